"""One ``test_hook_<name>`` per hookspec: what a plugin implementing it can observe."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pluggy
import pytest

from loop_core import (
    Bundle,
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

from .captures import copy_examples

Register = Callable[[object, str], object]


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


def test_plugins_tells_the_builtins_from_a_plugin_of_ones_own(pm: pluggy.PluginManager, register_plugin: Register,
                                                               tmp_path: Path) -> None:
    from loop_core.plugins import plugin_report

    register_plugin(PackPlugin("acme", tmp_path), "acme-packs")
    report = plugin_report(pm)
    assert [entry["name"] for entry in report] == sorted(entry["name"] for entry in report)
    entries = {entry["name"]: entry for entry in report}
    assert entries["acme-packs"] == {"name": "acme-packs", "hooks": ["loop_register_rule_packs"], "builtin": False}
    assert entries["loop_rules.tier1"] == {"name": "loop_rules.tier1", "hooks": ["loop_register_matchers"],
                                           "builtin": True}


def test_hook_loop_register_rule_packs_without_its_yaml_names_the_pack_and_plugin(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Register, tmp_path: Path) -> None:
    """A plugin installed without its package data: the error said only "<path>: rule
    pack directory not found", or asked of the empty folder "is it a rule pack?"."""
    rules = tmp_path / "rules"
    register_plugin(PackPlugin("acme", rules), "acme-packs")
    hint = "the plugin must ship the pack's YAML files with its package (package data)"
    with pytest.raises(RuleError, match=r"^rule pack 'acme' \(plugin 'acme-packs'\): .*rules: no such directory; "):
        Engine.build("acme", cli_uses_pm)
    rules.mkdir()
    (rules / "__init__.py").write_text("")
    result = _cli("classify", "--rules", "acme", tmp_path)
    assert (result.exit_code, result.stderr) == (
        2, f"Error: rule pack 'acme' (plugin 'acme-packs'): {rules}: no rule files (*.yml or *.yaml); {hint}\n")
    result = _cli("check", "--rules", "acme")
    problem = f"rule pack 'acme' (plugin 'acme-packs'): {rules}: no rule files (*.yml or *.yaml); {hint}"
    assert (result.exit_code, result.stdout) == (1, f"error: {problem}\ncheck: 1 problem(s)\n")


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
    where = r"10-quant\.yml\[0\] awq-dtype \(line 5\): when\[0\]\.quant_label_in: needs"
    with pytest.raises(RuleError, match=where):
        Engine.build(tmp_path, pm)


def _compile_quants_strictly(arg: Any) -> frozenset[str]:
    if not isinstance(arg, list):
        raise TypeError(f"needs a list of quant labels, got {type(arg).__name__}")
    return _compile_quants(arg)


class StrictQuantPlugin:
    @hookimpl
    def loop_register_conditions(self, register: Callable[[ConditionKind], None]) -> None:
        register(ConditionKind("quant_label_in", _quant_in, _compile_quants_strictly))


def test_hook_loop_register_conditions_compile_type_error_rejects_the_argument(
        pm: pluggy.PluginManager, register_plugin: Register, tmp_path: Path) -> None:
    # TypeError refuses an argument as ValueError does (docs/plugins.md): the plugin's
    # message at the rule, not a report of a plugin that failed.
    register_plugin(StrictQuantPlugin(), "acme-conditions")
    (tmp_path / "10-quant.yml").write_text(QUANT_RULE.replace("[AWQ, GPTQ]", "AWQ"), encoding="utf-8")
    with pytest.raises(RuleError) as err:
        Engine.build(tmp_path, pm)
    assert "when[0].quant_label_in: needs a list of quant labels, got str" in str(err.value)
    assert "raised" not in str(err.value)


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
    assert verdict.warnings == (("matcher 'acme-odd' returned the class 'not-a-class', which is none of the six; "
                                 "read as unknown"),)
    assert (verdict.review_queue, verdict.should_file) == (True, False)
    assert (verdict.route_as_kv_calc_bug, verdict.delta_mib) == (False, None)


