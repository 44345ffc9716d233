"""One ``test_hook_<name>`` per hookspec: what a plugin implementing it can observe."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pluggy
import pytest

from loop_core import (
    ConditionKind,
    Engine,
    FailureClass,
    Match,
    MatchContext,
    Matcher,
    PackInfo,
    PluginError,
    RuleError,
    Tier,
    View,
    hookimpl,
)
from loop_core.selftest import run_examples
from loop_core.testing import make_bundle, write_bundle

Register = Callable[[object, str], object]


@pytest.fixture
def register_plugin(pm: pluggy.PluginManager) -> Iterator[Register]:
    """Register plugin objects on ``pm`` for one test; always unregister them."""
    names: list[str] = []

    def register(plugin: object, name: str) -> object:
        pm.register(plugin, name=name)
        names.append(name)
        return plugin

    try:
        yield register
    finally:
        for name in reversed(names):
            if pm.has_plugin(name):
                pm.unregister(name=name)


# -- loop_register_rule_packs ------------------------------------------------


class PackPlugin:
    def __init__(self, name: str, path: Path) -> None:
        self.name, self.path = name, path

    @hookimpl
    def loop_register_rule_packs(self, register: Callable[[PackInfo], None]) -> None:
        register(PackInfo(self.name, self.path, "a pack shipped by a test plugin"))


NCCL_RULE = """\
- id: nccl-init
  class: unknown
  description: NCCL failed to initialise; a maintainer looks at it.
  when: {select: $.signal.error_text, regex: 'NCCL error'}
  examples:
    match: ["RuntimeError: NCCL error in: init.cpp:42"]
    no_match: ["RuntimeError: CUDA error: an illegal memory access was encountered"]
"""


def test_hook_loop_register_rule_packs(pm: pluggy.PluginManager, register_plugin: Register,
                                       tmp_path: Path) -> None:
    (tmp_path / "10-nccl.yml").write_text(NCCL_RULE, encoding="utf-8")
    register_plugin(PackPlugin("acme", tmp_path), "acme-packs")

    engine = Engine.build("acme", pm)

    assert engine.pack.root == tmp_path
    assert [(r.id, str(r.source)) for r in engine.pack.rules] == [
        ("nccl-init", "acme/10-nccl.yml[0]")]
    verdict = engine.classify(make_bundle("RuntimeError: NCCL error in: init.cpp:42"))
    assert (verdict.failure_class, verdict.tier, verdict.matched_rule) == (
        FailureClass.UNKNOWN, Tier.TIER2, "nccl-init")


def test_hook_loop_register_rule_packs_duplicate_names_both_plugins(
        pm: pluggy.PluginManager, register_plugin: Register, tmp_path: Path) -> None:
    register_plugin(PackPlugin("reference", tmp_path), "acme-packs")
    with pytest.raises(PluginError, match=r"rule pack 'reference' registered twice") as err:
        Engine.build("default", pm)
    assert "'loop_rules.packs'" in str(err.value) and "'acme-packs'" in str(err.value)


# -- loop_register_conditions ------------------------------------------------


def _compile_quants(arg: Any) -> frozenset[str]:
    if isinstance(arg, str):
        arg = [arg]
    if not isinstance(arg, list) or not arg or not all(isinstance(q, str) for q in arg):
        raise ValueError(f"needs a quant label or a list of them, got {arg!r}")
    return frozenset(q.lower() for q in arg)


def _quant_in(view: View, quants: frozenset[str]) -> bool:
    return view.bundle.quant_label in quants


class QuantPlugin:
    def __init__(self, name: str = "quant_label_in") -> None:
        self.name = name

    @hookimpl
    def loop_register_conditions(self, register: Callable[[ConditionKind], None]) -> None:
        register(ConditionKind(self.name, _quant_in, _compile_quants, "the bundle's quant label"))


QUANT_RULE = """\
- id: awq-dtype
  class: quant-unsupported
  description: An AWQ or GPTQ checkpoint whose dtype the engine refuses.
  when:
    - {quant_label_in: [AWQ, GPTQ]}
    - {select: $.signal.error_text, regex: '(?i)dtype'}
  examples:
    match:
      - manifest: {quant_label: AWQ}
        pt3: {failure: "ValueError: torch.float32 is not a supported dtype"}
    no_match:
      - manifest: {quant_label: BF16}
        pt3: {failure: "ValueError: torch.float32 is not a supported dtype"}
