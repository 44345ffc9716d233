"""A cache of each pack's regex analysis, so a start does not redo it.

Loading a pack compiles every regex (the ``regex`` module's parser is pure
Python) and works out each one's literals and reach. Both depend only on
the pack's files and on this code, so after a load the results are written
to ``<cache dir>/packs/<key>.json``, the key hashing the pack's content, the
Python, ``regex`` and loop-rules versions, and the source of the modules
that analyse and compile patterns. The next load of the same pack restores
the analysis, and each pattern only when a bundle first needs it: from its
compiled code (the arguments the ``regex`` module's pickling rebuilds a
pattern from, kept as JSON data), without parsing it again (it compiled
without error when the entry was written).

It also keeps the literals the literal scanner (:mod:`loop_core.litscan`)
learnt while the pack's rules searched (``literals``): a run over bundles
adds what it learnt at its end (:meth:`RulePack.remember_literals
<loop_core.rules.RulePack.remember_literals>`), and a start seeds its
scanner with them, so its automata are built with the whole set at the
first scan instead of again and again while the literals trickle in.

The same file keeps the pack's parsed files (``documents``) when they are
plain JSON data, as rule files are: a start that finds them parses no YAML
and does not even import the YAML library. Only a pack that loaded without
a problem is saved, so restored documents are always ones that validated.

The cache directory is ``$LOOP_RULES_CACHE_DIR``, else
``$XDG_CACHE_HOME/loop-rules``, else ``~/.cache/loop-rules``;
``LOOP_RULES_CACHE=off`` turns the cache off. (The literal scanner keeps
its long runs' Hyperscan databases in ``hyperscan/`` there, see
:data:`loop_core.litscan.CACHED_FROM`.) A file that is missing,
unreadable, damaged or written by other code is ignored (and replaced);
a directory that cannot be written to only costs the speed-up. Every edit
of a pack is a new content and a new file: ``packs/`` keeps the
:data:`CACHED_PACKS` used last (a load marks its file used).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .__version__ import __version__
from .bundle import FAST_LOADS
from .envflags import switched_off
from .fastregex import RegexCache, strings_limit

__all__ = ["PackCache", "cache_dir", "load", "prune", "save", "write_cache_file"]

FORMAT = 3
CACHED_PACKS = 16  # pack files kept in packs/; the least recently used go first
_CODE_KEY: str | None = None


def cache_dir() -> Path | None:
    """Where pack caches live, or None when the cache is off."""
    if switched_off("LOOP_RULES_CACHE"):
        return None
    return cache_root()


def cache_root() -> Path:
    """The cache folder, whether or not the cache is on (other per-user state lives there)."""
    explicit = os.environ.get("LOOP_RULES_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "loop-rules"


def _code_key() -> str | None:
    """A hash of the code whose output is cached (None when its source is not on disk)."""
    global _CODE_KEY
    if _CODE_KEY is None:
        import regex

        digest = hashlib.sha256(f"{FORMAT}\0{__version__}\0{sys.version}\0"
                                f"{getattr(regex, '__version__', '?')}\0".encode())
        here = Path(__file__).parent
        try:
            for name in ("fastregex.py", "conditions.py", "packcache.py", "rules.py"):
                digest.update((here / name).read_bytes())
        except OSError:
            return None
        _CODE_KEY = digest.hexdigest()
    return _CODE_KEY


def _path(content_digest: str) -> Path | None:
    root, code = cache_dir(), _code_key()
    if root is None or code is None:
        return None
    # The analysis looks for more literals when the literal scanner is there to find them.
    key = hashlib.sha256(f"{code}\0{content_digest}\0{strings_limit()}".encode()).hexdigest()[:32]
    return root / "packs" / f"{key}.json"


class PackCache(RegexCache):
    """A pack's regex analysis (see :class:`RegexCache`) and its parsed files.

    ``documents`` maps each file name to what the rule-file loader parsed
    from it, or is None when the cache holds none (a first load, or files
    holding more than plain JSON data).
    """

    def __init__(self, entries: dict[str, Any] | None = None, *, keep: bool = True,
                 documents: dict[str, Any] | None = None, literals: Iterable[str] = ()) -> None:
        super().__init__(entries, keep=keep, literals=literals)
        self.documents = documents

    def remember(self, documents: dict[str, Any]) -> None:
        """Keep a valid pack's parsed files for the next load (plain JSON data only)."""
        if self.keep and self.documents is None and all(_plain(doc) for doc in documents.values()):
            self.documents = dict(documents)
            self.dirty = True


