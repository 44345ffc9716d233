"""The matcher chain: order, closed class set, routing, Tier-1 inputs and the kv-calc fix."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pluggy
import pytest

from loop_core import Engine, FailureClass, Match, Matcher, Tier, hookimpl
from loop_core.batch import Outcome, verdict_row
from loop_core.rules import RulePack
from loop_core.testing import make_bundle
from loop_rules.tier1 import predicted_total_mib

from .test_rules import GOOD, write

PRED = {"weights_gb": 9.0, "kv_gb": 12.0, "overhead_gb": 1.5}  # 22.5 GB -> 23040 MiB
OOM = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB"


def test_builtin_chain_order_is_pinned(reference_engine: Engine) -> None:
    assert [m.name for m in reference_engine.matchers] == ["tier1-oom-fastpath", "tier2-exact", "tier2-rules"]


def test_reference_rule_order_is_the_references(reference_engine: Engine) -> None:
    assert [r.id for r in reference_engine.pack.rules] == [
        "cold-start-then-green", "served-model-name-404-negative-control", "streaming-dead-boot-green-145",
        "quant-weightload-dtype", "overlay-arch-drift-missing-symbol", "kernel-unsupported-sm",
        "genuine-oom-cuda", "gate-engine-support-no-arch-row", "gate-engine-support-runtime-incompatible",
        "gate-disk-short", "gate-hard-block-wont-fit", "gate-other-correct-refusals",
    ]


class _Plugin:
    def __init__(self, matchers: list[Matcher]) -> None:
        self.matchers = matchers

    @hookimpl
    def loop_register_matchers(self, register):  # type: ignore[no-untyped-def]
        for m in self.matchers:
            register(m)


def _always(cls: str, rule: str):  # type: ignore[no-untyped-def]
    return lambda ctx: Match(cls, rule)


def test_order_follows_tier_and_order_not_registration(pm: pluggy.PluginManager) -> None:
    late = Matcher("zz-late-tier1", Tier.TIER1, 50, _always("kernel-unsupported", "zz"))
    early = Matcher("aa-tier2-first", Tier.TIER2, 10, _always("quant-unsupported", "aa"))
    plugin = _Plugin([early, late])
    pm.register(plugin)
    try:
        engine = Engine.build("reference", pm)
        names = [m.name for m in engine.matchers]
        assert names == ["zz-late-tier1", "tier1-oom-fastpath", "aa-tier2-first", "tier2-exact", "tier2-rules"]
        verdict = engine.classify(make_bundle(OOM))
        assert (verdict.failure_class, verdict.tier, verdict.matched_rule) == (
            FailureClass.KERNEL_UNSUPPORTED, Tier.TIER1, "zz")
    finally:
        pm.unregister(plugin)


def test_out_of_set_class_from_a_plugin_becomes_unknown(pm: pluggy.PluginManager) -> None:
    plugin = _Plugin([Matcher("poison", Tier.TIER1, 1, _always("not-a-real-class-7th-value", "poison"))])
    pm.register(plugin)
    try:
        verdict = Engine.build("reference", pm).classify(make_bundle("anything"))
    finally:
        pm.unregister(plugin)
    assert verdict.failure_class is FailureClass.UNKNOWN
    assert verdict.should_file is False and verdict.review_queue is False  # Tier-1 never review-queues


def test_tier1_oom_routes_with_all_three_inputs(reference_engine: Engine) -> None:
    bundle = make_bundle({
        "pt1": {"predicted_b_breakdown": PRED},
        "pt3": {"failure_log_excerpt": "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB",
                "actual": {"attempted_alloc_mib": 2560, "gpu_worker_reported_mib": 22880}},
    })
    v = reference_engine.classify(bundle)
    assert (v.failure_class, v.tier, v.matched_rule) == (FailureClass.GENUINE_OOM, Tier.TIER1, "tier1-oom-fastpath")
    assert v.route_as_kv_calc_bug is True and v.delta_mib == 22880 - 23040
    assert v.tier1_inputs == {"predicted_b_breakdown": PRED, "attempted_alloc_mib": 2560,
                              "gpu_worker_reported_mib": 22880, "source": "pt3+pt1"}
    row = verdict_row(Outcome(Path("b"), bundle, None, v))  # what classify --format jsonl prints
    assert (row["route_as_kv_calc_bug"], row["delta_mib"], row["tier1_inputs"]) == (True, -160, v.tier1_inputs)


def test_tier1_oom_without_worker_number_is_filed_but_not_routed(reference_engine: Engine) -> None:
    bundle = make_bundle({"pt1": {"predicted_b_breakdown": PRED},
                          "pt3": {"failure": OOM, "actual": {"attempted_alloc_mib": 2560, "gpu_worker_reported_mib": None}}})
    v = reference_engine.classify(bundle)
    assert v.failure_class is FailureClass.GENUINE_OOM and v.should_file and not v.route_as_kv_calc_bug


@pytest.mark.parametrize("where", ["worker", "attempted", "breakdown", "worker-text"])
@pytest.mark.parametrize("pack", ["reference", "default"])
def test_a_number_beyond_any_float_is_unusable_not_a_skipped_tier1(pm: pluggy.PluginManager, where: str,
                                                                   pack: str) -> None:
    """math.isfinite raises for such an int: the Tier-1 matcher was skipped with a warning,
    and an OOM the log names read as unknown."""
    huge = 10 ** 400
    actual: dict[str, Any] = {"attempted_alloc_mib": 2560, "gpu_worker_reported_mib": 22880}
    breakdown = dict(PRED)
    if where == "worker":
        actual["gpu_worker_reported_mib"] = huge
    elif where == "worker-text":
        actual["gpu_worker_reported_mib"] = str(huge)
    elif where == "attempted":
        actual["attempted_alloc_mib"] = huge
    else:
        breakdown["weights"] = huge
    bundle = make_bundle({"pt1": {"predicted_b_breakdown": breakdown},
                          "pt3": {"failure_log_excerpt": "torch.cuda.OutOfMemoryError: CUDA out of memory.",
                                  "actual": actual}})
    v = Engine.build(pack, pm).classify(bundle)
    assert (v.failure_class, v.tier) == (FailureClass.GENUINE_OOM, Tier.TIER1)
    assert v.warnings == ()
    assert v.route_as_kv_calc_bug is False or where == "breakdown"


def test_pt5_inputs_take_precedence(reference_engine: Engine) -> None:
    bundle = make_bundle({
        "pt3": {"failure": "timeout", "actual": {"attempted_alloc_mib": None, "gpu_worker_reported_mib": None}},
        "pt5": {"point": "override_capture", "predicted_b_breakdown": PRED,
                "actual": {"boot_peak_mib": 23900, "gpu_worker_reported_mib": 23900},
                "exit_error_summary": "torch.cuda.OutOfMemoryError: CUDA OOM", "calibration_signal_not_validated": True},
    })
    v = reference_engine.classify(bundle)
    assert v.tier is Tier.TIER1 and v.tier1_inputs is not None and v.tier1_inputs["source"] == "pt5"
    assert v.route_as_kv_calc_bug and v.delta_mib == 23900 - 23040


def test_real_vllm_kv_cache_text_is_tier1(reference_engine: Engine) -> None:
    text = ("INFO [gpu_worker.py:184] Available KV cache memory: 20.89 GiB\n"
            "ValueError: 22.89 GiB KV cache is needed, which is larger than the available KV cache memory "
            "(20.89 GiB). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`")
    v = reference_engine.classify(make_bundle({"pt1": {"predicted_b_breakdown": PRED},
                                               "pt3": {"failure_log_excerpt": text,
                                                       "actual": {"attempted_alloc_mib": 23439,
                                                                  "gpu_worker_reported_mib": 21391}}}))
    assert v.tier is Tier.TIER1 and v.route_as_kv_calc_bug and v.delta_mib == 21391 - 23040


def test_tier1_reads_the_measured_numbers_written_as_text(reference_engine: Engine) -> None:
    v = reference_engine.classify(make_bundle({
        "pt1": {"predicted_b_breakdown": PRED},
        "pt3": {"failure_log_excerpt": OOM, "actual": {"attempted_alloc_mib": "2560", "gpu_worker_reported_mib": " 22880 "}},
    }))
    assert v.tier is Tier.TIER1 and v.route_as_kv_calc_bug is True and v.delta_mib == 22880 - 23040


def test_tier1_finds_the_signature_past_the_first_240_characters_of_a_boot_failure(reference_engine: Engine) -> None:
    v = reference_engine.classify(make_bundle({"pt3": {"failure": "INFO " + "x" * 300 + f" {OOM}"}}))
    assert (v.tier, v.matched_rule) == (Tier.TIER1, "tier1-oom-fastpath")


def test_the_packs_veto_keeps_a_host_ram_oom_kill_off_the_tier1_path(engine: Engine) -> None:
    cuda = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert engine.classify(make_bundle(cuda)).matched_rule == "tier1-oom-fastpath"
    v = engine.classify(make_bundle(f"{cuda}\nMemory cgroup out of memory: Killed process 4242 (python)"))
    assert (v.failure_class, v.tier, v.matched_rule) == (FailureClass.UNKNOWN, Tier.TIER2, "unknown-host-ram-oom-kill")


@pytest.mark.parametrize("breakdown, total", [
    # The producer's real shape carries `total` and both KV pools: counted once, not twice (§8.2.1).
    ({"weights": 3.9, "kv_pool_requested": 16.25, "kv_pool_actual": 16.25, "kv_pool_sliding_fixed": 0.0,
      "activation": 1.1, "cudagraph_overhead": 0.75, "drafter": 0.0, "total": 22.0}, 22528),
    ({"weights": 3.9, "kv_pool_requested": 20.0, "kv_pool_actual": 16.25, "activation": 1.1,
      "cudagraph_overhead": 0.75}, 22528),
    ({"activations": 1.1, "kv_cache": 16.25, "overhead": 0.75, "weights": 3.9}, 22528),
    ({"weights": True, "kv": "12"}, None),
    # A NaN or infinite part that counts leaves no prediction, not the sum of the others.
    ({"weights": float("inf"), "kv_pool_requested": 16.25}, None),
    ({"weights": float("nan"), "kv_pool_requested": 16.25}, None),
    ({"weights": 3.9, "kv_pool_requested": float("nan"), "total": 22.0}, 22528),  # total decides
    ({"weights": 3.9, "kv_pool_requested": float("inf"), "kv_pool_actual": 16.25, "activation": 1.1,
      "cudagraph_overhead": 0.75}, 22528),  # the requested pool does not count
    ({"weights": 3.9, "kv_pool_requested": 16.25, "kv_pool_actual": None}, 20634),  # no actual pool to count instead
    ({"total": float("inf"), "weights": 3.9}, None),
    ({}, None),
    (0, None),
    ([1.0, 2.0], None),
])
def test_predicted_total_counts_each_component_once(breakdown: object, total: int | None) -> None:
    assert predicted_total_mib(breakdown) == total


def test_route_needs_a_usable_prediction(reference_engine: Engine) -> None:
    bundle = make_bundle({"pt1": {"predicted_b_breakdown": {}},
                          "pt3": {"failure": OOM, "actual": {"attempted_alloc_mib": 2560, "gpu_worker_reported_mib": 22880}}})
    v = reference_engine.classify(bundle)
    assert v.failure_class is FailureClass.GENUINE_OOM
    assert v.route_as_kv_calc_bug is False and v.delta_mib is None


@pytest.mark.parametrize("overrides, cls, tier, rule", [
    ({"pt3": {"ok": True, "failure": None}, "pt4": {"results": {"plain-chat": "green", "streaming": "red"},
      "results_detail": {"streaming": {"status": 200, "error": ""}}}},
     "quant-unsupported", "tier2", "streaming-dead-boot-green-145"),
    ("ValueError: Model QuantConfig: the AWQ weight is not supported for this dtype",
     "quant-unsupported", "tier2", "quant-weightload-dtype"),
    ("AttributeError: module 'vllm' has no attribute 'genesis_patch' (patch not applied)",
     "overlay-arch-drift", "tier2", "overlay-arch-drift-missing-symbol"),
    ("RuntimeError: FlashAttention-3 requires Hopper SM90; compute capability 8.6 not supported on this gpu",
     "kernel-unsupported", "tier2", "kernel-unsupported-sm"),
    ({"pt4": {"results": {"plain-chat": "green", "streaming": "unsmoked"}}},
     "benign-cold-start", "tier2", "cold-start-then-green"),
    ({"pt3": {"ok": True, "failure": None}, "pt4": {"results": {"plain-chat": "red"},
      "results_detail": {"plain-chat": {"status": 404, "error": "nope"}}}},
     "benign-cold-start", "tier2", "served-model-name-404-negative-control"),
    ("some entirely novel boot error nobody has classified yet", "unknown", "none-unknown", None),
])
def test_appendix_a_rows_with_the_reference_pack(reference_engine: Engine, overrides: object, cls: str,
                                                 tier: str, rule: str | None) -> None:
    v = reference_engine.classify(make_bundle(overrides))  # type: ignore[arg-type]
    assert (v.failure_class.value, v.tier.value, v.matched_rule) == (cls, tier, rule)
    assert v.should_file == (cls not in ("benign-cold-start", "unknown"))
    assert v.review_queue == (cls == "unknown")
    assert v.route_as_kv_calc_bug is False


@pytest.mark.parametrize("token, cls, tier", [
    ("engine-support-unknown/no-arch-row", "kernel-unsupported", "tier2"),
    ("engine-support-unknown/runtime-incompatible", "unknown", "tier2"),
    ("disk-short", "unknown", "tier2"),
    ("hard-block", "unknown", "tier2"),
    ("repo-not-found", "unknown", "none-unknown"),
    ("DISK-SHORT", "unknown", "none-unknown"),
])
def test_gate_rows(engine: Engine, reference_engine: Engine, token: str, cls: str, tier: str) -> None:
    bundle = make_bundle({"manifest": {"schema": 2}, "pt1": {"abort_reason": token}})
    for e in (engine, reference_engine):
        v = e.classify(bundle)
        assert (v.failure_class.value, v.tier.value) == (cls, tier)
        assert v.review_queue == (cls == "unknown")


def test_gate_rows_never_fire_for_schema_1(reference_engine: Engine) -> None:
    v = reference_engine.classify(make_bundle("some entirely novel boot error"))
    assert v.matched_rule is None


def test_exact_table_hits_before_rows(tmp_path, pm: pluggy.PluginManager) -> None:  # type: ignore[no-untyped-def]
    bundle = make_bundle("ValueError: the AWQ weight is not supported")
    probe = Engine.build("reference", pm).context(bundle).fingerprint
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "00-exact.yml").write_text(f"exact:\n  '{probe}': kernel-unsupported\n")
    (pack / "10-rows.yml").write_text(
        "- id: quant\n  class: quant-unsupported\n  description: d\n"
        "  when: {select: $.signal.error_text, regex: 'AWQ'}\n  examples: {match: ['AWQ']}\n")
    v = Engine.build(pack, pm).classify(bundle)
    assert (v.failure_class.value, v.tier.value, v.matched_rule) == ("kernel-unsupported", "tier2", probe)


def test_an_exact_unknown_is_dismissed_where_a_rule_unknown_stays_queued(tmp_path: Path,
                                                                        pm: pluggy.PluginManager) -> None:
    # docs/rules.md: an `unknown` in the exact table is a maintainer's decision, not sent to review again.
    reviewed, fresh = make_bundle("NCCL error: unhandled system error"), make_bundle("NCCL error: remote end hung up")
    pack = write(tmp_path / "pack", "00-exact.yml",
                 f"exact:\n  '{Engine.build('reference', pm).context(reviewed).fingerprint}': unknown\n")
    engine = Engine.build(write(pack, "10-rows.yml", GOOD.format(id="nccl", cls="unknown", regex="NCCL", example="NCCL")), pm)
    assert [(v.tier.value, v.review_queue) for v in map(engine.classify, (reviewed, fresh))] == [
        ("tier2", False), ("tier2", True)]


def test_a_tier1_signature_search_that_times_out_decides_nothing_and_says_so(tmp_path: Path,
                                                                            pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "pack", "pack.yml", "tier1_oom:\n  signature: ['(a|aa)+$']\n")
    write(pack, "10-rows.yml", GOOD.format(id="r", cls="unknown", regex="zzfrob", example="zzfrob"))
    v = Engine.build(pack, pm).classify(make_bundle("a" * 50_000 + "!"))
    assert (v.failure_class, v.matched_rule) == (FailureClass.UNKNOWN, None)
    assert "tier1-oom-fastpath: signature search timed out; counted as no match" in v.warnings


@pytest.mark.parametrize("worker", [True, "many"])
def test_a_worker_number_that_is_no_number_is_not_routed(reference_engine: Engine, worker: object) -> None:
    # JSON true is not 1 MiB: the OOM is filed, with no kv-calc route and no delta.
    bundle = make_bundle({"pt1": {"predicted_b_breakdown": PRED},
                          "pt3": {"failure": OOM, "actual": {"attempted_alloc_mib": 2560, "gpu_worker_reported_mib": worker}}})
    v = reference_engine.classify(bundle)
    assert v.failure_class is FailureClass.GENUINE_OOM
    assert v.route_as_kv_calc_bug is False and v.delta_mib is None


def test_default_pack_fixes_the_references_misfires(engine: Engine, reference_engine: Engine) -> None:
    cases = {
        # fa3 inside a snapshot hash
        "INFO loading /cache/models--a--b/snapshots/3fa3b9c0d1/model.safetensors\nRuntimeError: NCCL error": "unknown",
        # awq in a model name
        "INFO Loading model TheBloke/Llama-2-13B-chat-AWQ\nRuntimeError: NCCL error": "unknown",
        # a bare AttributeError word in an INFO line
        "INFO AttributeError handler installed\nRuntimeError: NCCL error": "unknown",
    }
    for text, cls in cases.items():
        assert engine.classify(make_bundle(text)).failure_class.value == cls, text
        assert reference_engine.classify(make_bundle(text)).failure_class.value != "unknown", text


def test_default_pack_sees_past_240_characters(engine: Engine, reference_engine: Engine) -> None:
    text = "INFO startup banner line\n" * 40 + "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    assert engine.classify(make_bundle(text)).failure_class is FailureClass.KERNEL_UNSUPPORTED
    assert reference_engine.classify(make_bundle(text)).failure_class is FailureClass.UNKNOWN


def test_default_pack_reads_failure_text_when_an_excerpt_exists(engine: Engine) -> None:
    bundle = make_bundle({"pt3": {"failure_log_excerpt": "engine died", "failure": OOM}})
    assert engine.classify(bundle).failure_class is FailureClass.GENUINE_OOM


def test_success_bundle_is_unknown_not_oom(engine: Engine) -> None:
    bundle = make_bundle({"manifest": {"outcome": "ok"}, "pt3": {"ok": True, "failure": None},
                          "pt4": {"results": {"plain-chat": "green", "streaming": "green"}}})
    v = engine.classify(bundle)
    assert v.failure_class is FailureClass.UNKNOWN and not v.route_as_kv_calc_bug


def test_classification_is_deterministic(engine: Engine) -> None:
    bundle = make_bundle(OOM)
    assert engine.classify(bundle) == engine.classify(make_bundle(OOM))


def test_engines_built_one_after_another_are_freed() -> None:
    """A long-lived process (a service, a notebook) builds engine after engine; once
    dropped, each must go with its pack, or memory grows by megabytes per build."""
    def live_packs() -> int:
        return sum(isinstance(o, RulePack) for o in gc.get_objects())

    gc.collect()
    before = live_packs()
    for _ in range(3):
        engine = Engine.build("default")
        verdict = engine.classify(make_bundle("torch.OutOfMemoryError: CUDA out of memory"))
        assert verdict.matched_rule == "tier1-oom-fastpath"  # Tier-1 compiled its signature for this pack
        del engine
    gc.collect()
    assert live_packs() == before


@pytest.mark.parametrize("pack", ["reference", "default"])
def test_classifying_one_bundle_again_and_again_holds_no_more_memory(pack: str) -> None:
    """A notebook or a service classifies the same bundle object many times: each
    call used to keep another copy of the log (Tier-1's scan surface) and its index."""
    import tracemalloc

    log = "INFO some line of boot log text that goes on\n" * 5000 + "torch.OutOfMemoryError: CUDA out of memory"
    bundle = make_bundle(log)
    engine = Engine.build(pack)
    assert engine.classify(bundle).matched_rule == "tier1-oom-fastpath"
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for _ in range(30):
            engine.classify(bundle)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert grown < len(log), f"{grown} bytes more after 30 classifications of a {len(log)}-character log"


@pytest.mark.parametrize("written", ["Genuine-OOM", "GENUINE-OOM", " genuine-oom"])
def test_a_class_written_in_another_case_from_a_plugin_becomes_unknown(pm: pluggy.PluginManager,
                                                                       written: str) -> None:
    """The six classes are matched exactly: a near miss is not filed under a class it
    only resembles."""
    plugin = _Plugin([Matcher("near-miss", Tier.TIER2, 1, _always(written, "near"))])
    pm.register(plugin)
    try:
        verdict = Engine.build("reference", pm).classify(make_bundle("anything"))
    finally:
        pm.unregister(plugin)
    assert verdict.failure_class is FailureClass.UNKNOWN and verdict.should_file is False


def test_a_class_given_as_a_member_of_the_six_is_that_class(pm: pluggy.PluginManager) -> None:
    """A matcher may return ``FailureClass.KERNEL_UNSUPPORTED`` as well as its text, and the
    verdict reads as text wherever a plugin or a message formats it."""
    plugin = _Plugin([Matcher("member", Tier.TIER2, 1, _always(FailureClass.KERNEL_UNSUPPORTED, "member"))])
    pm.register(plugin)
    try:
        verdict = Engine.build("reference", pm).classify(make_bundle("anything"))
    finally:
        pm.unregister(plugin)
    assert (verdict.failure_class, verdict.matched_rule, verdict.warnings) == (
        FailureClass.KERNEL_UNSUPPORTED, "member", ())
    assert verdict.should_file is True
    assert f"{verdict.failure_class} ({verdict.tier})" == "kernel-unsupported (tier2)"


def test_a_verdicts_dict_is_the_verdict_part_of_its_classify_row(pm: pluggy.PluginManager) -> None:
    """docs/api.md: ``verdict.to_dict()`` is the verdict part of a ``classify --format json`` row."""
    from loop_core.verdict import Classification

    verdict = Classification(FailureClass.GENUINE_OOM, Tier.TIER1, "tier1-oom-fastpath", "0123456789ab", "cuda oom",
                             True, False, True, -160, {"source": "pt3+pt1", "attempted_alloc_mib": 2560}, "v1",
                             ("matcher 'acme' raised ValueError: boom",), ("shadow-rule",))
    bundle = make_bundle(OOM)
    row = verdict_row(Outcome(bundle.path, bundle, None, verdict))
    as_dict = verdict.to_dict()
    bundle_part = {"bundle", "schema", "reader_error", "consensus_key", "dedup_tuple", "dedup_hash", "labels",
                   "failure"}
    assert as_dict == {key: value for key, value in row.items() if key not in bundle_part}
    assert as_dict["delta_mib"] == -160 and as_dict["tier1_inputs"]["source"] == "pt3+pt1"
    assert as_dict["warnings"] == ["matcher 'acme' raised ValueError: boom"]
    assert as_dict["shadow_matches"] == ["shadow-rule"]
    nothing = Engine.build("reference", pm).classify(make_bundle("no rule knows"))
    unmatched = verdict_row(Outcome(bundle.path, bundle, None, nothing))
    assert nothing.to_dict() == {key: value for key, value in unmatched.items() if key not in bundle_part}
    assert nothing.to_dict()["matched_rule"] is None


def test_explain_gives_the_verdict_classify_gives_when_later_matchers_also_match(pm: pluggy.PluginManager) -> None:
    """`explain` runs every matcher, but the first that matches still decides."""
    first = Matcher("aa-first", Tier.TIER2, 1, _always("kernel-unsupported", "first"))
    later = Matcher("bb-later", Tier.TIER2, 2, _always("quant-unsupported", "later"))
    plugin = _Plugin([later, first])
    pm.register(plugin)
    try:
        engine = Engine.build("reference", pm)
        bundle = make_bundle("RuntimeError: something no rule knows")
        verdict, traces = engine.explain(bundle)
        assert verdict == engine.classify(bundle)
        assert (verdict.failure_class, verdict.matched_rule) == (FailureClass.KERNEL_UNSUPPORTED, "first")
        assert {"aa-first", "bb-later"} <= {t.matcher for t in traces if t.decided}
    finally:
        pm.unregister(plugin)
