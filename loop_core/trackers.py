"""Where deduplicated failures go: one interface, several backends.

A tracker ``file``s an :class:`~loop_core.dedup.IssueDraft` for one
:class:`~loop_core.dedup.Occurrence`: it opens a new issue, adds a +1 to the
issue whose body tuple verifies, or recognises the occurrence as already
counted. Occurrences are keyed by submission fingerprint, so replaying the
same captures never counts anything twice.

Built-in backends (registered by ``loop_rules.trackers``):

- ``sqlite``: the embedded default, ``<captures>/_loop/tracker.sqlite``;
- ``spool``: offline files, ``<captures>/_dedup-queue/<hash>.json``;
- ``github``: the ``gh`` CLI (``loop_core.github``), degrading to the spool.

The review queue (``_review-queue/<hash>.json``) is shared by all backends.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import functools
import json
import os
import re
import sqlite3
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .dedup import SCHEMA, SPOOL_KIND, IssueDraft, Occurrence, body_tuple_matches
from .errors import PLUGIN_FAILURES, LoopError, TrackerError, failure_text
from .jsontext import dumps_indented, item_texts, splice_list

__all__ = [
    "FileAction",
    "FileResult",
    "ReviewQueue",
    "Settled",
    "SpoolTracker",
    "SqliteTracker",
    "Tracker",
    "TrackerOptions",
    "TrackerSpec",
    "atomic_write_json",
    "atomic_write_json_many",
    "locked",
]

DEDUP_QUEUE = "_dedup-queue"
REVIEW_QUEUE = "_review-queue"
STATE_DIR = "_loop"
# Occurrences per SQLite transaction in SqliteTracker.file_many (and per batch in `loop-rules run`).
BATCH = 256


class FileAction(str, enum.Enum):
    OPENED = "opened"
    PLUS_ONE = "plusone"
    ALREADY_COUNTED = "already-counted"
    SPOOLED = "spooled"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class FileResult:
    """What a tracker did with one occurrence."""

    action: FileAction
    dedup_hash: str
    issue: int | str | None = None
    reason: str = ""
    spool_path: Path | None = None


def checked_results(tracker: Any, results: Any, count: int) -> list[FileResult]:
    """A tracker's answers to ``count`` occurrences, held to the protocol: one
    :class:`FileResult` each, whose action is a :class:`FileAction`. A plugin's
    tracker that answers otherwise would make the counts (and a spool replay's
    decision to delete a file) wrong, so it is an error naming the tracker."""
    name = getattr(tracker, "name", type(tracker).__name__)
    try:
        found = None if isinstance(results, (str, bytes, dict)) else list(results)
    except TypeError:  # not iterable: None, a single FileResult
        found = None
    if found is None or len(found) != count:
        shown = f"{len(found)} results" if found is not None else type(results).__name__
        raise TrackerError(f"tracker {name!r} answered {shown} for {count} occurrence(s), not one FileResult each")
    for result in found:
        if not isinstance(result, FileResult) or not isinstance(result.action, FileAction):
            raise TrackerError(f"tracker {name!r} answered {str(result)[:120]!r}, not a FileResult "
                               "whose action is a FileAction")
    return found


@contextlib.contextmanager
def failures_named(tracker: Any, what: str) -> Iterator[None]:
    """Around a tracker's ``what`` (``file``, ``file_many``, ``counted``): a
    :class:`TrackerError` (the tracker's own word) or an ``OSError`` (the system's
    refusal) goes up as it is; anything else, a plugin's bug or its ``sys.exit``,
    becomes a :class:`TrackerError` that names the tracker. As an internal error's
    line, or a quiet exit with the plugin's status, it did not say which tracker
    stopped the filing. A built-in tracker's exception is loop-rules' own bug, and
    goes up as it is: an internal error.
    """
    try:
        yield
    except (LoopError, OSError):
        raise
    except PLUGIN_FAILURES as e:
        if built_in(tracker):
            raise
        raise tracker_failure(tracker, what, e) from e


def built_in(tracker: Any) -> bool:
    """Whether ``tracker`` is one of loop-rules' own (SQLite, GitHub, spool)."""
    return type(tracker).__module__.startswith("loop_core.")


def tracker_failure(tracker: Any, what: str, error: BaseException) -> TrackerError:
    """The error :func:`failures_named` raises for ``error``, a plugin's exception."""
    name = getattr(tracker, "name", type(tracker).__name__)
    return TrackerError(f"tracker {name!r}: {what} raised {failure_text(error)}")


class Tracker(Protocol):
    """A tracker backend. ``file`` must never lose an occurrence or count one twice.

    A backend may also offer ``file_many(items) -> list[FileResult]`` for a
    sequence of ``(draft, occurrence)`` pairs, with the results ``file``
    would have given one by one in that order; ``loop-rules run`` then hands
    it batches (see :meth:`SqliteTracker.file_many`). And ``counted(dedup_hash,
    submission) -> bool``: True only when filing that occurrence would answer
    already-counted (False when unsure); a single-process run asks it before
    drafting a failure's issue, and neither drafts nor files one it counted
    (see :meth:`SqliteTracker.counted`).
    """

    name: str

    def file(self, draft: IssueDraft, occurrence: Occurrence) -> FileResult: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class TrackerOptions:
    """What a tracker factory receives from ``loop-rules run`` and ``spool replay``."""

    captures: Path
    repo: str | None = None
    dry_run: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TrackerSpec:
    """A tracker backend a plugin registers: ``factory(options) -> Tracker``.

    ``takes_repo``: whether ``--repo`` means anything to it. One that files locally
    says False, and the CLI refuses a ``--repo`` given with it (most likely the
    ``--tracker github`` it was meant for was left out).
    """

    name: str
    factory: Callable[[TrackerOptions], Tracker]
    description: str = ""
    takes_repo: bool = True


# -- files ----------------------------------------------------------------


