"""Self-checks of a rule pack: rule examples, the seed corpus, regex stress probes."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

import regex

from .conditions import All, Any_, Condition, Not, Select
from .engine import Engine
from .errors import pattern_text
from .fastregex import GuardedRegex
from .rules import Rule, RulePack, load_yaml_text
from .testing import make_bundle
from .view import View

__all__ = ["CaseResult", "load_seed_corpus", "probe_regexes", "run_examples", "run_seed_corpus"]

# Inputs that make backtracking-prone patterns blow up: long runs of one
# character with a mismatching tail.
_PROBES = tuple(c * 20_000 + "!" for c in ("a", "0", " ", "x", "=", "-", "\n", ".")) + (
    "ab" * 10_000 + "!", "a " * 10_000 + "!",
)
_NESTED = regex.compile(r"\((?:[^()\\]|\\.)*[+*](?:[^()\\]|\\.)*\)[+*{]")
# Control characters YAML makes of a regex escape written in double quotes ("\bnccl\b" is
# a backspace, then nccl), which no log line holds; a tab or a newline may be meant.
_YAML_ESCAPES = {"\x08": "\\b", "\x07": "\\a", "\x0b": "\\v", "\x0c": "\\f", "\x00": "\\0", "\x1b": "\\e"}


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One replayed case: its name, whether it passed, and what was seen."""

    name: str
    ok: bool
    expected: str
    got: str
    detail: str = ""


def run_examples(engine: Engine) -> list[CaseResult]:
    """Every rule's own ``match``/``no_match`` examples, evaluated against the rule."""
    out = []
    for rule in engine.pack.rules:
        for kind, examples in (("match", rule.match_examples), ("no_match", rule.no_match_examples)):
            for i, example in enumerate(examples):
                view = View(make_bundle(example))
                hit = rule.matches(view)
                want = kind == "match"
                # What decided a wrong outcome (warnings are in ``got`` already).
                detail = _deciding_condition(rule, make_bundle(example)) if hit != want and not view.warnings else ""
                out.append(CaseResult(
                    f"{rule.source} {rule.id} examples.{kind}[{i}]", hit == want and not view.warnings,
                    "match" if want else "no match", ("match" if hit else "no match") + _with_warnings(view.warnings),
                    detail))
    return out


def _deciding_condition(rule: Rule, bundle: Any) -> str:
    """The condition that decided a rule's outcome on ``bundle``: down from the top,
    the first part that came out as the whole did (the failing part of an ``all``,
    the holding one of an ``any``), to a single select. So an author whose example
    fails reads which part of a three-part ``when`` to look at, with the value it saw."""
    trace, _matched = rule.explain(View(bundle))
    node = trace
    while node.children:
        node = next((child for child in node.children if child.matched == node.matched), node.children[0])
    verdict = "held" if node.matched else "did not hold"
    text = f"{node.label} {verdict}" + (f": {node.detail}" if node.detail else "")
    return text if len(text) <= 240 else text[:239] + "…"


def _with_warnings(warnings: Any) -> str:
    """What ``got`` adds when the case met warnings (which fail it whatever the outcome)."""
    return f" with warnings: {'; '.join(warnings)}" if warnings else ""


def load_seed_corpus() -> list[dict[str, Any]]:
    """The seed corpus shipped with the package: Appendix-A rows and gate rows."""
    text = resources.files("loop_core").joinpath("seed/seed-corpus.yml").read_text(encoding="utf-8")
    cases = load_yaml_text(text, "seed-corpus.yml")
    return list(cases)


def run_seed_corpus(engine: Engine) -> list[CaseResult]:
    """Classify every seed case as a bundle and compare with its expected class."""
    out = []
    for case in load_seed_corpus():
        verdict = engine.classify(make_bundle(case.get("bundle") or {}, path=case["id"]))
        want = case["expected"]
        got = verdict.failure_class.value
        # A warning (a matcher that raised, a regex that timed out) fails the case, as it
        # does a rule's example: the right class by luck is not a pass.
        ok = (got == want["class"] and ("tier" not in want or verdict.tier.value == want["tier"])
              and not verdict.warnings)
        out.append(CaseResult(
            f"seed {case['id']}", ok, f"{want['class']}" + (f" ({want['tier']})" if "tier" in want else ""),
            f"{got} ({verdict.tier.value}" + (f", {verdict.matched_rule})" if verdict.matched_rule else ")")
            + _with_warnings(verdict.warnings),
            case.get("description", "")))
    return out


def _regex_nodes(cond: Condition) -> list[Select]:
    if isinstance(cond, Select):
        return [cond] if cond.op == "regex" else []
    if isinstance(cond, (All, Any_)):
        return [n for item in cond.items for n in _regex_nodes(item)]
    if isinstance(cond, Not):
        return _regex_nodes(cond.item)
    return []


def probe_regexes(rules: tuple[Rule, ...], pack: RulePack | None = None) -> tuple[list[str], list[str]]:
    """(errors, warnings): patterns that time out on stress inputs, and nested quantifiers.

    With ``pack``, its ``pack.yml`` Tier-1 OOM patterns are probed too, each as the
    matcher searches it (ignoring case, under the pack's time limit): one that backtracks
    would make the whole signature time out, and the OOM fast path never decide.
    """
    errors: list[str] = []
    warnings: list[str] = []
    for rule in rules:
        for node in _regex_nodes(rule.when):
            _probe(node.operand, node.timeout, f"{rule.source} {rule.id}", errors, warnings)
    if pack is not None:
        settings = pack.settings
        where = f"{pack.shown}/pack.yml" if pack.shown else "pack.yml"
        for key, patterns in (("signature", settings.tier1_oom_signature), ("unless", settings.tier1_oom_unless)):
            for i, pattern in enumerate(patterns):
                _probe(pack.regex(pattern, regex.IGNORECASE), settings.regex_timeout,
                       f"{where}: tier1_oom.{key}[{i}]", errors, warnings)
    return errors, warnings


def _probe(guarded: GuardedRegex, timeout: float, where: str, errors: list[str], warnings: list[str]) -> None:
    pattern = guarded.compiled
    # A pattern that needs a literal first ("boom (a+)+$") only backtracks after it.
    prefixes = ("", *(guarded.literals or ())[:2])
    for probe in (prefix + probe for prefix in prefixes for probe in _PROBES):
        try:
            pattern.search(probe, timeout=timeout)
        except TimeoutError:
            errors.append(f"{where}: regex {pattern_text(pattern.pattern)} exceeded its {timeout:g}s timeout on a "
                          f"{len(probe)}-character line (catastrophic backtracking)")
            break
    if _NESTED.search(pattern.pattern):
        warnings.append(f"{where}: regex {pattern_text(pattern.pattern)} nests quantifiers; it may backtrack catastrophically")
    control = next((c for c in pattern.pattern if c in _YAML_ESCAPES), None)
    if control is not None:
        warnings.append(f"{where}: regex {pattern_text(pattern.pattern)} holds the control character {control!r}, which "
                        f"YAML makes of {_YAML_ESCAPES[control]} in double quotes; write the pattern in single "
                        "quotes")
