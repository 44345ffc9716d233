"""Regex search that skips most of a long log without changing any result.

Rules search log excerpts of many kilobytes, and an alternation of phrases
costs the regex engine tens of nanoseconds per character. Three facts, worked
out once per pattern from its parse tree, make most searches cheap:

- **required literals**: every match contains at least one of a few literal
  strings (e.g. ``no kernel image`` or ``flashattention``). If none occurs in
  the lower-cased text, the pattern cannot match and is not run at all.
- **line-local**: the pattern cannot match a newline and has no anchors or
  lookarounds that see past a line. Then any match lies inside one line that
  holds a required literal, and only those lines are searched.
- **bounded reach**: a pattern that can cross lines, but only a bounded
  number of times (``error\\s{1,3}code`` crosses at most three), has every
  match within that many lines of a required literal's line; only those
  stretches are searched.

Windows are searched with ``pos``/``endpos`` on the original text, in order,
and always start and end at line boundaries, where ``\\b``, ``^`` and a
multi-line ``$`` mean what they mean in the whole text: spans are unchanged.
A :class:`TextIndex` holds what the searches of one text share (its
lower-cased form, its words, where each literal occurs), so a pack of many
rules lower-cases and scans a log once per literal, not once per rule.

The analysis is conservative: when it is unsure it answers "unknown" and the
pattern runs on the whole text, as written. Property tests check that
:meth:`GuardedRegex.search` finds exactly what a plain search finds.
"""

from __future__ import annotations

import base64
import copyreg
import json
import re
import sys
import time
import warnings
import zlib
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from typing import Any

import regex

from .litscan import LiteralScanner, Scan, scanner

if sys.version_info >= (3, 11):
    from re import _constants as C  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
else:  # pragma: no cover - Python 3.10
    import sre_constants as C
    import sre_parse

__all__ = ["GuardedRegex", "RegexCache", "TextIndex", "affix_key", "anchor_word", "required_literals", "split_alternatives"]

MIN_LITERAL = 3
MAX_STRINGS = 1  # strings a stretch may stand for when each literal costs a find: more cost more than rarer ones save
MAX_STRINGS_SCANNED = 16  # when one scan finds every literal at once (loop_core.litscan): rarer ones pay, up to here
_LIMIT = [MAX_STRINGS]  # the limit of the analysis under way (see strings_limit)
# regex-module syntax the stdlib parser would misread as literal text: the
# version-1 flag, whose set operations -- && ~~ || are plain characters in the
# version 0 we compile with (fuzzy constraints are found by _has_fuzzy).
_VERSION1 = re.compile(r"\(\?[a-zA-Z]*V1")
_REPEAT_BODY = re.compile(r"\d*(?:,\d*)?")
_POSIX_CLASS = re.compile(r"\[:\^?\w+:\]")  # regex's [:alpha:] and [:^alpha:] inside a set; re reads [:alph] + "]"
_FLAG_MAP = ((regex.IGNORECASE, re.IGNORECASE), (regex.MULTILINE, re.MULTILINE),
             (regex.DOTALL, re.DOTALL), (regex.VERBOSE, re.VERBOSE))
MAX_WINDOWS = 64  # more separate windows than this: one search of the whole text is cheaper
MAX_REACH_LINES = 8  # a pattern whose matches can span more lines is searched in full
WHOLE_TEXT_BELOW = 512  # a text this short is searched whole: finding windows in it costs more than it saves
AFFIX = 8  # characters of a word's start and end kept by TextIndex.affixes
TOKEN_MIN = 2048  # below this length, scanning a text is cheaper than building its word set
_FOLDS_TO_ASCII_S = "\u017f"  # LATIN SMALL LETTER LONG S: matches (?i)s, but lower() keeps it
# The only characters whose lower() is longer than one character (LATIN CAPITAL LETTER I
# WITH DOT ABOVE) or is ASCII without being ASCII (KELVIN SIGN), in the Unicode tables
# of the Pythons supported (a test walks every code point to hold this).
LOWER_GROWS = "\u0130"
LOWERS_TO_ASCII = "\u212a"
_NEWLINE = ord("\n")
_REPEATS = {C.MAX_REPEAT, C.MIN_REPEAT} | ({C.POSSESSIVE_REPEAT} if hasattr(C, "POSSESSIVE_REPEAT") else set())
# Categories that can match a newline: \s, \W, \D (and their Unicode/locale twins).
_NEWLINE_CATEGORIES = {c for c in (getattr(C, n, None) for n in (
    "CATEGORY_SPACE", "CATEGORY_NOT_WORD", "CATEGORY_NOT_DIGIT", "CATEGORY_UNI_SPACE",
    "CATEGORY_UNI_NOT_WORD", "CATEGORY_UNI_NOT_DIGIT", "CATEGORY_LOC_NOT_WORD", "CATEGORY_LINEBREAK",
    "CATEGORY_UNI_LINEBREAK")) if c is not None}


def _outside_classes(pattern: str) -> Iterator[tuple[int, str]]:
    """``(index, character)`` for each character of ``pattern`` that is neither
    escaped nor inside a character class (a leading ``]`` in a class is a
    member); an unterminated class ends with ``(len(pattern), "[")``."""
    i, in_class = 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if pattern.startswith("]", i + 1) or pattern.startswith("^]", i + 1):
                i += 2 if pattern[i + 1] == "]" else 3
                continue
        else:
            yield i, ch
        i += 1
    if in_class:
        yield len(pattern), "["


