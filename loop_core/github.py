"""File deduplicated failures as GitHub issues through the ``gh`` CLI.

The wire format is the reference's (CONTRACTS §5.7): the same ``gh`` command
lines, the same three labels, the same verify-before-+1. What differs:

- labels are created on demand before ``gh issue create`` (the reference
  never created them, so every first occurrence failed: §8.4.1);
- every occurrence is counted at most once: the issue body records the first
  submission and every +1 comment carries its own, so a rerun or a spool
  replay answers ``already-counted`` instead of commenting again;
- a +1 comment counts only when ``gh`` says this account wrote it or its
  author can write to the repository: anyone can comment on a public
  issue, and a forged +1 would otherwise mark a submission as counted;
- an issue another run opened for the same failure while this one ran is
  found right after opening: the occurrence is counted there and the
  duplicate closed;
- runs on one machine file into GitHub one occurrence at a time, and
  each forgets what it knew of the issues when another wrote meanwhile, so two
  runs at once never +1 the same submission twice;
- creates are paced under GitHub's secondary limits and capped per run;
- any ``gh`` failure, an unreadable ``gh`` answer included (§8.4.6), degrades
  to the spool (``<captures>/_dedup-queue/<hash>.json``), so nothing is lost;
  after an outage (timeout, missing ``gh``, a failed label listing, a rate
  limit, or three failures without an issue or comment getting through) the
  rest of the run goes straight to the spool.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from .dedup import BODY_LIMIT, IssueDraft, Occurrence, body_tuple_matches, plus_one_comment, plus_one_submission
from .errors import TrackerError
from .trackers import FileAction, FileResult, SpoolTracker, held
from .verdict import FailureClass

__all__ = ["GhResult", "GitHubTracker", "label_style", "run_gh"]

LABEL_LIST_LIMIT = 1000
ISSUE_LIST_LIMIT = 100
COMMENTS_PER_LIST = 100  # gh issue list fetches comments(first: 100)
FIRST_SUBMISSION = "<!-- loop-rules first-submission: {} -->"
# A line of its own, outside every code fence: capture text only ever reaches a body
# inside a fence (or a code span on the model's line), so it cannot forge one, and a
# maintainer may still add notes below it.
_FIRST_SUBMISSION = re.compile(r"<!-- loop-rules first-submission: ([A-Za-z0-9._:-]+) -->")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_SAFE_SUBMISSION = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_ISSUE_URL = re.compile(r"/issues/(\d+)$")
_OUTAGE = (124, 127)
# How gh passes on GitHub's limits: "API rate limit exceeded", "You have exceeded a
# secondary rate limit", "was submitted too quickly" (GraphQL creates), HTTP 429.
_RATE_LIMITED = re.compile(r"(?i)rate limit|submitted too quickly|\bHTTP 429\b|abuse detection")
# GitHub's authorAssociation values of people who can write to the repository.
_WRITERS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})

_CLASS_COLORS = {
    "genuine-oom": "b60205", "overlay-arch-drift": "d93f0b", "kernel-unsupported": "5319e7",
    "quant-unsupported": "1d76db", "benign-cold-start": "0e8a16", "unknown": "cccccc",
}


@dataclass(frozen=True, slots=True)
class GhResult:
    """One finished ``gh`` call. ``returncode`` 124: timed out, 127: no ``gh``."""

    ok: bool
    returncode: int
    stdout: str
    stderr: str


def run_gh(argv: Sequence[str], *, timeout: float = 30.0) -> GhResult:
    """Run ``gh *argv`` (no shell) and never raise.

    The call runs in its own session; on timeout the whole process group is
    killed, so a hung ``gh`` leaves nothing behind.
    """
    env = {**os.environ, "GH_PROMPT_DISABLED": "1", "GH_NO_UPDATE_NOTIFIER": "1", "NO_COLOR": "1"}
    try:
        proc, held_mask = _start_gh(argv, env)
    except FileNotFoundError:
        return GhResult(False, 127, "", "gh: command not found")
    except (OSError, ValueError) as e:
        return GhResult(False, 1, "", f"gh: {e}")
    try:
        _let_through(held_mask)  # a Ctrl-C that came while gh was starting is raised here
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return GhResult(False, 124, "", f"gh: timed out after {timeout:g}s")
    except Exception as e:  # noqa: BLE001 - never raise
        _kill_group(proc)
        return GhResult(False, 1, "", f"gh: {e}")
    except BaseException:
        # Ctrl-C or SIGTERM: gh runs in a session of its own and would go on to file
        # after loop-rules has ended, behind the back of the rerun's lookup.
        _kill_group(proc)
        raise
    return GhResult(proc.returncode == 0, proc.returncode, out or "", err or "")


_STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


def _start_gh(argv: Sequence[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], Any]:
    """Start ``gh`` with Ctrl-C and SIGTERM held back, and return it with the signal
    mask to go back to once the caller can stop it.

    ``Popen`` runs Python code after the fork; a Ctrl-C raised there left the new
    ``gh`` running, unknown to anyone, free to file after loop-rules had ended.
    Where signals cannot be held back (not POSIX), that window stays open.
    """
    held_mask = (signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
                 if hasattr(signal, "pthread_sigmask") else None)
    try:
        proc = subprocess.Popen(
            ["gh", *argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, encoding="utf-8", errors="replace", start_new_session=True, env=env)
    except BaseException:
        _let_through(held_mask)
        raise
    return proc, held_mask


def _let_through(held_mask: Any) -> None:
    """Go back to the signal mask :func:`_start_gh` found: a signal that came
    meanwhile is raised now."""
    if held_mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, held_mask)


# The kernel's limit on one command-line argument is 128 KiB (MAX_ARG_STRLEN): a body of
# 65,536 characters of CJK text is three times that. Longer bodies go through a file.
ARG_BYTES = 96 * 1024


@contextlib.contextmanager
def _body_argv(text: str) -> Iterator[list[str]]:
    """``["--body", text]``, or for a text too long for one argument ``["--body-file",
    path]`` of a temporary file that is removed afterwards."""
    if len(text) * 4 <= ARG_BYTES or len(text.encode("utf-8")) <= ARG_BYTES:
        yield ["--body", text]
        return
    fd, path = tempfile.mkstemp(prefix="loop-rules-body-", suffix=".md")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        yield ["--body-file", path]
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _lock_paths(captures: Path) -> list[Path]:
    """The file every run on this machine filing into GitHub locks, whatever repository
    it names (``--repo``, in any case, or gh's default: one name per repository cannot
    be known without asking gh): in the cache folder, or the captures folder's
    ``_loop/`` when that cannot be written."""
    from .packcache import cache_root

    return [cache_root() / "github.lock", captures / "_loop" / "github.lock"]


def _first_submission(body: str) -> str | None:
    """The submission of the last first-submission marker that starts a line of ``body``
    outside the code fences (CommonMark: a fence closes with a run of the same
    character at least as long), or None. Text after the marker on its line (a
    maintainer's note) is allowed; no capture text can start a line outside a fence.
    A run of backticks followed by another backtick on its line opens no fence: it
    starts a code span (```pip install x``` in a maintainer's note)."""
    found = None
    fence: str | None = None
    for line in body.splitlines():
        opener = _FENCE.match(line)
        if fence is None:
            if opener and not (opener.group(1)[0] == "`" and "`" in line[opener.end():]):
                fence = opener.group(1)
                continue
            marker = _FIRST_SUBMISSION.match(line.strip())
            if marker:
                found = marker.group(1)
        elif opener and opener.group(1)[0] == fence[0] and len(opener.group(1)) >= len(fence) \
                and not line.strip()[len(opener.group(1)):].strip():
            fence = None
    return found


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # start_new_session: the group id is the pid
    except OSError:
        pass
    try:
        proc.communicate(timeout=5)
    except Exception:  # noqa: BLE001 - a grandchild that escaped the group keeps a pipe open
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait()


def label_style(name: str) -> tuple[str, str]:
    """``(color, description)`` for one of the labels a draft carries."""
    kind, _, value = name.partition(":")
    if kind == "class":
        return _CLASS_COLORS.get(value, "cccccc"), f"loop-rules failure class: {value}"
    if kind == "arch":
        return "c5def5", f"loop-rules architecture family: {value}"
    if name.startswith("loop:dedup-"):
        return "ededed", f"loop-rules dedup key {name.removeprefix('loop:dedup-')}"
    return "ededed", "loop-rules"


class _Degraded(Exception):
    """Control flow: stop here and spool the occurrence with this reason."""


class GitHubTracker:
    """Issues in a GitHub repository, through ``gh``; degrades to the spool.

    :param captures: the captures directory; the spool lives under it.
    :param repo: ``OWNER/NAME``; appended as ``-R`` to every call when given.
    :param runner: ``runner(argv, timeout=...) -> GhResult`` (tests inject one).
    :param sleep: and ``clock``: pacing; tests inject fakes.
    :param create_interval: minimum seconds between two creates (issues and comments).
    :param max_creates_per_minute: creates allowed in any trailing 60 seconds.
    :param max_creates_per_run: creates allowed in this run; the rest is spooled (``run-cap``).
    :param timeout: seconds one ``gh`` call may take.
    """

    name = "github"

    def __init__(self, captures: Path, *, repo: str | None = None,
                 runner: Callable[..., GhResult] = run_gh, sleep: Callable[[float], Any] = time.sleep,
                 clock: Callable[[], float] = time.monotonic, create_interval: float = 3.0,
                 max_creates_per_minute: int = 20, max_creates_per_run: int = 50,
                 timeout: float = 30.0) -> None:
        if repo is not None and not repo.strip():
            # Left out of gh's command line, it would file into gh's default repository: the
            # one of the current directory, which a `--repo "$REPO"` with REPO unset never meant.
            raise TrackerError(f"--repo {repo!r}: no repository named; give OWNER/NAME, or leave --repo "
                               "out to file into gh's default repository")
        if repo is not None and ("/" not in repo or any(c.isspace() for c in repo)):
            # gh refuses it at every call, and each capture only waited in the spool.
            raise TrackerError(f"--repo {repo!r}: not a repository name; give OWNER/NAME "
                               "(or HOST/OWNER/NAME, as gh takes it)")
        self.spool = SpoolTracker(Path(captures))
        self.repo = repo
        self.runner = runner
        self.sleep = sleep
        self.clock = clock
        self.create_interval = create_interval
        self.max_creates_per_minute = max_creates_per_minute
        self.max_creates_per_run = max_creates_per_run
        self.timeout = timeout
        self.creates = 0
        self._create_times: deque[float] = deque(maxlen=max(1, max_creates_per_minute))
        self._labels: set[str] | None = None
        self._labels_complete = True
        self._issues: dict[tuple[str, ...], tuple[int, set[str]]] = {}  # tuple -> (issue, submissions)
        self._failures = 0
        self._down: str | None = None
        # What went wrong, each distinct message once, for the user (FileResult.reason is terse).
        self.problems: dict[str, None] = {}
        # The repository's lock (see _locked): what this tracker last read or wrote there.
        self._lock_paths = _lock_paths(Path(captures))
        self._seen_token: bytes | None = None
        self._wrote = False

    # -- the Tracker protocol --------------------------------------------

    def file(self, draft: IssueDraft, occurrence: Occurrence) -> FileResult:
        """Open, +1 or recognise; on any ``gh`` trouble, spool. Raises only if the spool cannot be written."""
        try:
            with self._locked():
                return self._file(draft, occurrence)
        except _Degraded as e:
            return self._spool(draft, occurrence, str(e))
        except Exception as e:  # noqa: BLE001 - a bug here must not lose the occurrence
            self.problems[f"internal error while filing: {type(e).__name__}: {e}"] = None
            return self._spool(draft, occurrence, f"gh-degraded:internal {type(e).__name__}")

    def close(self) -> None:
        self.spool.close()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the repository's lock on this machine while one occurrence is filed.

        What this tracker knows of the issues (each one's counted submissions,
        the labels) stays true only while nobody else writes: two runs at once
        each posted a +1 for the same new submission. The lock file holds a
        token that every writer changes; one that changed since this tracker
        last held the lock means another run wrote, and what it knew is
        forgotten (looked up again). After the token, the file holds the times
        of the latest creates of every run (on the tracker's clock, monotonic:
        one for the whole machine), and the lock is held during the pacing
        waits too, so two runs share GitHub's limits instead of doubling the rate.
        """
        fd = None
        for path in self._lock_paths:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                break
            except OSError as e:
                failed = f"{path}: {e.strerror or e}"
        if fd is None:  # filing goes on: the lock only guards against another run at once
            self.problems[f"could not make the lock file {failed}; filed without it (another run filing into "
                          "this repository at the same time could count a submission twice)"] = None
            yield
            return
        with held(fd):
            token, _, others = os.pread(fd, max(64, os.fstat(fd).st_size), 0).partition(b"\n")
            if token != self._seen_token:
                self._issues.clear()
                self._labels = None
                self._labels_complete = True
                self._share_create_times(others)
            self._wrote = False
            try:
                yield
            finally:
                if self._wrote:
                    token = os.urandom(16).hex().encode()
                    data = token + b"\n" + " ".join(map(repr, self._create_times)).encode()
                    os.pwrite(fd, data, 0)
                    os.ftruncate(fd, len(data))
                self._seen_token = token

    def _share_create_times(self, text: bytes) -> None:
        """Pace this run's creates after the other runs' too: ``text`` holds the latest
        creates of every run on this machine (this one's among them). A time still to
        come is not one (the monotonic clock starts again at each boot): it is left out."""
        now = self.clock()
        times = set(self._create_times)
        for word in text.split():
            with contextlib.suppress(ValueError):
                if (t := float(word)) <= now:
                    times.add(t)
        keep = max(1, self.max_creates_per_minute)
        self._create_times = deque(sorted(times)[-keep:], maxlen=keep)

    def bootstrap_labels(self) -> dict[str, bool]:
        """Create (or update) the six ``class:`` labels; ``{class: ok}``. Never raises."""
        out = {}
        for cls in FailureClass:
            name = f"class:{cls.value}"
            if self._down:
                out[cls.value] = False
                continue
            try:
                self._create_label(name)
                out[cls.value] = True
            except _Degraded:
                out[cls.value] = False
        return out

    # -- filing ------------------------------------------------------------

    def _file(self, draft: IssueDraft, occurrence: Occurrence) -> FileResult:
        if self._down:
            raise _Degraded(self._down)
        found = self._issues.get(_cache_key(draft))
        if found is None and (draft.labels[0] in self._label_names() or not self._labels_complete):
            found = self._lookup(draft)
        if found is None:
            return self._open(draft, occurrence)
        return self._count(draft, occurrence, *found)

    def _count(self, draft: IssueDraft, occurrence: Occurrence, number: int, seen: set[str]) -> FileResult:
        if occurrence.submission in seen:
            return FileResult(FileAction.ALREADY_COUNTED, draft.dedup_hash, number, "occurrence already counted")
        self._before_create()
        with _body_argv(plus_one_comment(draft, occurrence)) as body:
            r = self._gh(["issue", "comment", str(number), *body])
        if not r.ok:
            self._fail("issue-comment", r)
        seen.add(occurrence.submission)
        return FileResult(FileAction.PLUS_ONE, draft.dedup_hash, number, "plusone-body-verified")

    def _open(self, draft: IssueDraft, occurrence: Occurrence) -> FileResult:
        self._check_cap()
        for name in draft.labels:
            if name not in self._label_names():
                self._create_label(name)
        with _body_argv(_body(draft, occurrence)) as body:
            argv = ["issue", "create", "--title", draft.title, *body]
            for label in draft.labels:
                argv += ["--label", label]
            return self._create(draft, occurrence, argv)

    def _create(self, draft: IssueDraft, occurrence: Occurrence, argv: list[str]) -> FileResult:
        for attempt in (1, 2):
            self._before_create()
            r = self._gh(argv)
            if r.ok:
                number = _issue_number(r.stdout)
                if number is None:
                    return FileResult(FileAction.OPENED, draft.dedup_hash, None, "opened-new")
                return self._settle(draft, occurrence, number)
            if r.returncode != 124 or attempt == 2:
                self._fail("issue-create", r)
            # A timed-out create may have landed: look before creating again.
            found = self._lookup(draft)
            if found is not None:
                number, seen = found
                if occurrence.submission in seen:
                    return FileResult(FileAction.OPENED, draft.dedup_hash, number, "opened-new (create timed out)")
                return self._count(draft, occurrence, number, seen)
        raise AssertionError("unreachable")  # pragma: no cover

    def _settle(self, draft: IssueDraft, occurrence: Occurrence, number: int) -> FileResult:
        """After opening issue ``number``: keep it, unless another run opened the same
        failure's issue first.

        Labels are listed once per run, so a run that started before another
        opened an issue for this failure does not look it up and opens one of its
        own. Listing the label again settles it: the lowest-numbered verified
        issue is the failure's issue (as every later lookup says), so when that is
        another one, the occurrence is counted there with a +1 and this issue is
        closed as its duplicate (even when that +1 fails: the occurrence is
        spooled, and the replay counts it there). A failed listing keeps this
        issue: the occurrence is on it (first-submission marker), and later runs
        count on the lowest.
        """
        mine = (number, {occurrence.submission})
        opened = FileResult(FileAction.OPENED, draft.dedup_hash, number, "opened-new")
        try:
            found = self._lookup(draft)
        except _Degraded:
            self._issues[_cache_key(draft)] = mine
            return opened
        if found is None or found[0] >= number:  # the first, or the listing does not show it yet
            self._issues[_cache_key(draft)] = mine
            return opened
        first, seen = found
        try:
            result = self._count(draft, occurrence, first, seen)
        except _Degraded:
            # The occurrence goes to the spool, and the replay counts it on ``first``, where
            # every lookup goes: left open, this issue would stay a second one for the failure.
            if not self._down:
                self._close_duplicate(number, first)
            raise
        closed = self._close_duplicate(number, first)
        return FileResult(result.action, draft.dedup_hash, first,
                          f"{result.reason}; opened #{number} at the same time as another run opened "
                          f"#{first}: " + (f"closed #{number} as its duplicate" if closed
                                          else f"could not close #{number}"))

    def _close_duplicate(self, number: int, first: int) -> bool:
        """Close issue ``number`` as a duplicate of ``first`` (best effort: False on failure)."""
        try:
            self._before_create()  # the closing comment is a create
        except _Degraded:
            return False
        r = self._gh(["issue", "close", str(number), "--reason", "not planned", "--comment",
                      f"Duplicate of #{first}: two loop-rules runs opened an issue for this failure at the "
                      f"same time. Its occurrences are counted on #{first}."])
        return r.ok

    def _lookup(self, draft: IssueDraft) -> tuple[int, set[str]] | None:
        """The first (lowest-numbered) issue with the dedup label whose body tuple verifies."""
        r = self._gh(["issue", "list", "--label", draft.labels[0], "--state", "all",
                      "--limit", str(ISSUE_LIST_LIMIT), "--json", "number,body,comments"])
        # gh prints [] when no issue has the label: nothing at all, or entries that are not
        # the issues asked for, would read as "no issue" and open a duplicate.
        issues = _json(r.stdout) if r.ok else None
        if not isinstance(issues, list) or not all(map(_is_issue, issues)):
            self._fail("issue-list", r)
        for issue in sorted(issues, key=lambda i: i["number"]):
            body = issue["body"]
            if not body_tuple_matches(body, draft.key):
                continue
            comments = issue["comments"]
            if len(comments) >= COMMENTS_PER_LIST:
                comments = self._all_comments(issue["number"])
            first = _first_submission(body)
            seen = {first} if first else set()
            for c in comments:
                if not isinstance(c, dict) or not _trusted(c):
                    continue
                submission = plus_one_submission(c.get("body") or "")
                if submission:
                    seen.add(submission)
            self._issues[_cache_key(draft)] = (issue["number"], seen)
            return issue["number"], seen
        return None

    def _all_comments(self, number: int) -> list[Any]:
        r = self._gh(["issue", "view", str(number), "--json", "comments"])
        doc = _json(r.stdout) if r.ok else None
        if not isinstance(doc, dict) or not isinstance(doc.get("comments"), list):
            self._fail("issue-view", r)
        return list(doc["comments"])

    # -- labels ------------------------------------------------------------

    def _label_names(self) -> set[str]:
        """The repository's labels, listed once per run."""
        if self._labels is None:
            r = self._gh(["label", "list", "--limit", str(LABEL_LIST_LIMIT), "--json", "name"])
            doc = _json(r.stdout or "[]") if r.ok else None
            if not isinstance(doc, list):
                self._fail("label-list", r)
            self._labels = {str(d["name"]) for d in doc if isinstance(d, dict) and "name" in d}
            # A full page may hide labels: then look every dedup label up instead of trusting the set.
            self._labels_complete = len(doc) < LABEL_LIST_LIMIT
        return self._labels

    def _create_label(self, name: str) -> None:
        color, description = label_style(name)
        r = self._gh(["label", "create", name, "--force", "--color", color, "--description", description])
        if not r.ok:
            self._fail("label-create", r)
        if self._labels is not None:
            self._labels.add(name)

    # -- pacing, calls, failures ---------------------------------------------

    def _check_cap(self) -> None:
        if self.creates >= self.max_creates_per_run:
            self.problems[f"{self.max_creates_per_run} issues and comments created, this run's cap; "
                          "the rest was spooled"] = None
            raise _Degraded("run-cap")

    def _before_create(self) -> None:
        """Count one create against the run cap and wait until GitHub's limits allow it."""
        self._check_cap()
        now = self.clock()
        times = self._create_times
        waits = []
        if times:
            waits.append(times[-1] + self.create_interval - now)
        if len(times) == times.maxlen:
            waits.append(times[0] + 60.0 - now)
        wait = max(waits, default=0.0)
        if wait > 0:
            self.sleep(wait)
            now = self.clock()
        times.append(now)
        self.creates += 1

    def _gh(self, argv: list[str]) -> GhResult:
        if self.repo:
            argv = [*argv, "-R", self.repo]
        if argv[1] in ("create", "comment", "close"):
            # Before the call: one that fails, times out or is interrupted (Ctrl-C) may have
            # landed all the same, and another run must not go on trusting what it knew.
            self._wrote = True
        try:
            r = self.runner(argv, timeout=self.timeout)
        except Exception as e:  # noqa: BLE001 - an injected runner must not break the never-raise rule
            r = GhResult(False, 1, "", str(e))
        if r.ok and argv[:2] in (["issue", "create"], ["issue", "comment"]):
            # An issue or a comment went through: GitHub takes them again. (Not a label: a
            # repository that refuses issues, issues disabled, say, still takes labels.)
            self._failures = 0
        return r

    def _fail(self, step: str, r: GhResult) -> NoReturn:
        """Spool this occurrence; after an outage, the rest of the run too."""
        reason = f"gh-degraded:{step} rc={r.returncode}"
        said = next((line.strip() for line in (r.stderr or "").splitlines() if line.strip()), "no message")
        if r.ok:  # it ran, but its output is not what the call asks for
            first = next((line.strip() for line in (r.stdout or "").splitlines() if line.strip()), "")
            said = f"its output is not the JSON asked for: {first[:80]!r}" if first else "it printed nothing"
            self.problems[f"`gh {step.replace('-', ' ')}` answered unreadably: {said}"] = None
        else:
            self.problems[f"`gh {step.replace('-', ' ')}` failed (exit {r.returncode}): {said}"] = None
        self._failures += 1
        if (r.returncode in _OUTAGE or step == "label-list" or self._failures >= 3
                or (not r.ok and _RATE_LIMITED.search(r.stderr or ""))):
            # A rate limit answers every call alike until it lifts (an hour, for the
            # primary one): two more creates would only lengthen it.
            self._down = reason
        raise _Degraded(reason)

    def _spool(self, draft: IssueDraft, occurrence: Occurrence, reason: str) -> FileResult:
        try:
            result = self.spool.file(draft, occurrence, reason=reason)
        except OSError as e:
            raise TrackerError(f"{self.spool.directory}: cannot spool {draft.dedup_hash}: {e}") from e
        # Already in the spool is still pending, not counted: a replay must keep the file.
        return FileResult(FileAction.SPOOLED, draft.dedup_hash, None, reason, result.spool_path)


def _trusted(comment: dict[str, Any]) -> bool:
    """Whether a comment's +1 may count: this account wrote it, or someone who can
    write to the repository did.

    ``gh`` says both (``viewerDidAuthor``, ``authorAssociation``). A ``gh`` too
    old to say who wrote a comment is trusted as before: ignoring this
    account's own +1s would count every occurrence again on each run.
    """
    mine = comment.get("viewerDidAuthor")
    if mine is None:
        return True
    return mine is True or comment.get("authorAssociation") in _WRITERS


def _is_issue(entry: Any) -> bool:
    """Whether one entry of ``gh issue list --json number,body,comments`` is an issue as asked."""
    return (isinstance(entry, dict) and type(entry.get("number")) is int and isinstance(entry.get("body"), str)
            and isinstance(entry.get("comments"), list))


def _cache_key(draft: IssueDraft) -> tuple[str, ...]:
    # The tuple as body verification compares it (as text): hashable whatever the manifest held.
    return tuple(str(v) for v in draft.key)


def _body(draft: IssueDraft, occurrence: Occurrence) -> str:
    """The draft body plus the first-submission marker, within GitHub's body limit."""
    if not _SAFE_SUBMISSION.fullmatch(occurrence.submission):
        return draft.body
    marker = "\n\n" + FIRST_SUBMISSION.format(occurrence.submission)
    return draft.body[: BODY_LIMIT - len(marker)] + marker


def _issue_number(stdout: str) -> int | None:
    m = _ISSUE_URL.search(stdout.strip())
    return int(m.group(1)) if m else None


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
