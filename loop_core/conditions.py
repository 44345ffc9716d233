"""Compiled conditions: what a rule's ``when`` becomes after loading.

Three steps stay apart (as in pySigma): :mod:`loop_core.rules` parses and
validates YAML, :func:`compile_condition` turns one validated mapping into a
tree of frozen nodes here (regexes and JSONPath compiled once), and the nodes
evaluate against a :class:`~loop_core.view.View`. Evaluation never sees YAML.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

from .errors import PLUGIN_FAILURES, failure_text, pattern_text
from .fastregex import GuardedRegex, affix_key, anchor_word
from .view import MISSING, SIGNALS, View

__all__ = [
    "Condition",
    "ConditionKind",
    "DEFAULT_REGEX_TIMEOUT",
    "Need",
    "OPERATORS",
    "Selector",
    "Trace",
    "compile_condition",
]

DEFAULT_REGEX_TIMEOUT = 0.25  # seconds per regex search
OPERATORS = ("regex", "contains", "equals", "in", "exists", "truthy")
TOP_LEVEL = ("manifest", "pt1", "pt2", "pt3", "pt4", "pt5", "signal")
# Signals that are always text: a `contains` on them is a substring test.
TEXT_SIGNALS = frozenset({"error_text", "error_substring", "error_text_lower", "all_text", "final_error"})

# $.a.b-c['d e'][0]: resolved by a plain walk, no JSONPath machinery.
_SIMPLE_PATH = re.compile(r"\$((?:\.[A-Za-z_][\w-]*|\['[^'\\]*'\]|\[\d+\])+)\Z")
# The named steps a general path starts with (one or two), each followed by another step
# or the end: '$.signal.red_caps[*]' gives signal, red_caps; '$..x' and '$.*' give none.
_HEAD_STEP = re.compile(r"\.([A-Za-z_][\w-]*)|\['([^'\\]*)'\]")
_NAMED_HEAD = re.compile(r"^\$(?:\.[A-Za-z_][\w-]*|\['[^'\\]*'\]){1,2}(?=[.\[]|$)")
_STEP = re.compile(r"\.([A-Za-z_][\w-]*)|\['([^'\\]*)'\]|\[(\d+)\]")


@dataclass(frozen=True, slots=True)
class Trace:
    """Why a condition did or did not match, for ``loop-rules explain``."""

    label: str
    matched: bool
    detail: str = ""
    children: tuple[Trace, ...] = ()

    def lines(self, indent: int = 0) -> list[str]:
        mark = "+" if self.matched else "-"
        text = f"{'  ' * indent}{mark} {self.label}"
        if self.detail:
            text += f": {self.detail}"
        out = [text]
        for child in self.children:
            out.extend(child.lines(indent + 1))
        return out


class Condition:
    """A compiled condition node."""

    def evaluate(self, view: View) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def explain(self, view: View) -> Trace:  # pragma: no cover - abstract
        raise NotImplementedError

    def needs(self) -> tuple[Need, ...] | None:
        """Ways one of which must hold for the condition to match, or None if unknown.

        The rule index (:mod:`loop_core.prefilter`) skips a rule when none of
        its needs holds for a bundle, so a need must be truly necessary.
        """
        return None

    def lookups(self) -> frozenset[str]:
        """The literals evaluating the condition may look up in a text's index (a
        case-insensitive ``contains``): the literal scanner learns them up front."""
        return frozenset()


@dataclass(frozen=True, slots=True)
class ConditionKind:
    """A condition kind usable from YAML as ``{<name>: <argument>}``.

    ``compile`` validates the YAML argument once at load time (raise
    ``ValueError`` with a message to reject it) and returns what ``evaluate``
    receives; ``evaluate(view, compiled)`` returns whether the bundle matches,
    True or False: any other answer fails the rule that evaluates it.
    """

    name: str
    evaluate: Callable[[View, Any], bool]
    compile: Callable[[Any], Any] = field(default=lambda arg: arg)
    description: str = ""


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled JSONPath selector into the view document."""

    text: str
    steps: tuple[str | int, ...] | None  # the fast path, when the path is simple
    jsonpath: Any = None

    def values(self, view: View) -> list[Any]:
        """What the path selects in ``view`` (computed once per bundle and path;
        the list is shared, so callers must not change it)."""
        selected = view.selected
        found = selected.get(self.text)
        if found is None:
            found = selected[self.text] = self._select(view)
        return found

    def _select(self, view: View) -> list[Any]:
        if self.steps is None:
            return [m.value for m in self.jsonpath.find(view.document())]
        first = self.steps[0]
        if first == "signal" and len(self.steps) >= 2:
            value: Any = view.signal(str(self.steps[1]))
            rest = self.steps[2:]
        else:
            value = view.top(str(first))
            rest = self.steps[1:]
        if value is MISSING:
            return []
        for step in rest:
            if isinstance(step, int):
                if not isinstance(value, list) or step >= len(value):
                    return []
                value = value[step]
            else:
                if not isinstance(value, dict) or step not in value:
                    return []
                value = value[step]
        return [value]