def _unparsed_syntax(pattern: str) -> bool:
    """True when ``pattern`` uses ``regex``-module syntax the standard parser would
    read as literal text: the V1 flag, a POSIX class such as ``[[:space:]]``
    (looked for anywhere, to be safe), or a fuzzy constraint such as
    ``(?:kernel){e<=1}`` (a brace outside a class that is not a repeat count)."""
    if ("[:" in pattern and _POSIX_CLASS.search(pattern)) or _VERSION1.search(pattern):
        return True
    for i, ch in _outside_classes(pattern):
        if ch == "{":
            end = pattern.find("}", i)
            if end > i and not _REPEAT_BODY.fullmatch(pattern, i + 1, end):
                return True
    return False


def _literal_char(code: int) -> str | None:
    # ASCII only: lower() keeps positions and is a sound stand-in for IGNORECASE there.
    return _PRINTABLE_ASCII.get(code)


_PRINTABLE_ASCII = {code: chr(code).lower() for code in range(128) if chr(code).isprintable()}


def _seq(items: Any) -> list[Any]:
    """The items of a parsed sequence as a list (a SubPattern indexes item by item)."""
    return getattr(items, "data", items)  # type: ignore[no-any-return]


def _best(candidates: list[frozenset[str]]) -> frozenset[str] | None:
    """The candidate cheapest to rule out: long strings (rare in logs) but few of
    them (without the literal scanner each costs a find); past eight characters length stops paying."""
    usable = [c for c in candidates if c and min(map(len, c)) >= MIN_LITERAL]
    if not usable:
        return None
    return max(usable, key=lambda c: (min(min(map(len, c)), 8), -len(c), min(map(len, c))))


def _strings(op: Any, av: Any) -> frozenset[str] | None:
    """Every string one parsed item can match, lower-cased; None when there are too
    many (a character class of more than four characters; an alternation or
    repeat with more than :func:`strings_limit`, which the caller's product is
    held to as well). Zero-width items match ``""``."""
    if op is C.LITERAL:
        ch = _literal_char(av)
        return None if ch is None else frozenset({ch})
    if op is C.IN:
        chars = set()
        for item_op, item_av in av:
            ch = _literal_char(item_av) if item_op is C.LITERAL else None
            if ch is None:
                return None  # a range, a class, a negation, an odd character
            chars.add(ch)
        return frozenset(chars) if len(chars) <= 4 else None
    if op in (C.AT, C.ASSERT, C.ASSERT_NOT):
        return frozenset({""})
    if op is C.SUBPATTERN:
        return _sequence_strings(av[-1])
    if op is C.BRANCH:
        out: set[str] = set()
        for alt in av[1]:
            sub = _sequence_strings(alt)
            if sub is None:
                return None
            out |= sub
        return frozenset(out) if len(out) <= _LIMIT[0] else None
    if op in _REPEATS and av[1] <= 2:
        low, high, sub_items = av
        inner = _sequence_strings(sub_items)
        if inner is None:
            return None
        found: set[str] = set()
        for count in range(low, high + 1):
            strings = {""}
            for _ in range(count):
                strings = {a + b for a in strings for b in inner}
            found |= strings
        return frozenset(found) if len(found) <= _LIMIT[0] else None
    return None


def _sequence_strings(items: Iterable[Any]) -> frozenset[str] | None:
    out = {""}
    for op, av in _seq(items):
        sub = _strings(op, av)
        if sub is None:
            return None
        out = {a + b for a in out for b in sub}
        if len(out) > _LIMIT[0]:
            return None
    return frozenset(out)


def _required(items: Iterable[Any]) -> frozenset[str] | None:
    """A set of literals one of which every match of the sequence contains, or None
    (the best of :func:`_required_sets`)."""
    return _best(_required_sets(items))


def _required_sets(items: Iterable[Any]) -> list[frozenset[str]]:
    """Sets of literals, one of each of which every match of the sequence contains.

    A stretch of items that can each match only a few strings gives the set
    of their concatenations: ``(?:cuda) out of`` one literal, and with a
    larger :func:`strings_limit`, ``needs? (an? )?gpu`` six. Rarer literals,
    but more of them to look for: where each costs a ``find``, one string per
    stretch was fastest on the benchmark corpus; where one scan finds them all,
    up to sixteen.
    """
    candidates: list[frozenset[str]] = []
    run = {""}  # every string the current stretch of few-string items can match

    def flush() -> None:
        if "" not in run:
            candidates.append(frozenset(run))

    for op, av in _seq(items):
        strings = _strings(op, av)
        if strings is not None:
            longer = {a + b for a in run for b in strings}
            if len(longer) <= _LIMIT[0]:
                run = longer
            else:
                flush()
                run = set(strings)
            if op in (C.SUBPATTERN, C.BRANCH):
                inner = _required(av[-1]) if op is C.SUBPATTERN else _branch_required(av)
                if inner is not None:
                    candidates.append(inner)
            continue
        flush()
        run = {""}
        if op is C.SUBPATTERN:
            sub = _required(av[-1])
            if sub is not None:
                candidates.append(sub)
        elif op is C.BRANCH:
            union = _branch_required(av)
            if union is not None:
                candidates.append(union)
        elif op in _REPEATS:
            low, _high, sub_items = av
            if low >= 1:
                inner = _required(sub_items)
                if inner is not None:
                    candidates.append(inner)
    flush()
    return candidates


def _branch_required(av: Any) -> frozenset[str] | None:
    alts = [_required(alt) for alt in av[1]]
    if any(a is None for a in alts):
        return None
    return frozenset().union(*alts)  # type: ignore[arg-type]


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


def anchor_word(literal: str) -> str | None:
    """A word of ``literal`` between two spaces (the longest), or None: any text
    holding the literal has that word as a whitespace-separated token."""
    words = literal.split(" ")
    inner = [w for w in words[1:-1] if w and not any(c.isspace() for c in w)]
    return max(inner, key=len) if inner else None


