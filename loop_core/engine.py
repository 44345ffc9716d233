"""Classify bundles: the matcher chain, first match wins (CONTRACTS §3.3, §3.7).

An :class:`Engine` is built once per run from a plugin manager and a rule
pack: it collects the condition kinds, loads and compiles the pack, and
sorts the matchers. ``classify`` is then a pure function of the bundle.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import pluggy

from .bundle import Bundle
from .conditions import ConditionKind, Trace
from .errors import (
    PLUGIN_FAILURES,
    PluginError,
    RuleError,
    failure_text,
    show_traceback,
)
from .keys import normalize_text, tier2_fingerprint
from .packs import PackInfo
from .plugins import BUILTIN_PLUGINS, collect, make_plugin_manager
from .rules import RulePack, load_rules
from .verdict import Classification, FailureClass, Match, Tier, coerce_class
from .view import View

__all__ = [
    "Engine",
    "MatchContext",
    "Matcher",
    "MatcherTrace",
    "condition_kinds",
    "registered_matchers",
    "resolve_pack",
    "rule_packs",
]

RESERVED_KINDS = frozenset({"all", "any", "not", "select"})


@dataclass(slots=True)
class MatchContext:
    """What a matcher sees for one bundle."""

    bundle: Bundle
    view: View
    pack: RulePack
    error_substring: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class Matcher:
    """One link of the classification chain.

    ``match`` returns a :class:`Match` to decide or None to defer.
    ``explain`` (optional) returns traces saying why it did or did not match.
    """

    name: str
    tier: Tier
    order: int
    match: Callable[[MatchContext], Match | None]
    explain: Callable[[MatchContext], list[Trace]] | None = None
    description: str = ""

    def sort_key(self) -> tuple[int, int, str]:
        return (0 if self.tier is Tier.TIER1 else 1, self.order, self.name)


@dataclass(frozen=True, slots=True)
class MatcherTrace:
    """``explain`` output for one matcher."""

    matcher: str
    tier: Tier
    decided: bool
    traces: tuple[Trace, ...] = ()


def _match_problem(match: Match) -> str | None:
    """What makes a matcher's Match unusable in a verdict (it reaches JSON rows, issue
    bodies and, under --jobs, a pickle), or None."""
    if not isinstance(match.rule_id, str):
        return f"rule_id is {type(match.rule_id).__name__}, not text"
    if match.delta_mib is not None and (not isinstance(match.delta_mib, (int, float))
                                        or isinstance(match.delta_mib, bool)):
        return f"delta_mib is {type(match.delta_mib).__name__}, not a number"
    inputs = match.tier1_inputs
    if inputs is not None and type(inputs) is not dict and not isinstance(inputs, Mapping):  # dict: no ABC check
        return f"tier1_inputs is {type(match.tier1_inputs).__name__}, not a mapping"
    if match.review is not None and not isinstance(match.review, bool):
        return f"review is {type(match.review).__name__}, not None or a bool"
    return None


MAX_INPUTS_DEPTH = 100  # levels tier1_inputs may nest: more than any bundle file read with default limits


class _NotData(Exception):
    """A value inside ``tier1_inputs`` that is not JSON data; ``path`` is where, innermost first."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path: list[str] = []

    def where(self) -> str:
        return "tier1_inputs" + "".join(reversed(self.path))


_PLAIN = frozenset({str, int, float, bool, type(None)})  # JSON scalars as they are kept