@dataclass(frozen=True, slots=True)
class Need:
    """One way a condition can hold: ``literal`` (lower-cased) occurs in the text
    that ``selector`` (a simple path, so one value) selects."""

    selector: Selector
    literal: str
    anchor: str | None  # a word of the literal between two spaces: a word-set lookup rules it out
    affix: str | None  # else a word start or end it implies (fastregex.affix_key)

    @classmethod
    def of(cls, selector: Selector, literals: Sequence[str],
           anchors: Sequence[str | None] | None = None) -> tuple[Need, ...]:
        """The needs "one of ``literals`` occurs"; none when one is empty (it always
        occurs), so a need's literal is never empty and an empty text holds none.
        ``anchors``: each literal's :func:`anchor_word`, where already known."""
        if not all(literals):
            return ()
        out = []
        for i, lit in enumerate(literals):
            anchor = anchor_word(lit) if anchors is None else anchors[i]
            out.append(cls(selector, lit, anchor, None if anchor else affix_key(lit)))
        return tuple(out)


def compile_selector(text: Any) -> Selector:
    if not isinstance(text, str) or not text.startswith("$"):
        raise ValueError(f"selector must be a JSONPath string starting with '$', got {text!r}")
    m = _SIMPLE_PATH.match(text)
    if m:
        steps: list[str | int] = []
        for name, quoted, index in _STEP.findall(m.group(1)):
            steps.append(int(index) if index else (name or quoted))
        _check_top(steps[0], text)
        if steps[0] == "signal" and len(steps) >= 2 and steps[1] not in SIGNALS:
            raise ValueError(_unknown_signal(steps[1], text))
        return Selector(text, tuple(steps))
    from jsonpath_ng.ext.parser import parse  # imported lazily: start-up cost
    try:
        compiled = parse(text)
    except Exception as e:  # jsonpath-ng raises several unrelated types
        raise ValueError(f"invalid JSONPath {text!r}: {e}") from e
    _refuse_filter_regexes(compiled, text)
    # The names a general path starts with are checked as a simple path's are: a typo
    # such as $.signals.* or $.signal.http_status[*] would otherwise select nothing, always.
    head = _NAMED_HEAD.match(text)
    if head:
        names = [a or b for a, b in _HEAD_STEP.findall(head.group(0))]
        _check_top(names[0], text)
        if names[0] == "signal" and len(names) >= 2 and names[1] not in SIGNALS:
            raise ValueError(_unknown_signal(names[1], text))
    return Selector(text, None, compiled)