def affix_key(literal: str) -> str | None:
    """For a literal that starts or ends with a space: a key that the text's
    :meth:`TextIndex.affixes` must hold, or None.

    ``" triton_0042"`` is the start of a whitespace-separated token, so some
    token begins with ``triton_0`` (key ``^triton_0``); ``"cudnn_status_x "``
    ends one (key ``$status_x``). Pieces shorter than ``AFFIX``, or with other
    whitespace (a tab) in those characters, give no key: the text's words are
    split at every kind of whitespace.
    """
    pieces = literal.split(" ")
    if len(pieces) < 2:
        return None
    start, end = pieces[-1][:AFFIX], pieces[0][-AFFIX:]
    if len(start) == AFFIX and not any(c.isspace() for c in start):
        return "^" + start
    if len(end) == AFFIX and not any(c.isspace() for c in end):
        return "$" + end
    return None


_NOT_SPLIT = re.compile(r"\\[1-9]|\\g<|\(\?P=|\(\?\(|\(\?[a-zA-Z]*[xV]|\(\?[a-zA-Z]*-[a-zA-Z]*:?|\(\?\|")


def split_alternatives(pattern: str, flags: int = 0) -> list[str] | None:
    """The top-level alternatives of ``pattern``, or None when there are fewer than
    two or splitting could change what a piece means: back-references and
    conditionals (group numbers shift), verbose mode (``|`` in comments),
    ``(?|...)`` branch resets, scoped flag changes, POSIX classes (the ``]`` of
    ``[[:digit:]|x]`` does not end the set, as :func:`_outside_classes` would
    take it to) and version-1 sets. A leading global flag group such as ``(?i)``
    stays on the first piece; compile every piece with the whole pattern's
    ``flags``, which hold it.
    """
    if (flags & (regex.VERBOSE | regex.VERSION1) or _NOT_SPLIT.search(pattern)
            or ("[:" in pattern and _POSIX_CLASS.search(pattern))):
        return None
    pieces, depth, start = [], 0, 0
    for i, ch in _outside_classes(pattern):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "[" and i == len(pattern):
            return None  # an unterminated class: left to the regex engine
        elif ch == "|" and depth == 0:
            pieces.append(pattern[start:i])
            start = i + 1
    if depth != 0:
        return None
    pieces.append(pattern[start:])
    return pieces if len(pieces) > 1 and all(pieces) else None


def strings_limit() -> int:
    """How many strings a stretch of a pattern may stand for in its required
    literals: :data:`MAX_STRINGS_SCANNED` when the literal scanner looks every
    literal up in one pass, :data:`MAX_STRINGS` when each costs a ``find``.
    Either way the literals are exact; only the speed differs."""
    return MAX_STRINGS_SCANNED if scanner() is not None else MAX_STRINGS


_Analysis = tuple[tuple[str, ...] | None, tuple[str | None, ...], int | None, tuple[str, ...] | None]


def _analysis_of(parsed: Any) -> _Analysis:
    """``(literals, anchors, reach, also)`` of a parsed pattern (None: unknown, search
    in full). ``also`` is a second set of literals every match holds one of, besides
    one of ``literals`` (None: no other worth looking for)."""
    if parsed is None:
        return None, (), None, None
    _LIMIT[0] = strings_limit()
    sets = _required_sets(parsed)
    lits = _best(sets)
    if lits is None:
        return None, (), None, None
    literals = tuple(sorted(lits, key=len, reverse=True))
    other = _best([c for c in sets if c != lits and not c >= lits])
    also = None if other is None else tuple(sorted(other, key=len, reverse=True))
    return literals, tuple(anchor_word(lit) for lit in literals), _reach(parsed), also


def _alternatives(parsed: Any, count: int) -> list[Any] | None:
    """The parse trees of the ``count`` top-level alternatives, when the parse kept
    them as they were written (it may factor out a shared prefix or turn ``a|b``
    into a set; then None)."""
    if parsed is None or count < 2:
        return None
    items = _seq(parsed)
    if len(items) != 1 or items[0][0] is not C.BRANCH or len(items[0][1][1]) != count:
        return None
    return list(items[0][1][1])


