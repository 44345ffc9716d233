"""Which rules of a pack can match a bundle, without walking them all.

Most rules can only match when some literal occurs in some text of the
bundle: a regex's required literals (:mod:`loop_core.fastregex`), the
phrases of a ``contains``. :meth:`Condition.needs` says which, per rule.
Built once per pack, a :class:`RuleIndex` turns that around:

- a need whose literal holds a word between two spaces (``cuda out of
  memory`` holds ``out``, ``of``) is filed under that word, so one set
  intersection of a text's words with the index's words finds every rule
  one of whose needs *may* hold, however many rules the pack has; a literal
  that starts or ends with a space is filed under the start or end of the
  word it implies (:func:`~loop_core.fastregex.affix_key`), the same way;
- a rule with a need that has no such word is checked when the walk
  reaches it, by looking for its literals (each looked for once per text;
  a ``final_error`` whose log the scanner found none of them in is not
  even made, see :meth:`View.lacks`);
- a rule with no known needs (a ``not``, a plugin condition kind, a general
  JSONPath) is always evaluated.

Rules are still evaluated in file order, and a rule is skipped only when it
provably cannot match, so the first match is the one a plain walk finds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from .conditions import Need, Selector
from .view import View

__all__ = ["RuleIndex"]

AFFIX_RULES = 64  # fewer rules keyed by word starts and ends are checked one by one instead

# A checked rule's needs, per selector: ((selector, ((literal, anchor word), ...), literals), ...)
_Groups = tuple[tuple[Selector, tuple[tuple[str, str | None], ...], frozenset[str]], ...]


@dataclass(slots=True)
class _ByWord:
    """The keyed needs on one selector: word (or affix key) -> positions of rules."""

    selector: Selector
    rules: dict[str, list[int]] = field(default_factory=dict)
    affix_rules: dict[str, list[int]] = field(default_factory=dict)
    positions: set[int] = field(default_factory=set)
    words: frozenset[str] = frozenset()
    affixes: frozenset[str] = frozenset()
    by_literal: dict[str, list[int]] = field(default_factory=dict)  # for a text the literal scanner has read
    literals: frozenset[str] = frozenset()


class RuleIndex:
    """The rules of a pack, indexed by the words and literals they need."""

    __slots__ = ("size", "_always", "_by_word", "_checked", "_checked_literals", "_checked_by_literal",
                 "_checked_keys", "_signals", "_base", "_base_order")

    def __init__(self, needs: Sequence[tuple[Need, ...] | None]) -> None:
        """``needs[i]`` are the needs of rule ``i`` (None or empty: always evaluated)."""
        self.size = len(needs)
        self._always: list[int] = []
        self._checked: dict[int, _Groups] = {}
        by_word: dict[str, _ByWord] = {}
        # A text's word starts and ends cost a pass over its words: worth it for many rules only.
        few_affixes = sum(1 for ns in needs if ns and any(n.anchor is None and n.affix for n in ns)) < AFFIX_RULES
        for pos, rule_needs in enumerate(needs):
            if not rule_needs:
                self._always.append(pos)
            elif any(n.anchor is None and (n.affix is None or few_affixes) for n in rule_needs):
                self._checked[pos] = _by_selector(rule_needs)
            else:
                for need in rule_needs:
                    entry = by_word.setdefault(need.selector.text, _ByWord(need.selector))
                    if need.anchor is not None:
                        entry.rules.setdefault(need.anchor, []).append(pos)
                    else:
                        entry.affix_rules.setdefault(need.affix, []).append(pos)  # type: ignore[arg-type]
                    entry.positions.add(pos)
                    entry.by_literal.setdefault(need.literal, []).append(pos)
        # Every literal the checked rules need, per selector: one set operation over a
        # scanned text answers them all (see _may_hold).
        wanted: dict[str, set[str]] = {}
        # And, per selector and literal, the checked rules that literal lets through.
        by_literal: dict[str, dict[str, set[int]]] = {}
        for pos, groups in self._checked.items():
            for selector, _pairs, literals in groups:
                wanted.setdefault(selector.text, set()).update(literals)
                for literal in literals:
                    by_literal.setdefault(selector.text, {}).setdefault(literal, set()).add(pos)
        self._checked_literals = {text: frozenset(lits) for text, lits in wanted.items()}
        self._checked_by_literal = {text: {lit: frozenset(ps) for lit, ps in lits.items()}
                                    for text, lits in by_literal.items()}
        self._checked_keys = {pos: frozenset(selector.text for selector, _p, _l in groups)
                              for pos, groups in self._checked.items()}
        # The signal each checked selector of the form $.signal.<name> picks (see _may_hold).
        self._signals = {selector.text: str(selector.steps[1]) for groups in self._checked.values()
                         for selector, _p, _l in groups
                         if selector.steps is not None and len(selector.steps) == 2 and selector.steps[0] == "signal"}
        # The rules every walk looks at (always evaluated, or checked on the way), in order.
        self._base = frozenset(self._always) | frozenset(self._checked)
        self._base_order = tuple(sorted(self._base))
        for entry in by_word.values():
            entry.words = frozenset(entry.rules)
            entry.affixes = frozenset(entry.affix_rules)
            entry.literals = frozenset(entry.by_literal)
        self._by_word = tuple(by_word.values())

    def describe(self) -> dict[str, int]:
        """How the pack's rules are indexed (for ``bench`` and docs)."""
        indexed = set().union(*(e.positions for e in self._by_word)) if self._by_word else set()
        return {"rules": self.size, "by_word": len(indexed), "checked": len(self._checked),
                "always": len(self._always)}

    def candidates(self, view: View) -> Iterator[int]:
        """Positions of the rules that may match ``view``, in order."""
        found: set[int] = set()  # the indexed rules one of whose words or literals the bundle has
        for entry in self._by_word:
            values = entry.selector.values(view)
            value = values[0] if values else None
            if not isinstance(value, str):
                continue  # a regex or a text `contains` cannot match a non-text
            index = view.index(value)
            if not index.exact:
                found |= entry.positions
                continue
            occurring = index.which(entry.literals)
            if occurring is not None:  # one scan read every literal: no word set needed
                for literal in occurring:
                    found.update(entry.by_literal[literal])
                continue
            for word in index.words() & entry.words:
                found.update(entry.rules[word])
            if entry.affixes:
                for key in index.affixes() & entry.affixes:
                    found.update(entry.affix_rules[key])
        order = sorted(self._base.union(found)) if found else self._base_order
        checked, keys_of = self._checked, self._checked_keys
        # Checked rules are decided a selector at a time, when the walk first needs the
        # selector: one scan's answer lets through every checked rule one of whose
        # literals on it occurs (``passing``), and the selector joins ``decided``. A
        # rule whose selectors are all decided and that is not passing cannot match:
        # a set lookup and a subset test, not a walk over its needs.
        present: dict[str, AbstractSet[str] | None] = {}  # per selector, see _may_hold
        passing: set[int] = set()
        decided: set[str] = set()
        may_hold = self._may_hold
        for pos in order:
            groups = checked.get(pos)
            if groups is None or pos in passing:
                yield pos
            elif not keys_of[pos] <= decided and may_hold(view, pos, groups, present, passing, decided):
                yield pos

    def _may_hold(self, view: View, pos: int, groups: _Groups, present: dict[str, AbstractSet[str] | None],
                  passing: set[int], decided: set[str]) -> bool:
        """Whether one of rule ``pos``'s needs may hold: its literal occurs in the text it is about.

        ``present`` remembers, per selector, which of all the checked rules'
        literals occur in its text, when one scan looked for every one of them
        (None: each is looked up in turn); such a selector is then ``decided``,
        with every checked rule it lets through added to ``passing``.
        """
        for selector, pairs, literals in groups:
            key = selector.text
            found = present.get(key, _UNSEEN)
            if found is _UNSEEN:
                # A signal that a text read already rules out (View.lacks: a final error
                # whose log holds none of the literals) is not made: decided when it holds
                # none of the checked rules' literals, else left for a later rule's.
                signal = self._signals.get(key)
                if signal is not None and view.lacks(signal, self._checked_literals[key]):
                    found = present[key] = frozenset()
                    decided.add(key)
                elif signal is not None and view.lacks(signal, literals):
                    continue
                else:
                    found = present[key] = _occurring(view, selector, self._checked_literals[key])
                    if found is not None:
                        through = self._checked_by_literal[key]
                        for literal in found:
                            passing.update(through[literal])
                        decided.add(key)
            if found is not None:
                if pos in passing:
                    return True
                continue
            index = view.index(selector.values(view)[0])
            if not index.exact or index.holds_any_of(literals, pairs):
                return True
        return False


def _by_selector(needs: tuple[Need, ...]) -> _Groups:
    groups: dict[str, tuple[Selector, list[tuple[str, str | None]]]] = {}
    for need in needs:
        groups.setdefault(need.selector.text, (need.selector, []))[1].append((need.literal, need.anchor))
    return tuple((selector, tuple(pairs), frozenset(lit for lit, _ in pairs)) for selector, pairs in groups.values())


_UNSEEN: Any = object()  # a selector whose text _may_hold has not looked at yet


def _occurring(view: View, selector: Selector, literals: frozenset[str]) -> AbstractSet[str] | None:
    """Those of ``literals`` in the text ``selector`` picks, when one scan of it looked for
    them all (none for an empty or non-text value: Need.of keeps no literal empty);
    None when each must be looked up."""
    values = selector.values(view)
    value = values[0] if values else None
    if not isinstance(value, str) or not value:
        return frozenset()
    return view.index(value).known_present(literals)