def atomic_write_json(path: Path, payload: Any, *, sync_directory: bool = True) -> None:
    """Write JSON so readers see the old file or the new one, never a torn one.

    Temp file in the same directory, fsync, rename, fsync of the directory
    (left to the caller with ``sync_directory=False``). Inside a spool or
    review folder, call it under :func:`locked` on that folder:
    :func:`clean_stale_temp_files` relies on it.
    """
    atomic_write_json_many([(path, payload)], sync_directory=sync_directory)


SYNC_THREADS = 16  # temp files synced at once by atomic_write_json_many


def atomic_write_json_many(files: Sequence[tuple[Path, Any]], *, sync_directory: bool = True) -> None:
    """:func:`atomic_write_json` for several files, synced together.

    Every file is written to its temp file, then all temp files are synced
    at once from a few threads (the file system commits concurrent syncs in
    one journal transaction, which one sync after another cannot share),
    and only then is each renamed into place and each folder synced once. A
    crash leaves each file old or new, never torn, as one by one would; a
    failure removes the temp files not yet renamed and raises.
    """
    # Encoded first: a payload that cannot be written fails before any file is touched.
    write_texts_many([(path, dumps_indented(payload, sort_keys=True)) for path, payload in files],
                     sync_directory=sync_directory)


def write_texts_many(files: Sequence[tuple[Path, str]], *, sync_directory: bool = True) -> None:
    """:func:`atomic_write_json_many` for texts already written (UTF-8)."""
    encoded = [(path, text.encode("utf-8")) for path, text in files]
    directories = dict.fromkeys(path.parent for path, _data in encoded)
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)
    temps: list[tuple[str, Path]] = []
    renamed = 0
    try:
        fds: list[int] = []
        try:
            for path, data in encoded:
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
                fds.append(fd)
                os.fchmod(fd, new_file_mode())
                temps.append((tmp, path))
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            _sync_all(fds)
        finally:
            for fd in fds:
                os.close(fd)
        for tmp, path in temps:
            os.replace(tmp, path)
            renamed += 1
    except BaseException:
        for tmp, _path in temps[renamed:]:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    if sync_directory:
        for directory in directories:
            fsync_directory(directory)


@functools.cache
def new_file_mode() -> int:
    """The mode ``open`` gives a new file in this process: 0o666 less the umask.

    What the files written through a temporary file get in place of its 0o600,
    so a review queue or a spool is as readable as the tracker beside it: a
    maintainer reading what a service account's run left works on all of it.
    """
    mask = os.umask(0o022)  # read by setting it, and setting it back at once
    os.umask(mask)
    return 0o666 & ~mask


def _sync_all(fds: Sequence[int]) -> None:
    """``fsync`` every descriptor, up to :data:`SYNC_THREADS` at once.

    Each thread syncs its share one after another: one task per thread, not
    per file, keeps the Python work between syncs (which needs the GIL the
    caller's other threads are using) to the syncs themselves.
    """
    if len(fds) <= 1:
        _sync_each(fds)
        return
    threads = min(SYNC_THREADS, len(fds))
    with ThreadPoolExecutor(threads, thread_name_prefix="loop-rules-sync") as pool:
        for _ in pool.map(_sync_each, [fds[i::threads] for i in range(threads)]):
            pass


def _sync_each(fds: Sequence[int]) -> None:
    for fd in fds:
        os.fsync(fd)


def fsync_directory(directory: Path) -> None:
    """Make the renames inside ``directory`` durable (best effort where unsupported)."""
    with contextlib.suppress(OSError):
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``directory`` (shared by concurrent runs).

    :raises TrackerError: the folder cannot be made or locked (a file in its place, say).
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise TrackerError(f"{directory}: cannot use this folder: {e.strerror}") from e
    with held(fd):
        yield


@contextlib.contextmanager
def held(fd: int) -> Iterator[int]:
    """An exclusive advisory lock (``flock``) on the open file or folder ``fd``, which
    is unlocked and closed at the end, however the block ends. (Unlocked first: a
    process forked meanwhile shares the lock, which closing here alone would leave held.)"""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield fd
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def clean_stale_temp_files(directory: Path) -> int:
    """Remove temp files a killed writer left behind; returns how many.

    Writers into a spool or review folder create and rename their temp file
    while holding :func:`locked` on that folder, so a temp file seen under
    the lock belongs to a writer that died: it goes at once, however fresh.
    (An age threshold alone left a just-killed run's files behind for the
    next run, and could not tell a slow live writer from a dead one.)
    """
    removed = 0
    if not directory.is_dir():
        if directory.exists():  # found at the start of a run, not at its first write
            raise TrackerError(f"{directory}: not a folder; move it aside")
        return 0
    if not os.access(directory, os.W_OK):  # a read-only copy (a snapshot, a mount): nothing to remove
        return 0
    with locked(directory):
        for path in directory.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                path.unlink()
                removed += 1
    return removed


def _file_names(directory: Path) -> set[str]:
    """The names of the entries of ``directory`` (empty when it does not exist)."""
    try:
        with os.scandir(directory) as entries:
            return {entry.name for entry in entries}
    except FileNotFoundError:
        return set()