def _std_parse(pattern: str, flags: int = 0) -> Any:
    """The standard parser's tree of ``pattern``, without its warnings ("possible
    nested set" and the like): the pattern is the rule author's, compiled by
    ``regex``, and the analysis only reads the tree."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sre_parse.parse(pattern, flags)


def _parse_all(pieces: list[str]) -> bool:
    """Every piece stands alone as a pattern (checked with the standard parser, as
    the analysis is; a piece it rejects keeps the pattern whole)."""
    if not pieces:
        return False
    try:
        for piece in pieces:
            _std_parse(piece)
    except Exception:  # noqa: BLE001 - any parser complaint: do not split
        return False
    return True


def required_literals(pattern: str) -> frozenset[str] | None:
    """Lower-cased literals one of which every match contains, or None when unknown."""
    if _unparsed_syntax(pattern):
        return None
    try:
        parsed = _std_parse(pattern)
    except Exception:  # noqa: BLE001 - regex-module syntax the stdlib parser does not know
        return None
    _LIMIT[0] = strings_limit()
    return _required(parsed)


_WINDOW_OPS = {C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN, C.CATEGORY}
_ATOMIC = getattr(C, "ATOMIC_GROUP", None)


def _window_safe(items: Iterable[Any], flags: int) -> bool:
    """True when searching a stretch of whole lines finds what the whole text would there.

    Windows end at a line end, which ``endpos`` turns into the end of the
    text: a single-line ``$``, ``\\Z`` or ``\\A`` would match there, or not, where
    the whole text differs. Back-references and conditionals are not analysed.
    """
    for op, av in _seq(items):
        if op in _WINDOW_OPS:
            continue
        if op is C.AT:
            if av in (C.AT_BOUNDARY, C.AT_NON_BOUNDARY, C.AT_BEGINNING):
                continue
            if av is C.AT_END and flags & sre_parse.SRE_FLAG_MULTILINE:
                continue
            return False
        if op in (C.ASSERT, C.ASSERT_NOT):
            if not _window_safe(av[1], flags):
                return False
        elif op is C.SUBPATTERN:
            if not _window_safe(av[-1], (flags | av[1]) & ~av[2]):
                return False
        elif op is C.BRANCH:
            if not all(_window_safe(alt, flags) for alt in av[1]):
                return False
        elif op in _REPEATS:
            if not _window_safe(av[2], flags):
                return False
        elif _ATOMIC is not None and op is _ATOMIC:
            if not _window_safe(av, flags):
                return False
        else:
            return False
    return True


def _newlines(items: Iterable[Any], flags: int) -> int | None:
    """The most newlines a match of ``items`` (and what its lookarounds read) can
    hold, or None when unbounded (``\\s*``, ``(?s).*``)."""
    total = 0
    for op, av in _seq(items):
        n: int | None
        if op is C.LITERAL:
            n = 1 if av == _NEWLINE else 0
        elif op is C.NOT_LITERAL:
            n = 0 if av == _NEWLINE else 1
        elif op is C.ANY:
            n = 1 if flags & sre_parse.SRE_FLAG_DOTALL else 0
        elif op is C.IN:
            n = 1 if _set_matches_newline(av) else 0
        elif op is C.CATEGORY:
            n = 1 if av in _NEWLINE_CATEGORIES else 0
        elif op in (C.ASSERT, C.ASSERT_NOT):
            n = _newlines(av[1], flags)  # a lookaround reads past the match at most once
        elif op is C.SUBPATTERN:
            n = _newlines(av[-1], (flags | av[1]) & ~av[2])
        elif op is C.BRANCH:
            alts = [_newlines(alt, flags) for alt in av[1]]
            n = None if None in alts else max(alts, default=0)  # type: ignore[type-var]
        elif op in _REPEATS:
            inner = _newlines(av[2], flags)
            n = None if inner is None or (inner and av[1] == sre_parse.MAXREPEAT) else inner * av[1]
        elif _ATOMIC is not None and op is _ATOMIC:
            n = _newlines(av, flags)
        else:
            n = 0  # AT: zero-width (and _window_safe has vetted it)
        if n is None:
            return None
        total += n
    return total


def _reach(parsed: Any) -> int | None:
    """How many lines above and below a required literal's own a match (and what
    it looks at) can reach; None when the whole text must be searched."""
    flags = parsed.state.flags
    if not _window_safe(parsed, flags):
        return None
    lines = _newlines(parsed, flags)
    return lines if lines is not None and lines <= MAX_REACH_LINES else None


_NO_SCAN = Scan.of_matches(frozenset(), {}, (), [])  # a text read while the scanner knew no literal yet


class TextIndex:
    """What every guarded search of one text shares.

    ``low`` is the lower-cased text; ``exact`` says its positions are the
    text's and every case-insensitive match of an ASCII literal shows in it
    (false for the few texts where ``lower()`` moves characters, or that hold
    LATIN SMALL LETTER LONG S, which matches ``(?i)s`` yet stays as it is).
    Where each literal occurs and the text's words are computed on first use.

    Lower-casing a log costs more than scanning it, so ``low`` is made when
    first asked for, and not at all where an ASCII literal can be found by
    reading the text as it is, ignoring the case of ASCII letters: in every
    exact text without a KELVIN SIGN (which ``lower()`` makes a ``k``) such
    a read finds what a read of ``low`` does, at the same positions. Those
    texts (most logs) are scanned by Hyperscan that way (see
    :meth:`LiteralScanner.scan`), and a literal's every position is found
    with a case-insensitive search (see :meth:`hits`).
    """

    __slots__ = ("text", "_low", "exact", "as_is", "long", "scannable", "_words", "_affixes", "_first", "_hits",
                 "_scan")

    def __init__(self, text: str) -> None:
        self.text = text
        self._low: str | None = None
        if text.isascii():
            self.exact = self.as_is = True
        else:
            self.exact = LOWER_GROWS not in text and _FOLDS_TO_ASCII_S not in text
            self.as_is = self.exact and LOWERS_TO_ASCII not in text  # reads as is (see above)
            if not self.as_is:
                self._low = text.lower()
        self.long = len(text) > TOKEN_MIN  # worth a word set
        self.scannable = self.exact and bool(text)  # one scan costs about what a few finds do
        self._words: frozenset[str] | None = None
        self._affixes: frozenset[str] | None = None
        self._first: dict[str, int] = {}
        self._hits: dict[str, list[int]] = {}
        self._scan: Scan | None = None  # what the literal scanner found

    def _lower(self) -> str:
        low = self._low
        if low is None:
            low = self._low = self.text.lower()
        return low

    @property
    def low(self) -> str:
        """The lower-cased text (made on first use)."""
        return self._lower()

    def scanned(self) -> frozenset[str] | None:
        """The literals one pass of the literal scanner (:mod:`loop_core.litscan`)
        has looked up in this text, scanning it now if it was not yet; None when
        there is no such pass (an empty or inexact text, or no scanner)."""
        scan = self._scan
        if scan is not None:  # read already (only ever by a scanner)
            return scan.known
        if not self.scannable:
            return None
        found = scanner()
        if found is None:
            return None
        self._read(found)
        return self._scan.known  # type: ignore[union-attr]

    def which(self, literals: frozenset[str]) -> AbstractSet[str] | None:
        """Those of ``literals`` that occur in ``low``, when the literal scanner has
        read the text (see :meth:`scanned`); None otherwise."""
        if self.scanned() is None:
            return None
        scan: Scan = self._scan  # type: ignore[assignment]
        out = literals & scan.present  # a walk over the smaller set
        rest = scan.unknown_of(literals)
        if rest:
            found = [literal for literal in rest if self.holds(literal)]
            if found:
                out = out.union(found)
        return out

    def _read(self, literals: LiteralScanner) -> None:
        scan = self._scan = literals.scan(self.text, self._lower, as_is=self.as_is) or _NO_SCAN
        if scan.first:
            # In place: a rule walk holds on to ``_first`` while it probes. Only what
            # occurs: a known literal that does not is remembered when first asked for
            # (:meth:`_probe`), not all several hundred at every scan.
            self._first.update(scan.first)

    def words(self) -> frozenset[str]:
        """The whitespace-separated words of ``low``."""
        if self._words is None:
            self._words = frozenset(self.low.split())
        return self._words

    def affixes(self) -> frozenset[str]:
        """``^`` + the first and ``$`` + the last ``AFFIX`` characters of every word
        at least that long (see :func:`affix_key`)."""
        if self._affixes is None:
            long_words = [w for w in self.words() if len(w) >= AFFIX]
            self._affixes = frozenset(["^" + w[:AFFIX] for w in long_words] + ["$" + w[-AFFIX:] for w in long_words])
        return self._affixes

    def holds(self, literal: str, anchor: str | None = None) -> bool:
        """Whether ``literal`` occurs in ``low``; ``anchor`` (a word the literal holds
        between two spaces) lets a long text rule it out with a set lookup."""
        at = self._first.get(literal)
        return (self._probe(literal, anchor) if at is None else at) >= 0

    def holds_any(self, pairs: Iterable[tuple[str, str | None]]) -> bool:
        """Whether one of the ``(literal, anchor)`` pairs holds (as :meth:`holds`)."""
        first = self._first  # the hot loop of a rule walk: no call per remembered literal
        for literal, anchor in pairs:
            at = first.get(literal)
            if at is None:
                at = self._probe(literal, anchor)
            if at >= 0:
                return True
        return False

    def known_present(self, literals: frozenset[str]) -> AbstractSet[str] | None:
        """Those of ``literals`` that occur, when one pass of the literal scanner
        looked for every one of them (scanning the text now if it was not yet);
        None otherwise."""
        if self.scanned() is None:
            return None
        scan: Scan = self._scan  # type: ignore[assignment]
        if scan.unknown_of(literals):
            return None
        return literals & scan.present

    def scanned_without(self, literals: frozenset[str]) -> bool:
        """Whether a pass of the literal scanner, made already, looked for every one of
        ``literals`` and found none. Never scans: False when the text was not read."""
        scan = self._scan
        return (scan is not None and bool(scan.known) and not scan.unknown_of(literals)
                and literals.isdisjoint(scan.present))

    def holds_any_of(self, literals: frozenset[str], pairs: Iterable[tuple[str, str | None]]) -> bool:
        """:meth:`holds_any` of ``pairs``, whose literals are ``literals``: one set
        operation when the literal scanner has read the text for all of them."""
        scan = self._scan
        if scan is not None and scan.known and not scan.unknown_of(literals):
            return not literals.isdisjoint(scan.present)
        return self.holds_any(pairs)

    def _probe(self, literal: str, anchor: str | None) -> int:
        """Where ``literal`` first occurs in ``low`` (-1: nowhere), looked up and remembered.

        The text is scanned once for every literal the scanner knows; one it does
        not know yet is looked for with ``find`` and learnt for later texts.
        """
        if self.scannable:
            literals = scanner()
            if literals is not None:
                scan = self._scan
                if scan is None:
                    self._read(literals)
                    scan = self._scan
                    at = self._first.get(literal)
                    if at is not None:
                        return at
                if literal in scan.known:  # type: ignore[union-attr]  # looked for and not found
                    self._first[literal] = -1
                    return -1
                literals.learn(literal)
                if self._words is None:
                    anchor = None  # a word set costs more than one find
        if anchor is not None and self.long and anchor not in (self._words or self.words()):
            at = -1
        else:
            at = self.low.find(literal)
        self._first[literal] = at
        return at

    def hits(self, literal: str, limit: int) -> list[int]:
        """Where ``literal`` starts in ``low`` (overlapping starts too), stopping
        after ``limit + 1``: more than ``limit`` means "too many to matter"."""
        found = self._hits.get(literal)
        if found is None:
            found = []
            if self.holds(literal):
                scan = self._scan
                listed = scan.positions(literal) if scan is not None and literal in scan.first else None
                if listed is not None:  # the scan kept every match
                    found = self._hits[literal] = listed[:limit + 1]
                    return found
                at = self._first[literal]
                if self._low is None:  # reads as is (see above): spare lower-casing it
                    search = _caseless(literal).search
                    while len(found) <= limit:
                        found.append(at)
                        m = search(self.text, at + 1)
                        if m is None:
                            break
                        at = m.start()
                else:
                    find = self._low.find
                    while at >= 0 and len(found) <= limit:
                        found.append(at)
                        at = find(literal, at + 1)
            self._hits[literal] = found
        return found


_CASELESS: dict[str, Any] = {}
_CASELESS_KEPT = 1024  # patterns kept (a pack's literals are a few hundred)


def _caseless(literal: str) -> Any:
    """``literal`` (lower-cased) as a compiled pattern matching ASCII letters of either
    case: in a text that reads as is (see :class:`TextIndex`) it matches where
    ``literal`` occurs in the text lower-cased."""
    pattern = _CASELESS.get(literal)
    if pattern is None:
        if len(_CASELESS) >= _CASELESS_KEPT:
            _CASELESS.clear()
        pattern = _CASELESS[literal] = regex.compile(regex.escape(literal), regex.IGNORECASE | regex.ASCII)
    return pattern


# A split pattern's search plan: (alternatives with no literal, ((literal, anchor,
# alternatives), ...), {literal: alternatives}, its literals); see GuardedRegex._make_plan.
_Plan = tuple[tuple[int, ...], tuple[tuple[str, "str | None", tuple[int, ...]], ...], dict[str, tuple[int, ...]],
              frozenset[str]]


class GuardedRegex:
    """A compiled ``regex`` pattern whose searches skip text that cannot match.

    The pattern is analysed on first use (first search or first look at
    ``literals``, ``anchors``, ``line_local``, ``reach`` or ``branches``),
    not when it is wrapped. A pack load looks at every rule's literals for
    its index, so it pays for the analysis, unless :class:`RegexCache`
    restores it from an earlier load (and then the pattern is rebuilt from
    its compiled code on its first search too). Every search runs after the analysis, so results
    do not depend on when it happened.
    """

    __slots__ = ("_compiled", "_code", "pattern", "flags", "_literals", "_anchors", "_reach", "_also", "_branches",
                 "_plan", "_tree", "_analysed")

    def __init__(self, compiled: Any) -> None:
        self._start(compiled.pattern, compiled.flags, compiled, None)

    @classmethod
    def lazy(cls, pattern: str, flags: int, tree: Any = None) -> GuardedRegex:
        """One compiled on its first search: the alternatives of a pattern already
        compiled whole, most of which are never searched (their literals are absent).
        ``tree``, the standard parser's tree of the pattern, spares parsing it again."""
        self = cls.__new__(cls)
        self._start(pattern, flags, None, tree)
        return self

    def _start(self, pattern: str, flags: int, compiled: Any, tree: Any) -> None:
        self.pattern, self.flags = pattern, flags
        self._compiled = compiled
        self._code: dict[str, Any] | None = None  # compiled code to rebuild from (restore)
        self._tree = tree
        self._plan: _Plan | None = None
        self._analysed = False

    @property
    def compiled(self) -> Any:
        if self._compiled is None:
            code, self._code = self._code, None
            compiled = None if code is None else thaw_compiled(self.pattern, code)
            self._compiled = compiled if compiled is not None else regex.compile(self.pattern, self.flags)
        return self._compiled

    def export(self) -> dict[str, Any]:
        """The analysis and the compiled code, the alternatives' too, as plain data
        (for :class:`RegexCache`); :meth:`restore` reads it back."""
        if not self._analysed:
            self._analyse()
        return {"flags": int(self.flags), "literals": None if self._literals is None else list(self._literals),
                "anchors": list(self._anchors), "reach": self._reach,
                "also": None if self._also is None else list(self._also), "code": freeze_compiled(self.compiled),
                "branches": [[b.pattern, b.export()] for b in self._branches]}

    @classmethod
    def restore(cls, pattern: str, flags: int, data: Any) -> GuardedRegex:
        """A lazily compiled pattern with the analysis :meth:`export` gave.

        :raises ValueError: ``data`` is not what ``export`` writes.
        """
        if not isinstance(data, dict):
            raise ValueError("analysis is not a mapping")
        effective = data.get("flags")  # the flags the pattern compiled with, inline ones included
        if not isinstance(effective, int) or isinstance(effective, bool) or effective & flags != flags:
            raise ValueError("bad flags")
        self = cls.lazy(pattern, effective)
        literals, anchors, reach, branches = (data.get(k) for k in ("literals", "anchors", "reach", "branches"))
        if literals is not None and not (isinstance(literals, list) and all(isinstance(x, str) for x in literals)):
            raise ValueError("bad literals")
        if not (isinstance(anchors, list) and all(x is None or isinstance(x, str) for x in anchors)):
            raise ValueError("bad anchors")
        if (literals is None) != (not anchors) or (literals is not None and len(anchors) != len(literals)):
            raise ValueError("anchors do not fit the literals")
        if reach is not None and (not isinstance(reach, int) or isinstance(reach, bool) or reach < 0):
            raise ValueError("bad reach")
        also = data.get("also")
        if also is not None and not (isinstance(also, list) and also and all(isinstance(x, str) and x for x in also)
                                     and literals is not None):
            raise ValueError("bad also")
        if not (isinstance(branches, list) and all(isinstance(b, list) and len(b) == 2 and isinstance(b[0], str)
                                                   for b in branches)):
            raise ValueError("bad branches")
        self._literals = None if literals is None else tuple(literals)
        self._anchors, self._reach = tuple(anchors), reach
        self._also = None if also is None else tuple(also)
        self._branches = tuple(cls.restore(piece, effective, sub) for piece, sub in branches)
        code = data.get("code")
        self._code = code if isinstance(code, dict) else None  # checked when first needed
        self._analysed = True
        return self

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
    def branches(self) -> tuple[GuardedRegex, ...]:
        """The top-level alternatives, each guarded on its own (empty: not split)."""
        if not self._analysed:
            self._analyse()
        return self._branches

    @property
    def line_local(self) -> bool:
        """No match can cross a newline or see past its line."""
        return self.reach == 0

    @property
    def reach(self) -> int | None:
        """How many lines above and below a required literal's line a match can
        reach: 0 when matches stay on the literal's line, None when the whole
        text is searched."""
        if not self._analysed:
            self._analyse()
        return self._reach

    def _analyse(self) -> None:
        parsed = self._parse()
        self._literals, self._anchors, self._reach, self._also = _analysis_of(parsed)
        pieces = split_alternatives(self.pattern, self.flags) or []
        trees = _alternatives(parsed, len(pieces))
        if trees is not None:  # the parse already holds each alternative: no parse of its own
            self._branches = tuple(GuardedRegex.lazy(p, self.flags, tree) for p, tree in zip(pieces, trees))
        elif _parse_all(pieces):
            self._branches = tuple(GuardedRegex.lazy(p, self.flags) for p in pieces)
        else:
            self._branches = ()
        self._tree = None
        self._analysed = True

    def _parse(self) -> Any:
        """The standard parser's tree of the pattern, or None where it cannot be trusted."""
        if self._tree is not None:
            return self._tree
        if _unparsed_syntax(self.pattern):
            return None
        flags = 0
        for theirs, ours in _FLAG_MAP:
            if self.flags & theirs:
                flags |= ours
        try:
            return _std_parse(self.pattern, flags)
        except Exception:  # noqa: BLE001 - unknown syntax: always search in full
            return None

    def test(self, text: str, *, timeout: float | None = None, index: TextIndex | None = None) -> bool:
        """``search(...) is not None``, often cheaper: a pattern ``A|B|C`` holds when
        one alternative does, and each alternative is searched only near its own
        literals (the span of the whole pattern's match is not computed).

        :raises TimeoutError: the searches together took longer than ``timeout``.
        """
        if not text:  # no literal to look for (many bundles have no log): one cheap search says it all
            return self.compiled.search(text, timeout=timeout) is not None
        if not self._analysed:
            self._analyse()
        if not self._branches:
            return self.search(text, timeout=timeout, index=index) is not None
        idx = index if index is not None else TextIndex(text)
        branches = self._branches
        if idx.exact:
            # Only the alternatives one of whose literals occurs (or that have none) can match.
            always, by_literal, where, literals = self._plan if self._plan is not None else self._make_plan()
            found = set(always)
            occurring = idx.which(literals)
            if occurring is not None:  # the literal scanner read the text: no lookup one by one
                for literal in occurring:
                    found.update(where[literal])
            else:
                first = idx._first
                for literal, anchor, positions in by_literal:
                    at = first.get(literal)
                    if at is None:
                        at = idx._probe(literal, anchor)
                    if at >= 0:
                        found.update(positions)
            order: Iterable[int] = sorted(found)
        else:
            occurring = None
            order = range(len(branches))
        deadline = None if timeout is None else time.monotonic() + timeout
        for pos in order:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"regex {self.pattern!r} timed out")
            branch = branches[pos]
            if occurring is not None and branch._literals is not None:
                # Its literals that occur are known already: no lookup one by one.
                m = branch._search_near(text, left, idx, [lit for lit in branch._literals if lit in occurring])
            else:
                m = branch.search(text, timeout=left, index=idx)
            if m is not None:
                return True
        return False

    def _make_plan(self) -> _Plan:
        """The alternatives without literals, each literal's alternatives (with its
        anchor), the same by literal alone, and the set of literals."""
        always: list[int] = []
        by_literal: dict[tuple[str, str | None], list[int]] = {}
        where: dict[str, set[int]] = {}
        for pos, branch in enumerate(self._branches):
            if branch.literals is None:
                always.append(pos)
            else:
                for literal, anchor in zip(branch.literals, branch.anchors):
                    by_literal.setdefault((literal, anchor), []).append(pos)
                    where.setdefault(literal, set()).add(pos)
        self._plan = (tuple(always), tuple((lit, anchor, tuple(p)) for (lit, anchor), p in by_literal.items()),
                      {literal: tuple(sorted(p)) for literal, p in where.items()}, frozenset(where))
        return self._plan

    def search(self, text: str, *, timeout: float | None = None, index: TextIndex | None = None) -> Any:
        """Like ``compiled.search(text, timeout=...)``: the same match object or None.

        :param index: a :class:`TextIndex` of ``text`` shared with other searches
            of it (one is made otherwise).
        """
        if not self._analysed:
            self._analyse()
        if self._literals is None:
            return self.compiled.search(text, timeout=timeout)
        idx = index if index is not None else TextIndex(text)
        if not idx.exact:
            return self.compiled.search(text, timeout=timeout)
        present = [lit for lit, anchor in zip(self._literals, self._anchors) if idx.holds(lit, anchor)]
        return self._search_near(text, timeout, idx, present)

    def _search_near(self, text: str, timeout: float | None, idx: TextIndex, present: list[str]) -> Any:
        """:meth:`search`, given those of the pattern's literals that occur in the text."""
        if not present:
            return None
        also = self._also
        if also is not None:
            for lit in also:
                if idx.holds(lit):
                    break
            else:
                return None  # every match holds one of these too, and none occurs
        if self._reach is None or len(text) <= WHOLE_TEXT_BELOW:
            return self.compiled.search(text, timeout=timeout)
        hits: list[tuple[int, int]] = []
        for lit in present:
            found = idx.hits(lit, MAX_WINDOWS)
            if len(found) > MAX_WINDOWS:
                return self.compiled.search(text, timeout=timeout)
            hits.extend((at, len(lit)) for at in found)
        windows = _windows(text, hits, self._reach)  # exact: the lower-cased text's lines are the text's
        if windows is None:
            return self.compiled.search(text, timeout=timeout)
        search = self.compiled.search
        for start, end in windows:
            m = search(text, start, end, timeout=timeout)
            if m is not None:
                return m
        return None