"""


def test_hook_loop_register_conditions(pm: pluggy.PluginManager, register_plugin: Register,
                                       tmp_path: Path) -> None:
    register_plugin(QuantPlugin(), "acme-conditions")
    (tmp_path / "10-quant.yml").write_text(QUANT_RULE, encoding="utf-8")

    engine = Engine.build(tmp_path, pm)

    assert "quant_label_in" in engine.kinds
    assert all(case.ok for case in run_examples(engine))
    verdict = engine.classify(make_bundle({"manifest": {"quant_label": "GPTQ"},
                                           "pt3": {"failure": "unsupported dtype bfloat16"}}))
    assert (verdict.failure_class, verdict.matched_rule) == (
        FailureClass.QUANT_UNSUPPORTED, "awq-dtype")


def test_hook_loop_register_conditions_compile_error_names_the_rule(
        pm: pluggy.PluginManager, register_plugin: Register, tmp_path: Path) -> None:
    register_plugin(QuantPlugin(), "acme-conditions")
    broken = QUANT_RULE.replace("[AWQ, GPTQ]", "{awq: 1}")
    (tmp_path / "10-quant.yml").write_text(broken, encoding="utf-8")
    where = r"10-quant\.yml\[0\] awq-dtype: when\[0\]\.quant_label_in: needs"
    with pytest.raises(RuleError, match=where):
        Engine.build(tmp_path, pm)


def test_hook_loop_register_conditions_rejects_duplicates_and_reserved_names(
        pm: pluggy.PluginManager, register_plugin: Register) -> None:
    register_plugin(QuantPlugin("structural"), "acme-conditions")
    with pytest.raises(PluginError, match=r"condition kind 'structural' registered twice") as err:
        Engine.build("reference", pm)
    assert "'loop_rules.conditions'" in str(err.value) and "'acme-conditions'" in str(err.value)

    pm.unregister(name="acme-conditions")
    register_plugin(QuantPlugin("select"), "acme-reserved")
    reserved = r"plugin 'acme-reserved': condition kind name 'select' is reserved"
    with pytest.raises(PluginError, match=reserved):
        Engine.build("reference", pm)


# -- loop_register_matchers --------------------------------------------------


MatchFn = Callable[[MatchContext], Match | None]


def _decide_on(word: str, failure_class: str, rule_id: str, **extra: Any) -> MatchFn:
    def match(ctx: MatchContext) -> Match | None:
        if word in ctx.view.signal("error_text_lower"):
            return Match(failure_class, rule_id, **extra)
        return None
    return match


class MatcherPlugin:
    def __init__(self, *matchers: Matcher) -> None:
        self.matchers = matchers

    @hookimpl
    def loop_register_matchers(self, register: Callable[[Matcher], None]) -> None:
        for matcher in self.matchers:
            register(matcher)


def test_hook_loop_register_matchers(pm: pluggy.PluginManager, register_plugin: Register) -> None:
    # Registered deliberately out of order: the chain sorts by tier, order, name.
    register_plugin(MatcherPlugin(
        Matcher("acme-nvlink", Tier.TIER2, 150,
                _decide_on("nvlink", "kernel-unsupported", "acme-nvlink")),
        Matcher("acme-late-t1", Tier.TIER1, 100, _decide_on("never-present", "unknown", "x")),
        Matcher("acme-first-t1", Tier.TIER1, 50,
                _decide_on("segfault", "overlay-arch-drift", "acme-segv")),
    ), "acme-matchers")

    engine = Engine.build("reference", pm)

    assert [m.name for m in engine.matchers] == [
        "acme-first-t1", "acme-late-t1", "tier1-oom-fastpath",  # Tier-1; order ties go by name
        "tier2-exact", "acme-nvlink", "tier2-rules",          # Tier-2 by order 100, 150, 200
    ]

    # The Tier-1 OOM fast path runs before any Tier-2 matcher.
    oom = engine.classify(make_bundle("nvlink: torch.cuda.OutOfMemoryError: CUDA out of memory"))
    assert (oom.tier, oom.matched_rule) == (Tier.TIER1, "tier1-oom-fastpath")

    # Order 150 runs before the YAML rows (200), which would call this quant-unsupported.
    nv = engine.classify(make_bundle("nvlink down; the AWQ weight is not supported for this dtype"))
    assert (nv.failure_class, nv.tier, nv.matched_rule) == (
        FailureClass.KERNEL_UNSUPPORTED, Tier.TIER2, "acme-nvlink")

    # An earlier Tier-1 matcher beats the OOM fast path, and Tier-1 never review-queues.
    segv = engine.classify(make_bundle("Segfault, then CUDA out of memory"))
    assert (segv.failure_class, segv.tier, segv.review_queue) == (
        FailureClass.OVERLAY_ARCH_DRIFT, Tier.TIER1, False)


def test_hook_loop_register_matchers_tier2_cannot_route_kv_calc(
        pm: pluggy.PluginManager, register_plugin: Register) -> None:
    register_plugin(MatcherPlugin(
        Matcher("acme-odd", Tier.TIER2, 150,
                _decide_on("nvlink", "not-a-class", "acme-odd",
                           route_as_kv_calc_bug=True, delta_mib=5)),
    ), "acme-matchers")
    verdict = Engine.build("reference", pm).classify(make_bundle("nvlink down"))
    assert verdict.failure_class is FailureClass.UNKNOWN  # outside the six: coerced
    assert (verdict.review_queue, verdict.should_file) == (True, False)
    assert (verdict.route_as_kv_calc_bug, verdict.delta_mib) == (False, None)


def test_hook_loop_register_matchers_duplicate_names_both_plugins(
        pm: pluggy.PluginManager, register_plugin: Register) -> None:
    clash = Matcher("tier2-rules", Tier.TIER2, 10, lambda ctx: None)
    register_plugin(MatcherPlugin(clash), "acme-matchers")
    with pytest.raises(PluginError, match=r"matcher 'tier2-rules' registered twice") as err:
        Engine.build("reference", pm)
    assert "'loop_rules.tier2'" in str(err.value) and "'acme-matchers'" in str(err.value)


def test_hook_loop_register_matchers_rejects_non_matchers(
        pm: pluggy.PluginManager, register_plugin: Register) -> None:
    class Bogus:
        name = "bogus"

        @hookimpl
        def loop_register_matchers(self, register: Callable[[Any], None]) -> None:
            register(Bogus())

    register_plugin(Bogus(), "acme-bogus")
    with pytest.raises(PluginError, match=r"plugin 'acme-bogus': matcher 'bogus' is not a Matcher"):
        Engine.build("reference", pm)


# -- loop_evaluate_trust -----------------------------------------------------


class EngineAllowList:
    """Anchors from engine images outside an allow list stop at candidate."""

    def __init__(self, allowed: tuple[str, ...]) -> None:
        self.allowed = allowed
        self.calls = 0

    @hookimpl
    def loop_evaluate_trust(self, bundle: Any, catalog: Any, priors: Any, maintainer_promoted: bool,
                            consensus_n: int) -> Any:
        from loop_core.trust import Stage, evaluate_trust

        self.calls += 1
        if str(bundle.engine_version).startswith(self.allowed):
            return None  # defer: the built-in pipeline decides
        result = evaluate_trust(bundle, catalog=catalog, priors=priors,
                                maintainer_promoted=maintainer_promoted, consensus_n=consensus_n)
        if result.at_least(Stage.VALIDATED):
            return dataclasses.replace(result, stage=Stage.CANDIDATE, reason="engine-not-allowed",
                                       calibration_row=None)
        return result


def _anchor(engine_pin: str) -> dict[str, Any]:
    return {"manifest": {"engine_pin": engine_pin, "outcome": "ok"},
            "pt3": {"ok": True, "failure": None},
            "pt4": {"results": {"plain-chat": "green"}}}


def test_hook_loop_evaluate_trust(pm: pluggy.PluginManager, register_plugin: Register,
                                  tmp_path: Path) -> None:
    from loop_core.batch import trust_rows

    write_bundle(tmp_path / "a-allowed", make_bundle(_anchor("vllm/vllm-openai:v0.21.0")))
    write_bundle(tmp_path / "b-other", make_bundle(_anchor("acme/fork:dev")))
    write_bundle(tmp_path / "c-gate", make_bundle({"manifest": {"schema": 2}}))
    gate = register_plugin(EngineAllowList(("vllm/",)), "acme-trust")

    rows = {Path(r["bundle"]).name: r for r in trust_rows([tmp_path], promote=True, pm=pm)}

    # The plugin deferred: the built-in (trylast) pipeline decided.
    assert (rows["a-allowed"]["stage"], rows["a-allowed"]["reason"]) == (
        "validated", "derived-tier1-deferred-v0.8.1")
    # The plugin's non-None result wins over the built-in.
    assert (rows["b-other"]["stage"], rows["b-other"]["reason"]) == (
        "candidate", "engine-not-allowed")
    # Gate-only bundles are never offered to the hook.
    assert rows["c-gate"]["stage"] is None
    assert isinstance(gate, EngineAllowList) and gate.calls == 2
