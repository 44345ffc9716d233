"""Plugins that break a hook's contract: a clear error naming the plugin or hook, never
a crash or a silently wrong count, and nothing filed twice."""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pluggy
import pytest

from loop_core import (
    BundleError,
    CatalogError,
    ConditionKind,
    Engine,
    FailureClass,
    Match,
    Matcher,
    PluginError,
    Tier,
    TrackerError,
    TrackerSpec,
    View,
    hookimpl,
    make_plugin_manager,
)
from loop_core.testing import make_bundle, write_bundle

from .captures import copy_examples
from .test_hooks import Recorder, RecorderStore, _cli

FILEABLE = 13  # fileable occurrences of the example captures, over 12 distinct failures


@pytest.fixture
def captures(tmp_path: Path) -> Path:
    target = tmp_path / "captures"
    copy_examples(target)
    return target


def run_json(captures: Path, *extra: str, code: int = 0) -> Any:
    result = _cli("run", captures, "--format", "json", *extra)
    assert result.exit_code == code, (result.stdout, result.stderr)
    return json.loads(result.stdout) if code == 0 else result


# -- trackers ------------------------------------------------------------------


class MadeFactory(RecorderStore):
    """A tracker plugin whose factory makes ``made``, whatever that is."""

    made: Any = None

    def factory(self, options: Any) -> Any:
        return self.made


@pytest.mark.parametrize(("made", "shown"), [(None, "NoneType"), ("a tracker", "str")])
def test_a_tracker_factory_that_makes_nothing_is_an_error_not_a_dry_run(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path,
        made: Any, shown: str) -> None:
    plugin = MadeFactory("nothing")
    plugin.made = made
    register_plugin(plugin, "acme-none")
    result = run_json(captures, "--tracker", "nothing", code=2)
    assert f"--tracker 'nothing': plugin 'acme-none' made {shown}, not a tracker" in result.stderr


class Many(Recorder):
    """file_many answering ``skew`` results more (or fewer) than it was given."""

    skew = 0

    def file_many(self, items: list[Any]) -> list[Any]:
        results = [self.file(draft, occurrence) for draft, occurrence in items]
        return results[:-1] if self.skew < 0 else results + results[: self.skew]


class ManyStore(RecorderStore):
    def __init__(self, skew: int) -> None:
        super().__init__("many")
        self.skew = skew

    def factory(self, options: Any) -> Any:
        tracker = Many(self, options)
        tracker.skew = self.skew
        return tracker


@pytest.mark.parametrize("skew", [-1, 1])
def test_file_many_must_answer_once_per_occurrence(cli_uses_pm: pluggy.PluginManager,
                                                   register_plugin: Callable[..., Any], captures: Path,
                                                   skew: int) -> None:
    register_plugin(ManyStore(skew), "acme-many")
    result = run_json(captures, "--tracker", "many", code=2)
    assert "tracker 'many' answered" in result.stderr and "not one FileResult each" in result.stderr


class TextActions(Recorder):
    def file(self, draft: Any, occurrence: Any) -> Any:
        result = super().file(draft, occurrence)
        return dataclasses.replace(result, action=result.action.value)  # "opened", not FileAction.OPENED


class TextActionStore(RecorderStore):
    def factory(self, options: Any) -> Any:
        return TextActions(self, options)


def test_a_result_whose_action_is_text_is_refused_and_the_spool_kept(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path) -> None:
    register_plugin(TextActionStore("texty"), "acme-texty")
    result = run_json(captures, "--tracker", "texty", code=2)
    assert "tracker 'texty' answered" in result.stderr and "whose action is a FileAction" in result.stderr
    spooled = run_json(captures, "--tracker", "spool")
    assert spooled["spooled"] == FILEABLE
    before = sorted((captures / "_dedup-queue").glob("*.json"))
    replay = _cli("spool", "replay", captures, "--tracker", "texty")
    assert replay.exit_code == 2 and "whose action is a FileAction" in replay.stderr
    assert sorted((captures / "_dedup-queue").glob("*.json")) == before  # nothing deleted


class Troubled(Recorder):
    """Files everything, and says what troubled it on the way, as the github tracker
    says which `gh` call failed."""

    problems: list[str]

    def file_many(self, items: list[Any]) -> list[Any]:
        self.problems = ["the board was slow to answer"]
        return [self.file(draft, occurrence) for draft, occurrence in items]


class TroubledStore(RecorderStore):
    def factory(self, options: Any) -> Any:
        return Troubled(self, options)