def _plain(value: Any) -> bool:
    """Whether JSON gives ``value`` back as it is (a YAML date, say, it would not)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return True
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _loads(text: str) -> Any:
    """The cache file parsed: by orjson where installed (the default pack's is some
    470 KB, which ``json`` takes about four times as long to read), by ``json`` where
    orjson refuses what ``json.dumps`` wrote (a NaN a pack's YAML held, say)."""
    if FAST_LOADS is not None:
        try:
            return FAST_LOADS(text)
        except ValueError:
            pass
    return json.loads(text)


def load(content_digest: str) -> PackCache:
    """The cache for a pack whose files hash to ``content_digest`` (empty if none)."""
    path = _path(content_digest)
    if path is None:
        return PackCache(keep=False)
    entries: dict[str, Any] = {}
    documents: dict[str, Any] | None = None
    literals: list[str] = []
    try:
        if not path.is_file():  # missing, or a FIFO whose read would block
            raise OSError(path)
        doc = _loads(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and doc.get("format") == FORMAT and isinstance(doc.get("regexes"), dict):
            entries = doc["regexes"]
            if isinstance(doc.get("documents"), dict):
                documents = doc["documents"]
            found = doc.get("literals")
            if isinstance(found, list) and all(isinstance(x, str) for x in found):
                literals = found
            os.utime(path)  # recently used: the last to be pruned
    except (OSError, ValueError, RecursionError):
        pass  # missing or damaged: analyse afresh
    return PackCache(entries, documents=documents, literals=literals)


def save(cache: RegexCache, content_digest: str) -> Path | None:
    """Write ``cache`` for the pack if it learnt anything; atomic, best effort."""
    path = _path(content_digest)
    if path is None or not cache.dirty:
        return None
    cache.dirty = False
    data: dict[str, Any] = {"format": FORMAT, "regexes": cache.entries}
    documents = getattr(cache, "documents", None)
    if documents is not None:
        data["documents"] = documents
    if cache.literals:
        data["literals"] = sorted(cache.literals)
    try:
        write_cache_file(path, json.dumps(data).encode("utf-8"))
    except OSError:
        return None  # read-only or full: the next start analyses again
    with contextlib.suppress(OSError):  # a folder left over its size is pruned by the next save
        prune(path, CACHED_PACKS)  # every edit of a pack is another content
    return path


def prune(path: Path, keep: int) -> None:
    """Keep the cache files beside ``path`` (those of its suffix) to ``keep``, the
    least recently used (the oldest modification time) going first. ``path``, just
    written, stays whatever its time says (file times tick coarsely), and so do the
    temp files of writes in progress.

    :raises OSError: the folder cannot be listed or a file removed.
    """
    others = []
    for entry in os.scandir(path.parent):
        if entry.name.endswith(path.suffix) and not entry.name.startswith(".") and entry.name != path.name:
            try:
                others.append((entry.stat().st_mtime_ns, entry.path))
            except FileNotFoundError:  # pruned by another process meanwhile
                continue
    others.sort()
    for _mtime, old in others[: max(0, len(others) - (keep - 1))]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(old)


def write_cache_file(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one step: a reader sees the old file or the
    new one, never half of one. Not synced to disk: a cache a crash loses is only
    built again.

    :raises OSError: the directory cannot be made or written.
    """
    import tempfile  # only when there is something to write

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=path.suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