def _json_data(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` made of plain JSON data (None, bools, ints, floats, text,
    lists, dicts with text keys), which every output writes and a ``--jobs`` worker
    pickles: a read-only mapping becomes a dict, a tuple a list, a subclass of int,
    float or str its plain value. (NaN and the infinities are kept: bundle files may
    hold them, and the JSON outputs write them as text.)

    :raises _NotData: something else is inside (a set, bytes, a path, a non-text
        key), or it nests deeper than :data:`MAX_INPUTS_DEPTH`.
    """
    if type(value) in _PLAIN:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if depth >= MAX_INPUTS_DEPTH:
        raise _NotData(f"is nested deeper than {MAX_INPUTS_DEPTH} levels")
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                if not isinstance(key, str):
                    raise _NotData(f"has a key {key!r} that is {type(key).__name__}, not text")
                key = str.__str__(key)
            if type(item) in _PLAIN:  # most values: no call
                out[key] = item
                continue
            try:
                out[key] = _json_data(item, depth + 1)
            except _NotData as e:
                e.path.append(f"[{key!r}]")
                raise
        return out
    if isinstance(value, (list, tuple)):
        items = []
        for index, item in enumerate(value):
            try:
                items.append(_json_data(item, depth + 1))
            except _NotData as e:
                e.path.append(f"[{index}]")
                raise
        return items
    raise _NotData(f"is {type(value).__name__}, not JSON data")


def _plain_dict(value: Any) -> bool:
    """Whether ``value`` is already what :func:`_json_data` would make of it, a dict of
    text keys and scalar values: the built-in Tier-1 matcher's answers, kept as they are."""
    return type(value) is dict and all(type(k) is str and type(v) in _PLAIN for k, v in value.items())


MAX_TRACE_DEPTH = 64  # levels of Trace children an explain may nest


def _traces_problem(traces: Any, depth: int) -> str | None:
    """What keeps ``traces`` (an explain's answer, or a Trace's ``children``) from being
    printed, or None: each must be a Trace whose children are a list or tuple of such,
    nested at most :data:`MAX_TRACE_DEPTH` levels (a Trace can even hold itself)."""
    if depth >= MAX_TRACE_DEPTH:
        return f"Traces nested deeper than {MAX_TRACE_DEPTH} levels"
    for trace in traces:
        if not isinstance(trace, Trace):
            where = "a Trace whose children hold" if depth else "something other than Traces:"
            return f"{where} {type(trace).__name__}"
        if not isinstance(trace.children, (tuple, list)):
            return f"a Trace whose children are {type(trace.children).__name__}, not a list of Traces"
        problem = _traces_problem(trace.children, depth + 1)
        if problem is not None:
            return problem
    return None


def condition_kinds(pm: pluggy.PluginManager) -> dict[str, ConditionKind]:
    found: dict[str, tuple[ConditionKind, str]] = collect(
        pm, "loop_register_conditions", lambda k: k.name, "condition kind", ConditionKind, ("evaluate", "compile"))
    for name, (_kind, plugin) in found.items():
        if name in RESERVED_KINDS:
            raise PluginError(f"plugin {plugin!r}: condition kind name {name!r} is reserved")
    return {name: kind for name, (kind, _plugin) in found.items()}


def registered_matchers(pm: pluggy.PluginManager) -> dict[str, tuple[Matcher, str]]:
    """Every matcher the plugins of ``pm`` register: name -> (matcher, plugin name).

    :raises PluginError: a plugin registered something that is not a valid Matcher.
    """
    found: dict[str, tuple[Matcher, str]] = collect(pm, "loop_register_matchers", lambda m: m.name, "matcher",
                                                      Matcher, ("match",))
    for mname, (matcher, plugin) in found.items():
        if not isinstance(matcher.tier, Tier) or matcher.tier is Tier.NONE:
            raise PluginError(f"plugin {plugin!r}: matcher {mname!r}: tier must be Tier.TIER1 or Tier.TIER2, "
                              f"got {matcher.tier!r}")
        if not isinstance(matcher.order, int) or isinstance(matcher.order, bool):
            raise PluginError(f"plugin {plugin!r}: matcher {mname!r}: order must be an int, got {matcher.order!r}")
        if matcher.explain is not None and not callable(matcher.explain):
            raise PluginError(f"plugin {plugin!r}: matcher {mname!r}: explain must be callable or None")
    return found


def rule_packs(pm: pluggy.PluginManager) -> dict[str, PackInfo]:
    return {name: info for name, (info, _plugin) in _registered_packs(pm).items()}


def _registered_packs(pm: pluggy.PluginManager) -> dict[str, tuple[PackInfo, str]]:
    return collect(pm, "loop_register_rule_packs", lambda p: p.name, "rule pack", PackInfo)


def _check_registered_dir(root: Path, name: str, plugin: str, *, allow_empty: bool) -> None:
    """A registered pack's directory exists and holds rule files. Said with the pack and
    its plugin: the usual cause is a plugin whose YAML was left out of its package."""
    root = Path(root)
    where = f"rule pack {name!r} (plugin {plugin!r}): {root}"
    hint = "; the plugin must ship the pack's YAML files with its package (package data)"
    if not root.is_dir():
        raise RuleError(f"{where}: no such directory{hint}")
    if allow_empty:
        return
    try:
        names = [entry.name for entry in os.scandir(root)]
    except OSError:
        return  # load_rules reports what the system says
    if not any(n.endswith((".yml", ".yaml")) and not n.startswith(".") for n in names):
        raise RuleError(f"{where}: no rule files (*.yml or *.yaml){hint}")


def resolve_pack(spec: str | Path, packs: Mapping[str, PackInfo]) -> tuple[Path, str, str]:
    """``(directory, pack name, display root)`` for a pack name or a directory."""
    text = str(spec)
    if text in packs:
        return packs[text].path, text, text
    path = Path(spec)
    if path.is_dir():
        return path, path.name, text.rstrip("/") or path.name
    raise UnknownPack(text, sorted(packs))


def _outside_the_six(matcher: str, value: Any) -> str:
    """The warning for a matcher's class that is none of the six (a slip such as
    ``genuine_oom``), which the verdict reads as ``unknown``, as CONTRACTS §3.1 has it."""
    import difflib

    meant = difflib.get_close_matches(str(value), [c.value for c in FailureClass], n=1) if isinstance(
        value, str) else []
    hint = f" (did you mean {meant[0]!r}?)" if meant else ""
    return f"matcher {matcher!r} returned the class {value!r}, which is none of the six{hint}; read as unknown"


class UnknownPack(RuleError):
    """``--rules`` (or another option taking a pack) names neither a registered pack
    nor a directory; :meth:`for_option` words it for the option the user typed."""

    def __init__(self, spec: str, known: list[str], option: str = "--rules") -> None:
        self.spec, self.known = spec, known
        where = Path(spec)
        if where.is_file() and where.suffix in (".yml", ".yaml"):
            # A pack is its directory's files in order: one file alone is none.
            super().__init__(f"{option} {spec!r}: a file of a pack, not a pack: give the directory that holds it "
                             f"({option} {str(where.parent)!r})")
            return
        super().__init__(f"{option} {spec!r}: neither a registered pack ({', '.join(known) or 'none'}) "
                         "nor a directory")

    def for_option(self, option: str) -> UnknownPack:
        return UnknownPack(self.spec, self.known, option)


class Engine:
    """A compiled pack plus the sorted matcher chain."""

    def __init__(self, pack: RulePack, matchers: list[Matcher], kinds: Mapping[str, ConditionKind],
                 pm: pluggy.PluginManager, *, trusted: frozenset[str] = frozenset()) -> None:
        """``trusted`` names the matchers whose ``tier1_inputs`` are not checked to be JSON
        data: the built-in ones, which copy them from a bundle the reader parsed."""
        self.pack = pack
        self.matchers = tuple(sorted(matchers, key=Matcher.sort_key))
        self.kinds = dict(kinds)
        self.pm = pm
        self._trusted = trusted

    @classmethod
    def build(cls, rules: str | Path = "default", pm: pluggy.PluginManager | None = None,
              *, collect_errors: bool = False, allow_empty: bool = False) -> Engine:
        """Load the pack ``rules`` (a name or a directory) with the plugins of ``pm``;
        ``allow_empty`` accepts a directory without rule files (see :func:`load_rules`).

        :raises RuleError: the pack is invalid.
        :raises PluginError: a plugin broke a registration contract.
        """
        pm = pm or make_plugin_manager()
        kinds = condition_kinds(pm)
        registered = _registered_packs(pm)
        root, name, shown = resolve_pack(rules, {n: info for n, (info, _plugin) in registered.items()})
        if str(rules) in registered:
            _check_registered_dir(root, name, registered[name][1], allow_empty=allow_empty)
        pack = load_rules(root, kinds, name=name, collect_errors=collect_errors, display_root=shown,
                          allow_empty=allow_empty)
        found = registered_matchers(pm)
        matchers = [matcher for matcher, _plugin in found.values()]
        trusted = frozenset(mname for mname, (_m, plugin) in found.items() if plugin in BUILTIN_PLUGINS)
        return cls(pack, matchers, kinds, pm, trusted=trusted)

    def context(self, bundle: Bundle) -> MatchContext:
        view = View.of(bundle)
        # Through the view, which keeps the error source for View.lacks: the rule walk
        # asks for it in two bundles of three (twice in one of five), and read afresh
        # each time it cost 1,780 instructions a bundle more (of 0.446 million).
        substring = normalize_text(view.error_source()[1])
        fingerprint = tier2_fingerprint(substring, bundle.arch_family, bundle.engine_version)
        return MatchContext(bundle, view, self.pack, substring, fingerprint)

    def classify(self, bundle: Bundle) -> Classification:
        """Decide the class of one bundle. Never raises for a bundle that was read."""
        ctx = self.context(bundle)
        verdict = None
        for matcher in self.matchers:
            result = self._run(matcher, ctx)
            if result is not None:
                verdict = self._verdict(ctx, matcher, result)
                break
        if verdict is None:
            verdict = self._routed(ctx, FailureClass.UNKNOWN, Tier.NONE, None)
        return self._with_shadow(ctx, verdict)

    def _run(self, matcher: Matcher, ctx: MatchContext) -> Match | None:
        """One matcher; a plugin that raises is reported and skipped, never fatal to the run."""
        try:
            result = matcher.match(ctx)
        except PLUGIN_FAILURES as e:  # third-party code must not crash a batch (nor end it)
            message = f"matcher {matcher.name!r} raised {failure_text(e)}; skipped"
            ctx.view.warnings.append(message)
            show_traceback(message, e)
            return None
        if result is not None and not isinstance(result, Match):
            ctx.view.warnings.append(f"matcher {matcher.name!r} returned {type(result).__name__}, not a Match; "
                                     "skipped")
            return None
        if result is not None and (problem := _match_problem(result)):
            ctx.view.warnings.append(f"matcher {matcher.name!r} returned a Match whose {problem}; skipped")
            return None
        if (result is not None and result.tier1_inputs is not None and matcher.name not in self._trusted
                and not _plain_dict(result.tier1_inputs)):
            # Written to JSON rows and pickled under --jobs: a set or a path in it lost every row.
            try:
                inputs = _json_data(result.tier1_inputs)
            except _NotData as e:
                ctx.view.warnings.append(f"matcher {matcher.name!r} returned a Match whose {e.where()} "
                                         f"{e.problem}; skipped")
                return None
            result = replace(result, tier1_inputs=inputs)
        return result

    def _with_shadow(self, ctx: MatchContext, verdict: Classification) -> Classification:
        shadow = self.pack.shadow_rules
        if not shadow:
            return verdict
        hits = tuple(rule.id for rule in shadow if rule.matches(ctx.view))
        return replace(verdict, shadow_matches=hits, warnings=tuple(ctx.view.warnings))

    def explain(self, bundle: Bundle) -> tuple[Classification, list[MatcherTrace]]:
        """Run every matcher in order and say why each did or did not decide."""
        ctx = self.context(bundle)
        traces = []
        verdict: Classification | None = None
        warnings = ctx.view.warnings
        decided_at = 0
        for matcher in self.matchers:
            result = self._run(matcher, ctx)
            said = len(warnings)
            detail = self._explain_one(matcher, ctx)
            # The traces evaluate again what _run just did: what that says again (a rule
            # that raised, a regex that timed out) is on the verdict once, as classify has it.
            del warnings[said:]
            decided = result is not None and verdict is None
            traces.append(MatcherTrace(matcher.name, matcher.tier, result is not None, detail))
            if decided and result is not None:
                verdict = self._verdict(ctx, matcher, result)
                decided_at = len(warnings)
        if verdict is None:
            verdict = self._routed(ctx, FailureClass.UNKNOWN, Tier.NONE, None)
        else:
            # The matchers after the deciding one run only to be shown: classify never runs
            # them, so what they said is not the verdict's (their traces show it).
            del warnings[decided_at:]
        return self._with_shadow(ctx, verdict), traces

    @staticmethod
    def _explain_one(matcher: Matcher, ctx: MatchContext) -> tuple[Trace, ...]:
        """A matcher's own traces; one that raises or answers other things is shown, not fatal."""
        if not matcher.explain:
            return ()
        try:
            traces = tuple(matcher.explain(ctx))
        except PLUGIN_FAILURES as e:  # third-party code, as in _run
            message = f"matcher {matcher.name!r} raised {failure_text(e)}"
            show_traceback(message, e)
            return (Trace("explain", False, message),)
        problem = _traces_problem(traces, 0)
        if problem is not None:
            return (Trace("explain", False, f"matcher {matcher.name!r} returned {problem}"),)
        return traces

    def _verdict(self, ctx: MatchContext, matcher: Matcher, result: Match) -> Classification:
        cls = coerce_class(result.failure_class)
        if cls is FailureClass.UNKNOWN and result.failure_class not in (FailureClass.UNKNOWN, "unknown"):
            ctx.view.warnings.append(_outside_the_six(matcher.name, result.failure_class))
        if matcher.tier is Tier.TIER1:
            # §3.7: Tier-1 never review-queues; only Tier-1 may route a kv-calc bug.
            return Classification(
                cls, Tier.TIER1, result.rule_id, ctx.fingerprint, ctx.error_substring,
                should_file=_fileable(cls), review_queue=False,
                route_as_kv_calc_bug=bool(result.route_as_kv_calc_bug) and cls is FailureClass.GENUINE_OOM,
                delta_mib=result.delta_mib,
                tier1_inputs=cast("dict[str, Any] | None", result.tier1_inputs),  # a plain copy: _run made it
                rules_version=self.pack.version, warnings=tuple(ctx.view.warnings),
            )
        return self._routed(ctx, cls, Tier.TIER2, result.rule_id, review=result.review is not False)

    def _routed(self, ctx: MatchContext, cls: FailureClass, tier: Tier, rule: str | None, *,
                review: bool = True) -> Classification:
        return Classification(
            cls, tier, rule, ctx.fingerprint, ctx.error_substring,
            should_file=_fileable(cls), review_queue=review and cls is FailureClass.UNKNOWN,
            rules_version=self.pack.version, warnings=tuple(ctx.view.warnings),
        )


def _fileable(cls: FailureClass) -> bool:
    return cls not in (FailureClass.BENIGN_COLD_START, FailureClass.UNKNOWN)