def _windows(text: str, hits: list[tuple[int, int]], reach: int) -> list[tuple[int, int]] | None:
    """Sorted, disjoint stretches of whole lines that hold every match: the
    lines of each literal hit and ``reach`` lines either side. None means
    "search the whole text" (too many stretches, or most of the text)."""
    out: list[tuple[int, int]] = []
    rfind, find, size = text.rfind, text.find, len(text)
    covered = 0
    for at, n in sorted(hits):
        if out and at + n <= out[-1][1] and reach == 0:
            continue  # on a line already in the last window
        start = rfind("\n", 0, at) + 1
        end = find("\n", at + n)
        for _ in range(reach):
            if start > 0:
                start = rfind("\n", 0, start - 1) + 1
            if 0 <= end < size:
                end = find("\n", end + 1)
        end = size if end < 0 else end
        if out and start <= out[-1][1]:  # overlaps (or touches) the last window: extend it
            last_start, last_end = out.pop()
            covered -= last_end - last_start
            start, end = last_start, max(end, last_end)
        elif len(out) == MAX_WINDOWS:
            return None
        out.append((start, end))
        covered += end - start
        if covered * 2 > size:
            return None
    return out


# Compiled code kept across processes. The ``regex`` module's parser and compiler
# are pure Python (a few hundred microseconds a pattern), but a compiled pattern
# pickles as the call that rebuilds it from its compiled code, with no parsing: a
# fresh process restores a pattern from that in a few microseconds. The pack cache
# keeps those arguments as JSON data, never as a pickle (which could run code),
# with a checksum against damage; they are trusted as Python trusts its own
# byte-code cache, and a cache written by another ``regex`` version is never read
# (its version is part of the key, see loop_core.packcache).
_CONSTRUCTOR: list[Any] = []  # what the regex module's pickling rebuilds a pattern with