def _unknown_signal(name: Any, text: str) -> str:
    """The problem with ``$.signal.<name>``, with the signal meant when the name is a slip
    of one (``final_eror``, ``http_status``), else the signals there are."""
    import difflib

    close = difflib.get_close_matches(str(name), SIGNALS, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"signals: {', '.join(SIGNALS)}"
    return f"unknown signal {name!r} in selector {text!r} ({hint})"


def _refuse_filter_regexes(path: Any, text: str) -> None:
    """Refuse a ``=~`` in the path's filters and a `` `sub(/re/, x)` `` step: jsonpath-ng
    runs both with :mod:`re`, without the pack's time limit (a pattern that backtracks
    could hang a run on one log); the ``regex`` operator has the limit and the literal
    prefilter."""
    stack = [path]
    while stack:
        node = stack.pop()
        if getattr(node, "op", None) == "=~":
            raise ValueError(f"selector {text!r}: a filter's =~ regex runs without the regex time limit; "
                             "select the values and match them with the regex operator instead")
        if type(node).__name__ == "Sub" and hasattr(node, "regex"):
            raise ValueError(f"selector {text!r}: `sub(/.../, ...)` runs its regex without the regex time "
                             "limit; select the values and match them with the regex operator instead")
        for child in getattr(node, "__dict__", {}).values():
            stack.extend(child if isinstance(child, (list, tuple)) else (child,))


def _check_top(first: str | int, text: str) -> None:
    if first not in TOP_LEVEL:
        raise ValueError(
            f"selector {text!r} must start with one of {', '.join('$.' + t for t in TOP_LEVEL)}"
        )


def _short(value: Any, limit: int = 80) -> str:
    return _cut(repr(value), limit)


def _cut(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True, slots=True)
class All(Condition):
    items: tuple[Condition, ...]

    def evaluate(self, view: View) -> bool:
        for item in self.items:  # a loop, not all(): no generator per call on the hot path
            if not item.evaluate(view):
                return False
        return True

    def explain(self, view: View) -> Trace:
        children = tuple(c.explain(view) for c in self.items)
        return Trace("all", all(c.matched for c in children), children=children)

    def needs(self) -> tuple[Need, ...] | None:
        # Every item must hold: the needs of any one will do; take the cheapest to rule out.
        found = [n for n in (item.needs() for item in self.items) if n]
        if not found:
            return None
        return min(found, key=lambda ns: (sum(n.anchor is None for n in ns), len(ns)))

    def lookups(self) -> frozenset[str]:
        return frozenset().union(*(item.lookups() for item in self.items))


@dataclass(frozen=True, slots=True)
class Any_(Condition):
    items: tuple[Condition, ...]

    def evaluate(self, view: View) -> bool:
        for item in self.items:
            if item.evaluate(view):
                return True
        return False

    def explain(self, view: View) -> Trace:
        children = tuple(c.explain(view) for c in self.items)
        return Trace("any", any(c.matched for c in children), children=children)

    def needs(self) -> tuple[Need, ...] | None:
        out: list[Need] = []
        for item in self.items:
            found = item.needs()
            if not found:
                return None  # this item can hold in ways nobody knows
            out.extend(found)
        return tuple(out)

    def lookups(self) -> frozenset[str]:
        return frozenset().union(*(item.lookups() for item in self.items))


@dataclass(frozen=True, slots=True)
class Not(Condition):
    item: Condition

    def evaluate(self, view: View) -> bool:
        return not self.item.evaluate(view)

    def explain(self, view: View) -> Trace:
        child = self.item.explain(view)
        return Trace("not", not child.matched, children=(child,))

    def lookups(self) -> frozenset[str]:
        return self.item.lookups()


class KindAnswerError(Exception):
    """A condition kind's ``evaluate`` answered something other than a bool, or raised:
    the rule evaluating it does not match, with a warning naming the rule and the kind."""


@dataclass(frozen=True, slots=True)
class Kind(Condition):
    """A plugin-registered condition kind, e.g. ``{gate_abort_reason: [disk-short]}``."""

    kind: ConditionKind
    argument: Any
    source_argument: Any

    def evaluate(self, view: View) -> bool:
        try:
            answer = self.kind.evaluate(view, self.argument)
        except PLUGIN_FAILURES as e:  # which of the rule's kinds failed, not only that the rule did
            raise KindAnswerError(f"condition kind {self.kind.name!r} raised {failure_text(e)}") from e
        if answer is True or answer is False:  # identity: as cheap as the bool() it replaces
            return answer
        # Taken for its truth, the text "false" (or None, or 0) decided the rule silently.
        raise KindAnswerError(f"condition kind {self.kind.name!r} returned {_short(answer, 40)}, "
                              "not True or False")

    def explain(self, view: View) -> Trace:
        matched = self.evaluate(view)
        return Trace(f"{self.kind.name} {_short(self.source_argument)}", matched)


@dataclass(frozen=True, slots=True)
class Select(Condition):
    """``{select: PATH, <operator>: VALUE}``: true when any selected value satisfies it."""

    selector: Selector
    op: str
    operand: Any
    ignore_case: bool = False
    timeout: float = DEFAULT_REGEX_TIMEOUT

    def evaluate(self, view: View) -> bool:
        if self.op == "regex":  # whether, not where: the cheaper test
            for value in self.selector.values(view):
                if isinstance(value, str) and self._test(view, value):
                    return True
            return False
        return self._check(view, self.selector.values(view))[0]

    def _test(self, view: View, value: str) -> bool:
        try:
            return bool(self.operand.test(value, timeout=self.timeout, index=view.index(value)))
        except TimeoutError:
            self._timed_out(view)
            return False

    def _timed_out(self, view: View) -> None:
        view.timeouts += 1
        view.warnings.append(
            f"regex {pattern_text(self.operand.pattern)} on {self.selector.text} timed out after "
            f"{self.timeout:g}s; the rule does not match"
        )

    def explain(self, view: View) -> Trace:
        values = self.selector.values(view)
        matched, detail = self._check(view, values)
        shown = "<missing>" if not values else _short(values[0] if len(values) == 1 else values)
        operand = (_cut(pattern_text(self.operand.pattern)) if self.op == "regex"
                   else _short(self._operand_text()))
        label = f"{self.selector.text} {self.op} {operand}"
        return Trace(label, matched, f"value {shown}" + (f"; {detail}" if detail else ""))

    def _operand_text(self) -> Any:
        if self.op == "regex":
            return self.operand.pattern
        if self.op == "contains":
            mode, lits = self.operand
            return {mode: list(lits)}
        return self.operand

    def needs(self) -> tuple[Need, ...] | None:
        steps = self.selector.steps
        if steps is None:
            return None  # a general JSONPath can select several values
        if self.op == "regex":
            # A regex never matches a value that is not text (see _one).
            literals = self.operand.literals
            return None if literals is None else Need.of(self.selector, literals, self.operand.anchors)
        if self.op == "contains" and len(steps) == 2 and steps[0] == "signal" and steps[1] in TEXT_SIGNALS:
            mode, lits = self.operand
            if not self.ignore_case and not all(lit.isascii() for lit in lits):
                # The index looks in the lower-cased text, and lower() of a non-ASCII
                # literal can differ inside a text (final sigma): no shortcut then.
                return None
            # A sigma may be final (ς) in the lower-cased text the index holds: no need of it.
            lowered = [lit.lower() for lit in lits]
            needed = [lit for lit in lowered if _SIGMA not in lit]
            if not needed or (mode == "any" and len(needed) < len(lowered)):
                return None
            return Need.of(self.selector, needed if mode == "any" else [max(needed, key=len)])
        return None

    def lookups(self) -> frozenset[str]:
        if self.op == "contains" and self.ignore_case:
            # Lower-cased at load; one with a sigma is looked for in the text itself (see _one).
            return frozenset(lit for lit in self.operand[1] if _SIGMA not in lit)
        return frozenset()

    def _check(self, view: View, values: list[Any]) -> tuple[bool, str]:
        op = self.op
        if op == "exists":
            return (bool(values) == self.operand), ""
        if not values:
            return False, ""
        missed = ""
        for value in values:
            hit, detail = self._one(view, value)
            if hit:
                return True, detail
            missed = missed or detail  # a search that timed out: explain says so on this line
        return False, missed

    def _one(self, view: View, value: Any) -> tuple[bool, str]:
        op = self.op
        if op == "regex":
            if not isinstance(value, str):
                return False, ""
            try:
                m = self.operand.search(value, timeout=self.timeout, index=view.index(value))
            except TimeoutError:
                self._timed_out(view)
                return False, f"timed out after {self.timeout:g}s"
            if m is None:
                return False, ""
            return True, f"span {m.span()} {_short(m.group())}"
        if op == "contains":
            mode, lits = self.operand
            if isinstance(value, str):
                if self.ignore_case:  # the literals are lower-cased: look them up in the text's index
                    holds = view.index(value).holds
                    found = [lit for lit in lits if (holds(lit) if _SIGMA not in lit else lit in _caseless(value))]
                else:
                    found = [lit for lit in lits if lit in value]
            elif isinstance(value, list):
                items = {(_caseless(v) if self.ignore_case else v) for v in value if isinstance(v, str)}
                found = [lit for lit in lits if lit in items]
            else:
                return False, ""
            ok = bool(found) if mode == "any" else len(found) == len(lits)
            return ok, (f"found {', '.join(map(repr, found))}" if ok else "")
        if op == "equals":
            return _equal(value, self.operand, self.ignore_case), ""
        if op == "in":
            return any(_equal(value, o, self.ignore_case) for o in self.operand), ""
        if op == "truthy":
            return bool(value) == self.operand, ""
        raise AssertionError(op)  # pragma: no cover - validated at load


_SIGMA = "\u03c3"  # σ; lower() writes a capital sigma at a word's end as ς (U+03C2)
_FINAL_SIGMA = str.maketrans("\u03c2", _SIGMA)


def _caseless(text: str) -> str:
    """``text`` as ``ignore_case`` compares it: lower-cased, a final sigma as any other.

    ``"ΑΣ".lower()`` is ``"ας"``, where a lower-cased ``"Σ"`` (``"σ"``) is not found.
    """
    low = text.lower()
    return low.translate(_FINAL_SIGMA) if "\u03c2" in low else low


def _equal(value: Any, operand: Any, ignore_case: bool) -> bool:
    if ignore_case and isinstance(value, str) and isinstance(operand, str):
        return _caseless(value) == _caseless(operand)
    if isinstance(value, bool) != isinstance(operand, bool):
        return False  # JSON true is not the number 1
    return bool(value == operand)


def _guarded(pattern: str, flags: int) -> GuardedRegex:
    return GuardedRegex(regex.compile(pattern, flags))


MAX_NESTING = 32  # all/any/not levels a condition may nest: far more than any rule needs


class ConditionErrors(ValueError):
    """Several problems in one ``when`` (each item of a list is checked), one per message."""

    def __init__(self, messages: Sequence[str]) -> None:
        super().__init__("; ".join(messages))
        self.messages = tuple(messages)


def compile_condition(
    raw: Any,
    kinds: Mapping[str, ConditionKind],
    *,
    timeout: float = DEFAULT_REGEX_TIMEOUT,
    where: str = "when",
    regexes: Callable[[str, int], GuardedRegex] = _guarded,
) -> Condition:
    """Compile one validated ``when`` value; raises ``ValueError`` naming ``where``.

    :param regexes: makes a guarded regex from a pattern and flags (raising
        ``regex.error`` for a bad one); a pack load passes its
        :class:`~loop_core.fastregex.RegexCache`.
    """
    return _compile(raw, kinds, timeout, where, regexes, MAX_NESTING)


def _compile_all(items: list[Any], kinds: Mapping[str, ConditionKind], timeout: float, where: str,
                 regexes: Callable[[str, int], GuardedRegex], room: int) -> tuple[Condition, ...]:
    """Each item compiled, or every item's problems raised at once."""
    out: list[Condition] = []
    problems: list[str] = []
    for i, item in enumerate(items):
        try:
            out.append(_compile(item, kinds, timeout, f"{where}[{i}]", regexes, room))
        except ConditionErrors as e:
            problems.extend(e.messages)
        except ValueError as e:
            problems.append(str(e))
    if problems:
        raise ConditionErrors(problems)
    return tuple(out)


def _compile(raw: Any, kinds: Mapping[str, ConditionKind], timeout: float, where: str,
             regexes: Callable[[str, int], GuardedRegex], room: int) -> Condition:
    if room < 0:
        raise ValueError(f"{where}: conditions nest more than {MAX_NESTING} levels deep")
    if isinstance(raw, list):
        if not raw:  # an empty list would match every bundle
            raise ValueError(f"{where}: needs a non-empty list of conditions")
        return All(_compile_all(raw, kinds, timeout, where, regexes, room - 1))
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{where}: a condition must be a non-empty mapping or list, got {_short(raw)}")
    keys = set(raw)
    if "select" in keys:
        return _compile_select(raw, timeout, where, regexes)
    if len(keys) != 1:
        raise ValueError(f"{where}: expected one of all/any/not/select or a condition kind, got keys {sorted(keys)}")
    (name, arg), = raw.items()
    if name in ("all", "any"):
        if not isinstance(arg, list) or not arg:
            raise ValueError(f"{where}.{name}: needs a non-empty list of conditions")
        items = _compile_all(arg, kinds, timeout, f"{where}.{name}", regexes, room - 1)
        return All(items) if name == "all" else Any_(items)
    if name == "not":
        return Not(_compile(arg, kinds, timeout, f"{where}.not", regexes, room - 1))
    kind = kinds.get(name)
    if kind is None:
        known = ", ".join(sorted(kinds)) or "none"
        raise ValueError(f"{where}: unknown condition {name!r} (condition kinds: {known})")
    try:
        compiled = kind.compile(arg)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{where}.{name}: {e}") from e
    except PLUGIN_FAILURES as e:  # a plugin's bug (or its sys.exit), reported at the rule that met it
        raise ValueError(f"{where}.{name}: condition kind {name!r} raised {failure_text(e)}") from e
    return Kind(kind, compiled, arg)


def _compile_select(raw: dict[str, Any], timeout: float, where: str,
                    regexes: Callable[[str, int], GuardedRegex]) -> Select:
    """A ``select`` mapping; every problem in it is raised at once (ConditionErrors)."""
    problems: list[str] = []
    selector = None
    try:
        selector = compile_selector(raw["select"])
    except ValueError as e:
        problems.append(f"{where}.select: {e}")
    ignore_case = raw.get("ignore_case", False)
    if not isinstance(ignore_case, bool):
        problems.append(f"{where}.ignore_case: must be true or false, got {ignore_case!r}")
        ignore_case = False
    ops = [k for k in raw if k in OPERATORS]
    extra = sorted(set(raw) - set(OPERATORS) - {"select", "ignore_case"})
    if extra:
        problems.append(f"{where}: unknown keys {extra} (operators: {', '.join(OPERATORS)})")
    operand: Any = None
    if len(ops) != 1:
        problems.append(f"{where}: select needs exactly one operator of {', '.join(OPERATORS)}, got {ops or 'none'}")
    else:
        try:
            operand = _operand(ops[0], raw[ops[0]], ignore_case, where, regexes)
        except ValueError as e:
            problems.append(str(e))
    if problems:
        raise ConditionErrors(problems)
    assert selector is not None  # it compiled, or its problem was raised above
    return Select(selector, ops[0], operand, ignore_case, timeout)


def _operand(op: str, value: Any, ignore_case: bool, where: str,
             regexes: Callable[[str, int], GuardedRegex]) -> Any:
    """The compiled operand of ``op``; raises ``ValueError`` naming ``where``."""
    if op == "regex":
        if not isinstance(value, str):
            raise ValueError(f"{where}.regex: must be a string, got {_short(value)}")
        flags = regex.IGNORECASE if ignore_case else 0
        try:
            return regexes(value, flags | regex.VERSION0)
        except regex.error as e:
            raise ValueError(f"{where}: invalid regex {pattern_text(value)}: {e}") from e
    if op == "contains":
        return _compile_contains(value, ignore_case, where)
    if op == "in":
        if not isinstance(value, list) or not value:
            raise ValueError(f"{where}.in: must be a non-empty list, got {_short(value)}")
        for i, item in enumerate(value):
            _check_scalar(item, f"{where}.in[{i}]")
        return tuple(value)
    if op in ("exists", "truthy"):
        if not isinstance(value, bool):
            raise ValueError(f"{where}.{op}: must be true or false, got {value!r}")
        return value
    _check_scalar(value, f"{where}.equals")  # equals
    return value


def _check_scalar(value: Any, where: str) -> None:
    """A value compared with a bundle's must be one a JSON file can hold: YAML also
    reads ``2026-01-01`` as a date and ``!!set`` as a set, which never equal one."""
    if value is not None and not isinstance(value, (str, int, float)):
        raise ValueError(f"{where}: must be text, a number, true/false or null, got {_short(value)} "
                         "(quote a date or a time to compare it as text)")


def _compile_contains(value: Any, ignore_case: bool, where: str) -> tuple[str, tuple[str, ...]]:
    mode = "any"
    if isinstance(value, dict):
        if len(value) != 1 or next(iter(value)) not in ("any", "all"):
            raise ValueError(f"{where}.contains: a mapping must be {{any: [...]}} or {{all: [...]}}")
        mode, value = next(iter(value.items()))
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{where}.contains: needs a non-empty string or list of non-empty strings")
    lits: Sequence[str] = [_caseless(v) for v in value] if ignore_case else value
    return mode, tuple(lits)
