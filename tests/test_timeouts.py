"""A regex timeout inside a rule makes the whole rule not match, even under ``not``."""

from __future__ import annotations

from pathlib import Path

import pluggy
from click.testing import CliRunner

from loop_core import Engine
from loop_core.cli import cli
from loop_core.testing import make_bundle
from loop_core.view import View

# The first condition holds; the second would hold too if the search under
# `not` were simply counted as "no match" when it times out.
NOT_SLOW = """\
- id: not-slow
  class: quant-unsupported
  description: x present and the catastrophic pattern absent
  when:
    all:
      - {select: $.signal.all_text, contains: x}
      - not: {select: $.signal.error_text, regex: '^(a+)+$'}
  examples: {match: [x]}
- id: fallback
  class: unknown
  description: anything with an x
  when: {select: $.signal.all_text, contains: x}
  examples: {match: [x]}
"""

# error_text is the excerpt, a catastrophic line for '^(a+)+$'; the boot
# failure (also in all_text) carries the x.
CATASTROPHIC = {"pt3": {"failure": "x", "failure_log_excerpt": "a" * 50_000 + "!"}}


def _pack(tmp_path: Path) -> Path:
    pack = tmp_path / "p"
    pack.mkdir()
    (pack / "10.yml").write_text(NOT_SLOW)
    return pack


def test_timeout_under_not_does_not_match(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    engine = Engine.build(_pack(tmp_path), pm)
    verdict = engine.classify(make_bundle(CATASTROPHIC))
    assert verdict.matched_rule == "fallback"  # not-slow fell through
    assert any("timed out" in w for w in verdict.warnings)
    assert any("'not-slow'" in w and "counted as no match" in w for w in verdict.warnings)


def test_the_rule_still_matches_when_nothing_times_out(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    engine = Engine.build(_pack(tmp_path), pm)
    verdict = engine.classify(make_bundle("x and some b"))
    assert verdict.matched_rule == "not-slow"
    assert verdict.warnings == ()


def test_view_counts_timeouts_and_rule_matches_reports_no_match(tmp_path: Path,
                                                                pm: pluggy.PluginManager) -> None:
    engine = Engine.build(_pack(tmp_path), pm)
    rule = engine.pack.rules[0]
    view = View(make_bundle(CATASTROPHIC))
    assert view.timeouts == 0
    assert rule.when.evaluate(view) is True  # the raw condition is fooled by the `not` ...
    assert view.timeouts == 1
    assert rule.matches(view) is False  # ... the rule is not
    assert view.timeouts == 2


def test_explain_marks_the_rule_as_not_matching(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    engine = Engine.build(_pack(tmp_path), pm)
    verdict, traces = engine.explain(make_bundle(CATASTROPHIC))
    assert verdict.matched_rule == "fallback"
    rows = next(t for t in traces if t.matcher == "tier2-rules")
    not_slow = next(t for t in rows.traces if t.label.startswith("not-slow"))
    assert not not_slow.matched
    assert "timed out" in not_slow.detail


def test_explain_says_which_search_timed_out(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    """The line of the search showed its value only, as for a pattern that is not there."""
    engine = Engine.build(_pack(tmp_path), pm)
    _verdict, traces = engine.explain(make_bundle(CATASTROPHIC))
    rows = next(t for t in traces if t.matcher == "tier2-rules")
    node = next(t for t in rows.traces if t.label.startswith("not-slow"))
    while not node.label.startswith("$.signal.error_text regex"):
        node = node.children[-1]
    assert not node.matched
    assert node.detail.endswith("...; timed out after 0.25s")


def test_classify_cli_warns(tmp_path: Path, bundle_dir) -> None:  # type: ignore[no-untyped-def]
    target = bundle_dir(CATASTROPHIC)
    result = CliRunner().invoke(cli, ["classify", "--rules", str(_pack(tmp_path)), str(target)])
    assert result.exit_code == 0
    assert "fallback" in result.output
    assert "warning: rule 'not-slow': regex '^(a+)+$' on $.signal.error_text timed out" in result.output


def test_the_warning_names_the_rule_whose_regex_timed_out(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    """The warning named the pattern and the selector, so a run's list of warnings did
    not say which rule of the pack to fix."""
    engine = Engine.build(_pack(tmp_path), pm)
    verdict = engine.classify(make_bundle(CATASTROPHIC))
    assert verdict.warnings == (
        "rule 'not-slow': regex '^(a+)+$' on $.signal.error_text timed out after 0.25s; the rule does not match",
        "rule 'not-slow' would match, but a regex timed out while it was evaluated; counted as no match",
    )
    explained, _traces = engine.explain(make_bundle(CATASTROPHIC))
    assert explained.warnings == verdict.warnings


def test_classifying_the_same_bundle_again_gives_the_same_warnings(tmp_path: Path,
                                                                   pm: pluggy.PluginManager) -> None:
    # Views of one bundle share computed signals (View.of), never warnings or timeouts.
    engine = Engine.build(_pack(tmp_path), pm)
    bundle = make_bundle(CATASTROPHIC)
    first, second = engine.classify(bundle), engine.classify(bundle)
    assert second.matched_rule == first.matched_rule == "fallback"
    assert second.warnings == first.warnings
    assert len(first.warnings) == 2


def test_a_rule_example_whose_regex_times_out_fails_whatever_its_outcome(tmp_path: Path,
                                                                         pm: pluggy.PluginManager) -> None:
    """The right outcome by a timeout's luck is not a pass: `loop-rules test` says what timed out."""
    from loop_core.selftest import run_examples

    slow = f"{{pt3: {{failure: x, failure_log_excerpt: '{'a' * 50_000}!'}}}}"
    pack = _pack(tmp_path)
    (pack / "10.yml").write_text(NOT_SLOW.replace("examples: {match: [x]}",
                                                  f"examples: {{match: [x, {slow}], no_match: [{slow}]}}", 1))
    warned = ("no match with warnings: rule 'not-slow': regex '^(a+)+$' on $.signal.error_text timed out after "
              "0.25s; the rule does not match; rule 'not-slow' would match, but a regex timed out while it was "
              "evaluated; counted as no match")
    failed = [(c.name, c.expected, c.got, c.detail) for c in run_examples(Engine.build(pack, pm)) if not c.ok]
    assert failed == [(f"{pack}/10.yml[0] not-slow examples.match[1]", "match", warned, ""),
                      (f"{pack}/10.yml[0] not-slow examples.no_match[0]", "no match", warned, "")]