_STATE_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _read_json(path: Path) -> dict[str, Any] | None:
    """A state file's object; None when it does not exist. Only a regular file is read:
    a FIFO put in its place would block the run, a link to a device fill memory."""
    try:
        fd = os.open(path, _STATE_OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise TrackerError(f"{path}: unreadable file: {e.strerror or e}") from e
    try:
        with open(fd, "rb", closefd=True) as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise TrackerError(f"{path}: not a regular file; remove it")
            data = f.read()
        doc = json.loads(data.decode("utf-8"))
    except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise TrackerError(f"{path}: unreadable file: {e}") from e
    if not isinstance(doc, dict):
        raise TrackerError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    return doc


def occurrence_list(doc: dict[str, Any], path: Path) -> list[Any]:
    """The ``occurrences`` list of a spool or review-queue file (made empty when
    absent), to append to.

    :raises TrackerError: it is not a list (a file edited by hand, say): appending
        would lose what it holds, so the file is left for a person to fix.
    """
    found = doc.setdefault("occurrences", [])
    if not isinstance(found, list):
        raise TrackerError(f"{path}: 'occurrences' is a {type(found).__name__}, not a list; "
                           "fix or remove the file")
    return found


def submissions_of(occurrences: list[Any]) -> set[str]:
    """The submissions a stored list of occurrences counts (entries that are not
    an object with a string ``submission`` count none)."""
    return {o["submission"] for o in occurrences if isinstance(o, dict) and isinstance(o.get("submission"), str)}


# A queue file with at least this many occurrences is kept in memory between the
# batches of one queue (one run), up to KEPT_FILES of them; see _OccurrenceFiles.
HOT_OCCURRENCES = 256
KEPT_FILES = 16
# A folder listed with more files than this is not listed again: each file of a batch is
# then simply opened (a failed open is a few microseconds; a listing of 20,000 files 20 ms).
LISTING_LIMIT = 4096


@dataclass(slots=True)
class _Kept:
    """A spool or review file as it was last written here: its identity on disk then, the
    document, its submissions and the text of each occurrence."""

    signature: tuple[int, int, int]
    doc: dict[str, Any]
    seen: set[str]
    texts: list[str]


def _signature(path: Path) -> tuple[int, int, int] | None:
    """What changes when anyone writes ``path`` (a rename brings a new inode)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class _OccurrenceFiles:
    """A folder of files that each hold one failure's document and the list of its
    occurrences (the spool, the review queue), appended to in batches under the
    folder's lock: each file read and written once per batch, a submission already
    in it not added again, the batch's files synced together.

    One failure that thousands of submissions hit has one file, which every batch
    of a run rewrites. So a file with many occurrences (:data:`HOT_OCCURRENCES`)
    is kept in memory between batches, with the text of each occurrence: the
    next batch, if the file on disk is still the one written here, neither reads
    it nor writes its occurrences again, only the new ones. The bytes are those
    of writing it whole.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        clean_stale_temp_files(directory)
        self._kept: dict[Path, _Kept] = {}  # in order of last write
        self._listing = True  # list the folder once per batch (see LISTING_LIMIT)

    def append(self, items: Sequence[tuple[str, Callable[[], dict[str, Any]], Occurrence]],
               problems: list[str] | None = None) -> list[tuple[bool | None, Path]]:
        """For each ``(file name, fresh document, occurrence)``: whether the occurrence
        was added (False: already there), and the file; ``fresh`` makes the document
        of a file that does not exist yet.

        :param problems: where a file that cannot be read, or whose ``occurrences``
            is not a list, is reported: its occurrences are skipped (None), it is
            left as it is, and the others are written. Without it, such a file
            raises.
        :raises TrackerError: such a file (``problems`` not given); nothing is written then.
        """
        out: list[tuple[bool | None, Path]] = []
        skipped: set[Path] = set()
        docs: dict[Path, dict[str, Any]] = {}
        # Each file's submissions as a set: a scan of its list per occurrence would make
        # one failure that thousands of users hit cost quadratic time.
        seen: dict[Path, set[str]] = {}
        texts: dict[Path, list[str]] = {}  # the written occurrences of a kept file
        changed: dict[Path, None] = {}  # in first-change order
        with locked(self.directory):
            # One listing, not a failed open per new failure; in a big folder, the opens.
            present = _file_names(self.directory) if self._listing else None
            if present is not None and len(present) > LISTING_LIMIT:
                self._listing = False
            for name, fresh, occurrence in items:
                path = self.directory / name
                if path in skipped:
                    out.append((None, path))
                    continue
                current = docs.get(path)
                if current is None:
                    exists = present is None or name in present  # unknown: open it and see
                    kept = self._kept.pop(path, None)  # back in only once written again
                    if kept is not None and exists and _signature(path) == kept.signature:
                        current, seen[path], texts[path] = kept.doc, kept.seen, kept.texts
                    else:
                        try:
                            current = (_read_json(path) if exists else None) or fresh()
                            seen[path] = submissions_of(occurrence_list(current, path))
                        except TrackerError as e:
                            if problems is None:
                                raise
                            problems.append(str(e))  # left for a person, as `review list` leaves it
                            skipped.add(path)
                            out.append((None, path))
                            continue
                    docs[path] = current
                if occurrence.submission in seen[path]:
                    out.append((False, path))
                    continue
                current["occurrences"].append(occurrence.to_dict())
                seen[path].add(occurrence.submission)
                changed[path] = None
                out.append((True, path))
            try:
                write_texts_many([(path, self._text(path, docs[path], texts)) for path in changed])
            except OSError as e:  # a full disk, a folder made read-only: the files as they were stay
                raise TrackerError(f"{self.directory}: cannot write {len(changed)} file(s) here: "
                                   f"{e.strerror or e}") from e
            for path in changed:
                self._keep(path, docs[path], seen[path], texts.get(path))
        return out

    @staticmethod
    def _text(path: Path, doc: dict[str, Any], texts: dict[Path, list[str]]) -> str:
        """The file's text: a long occurrence list from the texts of its items, those
        written before kept (``texts[path]``, extended here); else written whole."""
        occurrences = doc["occurrences"]
        if len(occurrences) >= HOT_OCCURRENCES:
            done = texts.get(path, [])
            new = item_texts(occurrences[len(done):], level=2, sort_keys=True)
            if new is not None:
                texts[path] = done + new
                text = splice_list(doc, "occurrences", texts[path], sort_keys=True)
                if text is not None:
                    return text
            texts.pop(path, None)
        return dumps_indented(doc, sort_keys=True)

    def _keep(self, path: Path, doc: dict[str, Any], seen: set[str], texts: list[str] | None) -> None:
        signature = _signature(path)
        if texts is None or signature is None:
            return
        self._kept[path] = _Kept(signature, doc, seen, texts)
        while len(self._kept) > KEPT_FILES:
            del self._kept[next(iter(self._kept))]


# -- spool ----------------------------------------------------------------


class SpoolTracker:
    """Offline files: ``<captures>/_dedup-queue/<hash>.json``, one per distinct failure.

    Each file holds the would-be issue in the reference's spool shape plus the
    list of occurrences, so repeats accumulate instead of overwriting (the
    reference's spool kept only the last). ``loop-rules spool replay`` drains
    the files into another tracker exactly once.
    """

    name = "spool"

    def __init__(self, captures: Path) -> None:
        self.directory = Path(captures) / DEDUP_QUEUE
        self._files = _OccurrenceFiles(self.directory)

    def file(self, draft: IssueDraft, occurrence: Occurrence, reason: str = "spooled") -> FileResult:
        (result,) = self.file_many([(draft, occurrence)], reason=reason)
        return result

    def file_many(self, items: Sequence[tuple[IssueDraft, Occurrence]], *,
                  reason: str = "spooled") -> list[FileResult]:
        """:meth:`file` for several occurrences, in order, under one lock: each
        failure's file is read and written once however many of its occurrences
        come (a run hands them over in batches), and the files are synced together.
        A file that cannot be read fails the call before anything is written."""
        added = self._files.append([(f"{draft.dedup_hash}.json", draft.spool_payload, occurrence)
                                    for draft, occurrence in items])
        return [FileResult(FileAction.SPOOLED, draft.dedup_hash, None, reason, path) if new else
                FileResult(FileAction.ALREADY_COUNTED, draft.dedup_hash, None, "occurrence already spooled", path)
                for (draft, _occurrence), (new, path) in zip(items, added)]

    def pending(self) -> list[Path]:
        return sorted(self.directory.glob("*.json")) if self.directory.is_dir() else []

    def close(self) -> None:
        pass


@dataclass(frozen=True, slots=True)
class ReplayResult:
    path: Path
    results: tuple[FileResult, ...]
    drained: bool
    problem: str | None = None  # why the file could not be replayed (it stays)


def replay_spool(spool: SpoolTracker, target: Tracker) -> list[ReplayResult]:
    """File every spooled occurrence into ``target``; remove a file once all of it landed.

    Safe to interrupt and rerun: a target that already counted an occurrence
    answers ``already-counted``, so nothing is counted twice.
    """
    out = []
    for path in spool.pending():
        try:
            spooled = _spooled(path)
        except TrackerError as e:  # this file stays for a person to look at; the others go on
            out.append(ReplayResult(path, (), False, str(e)))
            continue
        if spooled is None:
            continue
        draft, occurrences = spooled
        # In batches where the target takes them (SQLite: a transaction per 256, not per
        # occurrence), with the results filing them one by one gives.
        many = getattr(target, "file_many", None)
        # On an error the spool file stays: nothing is removed for a filing that stopped.
        with failures_named(target, "file_many" if many is not None else "file"):
            answers = (many([(draft, occurrence) for occurrence in occurrences]) if many is not None
                       else [target.file(draft, occurrence) for occurrence in occurrences])
        results = checked_results(target, answers, len(occurrences))
        # A result that points at a spool file did not land in the target (it fell back).
        drained = all(r.action is not FileAction.SPOOLED and r.spool_path is None for r in results)
        if drained:
            replayed = {occurrence.submission for occurrence in occurrences}
            with locked(spool.directory):
                current = _read_json(path)
                # Only remove what we replayed: a run may have added an occurrence meanwhile
                # (to a reference file it replaces the stand-in occurrence, so a count of
                # them cannot tell), or made the file again after another replay removed it.
                if current is None:
                    pass  # another replay drained it meanwhile: all of it landed all the same
                elif _spooled_submissions(current, draft.dedup_hash) <= replayed:
                    path.unlink()
                else:
                    drained = False
        out.append(ReplayResult(path, tuple(results), drained))
    return out


def _spooled_submissions(payload: dict[str, Any], dedup_hash: str) -> set[str | None]:
    """The submissions a spool file holds, as :func:`_spooled` names them (None for an
    occurrence list that is no longer a list: such a file is kept)."""
    if "occurrences" not in payload:
        return {f"spool-{dedup_hash}"}
    entries = payload["occurrences"]
    return set(submissions_of(entries)) if isinstance(entries, list) else {None}


def _spooled(path: Path) -> tuple[IssueDraft, list[Occurrence]] | None:
    """The would-be issue and the occurrences of a spool file (None: gone meanwhile).

    :raises TrackerError: the file is not a spool file, naming what is wrong.
    """
    payload = _read_json(path)
    if payload is None:
        return None
    # Another tool's file, or a newer format: filing what it might mean could count
    # under the wrong key. Left where it is, for a person or a newer loop-rules.
    for name, expected in (("kind", SPOOL_KIND), ("schema", SCHEMA)):
        if payload.get(name) != expected:
            raise TrackerError(f"{path}: not a would-be issue this version can file: its {name} is "
                               f"{payload.get(name)!r}, not {expected!r}")
    try:  # JSON can write "\udcff", which no tracker can store (nor hash, in a tuple); loop-rules never does
        json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise TrackerError(f"{path}: holds a lone surrogate escape, which is not valid Unicode "
                           "(edited or damaged?)") from None
    try:
        draft = IssueDraft.from_spool(payload)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise TrackerError(f"{path}: not a would-be issue ({type(e).__name__}: {e})") from e
    # A file edited by hand, or damaged, whose hash, key and body disagree would file
    # differently in every tracker (an issue per occurrence where the body never
    # verifies, +1s under a key the body does not hold): it must agree with itself.
    # (A tuple value that is an object reads back with its keys sorted, and so hashes
    # differently from the manifest it came from: only scalar tuples are rehashed.)
    scalar = all(value is None or isinstance(value, (str, int, float)) for value in draft.key)
    problem = ("its dedup_hash is not its tuple's" if scalar and draft.dedup_hash != draft.key.digest()
               else "its canonical dedup_hash is not its dedup_hash"
               if draft.canonical.get("dedup_hash") != draft.dedup_hash
               else "its body's tuple block does not hold its tuple" if not body_tuple_matches(draft.body, draft.key)
               else None)
    if problem is not None:
        raise TrackerError(f"{path}: not a would-be issue that can be filed: {problem} (edited or damaged?)")
    if "occurrences" not in payload:
        # A spool file the reference wrote: one would-be issue, no occurrence list.
        return draft, [Occurrence(f"spool-{draft.dedup_hash}", None, None, str(path))]
    if not payload["occurrences"]:
        raise TrackerError(f"{path}: its occurrence list is empty: nothing to file (edited or damaged?)")
    occurrences = []
    for i, entry in enumerate(occurrence_list(payload, path)):
        if not isinstance(entry, dict) or not isinstance(entry.get("submission"), str):
            raise TrackerError(f"{path}: occurrences[{i}] is not an occurrence (an object with a 'submission')")
        occurrences.append(Occurrence.from_dict(entry))
    return draft, occurrences


class ReviewQueue:
    """``<captures>/_review-queue/<hash>.json``: unknown failures waiting for a maintainer."""

    def __init__(self, captures: Path) -> None:
        self.directory = Path(captures) / REVIEW_QUEUE
        self._files = _OccurrenceFiles(self.directory)

    def add(self, payload: dict[str, Any], occurrence: Occurrence) -> tuple[bool, Path]:
        """Queue one occurrence; False when it was already queued."""
        ((added, path),) = self.add_many([(payload, occurrence)])
        return bool(added), path  # never None: without problems, a damaged entry raises

    def add_many(self, items: Sequence[tuple[dict[str, Any], Occurrence]],
                 problems: list[str] | None = None) -> list[tuple[bool | None, Path]]:
        """Queue several occurrences, each as :meth:`add` would, under one lock:
        a failure's file is read and written once however many of its
        occurrences come, and the folder is synced once (see :class:`_OccurrenceFiles`).

        :param problems: where a damaged entry is reported; its occurrences are not
            queued (None) and the others are. Without it, a damaged entry raises
            :class:`TrackerError` and nothing is queued.
        """
        return self._files.append([(f"{payload['dedup_hash']}.json", functools.partial(dict, payload), occurrence)
                                   for payload, occurrence in items], problems)

    def items(self, problems: list[str] | None = None) -> list[dict[str, Any]]:
        """Every entry, sorted by file name, each with ``_path`` added.

        :param problems: where a damaged entry is reported (and skipped); without
            it, such an entry raises.
        :raises TrackerError: a file that is not a JSON object (``problems`` not given).
        """
        out = []
        if self.directory.is_dir():
            for path in sorted(self.directory.glob("*.json")):
                try:
                    doc = _read_json(path)
                except TrackerError as e:
                    if problems is None:
                        raise
                    problems.append(str(e))
                    continue
                if doc is not None:
                    doc["_path"] = str(path)
                    out.append(doc)
        return out

    def entry(self, dedup_hash: str) -> dict[str, Any] | None:
        """The entry of ``dedup_hash``; None when the queue has none.

        :raises TrackerError: its file is not a JSON object.
        """
        if not _HASH.fullmatch(dedup_hash):
            return None
        return _read_json(self.directory / f"{dedup_hash}.json")

    def remove(self, dedup_hash: str) -> bool:
        """Delete the entry of ``dedup_hash``; False when the queue has none (nor a name
        that is no hash: ``../x`` names a file outside the queue)."""
        if not _HASH.fullmatch(dedup_hash):
            return False
        path = self.directory / f"{dedup_hash}.json"
        with locked(self.directory):
            try:
                path.unlink()
            except FileNotFoundError:
                return False
        return True

    def hashes(self) -> frozenset[str]:
        """The dedup hashes with an entry in the queue (from the file names alone)."""
        return frozenset(name[:-5] for name in _file_names(self.directory)
                         if name.endswith(".json") and _HASH.fullmatch(name[:-5]))

    def settle(self, decided: Mapping[str, Settled], problems: list[str] | None = None) -> int:
        """Take the occurrences a decision now covers out of the queue.

        ``decided`` maps a dedup hash to its :class:`Settled`: the submissions no
        longer unknown (a rule or the exact table decides them now) and, when one
        of the entry's other occurrences was seen still unknown, a fresh payload
        (:func:`review_payload`) to describe the entry with, since the one it was
        written with may have been among those taken out. An entry left with no
        occurrence is deleted. Returns how many occurrences were taken out.

        :param problems: where an entry that cannot be read (a damaged file) is
            reported and left as it is; without it, such an entry raises.
        :raises TrackerError: an entry that cannot be read (``problems`` not given)
            or written; the entries settled before it stay settled.
        """
        removed = 0
        with locked(self.directory):
            for dedup_hash, settled in decided.items():
                path = self.directory / f"{dedup_hash}.json"
                try:
                    doc = _read_json(path)
                    if doc is None:
                        continue
                    occurrences = occurrence_list(doc, path) if "occurrences" in doc else None
                except TrackerError as e:
                    if problems is None:
                        raise
                    problems.append(str(e))
                    continue
                if occurrences is None:
                    # The reference's shape: no list, one capture, named by its capture time
                    # alone. It leaves once that capture is decided, or it would wait forever.
                    occurrences = [doc]
                    capture_decided = isinstance(doc.get("utc_ts"), str) and doc["utc_ts"] in settled.times
                    kept = [] if capture_decided else occurrences
                else:
                    kept = [o for o in occurrences
                            if not (isinstance(o, dict) and o.get("submission") in settled.submissions)]
                if len(kept) == len(occurrences):
                    continue
                try:
                    if not kept:
                        path.unlink()
                    else:
                        if settled.payload is not None:
                            doc.update(settled.payload)
                        elif _described_by(doc, occurrences) in settled.submissions:
                            # What described the entry has left it, and no occurrence still
                            # unknown was seen to describe it anew: say so, not the old text.
                            doc.update(STALE_DESCRIPTION)
                        doc["occurrences"] = kept
                        write_texts_many([(path, dumps_indented(doc, sort_keys=True))])
                except OSError as e:
                    raise TrackerError(f"{path}: cannot update the review queue: {e.strerror or e}") from e
                removed += len(occurrences) - len(kept)
        return removed


# What a review-queue entry says when the occurrence it was described by has been
# decided and none left in it could be seen (ReviewQueue.settle).
STALE_DESCRIPTION = {
    "described_by": None, "fingerprint": None, "error_substring": "",
    "final_error": "(the failure this entry was described by has been decided; the bundles of the "
                   "occurrences left were not found in the last run)",
}


def _described_by(doc: dict[str, Any], occurrences: list[Any]) -> Any:
    """The submission whose failure an entry's text describes: as written, or for an
    entry written before that was kept, its first occurrence's."""
    if "described_by" in doc:
        return doc["described_by"]
    first = occurrences[0] if occurrences else None
    return first.get("submission") if isinstance(first, dict) else None


@dataclass(slots=True)
class Settled:
    """One review-queue entry's occurrences that a decision now covers (see
    :meth:`ReviewQueue.settle`)."""

    submissions: set[str] = field(default_factory=set)
    payload: dict[str, Any] | None = None  # describes an occurrence still unknown
    # Their capture times: what names the one capture of an entry the reference wrote,
    # which lists no occurrences.
    times: set[str] = field(default_factory=set)


_HASH = re.compile(r"[0-9a-f]{12}")


def review_count(entry: Mapping[str, Any]) -> int | None:
    """How many occurrences a review-queue entry holds: one for an entry the reference
    wrote (no list: it stands for one capture); None for a list edited into another shape."""
    if "occurrences" not in entry:
        return 1
    occurrences = entry["occurrences"]
    return len(occurrences) if isinstance(occurrences, list) else None


def review_error(entry: Mapping[str, Any]) -> str:
    """A review-queue entry's error as one line, as ``review list`` and the report show
    it: the final error (else the error substring) without its log decorations, runs
    of blanks collapsed. Not cut: each caller cuts it to its column."""
    from .view import undecorated

    error = str(entry.get("final_error") or entry.get("error_substring") or "")
    # The message, not the log decorations before it: "(EngineCore_DP0 pid=1789245) ERROR
    # 11-19 12:54:26 [core.py:710] " would fill a column on its own.
    return " ".join(undecorated(error).split()) or " ".join(error.split())


def review_payload(draft_key_hash: str, canonical: dict[str, Any], error_substring: str,
                   model: Any, utc_ts: Any, reason: str) -> dict[str, Any]:
    """§5.8 review spool shape."""
    return {"canonical": canonical, "dedup_hash": draft_key_hash, "error_substring": error_substring,
            "kind": "review-queue", "model_slug": model, "reason": reason, "schema": SCHEMA, "utc_ts": utc_ts}


# -- sqlite ---------------------------------------------------------------

_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS issues (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dedup_hash TEXT NOT NULL,
    failure_class TEXT NOT NULL,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'open',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS issues_by_hash ON issues (dedup_hash);
CREATE TABLE IF NOT EXISTS labels (
    issue_id INTEGER NOT NULL REFERENCES issues (id),
    name TEXT NOT NULL,
    PRIMARY KEY (issue_id, name)
);
CREATE TABLE IF NOT EXISTS occurrences (
    submission TEXT NOT NULL,
    dedup_hash TEXT NOT NULL,
    issue_id INTEGER NOT NULL REFERENCES issues (id),
    utc_ts TEXT,
    commit_sha TEXT,
    bundle TEXT,
    recorded_at TEXT NOT NULL,
    PRIMARY KEY (submission, dedup_hash)
);
CREATE INDEX IF NOT EXISTS occurrences_by_issue ON occurrences (issue_id);
"""


_HASH = re.compile(r"[0-9a-f]{12}")
MIN_HASH_PREFIX = 6  # the fewest digits of a dedup hash that name an issue (1 in 16.7 million)
LOCK_WAIT_SECONDS = 60.0  # how long a SQLite tracker waits in all for another run's write lock
_HASH_PREFIX = re.compile(rf"[0-9a-f]{{{MIN_HASH_PREFIX},11}}")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class SqliteTracker:
    """The embedded tracker: one SQLite file, safe for concurrent runs.

    WAL journal, a busy timeout, and ``BEGIN IMMEDIATE`` around each
    check-then-write, so concurrent runs serialize their writes instead of
    failing with "database is locked" or counting an occurrence twice.
    """

    name = "sqlite"

    def __init__(self, path: Path, *, busy_timeout: float = 60.0, readonly: bool = False,
                 lock_wait: float = LOCK_WAIT_SECONDS) -> None:
        """Open (and make, unless ``readonly``) the tracker at ``path``.

        ``busy_timeout`` is how long SQLite waits for another run's lock in one try;
        ``lock_wait`` how long all tries of one step wait together before it fails.

        ``readonly`` opens an existing tracker for browsing only: nothing is written,
        so it also works in a folder this process may not write (a snapshot, a
        read-only mount, a colleague's captures).
        """
        self.path = Path(path)
        self.lock_wait = lock_wait
        if readonly:
            self._open_readonly(busy_timeout)
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            if self.path.parent.exists() and not self.path.parent.is_dir():
                raise TrackerError(f"{self.path.parent}: is a file where the tracker's folder goes; "
                                   "move it aside") from e
            raise TrackerError(f"{self.path.parent}: cannot make the tracker's folder: {e.strerror}") from e
        with self._errors_named():
            self.db = sqlite3.connect(self.path, timeout=busy_timeout, isolation_level=None)
            try:
                self.db.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
                self._retry(lambda: self.db.execute("PRAGMA journal_mode = WAL"))
                self.db.execute("PRAGMA synchronous = NORMAL")
                self._retry(lambda: self.db.executescript(_SCHEMA_SQL))
                # A tracker that held no occurrence when opened counted none before this run.
                self._held_any = self.db.execute("SELECT EXISTS (SELECT 1 FROM occurrences)").fetchone()[0] == 1
            except BaseException:
                self.db.close()
                raise

    def _open_readonly(self, busy_timeout: float) -> None:
        uri = self.path.resolve().as_uri()
        with self._errors_named():
            self.db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=busy_timeout, isolation_level=None)
            try:
                self._check_tables()
            except sqlite3.OperationalError:
                self.db.close()
                if os.access(self.path.parent, os.W_OK):
                    raise
                # A WAL database needs its -shm file, which this process cannot make in a
                # folder it may not write. With no -wal file left (every run that wrote it
                # ended cleanly), the database file alone is the whole tracker: read it as it
                # is. Changes a killed run left in the -wal could not be read that way.
                wal = self.path.with_name(self.path.name + "-wal")
                if wal.exists() and wal.stat().st_size:
                    raise TrackerError(f"{self.path}: a run's last changes wait in {wal.name}, which cannot be "
                                       "read in a folder this process may not write; browse a writable copy of "
                                       "the captures folder") from None
                self.db = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None)
                self._check_tables()
        self._held_any = True

    def _check_tables(self) -> None:
        """Refuse a database without the tables a run makes: another program's SQLite file,
        or an empty file (SQLite reads one as a database without tables).

        :raises TrackerError: a table is missing (the connection is closed).
        :raises sqlite3.OperationalError: the database cannot be read.
        """
        found = {row[0] for row in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = [table for table in ("issues", "labels", "occurrences") if table not in found]
        if not missing:
            return
        self.db.close()
        if not found and self.path.stat().st_size == 0:
            raise TrackerError(f"{self.path}: an empty file, no tracker yet; a run over its captures folder makes one")
        raise TrackerError(f"{self.path}: not a tracker this version of loop-rules wrote (no table "
                           f"{', '.join(missing)}); move it aside and the next run starts a new tracker")

    @contextlib.contextmanager
    def _errors_named(self) -> Iterator[None]:
        """SQLite's errors (a file that is no database, a damaged one) as a
        :class:`TrackerError` naming the file, not a crash."""
        try:
            yield
        except sqlite3.DatabaseError as e:
            damaged = "not a database" in str(e) or "malformed" in str(e)
            hint = "; move it aside and the next run starts a new tracker" if damaged else ""
            raise TrackerError(f"{self.path}: {e}{hint}") from e

    @classmethod
    def for_captures(cls, captures: Path) -> SqliteTracker:
        return cls(Path(captures) / STATE_DIR / "tracker.sqlite")

    def _retry(self, op: Callable[[], Any]) -> Any:
        """``op()``, tried again while another run holds the database, until the waits
        (SQLite's own busy timeout within each try, and the pauses between tries) add
        up to ``lock_wait`` seconds. Counting each try's attempts instead made a 60 s busy
        timeout wait 50 times over: most of an hour before a run gave up."""
        waited = 0.0
        pause = 0.05
        while True:
            started = time.monotonic()
            try:
                return op()
            except sqlite3.OperationalError as e:
                waited += time.monotonic() - started
                if "locked" not in str(e) and "busy" not in str(e) or waited >= self.lock_wait:
                    raise
                time.sleep(pause)
                waited += pause
                pause = min(pause + 0.05, 1.0)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._errors_named():
            self._retry(lambda: self.db.execute("BEGIN IMMEDIATE"))
            try:
                yield self.db
            except BaseException:
                with contextlib.suppress(sqlite3.Error):  # already rolled back: the first error is the one to see
                    self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    def file(self, draft: IssueDraft, occurrence: Occurrence) -> FileResult:
        with self.transaction() as db:
            return self._file(db, draft, occurrence)

    def counted(self, dedup_hash: str, submission: str) -> bool:
        """True when the tracker holds this occurrence; False when it does not, or may
        not. A run asks before it drafts a failure's issue: replaying a corpus into
        the tracker renders no issue text for the captures it counted before. (True
        is final: occurrences are never removed. A tracker that held none when opened
        answers False without a query; those this run files, ``file`` finds anyway.)
        """
        if not self._held_any:
            return False
        with self._errors_named():
            row = self._retry(lambda: self.db.execute(
                "SELECT 1 FROM occurrences WHERE submission = ? AND dedup_hash = ?",
                (submission, dedup_hash)).fetchone())
        return row is not None

    def file_many(self, items: Sequence[tuple[IssueDraft, Occurrence]], *,
                  batch: int = BATCH) -> list[FileResult]:
        """File ``(draft, occurrence)`` pairs, up to ``batch`` per ``BEGIN IMMEDIATE`` transaction.

        The results are those of calling :meth:`file` on each pair in order:
        within a transaction every check sees the writes before it, so a key
        opened earlier in the batch gets a +1 and a submission repeated in the
        batch is already counted. A transaction commits whole or not at all: an
        error or a kill rolls back the batch in progress (earlier batches stay
        committed), and a rerun files what did not commit, counting nothing twice.
        """
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        results: list[FileResult] = []
        for start in range(0, len(items), batch):
            with self.transaction() as db:
                results.extend([self._file(db, draft, occurrence)
                                for draft, occurrence in items[start:start + batch]])
        return results

    def _file(self, db: sqlite3.Connection, draft: IssueDraft, occurrence: Occurrence) -> FileResult:
        row = db.execute("SELECT issue_id FROM occurrences WHERE submission = ? AND dedup_hash = ?",
                         (occurrence.submission, draft.dedup_hash)).fetchone()
        if row is not None:
            return FileResult(FileAction.ALREADY_COUNTED, draft.dedup_hash, row[0], "occurrence already counted")
        issue_id = None
        for candidate_id, body in db.execute("SELECT id, body FROM issues WHERE dedup_hash = ? ORDER BY id",
                                             (draft.dedup_hash,)):
            if body_tuple_matches(body, draft.key):
                issue_id = candidate_id
                break
        now = _now()
        if issue_id is None:
            cur = db.execute(
                "INSERT INTO issues (dedup_hash, failure_class, title, body, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)", (draft.dedup_hash, draft.failure_class, draft.title, draft.body, now, now))
            issue_id = cur.lastrowid
            db.executemany("INSERT OR IGNORE INTO labels (issue_id, name) VALUES (?, ?)",
                           [(issue_id, label) for label in draft.labels])
            action, reason = FileAction.OPENED, "opened-new"
        else:
            db.execute("UPDATE issues SET updated_at = ? WHERE id = ?", (now, issue_id))
            action, reason = FileAction.PLUS_ONE, "plusone-body-verified"
        db.execute(
            "INSERT INTO occurrences (submission, dedup_hash, issue_id, utc_ts, commit_sha, bundle, recorded_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (occurrence.submission, draft.dedup_hash, issue_id, _text(occurrence.utc_ts),
             _text(occurrence.commit), occurrence.bundle, now))
        return FileResult(action, draft.dedup_hash, issue_id, reason)

    def issues(self) -> list[dict[str, Any]]:
        with self._errors_named():
            return self._summaries("ORDER BY i.id")

    def _summaries(self, where: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        rows = self.db.execute(
            "SELECT i.id, i.dedup_hash, i.failure_class, i.title, i.state, i.created_at, i.updated_at, "
            f"(SELECT COUNT(*) FROM occurrences o WHERE o.issue_id = i.id) FROM issues i {where}", params).fetchall()
        keys = ("id", "dedup_hash", "failure_class", "title", "state", "created_at", "updated_at", "occurrences")
        return [dict(zip(keys, r)) for r in rows]

    def issue(self, ref: str) -> dict[str, Any] | None:
        """One issue, with labels and occurrences; None when no issue is ``ref``.

        ``ref`` is an issue number (``7`` or ``#7``), or a dedup hash in either case,
        whole or its first :data:`MIN_HASH_PREFIX` digits or more (a hash's first issue).
        Digits alone are a number, unless there are twelve of them or no issue has that
        number.

        :raises TrackerError: the prefix starts the hashes of several issues (named).
        """
        with self._errors_named():
            return self._issue(ref)

    def _issue(self, ref: str) -> dict[str, Any] | None:
        if not ref.isascii():
            return None  # neither a number nor a hash; SQLite refuses a name's byte that is not UTF-8
        text = ref.strip().lower()
        if text.startswith("#"):  # the number as the list and the titles write it
            found = self._numbered(text[1:]) if text[1:].isdigit() else []
        elif _HASH.fullmatch(text):
            # Twelve hex digits are a dedup hash, even all digits (074088267420): never
            # another issue's number.
            found = self._summaries("WHERE i.dedup_hash = ? ORDER BY i.id LIMIT 1", (text,))
        else:
            found = self._numbered(text) if text.isdigit() else []
            if not found and _HASH_PREFIX.fullmatch(text):
                found = self._prefixed(text)
        if not found:
            return None
        base = found[0]
        issue_id = base["id"]
        base["body"] = self.db.execute("SELECT body FROM issues WHERE id = ?", (issue_id,)).fetchone()[0]
        base["labels"] = [r[0] for r in self.db.execute(
            "SELECT name FROM labels WHERE issue_id = ? ORDER BY name", (issue_id,))]
        base["occurrence_list"] = [
            dict(zip(("submission", "utc_ts", "bundle", "recorded_at"), r)) for r in self.db.execute(
                "SELECT submission, utc_ts, bundle, recorded_at FROM occurrences WHERE issue_id = ? "
                "ORDER BY utc_ts, recorded_at, submission", (issue_id,))]
        return base

    def _numbered(self, digits: str) -> list[dict[str, Any]]:
        # Beyond 19 digits no SQLite integer (and beyond 4300 no int() either): no such issue.
        number = int(digits) if len(digits.lstrip("0")) <= 19 else 2**63
        return self._summaries("WHERE i.id = ?", (number,)) if number < 2**63 else []

    def _prefixed(self, prefix: str) -> list[dict[str, Any]]:
        """The first issue of the one dedup hash that starts with ``prefix`` (hex digits)."""
        firsts = self.db.execute("SELECT MIN(id), dedup_hash FROM issues WHERE dedup_hash GLOB ? "
                                 "GROUP BY dedup_hash ORDER BY MIN(id) LIMIT 11", (prefix + "*",)).fetchall()
        if len(firsts) > 1:
            shown = ", ".join(f"#{number} ({digest})" for number, digest in firsts[:10])
            count, more = ("more than 10", ", ...") if len(firsts) > 10 else (str(len(firsts)), "")
            raise TrackerError(f"{self.path}: dedup hash prefix {prefix!r} matches {count} issues: "
                               f"{shown}{more}; give more of the hash")
        return self._summaries("WHERE i.id = ?", (firsts[0][0],)) if firsts else []

    def close(self) -> None:
        self.db.close()


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
