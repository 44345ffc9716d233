"""Regex search that skips most of a long log without changing any result.

Rules search log excerpts of many kilobytes, and an alternation of phrases
costs the regex engine tens of nanoseconds per character. Two facts, worked
out once per pattern from its parse tree, make most searches cheap:

- **required literals**: every match contains at least one of a few literal
  strings (e.g. ``no kernel image`` or ``flashattention``). If none occurs in
  the lower-cased text, the pattern cannot match and is not run at all.
- **line-local**: the pattern cannot match a newline and has no anchors or
  lookarounds that see past a line. Then any match lies inside one line that
  holds a required literal, and only those lines are searched (with
  ``pos``/``endpos`` on the original text, so spans are unchanged).

Both are conservative: when the analysis is unsure it answers "unknown" and
the pattern runs on the whole text, as written. Property tests check that
:meth:`GuardedRegex.search` finds exactly what a plain search finds.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

import regex

if sys.version_info >= (3, 11):
    from re import _constants as C  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
else:  # pragma: no cover - Python 3.10
    import sre_constants as C
    import sre_parse

__all__ = ["GuardedRegex", "required_literals"]

MIN_LITERAL = 3
# regex-module syntax the stdlib parser would misread as literal text: fuzzy
# constraints such as (?:kernel){e<=1}, and the version-1 flag (whose set
# operations -- && ~~ || are plain characters in the version 0 we compile with).
_UNPARSED_SYNTAX = re.compile(r"\{[^{}]*[A-Za-z<>=][^{}]*\}|\(\?[a-zA-Z]*V1")
_FLAG_MAP = ((regex.IGNORECASE, re.IGNORECASE), (regex.MULTILINE, re.MULTILINE),
             (regex.DOTALL, re.DOTALL), (regex.VERBOSE, re.VERBOSE))
MAX_HIT_LINES = 64
_FOLDS_TO_ASCII_S = "\u017f"  # LATIN SMALL LETTER LONG S: matches (?i)s, but lower() keeps it
_NEWLINE = ord("\n")
_REPEATS = {C.MAX_REPEAT, C.MIN_REPEAT} | ({C.POSSESSIVE_REPEAT} if hasattr(C, "POSSESSIVE_REPEAT") else set())
# Categories that can match a newline: \s, \W, \D (and their Unicode/locale twins).
_NEWLINE_CATEGORIES = {c for c in (getattr(C, n, None) for n in (
    "CATEGORY_SPACE", "CATEGORY_NOT_WORD", "CATEGORY_NOT_DIGIT", "CATEGORY_UNI_SPACE",
    "CATEGORY_UNI_NOT_WORD", "CATEGORY_UNI_NOT_DIGIT", "CATEGORY_LOC_NOT_WORD", "CATEGORY_LINEBREAK",
    "CATEGORY_UNI_LINEBREAK")) if c is not None}


def _literal_char(code: int) -> str | None:
    ch = chr(code)
    # ASCII only: lower() keeps positions and is a sound stand-in for IGNORECASE there.
    return ch.lower() if ch.isascii() and ch.isprintable() else None


def _best(candidates: list[frozenset[str]]) -> frozenset[str] | None:
    usable = [c for c in candidates if c and min(map(len, c)) >= MIN_LITERAL]
    if not usable:
        return None

    return max(usable, key=lambda c: (min(map(len, c)), -len(c)))


def _required(items: Iterable[Any]) -> frozenset[str] | None:
    """A set of literals one of which every match of the sequence contains, or None."""
    candidates: list[frozenset[str]] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            candidates.append(frozenset({"".join(run)}))
            run.clear()

    for op, av in items:
        if op is C.LITERAL:
            ch = _literal_char(av)
            if ch is None:
                flush()
            else:
                run.append(ch)
            continue
        flush()
        if op is C.SUBPATTERN:
            sub = _required(av[-1])
            if sub is not None:
                candidates.append(sub)
        elif op is C.BRANCH:
            alts = [_required(alt) for alt in av[1]]
            if all(a is not None for a in alts):
                candidates.append(frozenset().union(*alts))  # type: ignore[arg-type]
        elif op in _REPEATS:
            low, _high, sub = av
            if low >= 1:
                inner = _required(sub)
                if inner is not None:
                    candidates.append(inner)
    flush()
    return _best(candidates)


def _set_matches_newline(items: list[Any]) -> bool:
    negate = bool(items) and items[0][0] is C.NEGATE
    hit = False
    for op, av in items[1:] if negate else items:
        if op is C.LITERAL and av == _NEWLINE:
            hit = True
        elif op is C.RANGE and av[0] <= _NEWLINE <= av[1]:
            hit = True
        elif op is C.CATEGORY and av in _NEWLINE_CATEGORIES:
            hit = True
        elif op not in (C.LITERAL, C.RANGE, C.CATEGORY):
            return True  # unknown set member: assume the worst
    return not hit if negate else hit


def _line_local(items: Iterable[Any], flags: int) -> bool:
    """True when no match can contain a newline or depend on text outside its line."""
    for op, av in items:
        if op is C.LITERAL:
            if av == _NEWLINE:
                return False
        elif op is C.NOT_LITERAL:
            if av != _NEWLINE:
                return False
        elif op is C.ANY:
            if flags & sre_parse.SRE_FLAG_DOTALL:
                return False
        elif op is C.IN:
            if _set_matches_newline(av):
                return False
        elif op is C.CATEGORY:
            if av in _NEWLINE_CATEGORIES:
                return False
        elif op is C.AT:
            # A line window starts at a real line start and ends at a real line end
            # (pos/endpos), so \b, ^ and, under MULTILINE, $ mean the same there;
            # \A, \Z and a single-line $ would not.
            if av in (C.AT_BOUNDARY, C.AT_NON_BOUNDARY, C.AT_BEGINNING):
                continue
            if av is C.AT_END and flags & sre_parse.SRE_FLAG_MULTILINE:
                continue
            return False
        elif op in (C.ASSERT, C.ASSERT_NOT):
            # A lookaround that cannot cross a newline sees the same text in the window.
            if not _line_local(av[1], flags):
                return False
        elif op is C.SUBPATTERN:
            add, delete = av[1], av[2]
            if not _line_local(av[-1], (flags | add) & ~delete):
                return False
        elif op is C.BRANCH:
            if not all(_line_local(alt, flags) for alt in av[1]):
                return False
        elif op in _REPEATS:
            if not _line_local(av[2], flags):
                return False
        else:
            return False  # lookarounds, backreferences, conditionals: not analysed
    return True


def _anchor(literal: str) -> str | None:
    words = literal.split(" ")
    inner = [w for w in words[1:-1] if w and not any(c.isspace() for c in w)]
    return max(inner, key=len) if inner else None


def required_literals(pattern: str) -> frozenset[str] | None:
    """Lower-cased literals one of which every match contains, or None when unknown."""
    if _UNPARSED_SYNTAX.search(pattern):
        return None
    try:
        parsed = sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - regex-module syntax the stdlib parser does not know
        return None
    return _required(parsed)


class GuardedRegex:
    """A compiled ``regex`` pattern whose searches skip text that cannot match.

    The pattern is analysed on first use (first search or first look at
    ``literals``, ``anchors`` or ``line_local``), not when it is wrapped: a
    command that loads a pack and classifies one bundle does not pay for
    the rules it never reaches. Every search runs after the analysis, so
    results do not depend on when it happened.
    """

    __slots__ = ("compiled", "pattern", "_literals", "_anchors", "_line_local", "_analysed")

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        self.pattern: str = compiled.pattern
        self._analysed = False

    @property
    def literals(self) -> tuple[str, ...] | None:
        """Lower-cased literals, longest first, one of which every match holds (None: unknown)."""
        if not self._analysed:
            self._analyse()
        return self._literals

    @property
    def anchors(self) -> tuple[str | None, ...]:
        """Per literal, a word it holds between two spaces (or None): such a word is a
        whitespace-separated token of any text holding the literal, so a set lookup
        can rule the literal out without scanning the text."""
        if not self._analysed:
            self._analyse()
        return self._anchors

    @property
    def line_local(self) -> bool:
        """No match can cross a newline or see past its line."""
        if not self._analysed:
            self._analyse()
        return self._line_local

    def _analyse(self) -> None:
        literals, anchors, line_local = self._analysis()
        self._literals, self._anchors, self._line_local = literals, anchors, line_local
        self._analysed = True

    def _analysis(self) -> tuple[tuple[str, ...] | None, tuple[str | None, ...], bool]:
        if _UNPARSED_SYNTAX.search(self.pattern):
            return None, (), False
        flags = 0
        for theirs, ours in _FLAG_MAP:
            if self.compiled.flags & theirs:
                flags |= ours
        try:
            parsed = sre_parse.parse(self.pattern, flags)
        except Exception:  # noqa: BLE001 - unknown syntax: always search in full
            return None, (), False
        lits = _required(parsed)
        if lits is None:
            return None, (), False
        literals = tuple(sorted(lits, key=len, reverse=True))
        return literals, tuple(_anchor(lit) for lit in literals), _line_local(parsed, parsed.state.flags)

    def search(self, text: str, *, timeout: float | None = None, lowered: str | None = None,
               tokens: Callable[[], frozenset[str]] | None = None) -> Any:
        """Like ``compiled.search(text, timeout=...)``: the same match object or None.

        :param lowered: ``text.lower()`` if the caller has it (it is computed otherwise).
        :param tokens: returns ``frozenset(lowered.split())``, for callers that cache it.
        """
        if not self._analysed:
            self._analyse()
        if self._literals is None:
            return self.compiled.search(text, timeout=timeout)
        low = lowered if lowered is not None else text.lower()
        if not text.isascii() and (len(low) != len(text) or _FOLDS_TO_ASCII_S in text):
            # lower() moved positions, or the text holds the one character that
            # case-insensitively matches an ASCII letter yet lower() leaves alone.
            return self.compiled.search(text, timeout=timeout)
        present = self._present(low, tokens)
        if not present:
            return None
        if not self._line_local:
            return self.compiled.search(text, timeout=timeout)
        starts: set[int] = set()
        for lit in present:
            at = low.find(lit)
            while at >= 0:
                starts.add(low.rfind("\n", 0, at) + 1)
                if len(starts) > MAX_HIT_LINES:
                    return self.compiled.search(text, timeout=timeout)
                at = low.find(lit, at + 1)
        for start in sorted(starts):
            end = low.find("\n", start)
            m = self.compiled.search(text, start, len(text) if end < 0 else end, timeout=timeout)
            if m is not None:
                return m
        return None

    def _present(self, low: str, tokens: Callable[[], frozenset[str]] | None) -> list[str]:
        """The required literals that occur in ``low`` (a token lookup first, when possible)."""
        assert self._literals is not None
        words = tokens() if tokens is not None and any(self._anchors) else None
        out = []
        for lit, anchor in zip(self._literals, self._anchors):
            if words is not None and anchor is not None and anchor not in words:
                continue
            if lit in low:
                out.append(lit)
        return out