def test_hook_loop_register_matchers_tier1_routes_kv_calc_only_for_an_oom(
        pm: pluggy.PluginManager, register_plugin: Register) -> None:
    """§3.7: a kv-calc bug is an OOM that memory accounting mispredicted. A Tier-1
    matcher that asks to route a kernel failure gets it filed as one, not routed."""
    register_plugin(MatcherPlugin(
        Matcher("acme-t1", Tier.TIER1, 10,
                _decide_on("nvlink", "kernel-unsupported", "acme-t1", route_as_kv_calc_bug=True)),
        Matcher("acme-t1-oom", Tier.TIER1, 20,
                _decide_on("hbm", "genuine-oom", "acme-t1-oom", route_as_kv_calc_bug=True)),
    ), "acme-matchers")
    engine = Engine.build("reference", pm)
    kernel = engine.classify(make_bundle("nvlink down"))
    assert (kernel.failure_class, kernel.tier, kernel.should_file) == (
        FailureClass.KERNEL_UNSUPPORTED, Tier.TIER1, True)
    assert kernel.route_as_kv_calc_bug is False
    assert engine.classify(make_bundle("hbm exhausted")).route_as_kv_calc_bug is True


def test_a_matchers_class_with_a_slip_is_named_with_the_one_meant(
        pm: pluggy.PluginManager, register_plugin: Register) -> None:
    """A plugin writing genuine_oom for genuine-oom had its verdicts read as unknown
    without a word: the verdict now carries a warning (which fails `loop-rules test`)."""
    register_plugin(MatcherPlugin(
        Matcher("acme-oom", Tier.TIER2, 150, _decide_on("hbm", "genuine_oom", "acme-oom")),
        Matcher("acme-unknown", Tier.TIER2, 160, _decide_on("odd", "unknown", "acme-unknown")),
    ), "acme-matchers")
    engine = Engine.build("reference", pm)
    slip = engine.classify(make_bundle("hbm exhausted"))
    assert slip.failure_class is FailureClass.UNKNOWN
    assert slip.warnings == (("matcher 'acme-oom' returned the class 'genuine_oom', which is none of the six "
                              "(did you mean 'genuine-oom'?); read as unknown"),)
    assert engine.classify(make_bundle("odd thing")).warnings == ()  # unknown itself is one of the six


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


class BootSeen:
    """Records the boot file of every anchor the trust hook is offered; decides nothing."""

    def __init__(self) -> None:
        self.boots: list[Any] = []

    @hookimpl(tryfirst=True)
    def loop_evaluate_trust(self, bundle: Any, catalog: Any, priors: Any, maintainer_promoted: bool,
                            consensus_n: int) -> Any:
        self.boots.append(bundle.pt3)
        return None


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_the_trust_hook_gets_the_whole_anchor_from_run_as_from_trust(cli_uses_pm: pluggy.PluginManager,
                                                                     register_plugin: Register, tmp_path: Path,
                                                                     jobs: str) -> None:
    """run (and report) offered a copy without the download, boot and override files,
    so a hook reading bundle.pt3 decided otherwise there than under `trust`."""
    for i in range(6):
        write_bundle(tmp_path / f"m{i}" / "1", make_bundle(_anchor(f"vllm/vllm-openai:v0.{i}")))
    seen = register_plugin(BootSeen(), "acme-boot-seen")
    result = _cli("run", tmp_path, "--dry-run", "--jobs", jobs)
    assert result.exit_code == 0, result.stderr
    assert len(seen.boots) == 6
    assert all(isinstance(boot, dict) and boot.get("ok") is True for boot in seen.boots)


# -- loop_draft_issue --------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "pull-captures"


class TitlePrefix:
    """Fileable failures get the team's tag in front of the built-in title; nothing else changes."""

    def __init__(self, prefix: str = "[acme] ") -> None:
        self.prefix = prefix
        self.calls: list[str] = []

    @hookimpl
    def loop_draft_issue(self, bundle: Any, verdict: Any) -> Any:
        from loop_core.dedup import draft_issue

        self.calls.append(verdict.failure_class.value)
        draft = draft_issue(bundle, verdict)
        return dataclasses.replace(draft, title=self.prefix + draft.title)


class Abstain:
    @hookimpl
    def loop_draft_issue(self, bundle: Any, verdict: Any) -> None:
        return None