def freeze_compiled(compiled: Any) -> dict[str, Any] | None:
    """A compiled pattern's code as JSON data for :func:`thaw_compiled`; None
    when its pickling gives something this does not write."""
    reduce: Any = copyreg.dispatch_table.get(type(compiled))
    if reduce is None:
        return None
    try:
        _constructor, args = reduce(compiled)
        data = _to_plain(args)
    except (TypeError, ValueError):
        return None
    return {"args": data, "sum": _checksum(data)}


def thaw_compiled(pattern: str, frozen: Any) -> Any | None:
    """The compiled ``pattern`` rebuilt from :func:`freeze_compiled` data, or None
    when the data is damaged or does not rebuild ``pattern`` (compile it then)."""
    try:
        data = frozen["args"]
        if frozen["sum"] != _checksum(data):
            return None
        args = _from_plain(data)
        if not _CONSTRUCTOR:
            empty = regex.compile("")
            reducer: Any = copyreg.dispatch_table[type(empty)]
            _CONSTRUCTOR.append(reducer(empty)[0])
        compiled = _CONSTRUCTOR[0](*args)
    except Exception:  # noqa: BLE001 - any damage at all: compile the pattern instead
        return None
    return compiled if getattr(compiled, "pattern", None) == pattern else None


def _checksum(data: Any) -> str:
    return f"{zlib.crc32(json.dumps(data, separators=(',', ':')).encode('utf-8')):08x}"