def test_what_troubled_the_tracker_in_a_run_s_last_batch_is_in_its_summary(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import pipeline

    monkeypatch.setattr(pipeline, "FLUSH_SECONDS", 3600.0)  # one batch, at the end of the run
    register_plugin(TroubledStore("troubled"), "acme-troubled")
    result = _cli("run", captures, "--tracker", "troubled", "--format", "json")
    assert json.loads(result.stdout)["tracker_problems"] == ["the board was slow to answer"]
    assert "loop-rules: troubled: the board was slow to answer" in result.stderr


class BadClose(Recorder):
    def close(self) -> None:
        raise OSError("the socket went away")


class BadCloseStore(RecorderStore):
    def factory(self, options: Any) -> Any:
        return BadClose(self, options)


def test_a_close_that_fails_after_filing_keeps_the_summary(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path) -> None:
    store = register_plugin(BadCloseStore("closing"), "acme-closing")
    result = _cli("run", captures, "--tracker", "closing", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["filed_new"] == len(store.issues) == 12
    assert "tracker 'closing': close failed: OSError: the socket went away" in result.stderr


# -- drafts ----------------------------------------------------------------------


class Drafts:
    def __init__(self, how: str) -> None:
        self.how = how

    @hookimpl
    def loop_draft_issue(self, bundle: Any, verdict: Any) -> Any:
        from loop_core.dedup import draft_issue

        draft = draft_issue(bundle, verdict)
        if self.how == "text":
            return draft.title
        if self.how == "exit":
            sys.exit(0)
        if self.how == "raise":
            raise ValueError("no template")
        if self.how == "bundle" and verdict.failure_class.value == "genuine-oom":
            raise BundleError(f"{bundle.path}: no issue for this one", path=bundle.path)
        if self.how == "loop":
            raise CatalogError("acme-templates.yml: missing")
        if self.how in ("bundle", "loop"):
            return draft
        if self.how == "hash":
            return dataclasses.replace(draft, dedup_hash="000000000000")
        if self.how == "notuple":
            return dataclasses.replace(draft, body="no tuple here")
        if self.how == "class":  # another failure's draft: its key, hash and tuple block agree
            other = "kernel-unsupported" if verdict.failure_class.value == "genuine-oom" else "genuine-oom"
            return draft_issue(bundle, dataclasses.replace(verdict, failure_class=FailureClass(other)))
        return dataclasses.replace(draft, title="x" * 1000)


@pytest.mark.parametrize("how, problem", [
    ("text", "returned str, not an IssueDraft"),
    ("hash", "its dedup_hash '000000000000' is not its key's"),
    ("notuple", "no tuple block that verifies"),
    ("class", "its key is not the bundle's dedup key"),
    ("longtitle", "title is longer than 256"),
    ("exit", "raised SystemExit: sys.exit(0) was called"),
    ("raise", "raised ValueError: no template"),
])
def test_a_draft_no_tracker_can_count_on_stops_the_run(cli_uses_pm: pluggy.PluginManager,
                                                       register_plugin: Callable[..., Any], captures: Path,
                                                       how: str, problem: str) -> None:
    register_plugin(Drafts(how), "acme-drafts")
    result = run_json(captures, code=2)
    assert "loop_draft_issue (plugins acme-drafts)" in result.stderr and problem in result.stderr
    assert "internal error" not in result.stderr


def test_a_drafter_s_own_errors_are_the_bundle_s_or_the_user_s(cli_uses_pm: pluggy.PluginManager,
                                                              register_plugin: Callable[..., Any],
                                                              captures: Path) -> None:
    """A BundleError says that one bundle cannot be drafted: it is counted unreadable and
    the run goes on. Another LoopError is for the user to fix: shown as it is."""
    register_plugin(Drafts("bundle"), "acme-drafts")
    data = run_json(captures)
    assert data["filed_new"] + data["plus_one"] == 12 - 3 and data["reader_errors"] == 1 + 4
    assert sum("no issue for this one" in e["message"] for e in data["errors"]) == 4
    cli_uses_pm.unregister(name="acme-drafts")
    register_plugin(Drafts("loop"), "acme-drafts")
    result = run_json(captures, code=2)
    assert result.stderr == "Error: acme-templates.yml: missing\n"


class Padded:
    """Drafts whose ``part`` (title or body) is padded to ``length`` characters."""

    def __init__(self, part: str, length: int) -> None:
        self.part, self.length = part, length

    @hookimpl
    def loop_draft_issue(self, bundle: Any, verdict: Any) -> Any:
        from loop_core.dedup import draft_issue

        draft = draft_issue(bundle, verdict)
        return dataclasses.replace(draft, **{self.part: getattr(draft, self.part).ljust(self.length, "x")})


@pytest.mark.parametrize("part", ["title", "body"])
def test_a_draft_as_long_as_the_limit_is_filed_and_one_character_longer_is_refused(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path, tmp_path: Path,
        part: str) -> None:
    from loop_core.dedup import BODY_LIMIT, TITLE_LIMIT

    limit = {"title": TITLE_LIMIT, "body": BODY_LIMIT}[part]
    padded = register_plugin(Padded(part, limit), "acme-padded")
    assert run_json(captures)["filed_new"] == 12
    padded.length += 1
    again = tmp_path / "again"
    copy_examples(again)
    result = run_json(again, code=2)
    assert f"its {part} is longer than {limit} characters" in result.stderr


def test_a_drafter_registered_after_a_run_is_checked_too(cli_uses_pm: pluggy.PluginManager,
                                                          register_plugin: Callable[..., Any],
                                                          captures: Path, tmp_path: Path) -> None:
    """A long-lived process registers a plugin between two runs: the drafters were
    looked up once per plugin manager and the newcomer's drafts went unchecked."""
    assert run_json(captures)["filed_new"] == 12
    register_plugin(Drafts("notuple"), "acme-drafts")
    again = tmp_path / "again"
    copy_examples(again)
    result = run_json(again, code=2)
    assert "loop_draft_issue (plugins acme-drafts)" in result.stderr


# -- trust -----------------------------------------------------------------------


class Trust:
    def __init__(self, how: str) -> None:
        self.how = how

    @hookimpl(tryfirst=True)
    def loop_evaluate_trust(self, bundle: Any, catalog: Any, priors: Any, maintainer_promoted: bool,
                            consensus_n: int) -> Any:
        if self.how == "raise":
            raise KeyError("calibration")
        if self.how == "exit":
            sys.exit(0)
        if self.how == "refuse":
            raise CatalogError("acme-engines.yml: allowed must be a list, got str")
        return "validated"


@pytest.mark.parametrize("how, problem", [("raise", "raised KeyError: 'calibration'"),
                                          ("exit", "raised SystemExit: sys.exit(0) was called"),
                                          ("text", "returned str, not a TrustResult")])
def test_a_trust_hook_that_breaks_its_contract_is_named(cli_uses_pm: pluggy.PluginManager,
                                                        register_plugin: Callable[..., Any], captures: Path,
                                                        how: str, problem: str) -> None:
    register_plugin(Trust(how), "acme-trust")
    for args in (("run", captures), ("trust", captures), ("report", captures, "--out", captures / "r.html")):
        result = _cli(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "loop_evaluate_trust (plugins " in result.stderr and "acme-trust)" in result.stderr
        assert problem in result.stderr


def test_a_loop_error_a_trust_hook_raises_is_shown_as_it_is(cli_uses_pm: pluggy.PluginManager,
                                                            register_plugin: Callable[..., Any],
                                                            captures: Path) -> None:
    """A ``LoopError`` is raised on purpose: a problem the user must fix, said by the plugin
    (docs/plugins.md), not a bug of the plugin to report."""
    register_plugin(Trust("refuse"), "acme-trust")
    result = _cli("trust", captures)
    assert result.exit_code == 2
    assert result.stderr == "Error: acme-engines.yml: allowed must be a list, got str\n"


# -- matchers and condition kinds ------------------------------------------------------


def _raising(ctx: Any) -> Match | None:
    raise ValueError("boom")


class Matchers:
    def __init__(self, matcher: Matcher) -> None:
        self.matcher = matcher

    @hookimpl
    def loop_register_matchers(self, register: Callable[[Matcher], None]) -> None:
        register(self.matcher)


def test_a_matcher_asking_for_a_signal_that_does_not_exist_is_told_the_one_meant(
        pm: pluggy.PluginManager, register_plugin: Callable[..., Any]) -> None:
    """It was "matcher 'acme-typo' raised KeyError: 'all_txt'; skipped"."""
    register_plugin(Matchers(Matcher("acme-typo", Tier.TIER2, 150, lambda ctx: ctx.view.signal("all_txt"))),
                    "acme-typo")
    verdict = Engine.build("default", pm).classify(make_bundle("boom"))
    assert verdict.warnings == (("matcher 'acme-typo' raised UnknownSignal: unknown signal 'all_txt' (did you "
                                 "mean 'all_text'?); skipped"),)
    with pytest.raises(KeyError):  # still the KeyError a plugin may catch
        View(make_bundle("boom")).signal("nonsense")


@pytest.mark.parametrize("field, value, problem", [
    ("tier", "tier1", "tier must be Tier.TIER1 or Tier.TIER2"),
    ("tier", Tier.NONE, "tier must be Tier.TIER1 or Tier.TIER2"),
    ("order", "abc", "order must be an int"),
])
def test_a_matcher_with_a_bad_tier_or_order_is_refused(pm: pluggy.PluginManager,
                                                       register_plugin: Callable[..., Any],
                                                       field: str, value: Any, problem: str) -> None:
    matcher = dataclasses.replace(Matcher("acme-odd", Tier.TIER2, 500, lambda ctx: None), **{field: value})
    register_plugin(Matchers(matcher), "acme-odd")
    with pytest.raises(PluginError, match=f"plugin 'acme-odd': matcher 'acme-odd': {problem}"):
        Engine.build("default", pm)


@pytest.mark.parametrize("field, value, problem", [
    ("tier", "tier1", "tier must be Tier.TIER1 or Tier.TIER2, got 'tier1'"),
    ("tier", Tier.NONE, "tier must be Tier.TIER1 or Tier.TIER2, got <Tier.NONE: 'none-unknown'>"),
    ("order", "abc", "order must be an int, got 'abc'"),
    ("order", True, "order must be an int, got True"),
])
def test_plugins_refuses_a_bad_matcher_as_every_command_does(cli_uses_pm: pluggy.PluginManager,
                                                            register_plugin: Callable[..., Any],
                                                            field: str, value: Any, problem: str) -> None:
    matcher = dataclasses.replace(Matcher("acme-odd", Tier.TIER2, 500, lambda ctx: None), **{field: value})
    register_plugin(Matchers(matcher), "acme-odd")
    result = _cli("plugins")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"Error: plugin 'acme-odd': matcher 'acme-odd': {problem}\n"


def test_a_matcher_whose_explain_raises_is_shown_in_explain(pm: pluggy.PluginManager,
                                                            register_plugin: Callable[..., Any]) -> None:
    register_plugin(Matchers(Matcher("acme-x", Tier.TIER2, 500, lambda ctx: None, _raising)), "acme-x")
    _verdict, traces = Engine.build("default", pm).explain(make_bundle("boom"))
    [mine] = [t for t in traces if t.matcher == "acme-x"]
    assert mine.traces[0].detail == "matcher 'acme-x' raised ValueError: boom"


def test_a_matcher_that_always_raises_fails_test_and_shows_in_run(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path) -> None:
    register_plugin(Matchers(Matcher("acme-raiser", Tier.TIER1, 5, _raising)), "acme-raiser")
    tested = _cli("test")
    assert tested.exit_code == 1 and "matcher 'acme-raiser' raised ValueError: boom" in tested.output
    data = run_json(captures, "--dry-run")
    assert data["warnings"] == {"matcher 'acme-raiser' raised ValueError: boom; skipped": data["bundles"] - 1}
    table = _cli("run", captures, "--dry-run").stdout
    assert "matcher 'acme-raiser' raised ValueError: boom; skipped" in table


def _quoting(ctx: Any) -> Match | None:
    raise ValueError(ctx.view.signal("error_text"))


@pytest.mark.parametrize("command", ["classify", "explain", "run --dry-run"])
def test_a_warning_quoting_capture_text_cannot_drive_the_terminal(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], tmp_path: Path,
        command: str) -> None:
    """classify's table and explain printed a verdict's warnings, and explain a matcher's
    trace, as they came: a plugin's exception quoting the log set the terminal's title,
    where run showed it escaped."""
    register_plugin(Matchers(Matcher("acme-quoting", Tier.TIER1, 5, _quoting, _quoting)), "acme-quoting")
    bundle = write_bundle(tmp_path / "c" / "m" / "1", make_bundle("evil \x1b]0;OWNED\x07 text"))
    out = _cli(*command.split(), bundle if command == "explain" else tmp_path / "c").stdout
    assert "\x1b" not in out and "\x07" not in out
    assert "matcher 'acme-quoting' raised ValueError: evil \\x1b]0;OWNED\\x07 text; skipped" in out


def test_loop_rules_debug_shows_a_raising_matcher_s_traceback_once_per_run(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A matcher's exception became a verdict's warning with no way to see where in the
    plugin it was raised, even with LOOP_RULES_DEBUG set."""
    from loop_core import errors

    register_plugin(Matchers(Matcher("acme-raiser", Tier.TIER1, 5, _raising)), "acme-raiser")
    quiet = _cli("run", captures, "--dry-run")
    assert "Traceback" not in quiet.stderr
    monkeypatch.setenv("LOOP_RULES_DEBUG", "1")
    monkeypatch.setattr(errors, "_SHOWN", set())
    loud = _cli("run", captures, "--dry-run")
    assert loud.exit_code == quiet.exit_code and loud.stdout == quiet.stdout
    assert loud.stderr.count("Traceback") == 1  # one failure, shown once for all the bundles it met
    assert "loop-rules: debug: matcher 'acme-raiser' raised ValueError: boom; skipped\n" in loud.stderr
    assert 'in _raising\n    raise ValueError("boom")' in loud.stderr


class Kinds:
    @hookimpl
    def loop_register_conditions(self, register: Callable[[Any], None]) -> None:
        from loop_core import ConditionKind

        def compile_(arg: Any) -> Any:
            raise KeyError("kaboom")

        register(ConditionKind("acme_kind", lambda view, arg: True, compile_))


def _one_rule_pack(tmp_path: Path, when: str) -> Path:
    """A pack of one rule, ``r``, whose ``when`` is ``when`` (line 4 of its file)."""
    pack = tmp_path / "p"
    pack.mkdir()
    (pack / "10.yml").write_text(f"- id: r\n  class: unknown\n  description: d\n  when: {when}\n"
                                 "  examples: {match: [x]}\n")
    return pack


def test_a_condition_kind_whose_compile_raises_is_named_at_the_rule(
        pm: pluggy.PluginManager, register_plugin: Callable[..., Any], tmp_path: Path) -> None:
    from loop_core import RuleError

    register_plugin(Kinds(), "acme-kinds")
    pack = _one_rule_pack(tmp_path, "{acme_kind: 1}")
    with pytest.raises(RuleError, match=r"r \(line 4\): when.acme_kind: condition kind 'acme_kind' raised KeyError"):
        Engine.build(pack, pm)


def test_a_counted_answer_that_is_not_true_does_not_skip_the_filing(tmp_path: Path) -> None:
    from loop_core.pipeline import process_bundle
    from loop_core.testing import write_bundle

    bundle = write_bundle(tmp_path / "b", make_bundle("torch.cuda.OutOfMemoryError: CUDA out of memory"))
    engine = Engine.build("default")
    item = process_bundle(bundle, engine, counted=lambda digest, submission: "no")
    assert not item.counted and item.draft is not None
    assert process_bundle(bundle, engine, counted=lambda digest, submission: True).counted


def test_an_entry_point_that_does_not_import_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = tmp_path / "acme_broken-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-broken\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[loop_rules]\nbroken = acme_no_such_module_xyz.plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("LOOP_RULES_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    with pytest.raises(PluginError, match=r"cannot load plugin 'broken' \(acme_no_such_module_xyz.plugin, "
                                          r"from acme-broken\): ModuleNotFoundError"):
        make_plugin_manager()


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"x": value}
    return value


_CYCLE: dict[str, Any] = {}
_CYCLE["self"] = _CYCLE


@pytest.mark.parametrize("fields, problem", [
    ({"rule_id": 12345}, "rule_id is int, not text"),
    ({"delta_mib": "lots"}, "delta_mib is str, not a number"),
    ({"tier1_inputs": [1, 2]}, "tier1_inputs is list, not a mapping"),
    ({"tier1_inputs": {"gpus": {0, 1}}}, "tier1_inputs['gpus'] is set, not JSON data"),
    ({"tier1_inputs": {"raw": b"\x00"}}, "tier1_inputs['raw'] is bytes, not JSON data"),
    ({"tier1_inputs": {"log": [Path("boot.log")]}}, "tier1_inputs['log'][0] is PosixPath, not JSON data"),
    ({"tier1_inputs": {("gpu", 0): 1}}, "tier1_inputs has a key ('gpu', 0) that is tuple, not text"),
    ({"tier1_inputs": {"by_gpu": {0: 1}}}, "tier1_inputs['by_gpu'] has a key 0 that is int, not text"),
    ({"tier1_inputs": _deep(100)}, "tier1_inputs" + "['x']" * 100 + " is nested deeper than 100 levels"),
    ({"tier1_inputs": _CYCLE}, "tier1_inputs" + "['self']" * 100 + " is nested deeper than 100 levels"),
])
def test_a_match_with_fields_a_verdict_cannot_carry_is_skipped_with_a_warning(
        pm: pluggy.PluginManager, register_plugin: Callable[..., Any], fields: dict[str, Any], problem: str) -> None:
    match = Match("genuine-oom", **{"rule_id": "acme-rule", **fields})
    register_plugin(Matchers(Matcher("acme-odd-match", Tier.TIER1, 5, lambda ctx: match)), "acme-odd-match")
    verdict = Engine.build("default", pm).classify(make_bundle("nothing special"))
    assert verdict.matched_rule != "acme-rule" and verdict.matched_rule != 12345
    assert f"matcher 'acme-odd-match' returned a Match whose {problem}; skipped" in verdict.warnings


# -- loading plugins ----------------------------------------------------------------


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """``install(dist, entry_points, modules)``: a distribution on ``sys.path`` for this test
    only (put before those installed earlier), with its ``loop_rules`` entry points
    (name -> module) and the sources of its modules (name -> text)."""
    made: list[str] = []
    monkeypatch.delenv("LOOP_RULES_DISABLE_PLUGIN_AUTOLOAD", raising=False)

    def install(dist: str, entry_points: dict[str, str], modules: dict[str, str]) -> None:
        site = tmp_path / f"site-{dist}"
        info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(
            "[loop_rules]\n" + "".join(f"{name} = {module}\n" for name, module in entry_points.items()))
        for name, source in modules.items():
            (site / f"{name}.py").write_text(textwrap.dedent(source))
            made.append(name)
        monkeypatch.syspath_prepend(str(site))

    try:
        yield install
    finally:
        for name in made:
            sys.modules.pop(name, None)


ABSTAINING_DRAFTER = """
    from loop_core import hookimpl


    @hookimpl
    def loop_draft_issue(bundle, verdict):
        return None
"""


def test_one_module_under_two_entry_points_is_named_in_one_line(install: Callable[..., None]) -> None:
    install("acme-twice", {"one": "acme_twice", "two": "acme_twice"}, {"acme_twice": ABSTAINING_DRAFTER})
    result = _cli("plugins")
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: entry point group 'loop_rules': cannot load plugin 'two' (acme_twice, from acme-twice): the same "
        "plugin is already registered, as plugin 'one' (two entry points naming one module, or a plugin also "
        "passed as plugins=[...])\n")


def test_an_entry_point_named_like_a_builtin_is_listed_as_not_loaded(install: Callable[..., None]) -> None:
    """It was skipped without a word, as pluggy skips a name already taken: the author's
    matchers were simply missing."""
    install("acme-clash", {"loop_rules.tier2": "acme_clash"}, {"acme_clash": ABSTAINING_DRAFTER})
    result = _cli("plugins")
    assert result.exit_code == 0
    where = "plugin 'loop_rules.tier2' (acme_clash, from acme-clash)"
    why = "the name of a plugin already registered; give the entry point a name of its own"
    assert json.loads(result.stdout)["skipped_entry_points"] == [{"entry_point": where, "why": why}]
    assert result.stderr == f"loop-rules: warning: entry point {where} not loaded: {why}\n"


def test_a_plugin_given_and_installed_too_is_named(install: Callable[..., None]) -> None:
    install("acme-given", {"acme": "acme_given"}, {"acme_given": ABSTAINING_DRAFTER})
    import acme_given  # type: ignore[import-not-found]

    with pytest.raises(PluginError) as err:
        make_plugin_manager(plugins=[acme_given])
    assert str(err.value).startswith(
        "entry point group 'loop_rules': cannot load plugin 'acme' (acme_given, from acme-given): the same plugin "
        "is already registered, as plugin 'acme_given' ")
    assert "\n" not in str(err.value)


def test_a_hook_argument_the_hookspec_lacks_is_named_with_its_cause(install: Callable[..., None]) -> None:
    install("acme-extra", {"extra": "acme_extra"}, {"acme_extra": """
        from loop_core import hookimpl


        @hookimpl
        def loop_draft_issue(bundle, verdict, tracker):
            return None
    """})
    result = _cli("plugins")
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: entry point group 'loop_rules': cannot load plugin 'extra' (acme_extra, from acme-extra): "
        "hookimpl definition: loop_draft_issue(bundle, verdict, tracker): Argument(s) {'tracker'} are declared "
        "in the hookimpl but can not be found in the hookspec\n")


def test_a_misspelt_hook_names_the_plugin_not_its_module() -> None:
    @hookimpl
    def loop_draft_isue(bundle: Any, verdict: Any) -> None:
        return None

    acme = types.ModuleType("acme_typo")
    acme.loop_draft_isue = loop_draft_isue  # type: ignore[attr-defined]
    with pytest.raises(PluginError) as err:
        make_plugin_manager(entry_points=False, plugins=[acme])
    assert str(err.value) == ("plugin 'acme_typo': implements 'loop_draft_isue', which is not a hook of loop-rules "
                              "(did you mean 'loop_draft_issue'?)")


def test_a_hook_name_like_none_of_the_hooks_is_called_misspelt() -> None:
    @hookimpl
    def loop_frobnicate(register: Any) -> None:
        return None

    acme = types.ModuleType("acme_odd")
    acme.loop_frobnicate = loop_frobnicate  # type: ignore[attr-defined]
    with pytest.raises(PluginError) as err:
        make_plugin_manager(entry_points=False, plugins=[acme])
    assert str(err.value) == ("plugin 'acme_odd': implements 'loop_frobnicate', which is not a hook of loop-rules "
                              "(a misspelt loop_* function?)")


@pytest.mark.parametrize("mark", [None, pluggy.HookimplMarker("loop_rules")], ids=["no-mark", "another-project"])
def test_a_hook_function_without_the_hookimpl_mark_is_named(mark: Any) -> None:
    def loop_register_matchers(register: Any) -> None:
        register(Matcher("acme-unmarked", Tier.TIER2, 150, lambda ctx: None))

    acme = types.ModuleType("acme_unmarked")
    acme.loop_register_matchers = loop_register_matchers if mark is None else mark(loop_register_matchers)  # type: ignore[attr-defined]
    with pytest.raises(PluginError) as err:
        make_plugin_manager(entry_points=False, plugins=[acme])
    assert str(err.value) == ("plugin 'acme_unmarked': loop_register_matchers is not marked with "
                              "@loop_core.hookimpl, so it is never called (pluggy passes over a function "
                              "without the project's mark)")


CHATTY = """
    from loop_core import Matcher, Tier, hookimpl

    print("chatty: imported")


    def _match(ctx):
        print("chatty: matching")
        return None


    @hookimpl
    def loop_register_matchers(register):
        print("chatty: registering")
        register(Matcher("acme-chatty", Tier.TIER2, 150, _match))
"""


@pytest.mark.parametrize("args", [
    ("classify", "--format", "json", "{bundle}"),
    ("explain", "--format", "json", "{bundle}"),
    ("test", "--format", "json", "--examples-only"),
    ("diff", "--rules", "reference", "--format", "json", "{captures}"),
    ("eval", "--corpus", "{corpus}", "--format", "json"),
    ("trust", "--format", "json", "{bundle}"),
    ("run", "--dry-run", "--format", "json", "{captures}"),
    ("plugins",),
], ids=lambda args: args[0])
def test_what_a_plugin_prints_never_reaches_json_on_stdout(install: Callable[..., None], captures: Path,
                                                           args: tuple[str, ...]) -> None:
    """A print at import, in a registration hook or in a matcher came out on stdout ahead of
    the JSON of every command but classify's rows and run's summary."""
    install("acme-chatty", {"chatty": "acme_chatty"}, {"acme_chatty": CHATTY})
    bundle = captures / "qwen-qwen3-14b" / "20261126T101112Z"
    corpus = Path(__file__).parent / "corpus" / "holdout"
    result = _cli(*(a.format(bundle=bundle, captures=captures, corpus=corpus) for a in args))
    assert result.exit_code == 0, result.stderr
    json.loads(result.stdout)
    assert "chatty: imported" in result.stderr  # shown all the same, where a pipe does not read it


TITLED_DRAFTER = """
    import dataclasses

    from loop_core import hookimpl
    from loop_core.dedup import draft_issue


    @hookimpl{mark}
    def loop_draft_issue(bundle, verdict):
        draft = draft_issue(bundle, verdict)
        return dataclasses.replace(draft, title="[{name}] " + draft.title)
"""


def _title_drafted_by(pm: pluggy.PluginManager) -> str:
    bundle = make_bundle("torch.cuda.OutOfMemoryError: CUDA out of memory")
    draft = pm.hook.loop_draft_issue(bundle=bundle, verdict=Engine.build("default", pm).classify(bundle))
    return str(draft.title)


@pytest.mark.parametrize("installed", [("alpha", "zeta"), ("zeta", "alpha")])
def test_of_two_drafters_without_a_mark_the_entry_point_named_last_answers(install: Callable[..., None],
                                                                           installed: tuple[str, str]) -> None:
    """Whichever package was installed (found on sys.path) first: entry points are
    registered in name order, and pluggy asks the one registered last first."""
    for name in installed:
        install(f"acme-{name}", {name: f"acme_{name}"}, {f"acme_{name}": TITLED_DRAFTER.format(name=name, mark="")})
    pm = make_plugin_manager()
    assert [name for name, _plugin in pm.list_name_plugin() if name in installed] == ["alpha", "zeta"]
    assert _title_drafted_by(pm).startswith("[zeta] [loop][genuine-oom] ")


def test_a_tryfirst_drafter_answers_before_one_without_a_mark(install: Callable[..., None]) -> None:
    install("acme-alpha", {"alpha": "acme_alpha"},
            {"acme_alpha": TITLED_DRAFTER.format(name="alpha", mark="(tryfirst=True)")})
    install("acme-zeta", {"zeta": "acme_zeta"}, {"acme_zeta": TITLED_DRAFTER.format(name="zeta", mark="")})
    assert _title_drafted_by(make_plugin_manager()).startswith("[alpha] ")


def test_plugins_registered_later_are_asked_first_and_trylast_ones_after_the_built_in(
        pm: pluggy.PluginManager, register_plugin: Callable[..., Any]) -> None:
    class Titled:
        def __init__(self, name: str, answers: bool = True) -> None:
            self.name, self.answers = name, answers

        def draft(self, bundle: Any, verdict: Any) -> Any:
            from loop_core.dedup import draft_issue

            draft = draft_issue(bundle, verdict)
            return dataclasses.replace(draft, title=f"[{self.name}] {draft.title}") if self.answers else None

    class Plain(Titled):
        @hookimpl
        def loop_draft_issue(self, bundle: Any, verdict: Any) -> Any:
            return self.draft(bundle, verdict)

    class Last(Titled):
        @hookimpl(trylast=True)
        def loop_draft_issue(self, bundle: Any, verdict: Any) -> Any:
            return self.draft(bundle, verdict)

    register_plugin(Last("last"), "acme-last")
    assert _title_drafted_by(pm).startswith("[loop]")  # the built-in, trylast too and registered first, answered
    register_plugin(Plain("first"), "acme-first")
    register_plugin(Plain("second"), "acme-second")
    assert _title_drafted_by(pm).startswith("[second] ")
    register_plugin(Plain("third", answers=False), "acme-third")  # asked first, no opinion: the next one answers
    assert _title_drafted_by(pm).startswith("[second] ")


# -- sys.exit in a plugin -------------------------------------------------------------
# A plugin that calls sys.exit has failed like one that raised: the command goes on or
# stops with one line naming it, never ends quietly with the plugin's status.


def _exits(*_args: Any) -> Any:
    sys.exit(0)


def test_a_matcher_that_calls_sys_exit_is_skipped_with_a_warning(pm: pluggy.PluginManager,
                                                                 register_plugin: Callable[..., Any]) -> None:
    register_plugin(Matchers(Matcher("acme-quit", Tier.TIER1, 5, _exits, _exits)), "acme-quit")
    engine = Engine.build("default", pm)
    bundle = make_bundle("torch.cuda.OutOfMemoryError: CUDA out of memory")
    verdict = engine.classify(bundle)
    assert verdict.matched_rule == "tier1-oom-fastpath"
    assert verdict.warnings == ("matcher 'acme-quit' raised SystemExit: sys.exit(0) was called; skipped",)
    _verdict, traces = engine.explain(bundle)
    [mine] = [t for t in traces if t.matcher == "acme-quit"]
    assert mine.traces[0].detail == "matcher 'acme-quit' raised SystemExit: sys.exit(0) was called"


def test_ctrl_c_in_a_matcher_still_stops_the_command(pm: pluggy.PluginManager,
                                                     register_plugin: Callable[..., Any]) -> None:
    def interrupted(ctx: Any) -> None:
        raise KeyboardInterrupt

    register_plugin(Matchers(Matcher("acme-ctrl-c", Tier.TIER1, 5, interrupted)), "acme-ctrl-c")
    with pytest.raises(KeyboardInterrupt):
        Engine.build("default", pm).classify(make_bundle("boom"))


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_run_whose_matcher_calls_sys_exit_goes_on_in_every_worker(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path, jobs: str) -> None:
    """Under --jobs the worker died with it ("worker process N exited with status 1")."""
    register_plugin(Matchers(Matcher("acme-quit", Tier.TIER1, 5, _exits)), "acme-quit")
    data = run_json(captures, "--dry-run", "--jobs", jobs)
    assert data["warnings"] == {"matcher 'acme-quit' raised SystemExit: sys.exit(0) was called; skipped":
                                data["bundles"] - 1}  # all but the unreadable bundle


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_drafter_that_calls_sys_exit_stops_the_run_named_and_loses_nothing(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path, jobs: str) -> None:
    register_plugin(Drafts("exit"), "acme-drafts")
    result = run_json(captures, "--jobs", jobs, code=2)
    assert result.stderr == ("Error: loop_draft_issue (plugins acme-drafts) raised SystemExit: sys.exit(0) was "
                             "called\n")
    cli_uses_pm.unregister(name="acme-drafts")
    assert run_json(captures)["filed_new"] == 12  # the rerun files every failure, once


class QuittingRegistration:
    @hookimpl
    def loop_register_conditions(self, register: Callable[[Any], None]) -> None:
        sys.exit(3)


def test_a_registration_hook_that_calls_sys_exit_is_a_plugin_error(pm: pluggy.PluginManager,
                                                                   register_plugin: Callable[..., Any]) -> None:
    register_plugin(QuittingRegistration(), "acme-quitter")
    with pytest.raises(PluginError, match=r"^plugin 'acme-quitter': loop_register_conditions failed: SystemExit\(3\)$"):
        Engine.build("default", pm)


def test_an_entry_point_that_calls_sys_exit_on_import_cannot_be_loaded(install: Callable[..., None]) -> None:
    install("acme-quitter", {"quitter": "acme_quitter"}, {"acme_quitter": "import sys\nsys.exit(0)\n"})
    result = _cli("plugins")
    assert result.exit_code == 2
    assert result.stderr == ("Error: entry point group 'loop_rules': cannot load plugin 'quitter' (acme_quitter, "
                             "from acme-quitter): SystemExit: sys.exit(0) was called\n")


class QuittingKind:
    def __init__(self, where: str) -> None:
        self.where = where

    @hookimpl
    def loop_register_conditions(self, register: Callable[[Any], None]) -> None:
        from loop_core import ConditionKind

        register(ConditionKind("acme_quit", _exits if self.where == "evaluate" else lambda view, arg: True,
                               _exits if self.where == "compile" else lambda arg: arg))


def _pack_using_acme_quit(tmp_path: Path) -> Path:
    pack = tmp_path / "p"
    pack.mkdir()
    (pack / "10.yml").write_text(
        "- id: quits\n  class: unknown\n  description: d\n  when: {not: {acme_quit: 1}}\n"
        "  examples: {match: [x]}\n"
        "- id: oom\n  class: genuine-oom\n  description: d\n  when: {select: $.signal.error_text_lower, "
        "contains: out of memory}\n  examples: {match: [out of memory]}\n")
    return pack


def test_a_condition_kind_that_calls_sys_exit_fails_its_rule_only(
        pm: pluggy.PluginManager, register_plugin: Callable[..., Any], tmp_path: Path) -> None:
    register_plugin(QuittingKind("evaluate"), "acme-kind")
    verdict = Engine.build(_pack_using_acme_quit(tmp_path), pm).classify(make_bundle("out of memory"))
    assert verdict.matched_rule == "oom"  # the rules after it are still evaluated
    assert verdict.warnings == (("rule 'quits': condition kind 'acme_quit' raised SystemExit: sys.exit(0) was "
                                 "called; counted as no match"),)


def test_a_condition_kind_whose_compile_calls_sys_exit_is_named_at_the_rule(
        pm: pluggy.PluginManager, register_plugin: Callable[..., Any], tmp_path: Path) -> None:
    from loop_core import RuleError

    register_plugin(QuittingKind("compile"), "acme-kind")
    with pytest.raises(RuleError, match=r"quits \(line 4\): when.not.acme_quit: condition kind 'acme_quit' raised "
                                        r"SystemExit: sys.exit\(0\) was called"):
        Engine.build(_pack_using_acme_quit(tmp_path), pm)


class Quitting(Recorder):
    def __init__(self, store: RecorderStore, options: Any, where: str) -> None:
        super().__init__(store, options)
        self.where = where

    def file(self, draft: Any, occurrence: Any) -> Any:
        if self.where == "file":
            sys.exit(0)
        return super().file(draft, occurrence)

    def close(self) -> None:
        if self.where == "close":
            sys.exit(0)


class QuittingStore(RecorderStore):
    def __init__(self, where: str) -> None:
        super().__init__("quitting")
        self.where = where

    def factory(self, options: Any) -> Any:
        if self.where == "factory":
            sys.exit(0)
        return Quitting(self, options, self.where)


@pytest.mark.parametrize("where, code, problem", [
    ("factory", 2, ("Error: --tracker 'quitting': plugin 'acme-quitting': its factory raised SystemExit: "
                    "sys.exit(0) was called\n")),
    ("file", 2, "Error: tracker 'quitting': file raised SystemExit: sys.exit(0) was called\n"),
    ("close", 0, "loop-rules: warning: tracker 'quitting': close failed: SystemExit: sys.exit(0) was called\n"),
])
def test_a_tracker_that_calls_sys_exit_is_named(cli_uses_pm: pluggy.PluginManager,
                                                register_plugin: Callable[..., Any], captures: Path,
                                                where: str, code: int, problem: str) -> None:
    register_plugin(QuittingStore(where), "acme-quitting")
    result = _cli("run", captures, "--tracker", "quitting", "--format", "json")
    assert result.exit_code == code
    assert result.stderr == problem
    if code == 0:
        assert json.loads(result.stdout)["filed_new"] == 12  # the summary still comes


def test_a_spool_replay_into_a_tracker_that_calls_sys_exit_keeps_the_spool(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path) -> None:
    assert run_json(captures, "--tracker", "spool")["spooled"] == FILEABLE
    before = sorted((captures / "_dedup-queue").glob("*.json"))
    register_plugin(QuittingStore("file"), "acme-quitting")
    result = _cli("spool", "replay", captures, "--tracker", "quitting")
    assert result.exit_code == 2
    assert result.stderr == "Error: tracker 'quitting': file raised SystemExit: sys.exit(0) was called\n"
    assert sorted((captures / "_dedup-queue").glob("*.json")) == before


class Raising(Recorder):
    """Files its first three failures, then raises ``error`` in ``where``."""

    def __init__(self, store: RecorderStore, options: Any, where: str, error: BaseException) -> None:
        super().__init__(store, options)
        self.where, self.error = where, error

    def file(self, draft: Any, occurrence: Any) -> Any:
        if self.where == "file" and len(self.store.drafts) == 3:
            raise self.error
        return super().file(draft, occurrence)

    def file_many(self, items: Any) -> Any:
        if self.where == "file_many":
            raise self.error
        return [self.file(draft, occurrence) for draft, occurrence in items]

    def counted(self, dedup_hash: str, submission: str) -> bool:
        if self.where == "counted":
            raise self.error
        return False


class RaisingStore(RecorderStore):
    def __init__(self, where: str, error: BaseException) -> None:
        super().__init__("raising")
        self.where, self.error = where, error

    def factory(self, options: Any) -> Any:
        tracker = Raising(self, options, self.where, self.error)
        if self.where == "file":  # no file_many: run hands failures to file one at a time
            tracker.file_many = None  # type: ignore[method-assign,assignment]
        return tracker


@pytest.mark.parametrize("where", ["file", "file_many", "counted"])
def test_a_tracker_whose_filing_raises_is_named_not_an_internal_error(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path, where: str) -> None:
    """It was "loop-rules: internal error: ValueError: no column 'x'" (status 70): which
    tracker stopped the filing, the line did not say."""
    register_plugin(RaisingStore(where, ValueError("no column 'x'")), "acme-raising")
    result = _cli("run", captures, "--tracker", "raising")
    assert result.exit_code == 2
    assert result.stderr == f"Error: tracker 'raising': {where} raised ValueError: no column 'x'\n"


@pytest.mark.parametrize("method", ["_file", "counted"])
def test_a_bug_in_the_built_in_tracker_stays_an_internal_error(
        captures: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], method: str) -> None:
    """A plugin's tracker that raises is named as the plugin's; the SQLite tracker's own
    exception is a bug of loop-rules, and says so (status 70)."""
    import gc

    from loop_core import cli as cli_module
    from loop_core.trackers import SqliteTracker

    if method == "counted":  # asked of a tracker that holds occurrences
        assert run_json(captures)["filed_new"] > 0

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("no such column: x")

    monkeypatch.setattr(SqliteTracker, method, broken)
    monkeypatch.setattr(gc, "freeze", lambda: None)  # main() ends processes; this one goes on
    with pytest.raises(SystemExit) as stopped:
        cli_module.main(["run", str(captures)])
    assert stopped.value.code == 70
    assert capsys.readouterr().err == ("loop-rules: internal error: ValueError: no such column: x "
                                       "(set LOOP_RULES_DEBUG=1 for the traceback)\n")
    monkeypatch.setenv("LOOP_RULES_DEBUG", "1")  # as the line says: the exception itself, with its traceback
    with pytest.raises(ValueError, match="^no such column: x$"):
        cli_module.main(["run", str(captures)])


def test_loop_rules_debug_shows_where_a_tracker_s_filing_raised(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import gc

    from loop_core import cli as cli_module

    register_plugin(RaisingStore("file", ValueError("no column 'x'")), "acme-raising")
    monkeypatch.setattr(gc, "freeze", lambda: None)  # main() ends processes; this one goes on
    monkeypatch.setenv("LOOP_RULES_DEBUG", "1")
    with pytest.raises(SystemExit) as stopped:
        cli_module.main(["run", str(captures), "--tracker", "raising"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("Traceback") == 1
    assert "in file\n    raise self.error\nValueError: no column 'x'\n" in err
    assert err.endswith("Error: tracker 'raising': file raised ValueError: no column 'x'\n")


@pytest.mark.parametrize("where", ["file", "counted"])
@pytest.mark.parametrize("error, code, problem", [
    (TrackerError("the board is read-only"), 2, "Error: the board is read-only\n"),
    (PermissionError(13, "Permission denied", "board.db"), 74, "loop-rules: system error: Permission denied: board.db\n"),
])
def test_a_tracker_s_own_errors_and_the_system_s_keep_their_meaning(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        error: BaseException, code: int, problem: str, where: str) -> None:
    import gc

    from loop_core import cli as cli_module

    register_plugin(RaisingStore(where, error), "acme-raising")
    monkeypatch.setattr(gc, "freeze", lambda: None)  # main() ends processes; this one goes on
    with pytest.raises(SystemExit) as stopped:
        cli_module.main(["run", str(captures), "--tracker", "raising"])
    assert (stopped.value.code, capsys.readouterr().err) == (code, problem)


def test_a_spool_replay_into_a_tracker_that_raises_keeps_the_spool(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path) -> None:
    assert run_json(captures, "--tracker", "spool")["spooled"] == FILEABLE
    before = sorted((captures / "_dedup-queue").glob("*.json"))
    register_plugin(RaisingStore("file_many", KeyError("issue")), "acme-raising")
    result = _cli("spool", "replay", captures, "--tracker", "raising")
    assert (result.exit_code, result.stderr) == (2, "Error: tracker 'raising': file_many raised KeyError: 'issue'\n")
    assert sorted((captures / "_dedup-queue").glob("*.json")) == before


# -- names -------------------------------------------------------------------------


class Named:
    """Registers one thing of each kind, the one of kind ``what`` under ``name``."""

    def __init__(self, what: str, name: Any) -> None:
        self.what, self.name = what, name

    def _name(self, what: str) -> Any:
        return self.name if what == self.what else f"acme-{what}"

    @hookimpl
    def loop_register_matchers(self, register: Callable[[Any], None]) -> None:
        register(Matcher(self._name("matcher"), Tier.TIER2, 500, lambda ctx: None))

    @hookimpl
    def loop_register_conditions(self, register: Callable[[Any], None]) -> None:
        from loop_core import ConditionKind

        register(ConditionKind(self._name("condition kind"), lambda view, arg: True))

    @hookimpl
    def loop_register_rule_packs(self, register: Callable[[Any], None]) -> None:
        from loop_core import PackInfo

        register(PackInfo(self._name("rule pack"), Path("nowhere"), "d"))


@pytest.mark.parametrize("what", ["matcher", "condition kind", "rule pack"])
def test_a_name_that_is_not_text_is_a_plugin_error(cli_uses_pm: pluggy.PluginManager,
                                                   register_plugin: Callable[..., Any], what: str) -> None:
    """It was "internal error: TypeError: '<' not supported ..." in every command."""
    register_plugin(Named(what, 42), "acme-named")
    problem = f"plugin 'acme-named': {what} name must be text, got 42"
    with pytest.raises(PluginError, match=f"^{problem}$"):
        Engine.build("default", cli_uses_pm)
    for args in (("plugins",), ("check",)):
        result = _cli(*args)
        assert (result.exit_code, result.stderr) == (2, f"Error: {problem}\n"), args


def test_a_tracker_name_that_is_not_text_is_a_plugin_error(cli_uses_pm: pluggy.PluginManager,
                                                           register_plugin: Callable[..., Any],
                                                           captures: Path) -> None:
    register_plugin(RecorderStore(42), "acme-trackers")  # type: ignore[arg-type]
    result = _cli("run", captures, "--tracker", "sqlite")
    assert (result.exit_code, result.stderr) == (2, ("Error: plugin 'acme-trackers': tracker name must be "
                                                     "text, got 42\n"))


class Unwrapped:
    """Registers the fields of one thing, not the thing: ``register(("acme", ...))``."""

    def __init__(self, hook: str, item: Any) -> None:
        setattr(self, hook, hookimpl(specname=hook)(lambda register: register(item)))


@pytest.mark.parametrize("hook, item, problem", [
    ("loop_register_matchers", ("acme-bus", Tier.TIER2, 150),
     "a matcher must be a Matcher, got tuple ('acme-bus', <Tier.TIER2: 'tier2'>, 150)"),
    ("loop_register_conditions", {"name": "acme_kind"},
     "a condition kind must be a ConditionKind, got dict {'name': 'acme_kind'}"),
    ("loop_register_rule_packs", ("acme", "rules"), "a rule pack must be a PackInfo, got tuple ('acme', 'rules')"),
    ("loop_register_trackers", "jsonfile", "a tracker must be a TrackerSpec, got str 'jsonfile'"),
    ("loop_register_matchers", "x" * 200, f"a matcher must be a Matcher, got str '{'x' * 76}..."),  # cut to 80
])
def test_registering_something_else_says_what_register_takes(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path,
        hook: str, item: Any, problem: str) -> None:
    """It was "loop_register_matchers failed: AttributeError("'tuple' object has no attribute 'name'")"."""
    register_plugin(Unwrapped(hook, item), "acme-unwrapped")
    args = ("run", captures, "--dry-run") if hook == "loop_register_trackers" else ("plugins",)
    result = _cli(*args)
    assert (result.exit_code, result.stderr) == (2, f"Error: plugin 'acme-unwrapped': {problem}\n")


class Returning:
    """Returns what it means to register, as hooks of other pluggy projects do."""

    def __init__(self, hook: str, items: list[Any]) -> None:
        setattr(self, hook, hookimpl(specname=hook)(lambda register: items))


@pytest.mark.parametrize("hook, items, what", [
    ("loop_register_matchers", [Matcher("acme-bus", Tier.TIER2, 150, lambda ctx: None)], "matcher"),
    ("loop_register_rule_packs", [("acme", "rules")], "rule pack"),
])
def test_a_registration_hook_that_returns_its_items_is_a_plugin_error(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any],
        hook: str, items: list[Any], what: str) -> None:
    """Its items were ignored without a word: the matcher missing from the chain, the pack unknown."""
    register_plugin(Returning(hook, items), "acme-returning")
    result = _cli("plugins")
    assert (result.exit_code, result.stderr) == (2, (
        f"Error: plugin 'acme-returning': {hook} returned list; it must call register() once for each "
        f"{what} and return None\n"))


@pytest.mark.parametrize("hook, item, problem", [
    ("loop_register_matchers", Matcher("acme-bus", Tier.TIER2, 150, "acme.match"),  # type: ignore[arg-type]
     "matcher 'acme-bus': match must be callable, got str"),
    ("loop_register_conditions", ConditionKind("acme_kind", "acme.evaluate"),  # type: ignore[arg-type]
     "condition kind 'acme_kind': evaluate must be callable, got str"),
    ("loop_register_conditions", ConditionKind("acme_kind", lambda view, arg: True, 3),  # type: ignore[arg-type]
     "condition kind 'acme_kind': compile must be callable, got int"),
    ("loop_register_trackers", TrackerSpec("jsonfile", "acme:factory"),  # type: ignore[arg-type]
     "tracker 'jsonfile': factory must be callable, got str"),
])
def test_a_function_field_that_is_not_callable_is_named_when_registered(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path,
        hook: str, item: Any, problem: str) -> None:
    """A matcher's was "matcher 'acme-bus' is not a Matcher"; a condition kind's failed
    every rule using it, and a tracker's factory was an internal error."""
    register_plugin(Unwrapped(hook, item), "acme-uncallable")
    for args in (("plugins",), ("run", captures, "--tracker", "jsonfile") if "tracker" in problem else ("check",)):
        result = _cli(*args)
        assert (result.exit_code, result.stderr) == (2, f"Error: plugin 'acme-uncallable': {problem}\n"), args


@pytest.mark.parametrize("inputs, kept", [
    (types.MappingProxyType({"source": "acme", "gpus": (0, 1)}), {"source": "acme", "gpus": [0, 1]}),
    (_deep(99), _deep(99)),  # 100 levels of mappings
    ({"ratio": float("nan")}, {"ratio": "NaN"}),  # as classify writes a bundle's NaN
])
def test_tier1_inputs_that_are_json_data_are_kept_as_plain_data(
        pm: pluggy.PluginManager, register_plugin: Callable[..., Any], bundle_dir: Callable[..., Path],
        inputs: Any, kept: Any) -> None:
    from loop_core.batch import classify_text

    match = Match("genuine-oom", "acme-rule", tier1_inputs=inputs)
    register_plugin(Matchers(Matcher("acme-inputs", Tier.TIER1, 5, lambda ctx: match)), "acme-inputs")
    engine = Engine.build("default", pm)
    verdict = engine.classify(make_bundle("nothing special"))
    assert (verdict.matched_rule, verdict.warnings) == ("acme-rule", ())
    assert type(verdict.tier1_inputs) is dict
    [row] = [json.loads(text) for _bad, text in classify_text([bundle_dir("nothing special")], engine)]
    assert row["tier1_inputs"] == kept


def _odd_inputs(ctx: Any) -> Match | None:
    if "acme" in ctx.view.signal("error_text_lower"):
        return Match("genuine-oom", "acme-odd-inputs", tier1_inputs={"gpus": {0, 1}, "log": Path("boot.log")})
    return None


@pytest.mark.parametrize("fmt, jobs", [("json", "1"), ("jsonl", "1"), ("jsonl", "2")])
def test_inputs_that_are_not_json_data_cost_no_row(cli_uses_pm: pluggy.PluginManager,
                                                   register_plugin: Callable[..., Any],
                                                   bundle_dir: Callable[..., Path], tmp_path: Path,
                                                   fmt: str, jobs: str) -> None:
    """classify --format json/jsonl ended with an internal error (status 70) and no row at all."""
    register_plugin(Matchers(Matcher("acme-odd-inputs", Tier.TIER1, 5, _odd_inputs)), "acme-odd-inputs")
    for i in range(8):
        bundle_dir("RuntimeError: acme driver fault" if i % 2 else "torch.cuda.OutOfMemoryError: CUDA out of memory")
    result = _cli("classify", "--format", fmt, "--jobs", jobs, tmp_path)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout) if fmt == "json" else [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 8
    odd = [row for row in rows if row["warnings"]]
    assert len(odd) == 4 and all(row["matched_rule"] != "acme-odd-inputs" for row in odd)
    assert odd[0]["warnings"] == [("matcher 'acme-odd-inputs' returned a Match whose tier1_inputs['gpus'] is "
                                   "set, not JSON data; skipped")]
    explained = _cli("explain", "--format", "json", tmp_path / "bundle-1")
    assert explained.exit_code == 0, explained.output
    assert json.loads(explained.stdout)["verdict"]["warnings"] == odd[0]["warnings"]


# -- explain ---------------------------------------------------------------------------


class RaisingKind:
    @hookimpl
    def loop_register_conditions(self, register: Callable[[Any], None]) -> None:
        from loop_core import ConditionKind

        def evaluate(view: Any, arg: Any) -> bool:
            raise KeyError("kaboom")

        register(ConditionKind("acme_kind", evaluate))


def test_explain_says_a_condition_kind_s_warning_once(cli_uses_pm: pluggy.PluginManager,
                                                      register_plugin: Callable[..., Any], tmp_path: Path,
                                                      bundle_dir: Callable[..., Path]) -> None:
    """explain evaluates every rule twice (to decide, then to trace): the warning came twice."""
    register_plugin(RaisingKind(), "acme-kinds")
    pack = _one_rule_pack(tmp_path, "{acme_kind: 1}")
    warning = "rule 'r': condition kind 'acme_kind' raised KeyError: 'kaboom'; counted as no match"
    engine = Engine.build(pack, cli_uses_pm)
    bundle = make_bundle("boom")
    assert engine.explain(bundle)[0] == engine.classify(bundle)
    assert engine.classify(bundle).warnings == (warning,)
    target = bundle_dir("boom")
    text = _cli("explain", "--rules", pack, target)
    assert text.exit_code == 0 and text.stdout.count(f"warning: {warning}") == 1
    data = json.loads(_cli("explain", "--rules", pack, "--format", "json", target).stdout)
    assert data["verdict"]["warnings"] == [warning]


class TwoKinds:
    @hookimpl
    def loop_register_conditions(self, register: Callable[[Any], None]) -> None:
        from loop_core import ConditionKind

        register(ConditionKind("acme_fine", lambda view, arg: True))
        register(ConditionKind("acme_broken", lambda view, arg: arg["n"]))


def test_a_condition_kind_that_raises_is_named_among_the_rule_s_kinds(
        pm: pluggy.PluginManager, register_plugin: Callable[..., Any], tmp_path: Path) -> None:
    """It was "rule 'r' raised TypeError while evaluated": which of its kinds, the author had to guess."""
    register_plugin(TwoKinds(), "acme-kinds")
    pack = _one_rule_pack(tmp_path, "[{acme_fine: 1}, {acme_broken: 2}]")
    verdict = Engine.build(pack, pm).classify(make_bundle("boom"))
    assert verdict.warnings == (("rule 'r': condition kind 'acme_broken' raised TypeError: 'int' object is not "
                                 "subscriptable; counted as no match"),)


def test_loop_rules_debug_shows_the_line_of_a_condition_kind_that_raised(
        pm: pluggy.PluginManager, register_plugin: Callable[..., Any], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from loop_core import errors

    register_plugin(TwoKinds(), "acme-kinds")
    engine = Engine.build(_one_rule_pack(tmp_path, "[{acme_fine: 1}, {acme_broken: 2}]"), pm)
    monkeypatch.setenv("LOOP_RULES_DEBUG", "1")
    monkeypatch.setattr(errors, "_SHOWN", set())
    for text in ("boom", "other"):
        engine.classify(make_bundle(text))
    err = capsys.readouterr().err
    assert err.count("Traceback") == 1
    assert err.startswith("loop-rules: debug: rule 'r': condition kind 'acme_broken' raised TypeError")
    assert 'lambda view, arg: arg["n"]' in err  # the plugin's own line, behind the rule's warning


def _looped() -> list[Any]:
    from loop_core import Trace

    children: list[Any] = []
    trace = Trace("loops", True, children=children)  # type: ignore[arg-type]
    children.append(trace)
    return [trace]


def _bad_traces(how: str) -> Callable[[Any], Any]:
    from loop_core import Trace

    answers = {
        "child text": lambda: [Trace("found", True, "x", children=("a", "b"))],  # type: ignore[arg-type]
        "children text": lambda: [Trace("found", True, "x", children="ab")],  # type: ignore[arg-type]
        "text": lambda: ["found it"],
        "loop": _looped,
    }
    return lambda ctx: answers[how]()


@pytest.mark.parametrize("how, problem", [
    ("child text", "returned a Trace whose children hold str"),
    ("children text", "returned a Trace whose children are str, not a list of Traces"),
    ("text", "returned something other than Traces: str"),
    ("loop", "returned Traces nested deeper than 64 levels"),
])
def test_an_explain_that_returns_malformed_traces_is_shown_as_a_trace_line(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], bundle_dir: Callable[..., Path],
        how: str, problem: str) -> None:
    """Children that were not Traces ended explain with an internal error (AttributeError)."""
    register_plugin(Matchers(Matcher("acme-traces", Tier.TIER2, 500, lambda ctx: None, _bad_traces(how))),
                    "acme-traces")
    target = bundle_dir("boom")
    text = _cli("explain", target)
    assert text.exit_code == 0, text.output
    assert f"[tier2] acme-traces: no match\n  - explain: matcher 'acme-traces' {problem}\n" in text.stdout
    data = json.loads(_cli("explain", "--format", "json", target).stdout)
    [mine] = [m for m in data["matchers"] if m["matcher"] == "acme-traces"]
    assert mine["trace"] == [f"- explain: matcher 'acme-traces' {problem}"]


# -- condition kinds' answers ---------------------------------------------------------


class Answering:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    @hookimpl
    def loop_register_conditions(self, register: Callable[[Any], None]) -> None:
        from loop_core import ConditionKind

        register(ConditionKind("acme_answer", lambda view, arg: self.answer))


@pytest.mark.parametrize("when", ["{acme_answer: 1}", "{not: {acme_answer: 1}}"])
@pytest.mark.parametrize("answer, shown", [("false", "'false'"), (None, "None"), (1, "1")])
def test_a_condition_kind_that_answers_other_than_a_bool_fails_its_rule(
        pm: pluggy.PluginManager, register_plugin: Callable[..., Any], tmp_path: Path,
        when: str, answer: Any, shown: str) -> None:
    """Taken for its truth, "false" made the rule match, silently."""
    register_plugin(Answering(answer), "acme-answers")
    pack = tmp_path / "p"
    pack.mkdir()
    (pack / "10.yml").write_text(f"- id: r\n  class: quant-unsupported\n  description: d\n  when: {when}\n"
                                 "  examples: {match: [x]}\n")
    engine = Engine.build(pack, pm)
    bundle = make_bundle("boom")
    verdict = engine.classify(bundle)
    assert verdict.matched_rule is None  # neither way round does the rule match
    assert verdict.warnings == ((f"rule 'r': condition kind 'acme_answer' returned {shown}, not True or False; "
                                 "counted as no match"),)
    explained, traces = engine.explain(bundle)
    assert explained == verdict
    [rules] = [t for t in traces if t.matcher == "tier2-rules"]
    assert rules.traces[0].children[0].detail == verdict.warnings[0]


def test_a_condition_kind_that_answers_a_bool_decides_as_before(
        pm: pluggy.PluginManager, register_plugin: Callable[..., Any], tmp_path: Path) -> None:
    pack = tmp_path / "p"
    pack.mkdir()
    (pack / "10.yml").write_text("- id: r\n  class: quant-unsupported\n  description: d\n  when: {acme_answer: 1}\n"
                                 "  examples: {match: [x]}\n")
    register_plugin(Answering(True), "acme-answers")
    verdict = Engine.build(pack, pm).classify(make_bundle("boom"))
    assert (verdict.matched_rule, verdict.warnings) == ("r", ())


# -- a tracker that cannot be opened ----------------------------------------------------


class UnopenableStore(RecorderStore):
    def __init__(self, error: OSError) -> None:
        super().__init__("vault")
        self.error = error

    def factory(self, options: Any) -> Any:
        raise self.error


def test_loop_rules_debug_shows_where_in_the_plugin_a_registration_hook_failed(
        install: Callable[..., None], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """LOOP_RULES_DEBUG=1 showed the traceback of internal errors only: a plugin's bug behind an
    Error: line could not be traced to its line."""
    import gc

    from loop_core import cli as cli_module

    install("acme-slip", {"slip": "acme_slip"}, {"acme_slip": """
        from loop_core import hookimpl


        @hookimpl
        def loop_register_rule_packs(register):
            register(PAKC_DIR)
    """})
    monkeypatch.setattr(gc, "freeze", lambda: None)  # main() ends processes; this one goes on
    monkeypatch.setenv("LOOP_RULES_DEBUG", "1")
    with pytest.raises(SystemExit) as stopped:
        cli_module.main(["plugins"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert 'acme_slip.py", line 7, in loop_register_rule_packs' in err and "NameError" in err
    assert err.endswith("Error: plugin 'slip': loop_register_rule_packs failed: "
                        "NameError(\"name 'PAKC_DIR' is not defined\")\n")
    monkeypatch.delenv("LOOP_RULES_DEBUG")
    with pytest.raises(SystemExit):
        cli_module.main(["plugins"])
    assert "Traceback" not in capsys.readouterr().err


class BrokenFactoryStore(RecorderStore):
    def factory(self) -> Any:  # type: ignore[override]  # the options argument forgotten
        raise AssertionError("never called with no argument")


@pytest.mark.parametrize("command", ["run", "spool replay"])
def test_a_tracker_factory_that_raises_names_the_tracker_and_plugin(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path,
        command: str) -> None:
    """It was "loop-rules: internal error: TypeError: ...factory() takes 1 positional argument
    but 2 were given", exit status 70, as if loop-rules had the bug."""
    register_plugin(BrokenFactoryStore("broken"), "acme-broken")
    result = _cli(*command.split(), captures, "--tracker", "broken")
    assert result.exit_code == 2
    assert result.stderr == ("Error: --tracker 'broken': plugin 'acme-broken': its factory raised TypeError: "
                             "BrokenFactoryStore.factory() takes 1 positional argument but 2 were given\n")


@pytest.mark.parametrize("error, line", [
    (OSError("cannot open store"), "cannot open store"),
    (PermissionError(13, "Permission denied", "/srv/vault/db"), "Permission denied: /srv/vault/db"),
])
@pytest.mark.parametrize("command", ["run", "spool replay"])
def test_a_tracker_factory_s_os_error_names_the_tracker_and_plugin(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        error: OSError, line: str, command: str) -> None:
    """It was "loop-rules: system error: cannot open store": which tracker, which plugin?"""
    import gc

    from loop_core import cli as cli_module

    register_plugin(UnopenableStore(error), "acme-vault")
    monkeypatch.setattr(gc, "freeze", lambda: None)  # main() ends processes; this one goes on
    with pytest.raises(SystemExit) as stopped:
        cli_module.main([*command.split(), str(captures), "--tracker", "vault"])
    assert stopped.value.code == 74  # the system's refusal, as for any command
    assert capsys.readouterr().err == f"loop-rules: system error: --tracker 'vault' (plugin 'acme-vault'): {line}\n"


def test_explain_gives_the_verdict_classify_gives_when_the_pack_has_shadow_rules(
        pm: pluggy.PluginManager, register_plugin: Callable[..., Any], tmp_path: Path) -> None:
    """explain runs the matchers after the deciding one only to show them; what they said
    reached its verdict when the pack had a shadow rule, so the two verdicts differed."""
    register_plugin(RaisingKind(), "acme-raising")
    pack = tmp_path / "p"
    pack.mkdir()
    (pack / "10.yml").write_text(
        "- id: r\n  class: unknown\n  description: d\n  when: {acme_kind: 1}\n  examples: {match: [x]}\n"
        "- id: trial\n  class: unknown\n  mode: shadow\n  description: d\n"
        "  when: {select: $.signal.all_text, contains: memory}\n  examples: {match: [memory]}\n")
    engine = Engine.build(pack, pm)
    bundle = make_bundle("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    classified = engine.classify(bundle)
    explained, traces = engine.explain(bundle)
    assert classified.tier is Tier.TIER1 and classified.warnings == ()
    assert explained == classified
    assert any("raised KeyError" in str(trace) for trace in traces)  # shown in the traces, not the verdict


class BrokenPipeTracker(Recorder):
    def file(self, draft: Any, occurrence: Any) -> Any:
        raise BrokenPipeError(32, "Broken pipe")  # its connection to its server went away


class BrokenPipeStore(RecorderStore):
    def factory(self, options: Any) -> Any:
        return BrokenPipeTracker(self, options)


def test_a_tracker_whose_connection_breaks_is_a_system_error_not_a_closed_output(
        cli_uses_pm: pluggy.PluginManager, register_plugin: Callable[..., Any], captures: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A BrokenPipeError from anywhere ended the run quietly with 141, the status of a
    reader that went away, though stdout was fine."""
    from loop_core import cli as cli_module

    register_plugin(BrokenPipeStore("piped"), "acme-piped")
    with pytest.raises(SystemExit) as info:
        cli_module.main(["run", str(captures), "--tracker", "piped"])
    assert info.value.code == 74
    assert capsys.readouterr().err.splitlines()[-1] == "loop-rules: system error: Broken pipe"