def test_hook_loop_draft_issue(pm: pluggy.PluginManager, register_plugin: Register, tmp_path: Path) -> None:
    from loop_core.dedup import IssueDraft, body_tuple_matches, draft_issue
    from loop_core.keys import dedup_key, dedup_labels
    from loop_core.pipeline import process_bundle, run_captures
    from loop_core.trackers import SqliteTracker

    engine = Engine.build("default", pm)
    bundle = make_bundle("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    verdict = engine.classify(bundle)
    assert verdict.should_file
    builtin = draft_issue(bundle, verdict)

    # Without a plugin of its own the built-in (trylast) rendering decides.
    assert pm.hook.loop_draft_issue(bundle=bundle, verdict=verdict) == builtin
    register_plugin(Abstain(), "acme-abstain")
    assert pm.hook.loop_draft_issue(bundle=bundle, verdict=verdict) == builtin

    # A plugin's non-None draft wins over the built-in one.
    plugin = register_plugin(TitlePrefix(), "acme-drafts")
    draft = pm.hook.loop_draft_issue(bundle=bundle, verdict=verdict)
    assert isinstance(draft, IssueDraft) and isinstance(plugin, TitlePrefix)
    assert draft.title == "[acme] " + builtin.title
    # ... and keeps what other tools dedup against: hash, key, labels, tuple block.
    key = dedup_key(bundle, verdict.failure_class.value)
    assert (draft.dedup_hash, draft.key, draft.labels) == (key.digest(), key, dedup_labels(key))
    assert draft.body == builtin.body and body_tuple_matches(draft.body, key)

    # The pipeline asks the hook only for fileable failures: not for unknowns or successes.
    plugin.calls.clear()
    unknown = write_bundle(tmp_path / "unknown", make_bundle("something nobody has seen before"))
    assert process_bundle(unknown, engine).draft is None and plugin.calls == []
    oom = write_bundle(tmp_path / "oom", bundle)
    processed = process_bundle(oom, engine)
    assert processed.draft is not None and processed.draft.title.startswith("[acme] [loop][genuine-oom] ")
    assert plugin.calls == ["genuine-oom"]

    # End to end: every issue carries the prefix, and the kept tuple block still lets a repeat
    # of the same failure (the two qwen2.5-32b-instruct-awq captures) count as a verified +1.
    captures = tmp_path / "captures"
    copy_examples(captures)
    tracker = SqliteTracker.for_captures(captures)
    try:
        summary = run_captures(captures, engine, tracker)
        issues = tracker.issues()
    finally:
        tracker.close()
    assert summary.plus_one == 1 and summary.filed_new == len(issues) > 0
    assert all(i["title"].startswith("[acme] [loop][") for i in issues)


# -- loop_register_trackers --------------------------------------------------


class Recorder:
    """An in-memory tracker: one issue per verified tuple, one count per submission."""

    def __init__(self, store: RecorderStore, options: Any) -> None:
        self.store, self.options = store, options
        self.name = store.name

    def file(self, draft: Any, occurrence: Any) -> Any:
        from loop_core import FileAction, FileResult
        from loop_core.dedup import body_tuple_matches

        self.store.drafts.append(draft)
        number = next((n for n, issue in enumerate(self.store.issues, 1)
                       if issue["hash"] == draft.dedup_hash and body_tuple_matches(issue["body"], draft.key)),
                      None)
        if number is None:
            self.store.issues.append({"hash": draft.dedup_hash, "title": draft.title, "body": draft.body,
                                      "submissions": [occurrence.submission]})
            return FileResult(FileAction.OPENED, draft.dedup_hash, len(self.store.issues))
        issue = self.store.issues[number - 1]
        if occurrence.submission in issue["submissions"]:
            return FileResult(FileAction.ALREADY_COUNTED, draft.dedup_hash, number)
        issue["submissions"].append(occurrence.submission)
        return FileResult(FileAction.PLUS_ONE, draft.dedup_hash, number)

    def close(self) -> None:
        self.store.closed += 1


class RecorderStore:
    """The plugin: registers the ``recorder`` tracker and keeps what it was given across runs."""

    def __init__(self, name: str = "recorder") -> None:
        self.name = name
        self.drafts: list[Any] = []
        self.issues: list[dict[str, Any]] = []
        self.options: list[Any] = []
        self.closed = 0

    def factory(self, options: Any) -> Recorder:
        self.options.append(options)
        return Recorder(self, options)

    @hookimpl
    def loop_register_trackers(self, register: Callable[[Any], None]) -> None:
        from loop_core import TrackerSpec

        register(TrackerSpec(self.name, self.factory, "in memory, for tests"))


def _cli(*args: Any) -> Any:
    from click.testing import CliRunner

    from loop_core.cli import cli

    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_hook_loop_register_trackers(cli_uses_pm: pluggy.PluginManager, register_plugin: Register,
                                     tmp_path: Path) -> None:
    import json

    from loop_core.dedup import body_tuple_matches

    captures = tmp_path / "captures"
    copy_examples(captures)
    store = register_plugin(RecorderStore(), "acme-trackers")
    assert isinstance(store, RecorderStore)

    dry = json.loads(_cli("run", captures, "--dry-run", "--format", "json").stdout)
    assert store.options == []  # a dry run builds no tracker

    result = _cli("run", captures, "--tracker", "recorder", "--repo", "acme/rig", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["tracker"] == "recorder"
    # The factory got the captures folder and --repo, once; the tracker was closed.
    assert [(o.captures, o.repo) for o in store.options] == [(captures, "acme/rig")]
    assert store.closed == 1
    # Every fileable failure reached the plugin's tracker, and its answers are the counts.
    assert len(store.drafts) == dry["would_file"] > 0
    assert data["filed_new"] == len(store.issues) == len({d.dedup_hash for d in store.drafts})
    assert data["plus_one"] == len(store.drafts) - len(store.issues) == 1
    assert all(body_tuple_matches(d.body, d.key) for d in store.drafts)
    assert not (captures / "_loop").exists()  # nothing went to the built-in sqlite tracker

    # A second run counts nothing twice: the plugin's tracker says already-counted.
    again = json.loads(_cli("run", captures, "--tracker", "recorder", "--format", "json").stdout)
    assert again["filed_new"] == again["plus_one"] == 0
    assert again["already_counted"] >= dry["would_file"]

    # spool replay drains into a plugin's tracker as well.
    spooled = json.loads(_cli("run", captures, "--tracker", "spool", "--format", "json").stdout)
    assert spooled["spooled"] == dry["would_file"]
    replay = _cli("spool", "replay", captures, "--tracker", "recorder")
    assert replay.exit_code == 0, replay.output
    assert (f"into recorder: already-counted {dry['would_file']}; {len(store.issues)} drained, "
            "0 still spooled") in replay.stdout
    assert not list((captures / "_dedup-queue").glob("*.json"))

    # An unknown name lists the plugin's tracker beside the built-ins.
    unknown = _cli("run", captures, "--tracker", "nope")
    assert unknown.exit_code == 2
    assert "unknown tracker (trackers: github, recorder, spool, sqlite)" in unknown.stderr


def test_hook_loop_register_trackers_duplicate_names_both_plugins(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Register, tmp_path: Path) -> None:
    from loop_core.plugins import collect

    register_plugin(RecorderStore("sqlite"), "acme-trackers")
    with pytest.raises(PluginError, match=r"tracker 'sqlite' registered twice") as err:
        collect(cli_uses_pm, "loop_register_trackers", lambda spec: spec.name, "tracker")
    assert "'loop_rules.trackers'" in str(err.value) and "'acme-trackers'" in str(err.value)

    write_bundle(tmp_path / "captures" / "b", make_bundle("torch.cuda.OutOfMemoryError: CUDA out of memory"))
    result = _cli("run", tmp_path / "captures")
    assert result.exit_code == 2
    assert result.stderr == ("Error: tracker 'sqlite' registered twice: by plugin 'acme-trackers' "
                             "and by plugin 'loop_rules.trackers'\n")


def test_plugins_lists_the_trackers_a_plugin_registers(cli_uses_pm: pluggy.PluginManager,
                                                      register_plugin: Register) -> None:
    """`loop-rules plugins` listed the hook under the plugin but not the trackers, so the
    values --tracker takes were found only by giving it a wrong one."""
    import json

    class Local(RecorderStore):
        @hookimpl
        def loop_register_trackers(self, register: Callable[[Any], None]) -> None:
            from loop_core import TrackerSpec

            register(TrackerSpec("acme-local", self.factory, "files into a local folder", takes_repo=False))

    register_plugin(RecorderStore(), "acme-trackers")
    register_plugin(Local(), "acme-local")
    result = _cli("plugins")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [t["name"] for t in report["trackers"]] == ["acme-local", "github", "recorder", "spool", "sqlite"]
    assert report["trackers"][0] == {"name": "acme-local", "plugin": "acme-local", "takes_repo": False,
                                     "description": "files into a local folder"}
    assert report["trackers"][2] == {"name": "recorder", "plugin": "acme-trackers", "takes_repo": True,
                                     "description": "in memory, for tests"}
    assert {"name": "sqlite", "plugin": "loop_rules.trackers", "takes_repo": False,
            "description": "embedded SQLite file under <captures>/_loop/ (default)"} in report["trackers"]


def test_plugins_refuses_a_tracker_registered_twice(cli_uses_pm: pluggy.PluginManager,
                                                    register_plugin: Register) -> None:
    register_plugin(RecorderStore("sqlite"), "acme-trackers")
    result = _cli("plugins")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == ("Error: tracker 'sqlite' registered twice: by plugin 'acme-trackers' "
                             "and by plugin 'loop_rules.trackers'\n")


def test_trace_shows_every_hook_call_registration_included(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOP_RULES_TRACE_HOOKS", "1")
    from loop_core import make_plugin_manager

    engine = Engine.build("default", make_plugin_manager(entry_points=False))
    engine.pm.hook.loop_draft_issue(bundle=make_bundle({"pt3": {"failure_log_excerpt": "CUDA out of memory"}}),
                                    verdict=engine.classify(make_bundle({})))
    err = capsys.readouterr().err
    for plugin in ("loop_rules.tier1", "loop_rules.tier2"):  # one traced call per plugin, each named
        assert f"loop_register_matchers [hook]\n      register: <register for plugin '{plugin}'>" in err
    assert "register: <register for plugin 'loop_rules.packs'>" in err
    assert "loop_draft_issue [hook]" in err and "finish loop_draft_issue" in err


def test_entry_points_are_looked_for_only_where_a_distribution_declares_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from loop_core.plugins import may_declare_entry_points

    site = tmp_path / "site"
    info = site / "some_tool-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "entry_points.txt").write_text("[console_scripts]\nsome-tool = some_tool:main\n", encoding="utf-8")
    (site / "old_tool-0.1.egg-info").write_text("Metadata-Version: 1.0\n", encoding="utf-8")  # a file, not a folder
    monkeypatch.setattr(sys, "path", [str(site), str(tmp_path / "missing")])
    assert not may_declare_entry_points("loop_rules")
    assert may_declare_entry_points("console_scripts")
    plugin = site / "Loop_Example-2.0.DIST-INFO"
    plugin.mkdir()
    (plugin / "entry_points.txt").write_text("[console_scripts]\nloop-example = loop_example:main\n\n"
                                             " [ loop_rules ]\t\nexample = loop_example\n", encoding="utf-8")
    assert may_declare_entry_points("loop_rules")
    # Where it cannot tell, it says yes: a zip on the path, a finder that lists distributions.
    zipped = tmp_path / "plugins.zip"
    zipped.write_bytes(b"PK\x05\x06" + bytes(18))
    monkeypatch.setattr(sys, "path", [str(zipped)])
    assert may_declare_entry_points("loop_rules")

    class Finder:
        @staticmethod
        def find_distributions(context: object = None) -> list[object]:
            return []

    monkeypatch.setattr(sys, "path", [])
    assert not may_declare_entry_points("loop_rules")
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder()])
    assert may_declare_entry_points("loop_rules")


def test_a_start_without_third_party_plugins_skips_the_metadata_scan() -> None:
    import subprocess
    import sys

    script = ("import sys\nfrom loop_core import make_plugin_manager\nmake_plugin_manager()\n"
              "print('importlib.metadata' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_consensus_counts_distinct_other_submissions_with_the_same_key() -> None:
    from loop_core.trust import ConsensusIndex

    def anchor(commit: str, ctx: int = 32768) -> Bundle:
        return make_bundle({"manifest": {"outcome": "ok", "club3090_commit": commit, "selected_ctx": ctx}})

    own = anchor("a" * 40)
    others = [anchor(c * 40) for c in "bcd"] + [anchor("b" * 40)]  # "b" twice: one submission
    index = ConsensusIndex.of([*others, anchor("e" * 40, ctx=8192)])  # another key: not counted
    assert index.count(own) == 1 + 3  # own is not among them
    index.add(own)
    assert index.count(own) == 1 + 3  # nor counted twice once indexed
    assert index.count(anchor("f" * 40, ctx=4096)) == 1  # no prior with that key
    assert ConsensusIndex().count(make_bundle({"manifest": {"schema": 2}})) == 1  # a gate bundle has no key


def test_consensus_compares_a_list_or_object_inside_the_key_by_equality() -> None:
    """§4.4 counts priors whose key is equal in Python; a field holding an object or a
    list made the key unhashable, and the anchor counted 1 whatever the priors."""
    from loop_core.trust import ConsensusIndex

    def anchor(commit: str, kv_format: object) -> Bundle:
        return make_bundle({"manifest": {"outcome": "ok", "club3090_commit": commit, "kv_format": kv_format,
                                         "smoke_capability_set": ["plain-chat", {"tools": ["a"]}]}})

    index = ConsensusIndex.of([anchor("b" * 40, {"k": "fp8", "v": "fp8"}), anchor("c" * 40, ["fp8"]),
                               anchor("d" * 40, {"v": "fp8", "k": "fp8"})])  # key order: still equal
    assert index.count(anchor("a" * 40, {"k": "fp8", "v": "fp8"})) == 1 + 2
    assert index.count(anchor("a" * 40, ["fp8"])) == 1 + 1
    assert index.count(anchor("a" * 40, ("fp8",))) == 1  # a tuple is not equal to a list
    assert index.count(anchor("a" * 40, {"k": "fp16"})) == 1


@pytest.mark.parametrize("field, value", [("selected_ctx", float("nan")),
                                          ("smoke_capability_set", ["plain-chat", float("nan")])])
def test_consensus_counts_a_nan_in_the_key_alike_however_the_bundle_travelled(tmp_path: Path, field: str,
                                                                             value: object) -> None:
    """Every NaN Python's JSON reader gives is one object, so keys holding one are equal
    (§4.4); a bundle pickled (run --jobs, anchors spilled to disk) came back with a NaN
    of its own, which matched no prior: -j 2 left anchors at candidate that -j 1 validated.
    A NaN among the smoke capabilities is a NaN in the key too."""
    import pickle

    from loop_core.bundle import read_bundle
    from loop_core.trust import ConsensusIndex

    anchors = []
    for commit in "ab":
        documents = make_bundle({"manifest": {"outcome": "ok", "club3090_commit": commit * 40}}).to_document()
        documents["manifest"][field] = value
        anchors.append(read_bundle(write_bundle(tmp_path / commit, documents)))
    travelled = [pickle.loads(pickle.dumps(anchor)) for anchor in anchors]
    for index in (ConsensusIndex.of(anchors), ConsensusIndex.of(travelled)):
        assert [index.count(anchor) for anchor in [*anchors, *travelled]] == [2, 2, 2, 2]
    floats = make_bundle({"manifest": {"outcome": "ok", "club3090_commit": "c" * 40, "selected_ctx": 32768.0}})
    assert ConsensusIndex.of([floats]).count(make_bundle({"manifest": {"outcome": "ok"}})) == 2  # 32768 == 32768.0


def test_a_plugin_given_twice_to_make_plugin_manager_is_a_plugin_error() -> None:
    import types

    import loop_rules.tier1
    from loop_core import make_plugin_manager

    acme = types.ModuleType("acme_plugin")
    for plugins in ([loop_rules.tier1], [acme, acme], [acme, types.ModuleType("acme_plugin")]):
        with pytest.raises(PluginError, match=r"^plugin '(loop_rules\.tier1|acme_plugin)': a name registered twice"):
            make_plugin_manager(entry_points=False, plugins=plugins)
