"""Find many literals in a text in one pass (optional, compiled).

A rule pack looks for a few hundred lower-cased literals in each long log
(``no kernel image``, ``torch.cuda.outofmemoryerror``, ``cubin``), and a
:class:`~loop_core.fastregex.TextIndex` answers each with one ``str.find``
over the whole text: cheap one at a time, but they add up to most of what
classifying a bundle costs. An Aho-Corasick automaton answers all of them,
with every position, in one pass that costs about what two or three
``find`` calls do.

The automaton comes from the optional ``ahocorasick_rs`` package
(``pip install "loop-rules[fast]"``). Without it, or with
``LOOP_RULES_SCANNER=off`` in the environment, nothing changes but speed:
every literal is looked for with ``find`` as before. Both ways give the same
positions, and the tests compare them.

A long run's texts are scanned by Hyperscan instead, when the optional
``hyperscan`` package is installed (also in the ``fast`` extra, where it
ships wheels): its SIMD matcher reports each literal's first match only, in
about a third of the time the Aho-Corasick DFA takes to report every match
(45 a log, most of them of a few common words), and the rare literal whose
every position a windowed search needs is then looked up from its first.
Hyperscan reads most texts as they are (one that is not ASCII as UTF-8),
ignoring the case of ASCII letters, so they are not lower-cased, which costs
more than the scan (see ``fastregex.TextIndex``). A database once compiled
is loaded back from the cache directory by the next run that needs the same
one. ``LOOP_RULES_SCANNER=ahocorasick`` keeps to ``ahocorasick_rs``.

The scanner learns its literals as they are asked for: a literal looked up
with ``find`` is added to the automaton at its next rebuild. Rebuilds (a few
milliseconds each) happen after 1, 2, 4, 8, ... scans, so a long run pays for
a handful while the set of literals its rules need settles, and at once
when the literals waiting are half as many as those known (another pack's).
A pack's cache keeps what its runs learnt, and the next start begins with
it (:meth:`LiteralScanner.seed`).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .envflags import switched_off

__all__ = ["LiteralScanner", "Scan", "ENV", "MAX_LITERALS", "available", "describe", "package", "scanner", "use_scanner"]

ENV = "LOOP_RULES_SCANNER"
MAX_LITERALS = 8192  # a scanner this full learns no more (its automaton would grow without bound)
# Until this many scans, automata are built as NFAs (about a millisecond for 800 literals,
# scanning at half the speed) while the literals still change; then as DFAs (several ms).
DFA_AFTER = 64
# Without Hyperscan, the automaton over every literal, for the few texts that are not
# ASCII, becomes a DFA only after this many of them: its DFA build (about 15 ms) pays
# off after some 700 such texts (about 20 µs saved on each), and most runs meet a
# handful of them.
TEXT_DFA_AFTER = 512
# Once a DFA is built, a scheduled rebuild waits until the literals it would add have
# been looked for with find this many times: a few rare ones (asked about only when a
# rare phrase occurs) would each cost a DFA build (about 14 ms) for a few finds.
LATE_MISSES = 1024
# A Hyperscan database over this many literals or more is kept in the cache directory
# (``<cache dir>/hyperscan/``, see :mod:`loop_core.packcache`), keyed by its literals
# and the package's version: compiling the default pack's (some 880 literals) takes
# 11-25 ms, loading it back 0.1 ms. A smaller one compiles faster than a file is read.
CACHED_FROM = 100
CACHED_FILES = 8  # databases kept there; the least recently used go first
_AHOCORASICK_ONLY = "ahocorasick"


def _package(name: str, needed: tuple[str, ...]) -> Any:
    """The optional package ``name``; None when it is missing or lacks ``needed``
    (an older release: treated as absent rather than failing mid-run)."""
    try:
        module = importlib.import_module(name)
    except ImportError:
        return None
    return module if all(hasattr(module, attr) for attr in needed) else None


def _backend() -> Any:
    return _package("ahocorasick_rs", ("AhoCorasick", "BytesAhoCorasick", "MatchKind", "Implementation"))


def _first_match_backend() -> Any:
    """The optional ``hyperscan`` package, imported when a run first needs it; None when it
    is not installed, too old, or ``LOOP_RULES_SCANNER=ahocorasick`` keeps it out."""
    if os.environ.get(ENV, "").lower() == _AHOCORASICK_ONLY:
        return None
    return _package("hyperscan", ("Database", "Scratch", "HS_MODE_BLOCK", "HS_FLAG_SINGLEMATCH", "HS_FLAG_CASELESS"))


def _first_match_installed() -> bool:
    """Whether :func:`_first_match_backend` would find the package (without importing it)."""
    from importlib.util import find_spec

    return os.environ.get(ENV, "").lower() != _AHOCORASICK_ONLY and find_spec("hyperscan") is not None


def package() -> Any:
    """The ``ahocorasick_rs`` module for another one-pass lookup over a fixed set of
    literals (the secret-scrubbing patterns' pre-check); None where it is not
    installed or ``LOOP_RULES_SCANNER=off`` keeps it out."""
    return None if switched_off(ENV) else _backend()


def available() -> bool:
    """Whether the compiled automaton can be used here (the package is installed)."""
    return _backend() is not None


def describe() -> str:
    """Which literal lookups this process uses, for ``--version`` and reports:
    ``ahocorasick_rs`` (and whether Hyperscan takes over in long runs), or why
    the scanner is off. (No version number: finding
    one through ``importlib.metadata`` would double what ``--version`` costs.)"""
    if scanner() is not None:
        return "ahocorasick_rs, hyperscan for long runs" if _first_match_installed() else "ahocorasick_rs"
    if available():
        return f"off ({ENV}=off)"
    return 'off (ahocorasick_rs is not installed: pip install "loop-rules[fast]")'


class Scan:
    """What one pass found in one text: ``known``, the literals it looked for;
    ``first``, those that occur, with their first positions (``present``: the
    same as a set); and the matches, from which a literal's positions are
    listed on demand (:meth:`positions`) when they are every match (``every``;
    a Hyperscan pass reports first matches only). ``unknown`` remembers, per
    set of literals asked about, those the pass did not look for."""

    __slots__ = ("known", "unknown", "first", "present", "every", "_numbers", "_matches")

    def __init__(self, known: frozenset[str], unknown: dict[frozenset[str], tuple[str, ...]],
                 first: dict[str, int], matches: list[tuple[int, int, int]] | None = None,
                 numbers: dict[str, int] | None = None) -> None:
        """A pass that found the literals of ``first`` there; with ``matches`` (and
        ``numbers``, each literal's number in them), every match it found."""
        self.known = known
        self.unknown = unknown
        self.first = first
        self.present = frozenset(first)
        self.every = matches is not None
        self._matches = matches if matches is not None else []
        self._numbers = numbers if numbers is not None else {}

    @classmethod
    def of_matches(cls, known: frozenset[str], unknown: dict[frozenset[str], tuple[str, ...]],
                   literals: tuple[str, ...], matches: list[tuple[int, int, int]],
                   numbers: dict[str, int] | None = None) -> Scan:
        """A pass that reported every match, ``(number, start, end)`` of ``literals``."""
        # Matches come in order of where they end, so a literal's earliest start is its
        # first in the list: walking it backwards, the earliest is written last.
        first = {literals[number]: start for number, start, _end in reversed(matches)}
        return cls(known, unknown, first, matches,
                   numbers if numbers is not None else {lit: i for i, lit in enumerate(literals)})

    def unknown_of(self, literals: frozenset[str]) -> tuple[str, ...]:
        """Those of ``literals`` this pass did not look for (computed once per set and build)."""
        rest = self.unknown.get(literals)
        if rest is None:
            rest = self.unknown[literals] = tuple(literals - self.known)
        return rest

    def positions(self, literal: str) -> list[int] | None:
        """Every start of ``literal`` (overlapping ones too), ascending; [] for one
        that does not occur; None when the pass kept first matches only. Not
        remembered: the caller (``TextIndex.hits``) keeps what it asks for, one
        literal at a time (most texts are asked about one or two)."""
        if not self.every:
            return None
        number = self._numbers.get(literal, -1) if literal in self.present else -1
        return [start for n, start, _end in self._matches if n == number]


class _FirstMatches:
    """A Hyperscan database over lower-cased ASCII literals that reports where each
    first ends in a text read ignoring the case of ASCII letters. (A literal with an
    upper-case letter never occurs in lower-cased text: it is left out, and reported
    absent.)"""

    __slots__ = ("_backend", "_database", "_lengths", "_local", "known", "literals", "unknown")

    def __init__(self, backend: Any, literals: tuple[str, ...]) -> None:
        self._backend = backend
        self.literals = literals = tuple(lit for lit in literals if lit == lit.lower())
        self.known = frozenset(literals)
        self.unknown: dict[frozenset[str], tuple[str, ...]] = {}  # see Scan.unknown_of
        self._database = _database(backend, literals)
        self._lengths = tuple(len(lit) for lit in literals)
        self._local = threading.local()  # a scratch space per thread: two scans at once may not share one

    def scan(self, text: str, built: _Build) -> Scan | None:
        """The first match of each literal in ``text`` read case-insensitively (the
        text as it is or lower-cased, see :meth:`LiteralScanner.scan`), at its
        position in ``text``; None if the scan failed. A text that is not ASCII is
        read as UTF-8, where no ASCII literal can match inside a character, and the
        positions found are counted again in characters; only this database's
        literals were looked for in it."""
        if text.isascii():
            ends = self.ends(text.encode("ascii"))
            if ends is None:
                return None
            literals, lengths = self.literals, self._lengths
            first = {literals[number]: end - lengths[number] for number, end in ends.items()}
            return Scan(built.known, built.unknown, first)  # no other literal occurs in ASCII text
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: find answers
            return None
        ends = self.ends(data)
        if ends is None:
            return None
        return Scan(self.known, self.unknown, _in_characters(data, ends, self.literals, self._lengths))

    def ends(self, data: bytes) -> dict[int, int] | None:
        """Where each literal's first match in ``data`` ends, by its number; None if
        Hyperscan failed (then ``find`` answers, as without a scanner)."""
        scratch = getattr(self._local, "scratch", None)
        found: dict[int, int] = {}
        try:
            if scratch is None:
                scratch = self._local.scratch = self._backend.Scratch(self._database)
            self._database.scan(data, match_event_handler=_on_first_match, context=found, scratch=scratch)
        except Exception:  # noqa: BLE001 - its own error types; a failed scan must not fail a verdict
            return None
        return found


def _in_characters(data: bytes, ends: dict[int, int], literals: tuple[str, ...],
                   lengths: tuple[int, ...]) -> dict[str, int]:
    """Each literal's first start, from where its match ``ends`` in the UTF-8 ``data``,
    counted in characters (each match is of an ASCII literal: as many characters as bytes)."""
    out: dict[str, int] = {}
    byte = char = 0
    for start, number in sorted((end - lengths[number], number) for number, end in ends.items()):
        if start > byte:
            gap = data[byte:start]
            char += len(gap) if gap.isascii() else len(gap.decode("utf-8"))
            byte = start
        out[literals[number]] = char
    return out


def _database(backend: Any, literals: tuple[str, ...]) -> Any:
    """The Hyperscan database over ``literals``: compiled, or loaded back from the
    cache directory when an earlier run compiled the same one (see :data:`CACHED_FROM`)."""
    path = _cache_path(backend, literals) if len(literals) >= CACHED_FROM else None
    # The file starts with the name it was written under: a database copied or renamed
    # onto another literal set's file would report other literals' numbers.
    header = path.name.encode("ascii") if path is not None else b""
    if path is not None:
        try:
            if not path.is_file():  # missing, or a FIFO that would block the read
                raise OSError(path)
            data = path.read_bytes()
            if not data.startswith(header):
                raise ValueError("written for other literals")
            database = backend.loadb(data[len(header):], backend.HS_MODE_BLOCK)
        except Exception:  # noqa: BLE001, S110 - missing, damaged, another release's or CPU's: compile it
            pass
        else:
            try:
                os.utime(path)  # recently used: the last to be pruned
            except OSError:
                pass
            return database
    database = backend.Database(mode=backend.HS_MODE_BLOCK)
    database.compile(expressions=[lit.encode("ascii") for lit in literals], ids=list(range(len(literals))),
                     elements=len(literals), flags=_flags(backend), literal=True)
    if path is not None:
        _store(path, header + backend.dumpb(database))
    return database


def _flags(backend: Any) -> int:
    """Each literal's Hyperscan flags: its first match only, ASCII letters of either case."""
    return int(backend.HS_FLAG_SINGLEMATCH | backend.HS_FLAG_CASELESS)


def _cache_path(backend: Any, literals: tuple[str, ...]) -> Path | None:
    from .packcache import cache_dir

    root = cache_dir()
    if root is None:
        return None
    digest = hashlib.sha256(f"{getattr(backend, '__version__', '?')}\0{_flags(backend)}\0".encode())
    digest.update("\0".join(literals).encode("ascii"))  # order matters: a match is reported by number
    return root / "hyperscan" / f"{digest.hexdigest()[:32]}.db"


def _store(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and keep the folder to :data:`CACHED_FILES`
    files, the least recently used going first; best effort (a read-only or full disk
    only costs the next run a compile)."""
    from .packcache import prune, write_cache_file

    try:
        write_cache_file(path, data)
        prune(path, CACHED_FILES)
    except OSError:
        pass


def _on_first_match(number: int, _start: int, end: int, _flags: int, found: dict[int, int]) -> None:
    # Called for every literal a text holds, a dozen a log: only a dict item each, which
    # is what the text's Scan needs (one match per literal: HS_FLAG_SINGLEMATCH).
    found[number] = end


class _Build:
    """One build's automata and what goes with them. A rebuild makes a new one and
    swaps it in whole, so a scan running beside it in another thread numbers its
    matches with the literals of the automaton that found them."""

    __slots__ = ("literals", "known", "unknown", "ascii_literals", "ascii", "first", "text", "text_dfa", "dfa",
                 "numbers", "ascii_numbers")

    def __init__(self, literals: tuple[str, ...], ascii: Any, ascii_literals: tuple[str, ...], dfa: bool,
                 first: _FirstMatches | None = None) -> None:
        self.dfa = dfa
        self.literals = literals
        self.known = frozenset(literals)
        self.unknown: dict[frozenset[str], tuple[str, ...]] = {}  # see Scan.unknown_of
        self.ascii_literals = ascii_literals  # numbered as the byte automaton numbers them
        self.ascii = ascii  # over the ASCII literals' bytes, for ASCII texts (most logs): a little faster
        self.first = first  # or, in a long run, first matches only, from Hyperscan (then ascii is None)
        # Each literal's number in the automaton that reports it (Scan.positions).
        self.numbers = {lit: i for i, lit in enumerate(literals)}
        self.ascii_numbers = {lit: i for i, lit in enumerate(ascii_literals)}
        self.text: Any = None  # over every literal, for any other text; made on first use
        self.text_dfa = False  # whether ``text`` is a DFA


class LiteralScanner:
    """Aho-Corasick automata (and, in a long run, a Hyperscan database) over the
    literals asked for so far."""

    __slots__ = ("_backend", "_first_backend", "_built", "_pending", "_scans", "_text_scans", "_next_build",
                 "_misses", "builds")

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self._first_backend: Any = _UNSEEN  # hyperscan, looked for at the first DFA build
        self._built: _Build | None = None
        self._pending: set[str] = set()
        self._scans = 0
        self._text_scans = 0  # of texts that are not ASCII
        self._next_build = 0
        self._misses = 0  # lookups of literals not in the automaton (each a find) since the last build
        self.builds = 0

    @property
    def known(self) -> frozenset[str]:
        """What the current automata find."""
        built = self._built
        return frozenset() if built is None else built.known

    def learn(self, literal: str) -> None:
        """Find ``literal`` too, from the next rebuild on (not one that UTF-8 cannot
        hold, such as a lone surrogate from a ``\\ud800`` escape: ``find`` answers it)."""
        known = self.known
        if literal and literal not in known and len(known) + len(self._pending) < MAX_LITERALS:
            try:
                literal.encode("utf-8")
            except UnicodeEncodeError:
                return
            self._pending.add(literal)
            self._misses += 1

    def learnt(self) -> frozenset[str]:
        """Every literal learnt so far: those the automata find and those waiting for a rebuild."""
        return self.known | frozenset(self._pending)

    def seed(self, literals: Iterable[str]) -> None:
        """Learn ``literals`` in one go (those an earlier run of the same pack
        learnt, see :mod:`loop_core.packcache`): the first scan builds them all,
        and the automata are not rebuilt again and again while they trickle in.
        They are not counted as lookups that missed the automaton."""
        misses = self._misses
        for literal in literals:
            self.learn(literal)
        self._misses = misses

    def settle(self) -> None:
        """Build now with every literal learnt so far, as a long run's rebuilds
        eventually do, and let the automaton for texts that are not ASCII be a
        DFA from its next use, as it is in a long run (the benchmark's
        steady-state count uses it)."""
        if self._pending:
            self._build()
        self._text_scans = max(self._text_scans, TEXT_DFA_AFTER)

    def scan(self, text: str, lower: Callable[[], str], *, as_is: bool = False) -> Scan | None:
        """Every occurrence of every known literal in ``text`` lower-cased (in a long run,
        with Hyperscan, each one's first); None while none is known, or when the scan
        failed (``find`` answers then).

        :param lower: gives the text lower-cased, called when the scan reads that.
        :param as_is: reading ``text`` itself, ignoring the case of ASCII letters, finds
            what reading it lower-cased does (see ``fastregex.TextIndex``); Hyperscan
            then reads the text itself, and it is not lower-cased.
        """
        self._scans += 1
        built = self._built
        pending = len(self._pending)
        # Rebuild on schedule (once a DFA is built, only when the waiting literals have
        # cost enough finds), or at once when a new pack's literals arrive in bulk, or
        # (once) when the run has gone on long enough to pay for a DFA.
        if pending and (built is None or 2 * pending >= len(built.known) or self._scans > self._next_build and (
                not built.dfa or self._misses >= LATE_MISSES)) or (
                built is not None and not built.dfa and self._scans >= DFA_AFTER):
            built = self._build()
        if built is None:
            return None
        if built.first is not None:
            return built.first.scan(text if as_is else lower(), built)
        if text.isascii():
            numbered, numbers = built.ascii_literals, built.ascii_numbers
            matches = (built.ascii.find_matches_as_indexes(lower().encode("ascii"), overlapping=True)
                       if built.ascii is not None else [])
        else:
            low = lower()
            numbered, numbers = built.literals, built.numbers
            self._text_scans += 1
            dfa = built.dfa and self._text_scans >= TEXT_DFA_AFTER
            if built.text is None or dfa and not built.text_dfa:
                built.text = self._automaton(self._backend.AhoCorasick, list(numbered), dfa)
                built.text_dfa = dfa
            try:
                matches = built.text.find_matches_as_indexes(low, overlapping=True)
            except UnicodeError:
                return None  # a lone surrogate in the text: UTF-8 cannot hold it, find can
        return Scan.of_matches(built.known, built.unknown, numbered, matches, numbers)

    def _automaton(self, kind: Any, patterns: list[Any], dfa: bool) -> Any:
        backend = self._backend
        shape = backend.Implementation.DFA if dfa else backend.Implementation.ContiguousNFA
        return kind(patterns, matchkind=backend.MatchKind.Standard, implementation=shape)

    def _build(self) -> _Build:
        waiting = set(self._pending)
        literals = tuple(sorted(self.known | waiting))
        self._pending -= waiting  # not clear(): another thread may have just added one
        self._misses = 0
        # An ASCII text is scanned as bytes, whose offsets are its positions; only
        # ASCII literals can occur in it.
        ascii_literals = tuple(lit for lit in literals if lit.isascii())
        dfa = self._scans >= DFA_AFTER
        first = self._first_matches(ascii_literals) if dfa and ascii_literals else None
        automaton = (self._automaton(self._backend.BytesAhoCorasick, [lit.encode("ascii") for lit in ascii_literals],
                                     dfa) if ascii_literals and first is None else None)
        built = self._built = _Build(literals, automaton, ascii_literals, dfa, first)
        self.builds += 1
        self._next_build = self._scans + 2 ** min(self.builds, 12)
        return built


    def _first_matches(self, literals: tuple[str, ...]) -> _FirstMatches | None:
        """Hyperscan over ``literals``, when it is installed and takes them (else None:
        the Aho-Corasick DFA does the work)."""
        if self._first_backend is _UNSEEN:
            self._first_backend = _first_match_backend()
        if self._first_backend is None:
            return None
        try:
            return _FirstMatches(self._first_backend, literals)
        except Exception:  # noqa: BLE001 - any refusal (an old release, a literal it rejects): use the DFA
            return None


_UNSEEN: Any = object()
_STATE: dict[str, Any] = {}  # "scanner": the process's LiteralScanner, or None when off


def scanner() -> LiteralScanner | None:
    """The process's scanner, made on first use; None when the package is missing
    or ``LOOP_RULES_SCANNER`` is ``off``."""
    try:
        return _STATE["scanner"]  # type: ignore[no-any-return]
    except KeyError:
        pass
    backend = None if switched_off(ENV) else _backend()
    made = _STATE["scanner"] = None if backend is None else LiteralScanner(backend)
    return made


def use_scanner(enabled: bool | None) -> None:
    """Turn the scanner on (a fresh one, if the package is installed) or off;
    None: decide again from the environment on next use."""
    _STATE.clear()
    if enabled is False:
        _STATE["scanner"] = None
    elif enabled:
        backend = _backend()
        _STATE["scanner"] = None if backend is None else LiteralScanner(backend)