def _to_plain(value: Any) -> Any:
    """``value`` (ints, strings, bytes, tuples, lists and dicts of them) as JSON data, types kept."""
    if value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, list):
        return [_to_plain(v) for v in value]
    if isinstance(value, tuple):
        return {"tuple": [_to_plain(v) for v in value]}
    if isinstance(value, dict):
        return {"dict": [[_to_plain(k), _to_plain(v)] for k, v in value.items()]}
    raise TypeError(f"cannot keep a {type(value).__name__}")


def _from_plain(value: Any) -> Any:
    """What :func:`_to_plain` was given."""
    if isinstance(value, list):
        return [_from_plain(v) for v in value]
    if not isinstance(value, dict):
        return value
    ((kind, inner),) = value.items()
    if kind == "bytes":
        return base64.b64decode(inner, validate=True)
    if kind == "tuple":
        return tuple(_from_plain(v) for v in inner)
    if kind == "dict":
        return {_from_plain(k): _from_plain(v) for k, v in inner}
    raise ValueError(f"unknown kind {kind!r}")


class RegexCache:
    """Makes the guarded regexes of one pack, reusing an earlier analysis.

    ``entries`` maps ``"<flags>:<pattern>"`` to :meth:`GuardedRegex.export`
    data from an earlier load of the same pack (see
    :mod:`loop_core.packcache`, which keys them by the pack's content and
    this code's). A pattern found there was compiled without error then, so
    it is rebuilt from the compiled code kept there (:func:`thaw_compiled`)
    only when first searched; any other is compiled now (raising
    ``regex.error`` for every pattern that does not compile, even where the
    ``regex`` module raises something else) and analysed, and ``dirty`` says the
    entries should be saved again.
    """

    def __init__(self, entries: dict[str, Any] | None = None, *, keep: bool = True,
                 literals: Iterable[str] = ()) -> None:
        self.entries: dict[str, Any] = dict(entries or {})
        self.keep = keep  # False: nothing will be saved, so nothing is exported (analysis stays lazy)
        self.dirty = False
        # What the literal scanner learnt while these regexes searched, in earlier runs too.
        self.literals = frozenset(literals)

    def learn_literals(self, literals: AbstractSet[str]) -> bool:
        """Add what a run's literal scanner learnt; True when that is news worth saving."""
        if not self.keep or literals <= self.literals:
            return False
        self.literals |= literals
        self.dirty = True
        return True

    def make(self, pattern: str, flags: int) -> GuardedRegex:
        key = f"{int(flags)}:{pattern}"
        data = self.entries.get(key)
        if data is not None:
            try:
                return GuardedRegex.restore(pattern, flags, data)
            except (ValueError, RecursionError):
                pass  # a damaged entry: analyse again
        try:
            guarded = GuardedRegex(regex.compile(pattern, flags))
            if self.keep:
                self.entries[key] = guarded.export()
                self.dirty = True
        except RecursionError:
            raise regex.error("groups nest too deeply to compile") from None
        except (ValueError, OverflowError) as e:  # e.g. conflicting inline flags, a huge repeat count
            raise regex.error(str(e)) from None
        except (KeyError, IndexError) as e:  # older releases' way of refusing some of the same (Python 3.10's)
            raise regex.error(f"the regex module cannot compile it ({type(e).__name__}: {e})") from None
        return guarded
