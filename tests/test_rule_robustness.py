"""Broken or unusual rule packs: a clear problem naming the place at load time, and at
classification time one rule's failure never silences the rules after it."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pluggy
import pytest
from click.testing import CliRunner

from loop_core import Engine, RuleError
from loop_core.cli import cli
from loop_core.fastregex import GuardedRegex, affix_key
from loop_core.testing import make_bundle

from .test_rules import GOOD, write

ROOT = Path(__file__).resolve().parent.parent


def rule(rule_id: str, when: str, cls: str = "quant-unsupported", examples: str = "{match: [boom]}") -> str:
    return f"- id: {rule_id}\n  class: {cls}\n  description: d\n  when: {when}\n  examples: {examples}\n"


def problems_of(pack: Path, pm: pluggy.PluginManager) -> str:
    with pytest.raises(RuleError) as info:
        Engine.build(pack, pm, collect_errors=True)
    return "\n".join(info.value.problems)


# -- a rule that raises while evaluated ---------------------------------------


def test_a_selector_that_fails_on_a_bundle_skips_its_rule_not_the_rules_after_it(
        tmp_path: Path, pm: pluggy.PluginManager) -> None:
    # `sorted` raises TypeError on a list mixing null and numbers: a bundle's values decide.
    pack = write(tmp_path / "p", "10.yml",
                 rule("sorts", "{select: '$.manifest.mixed.`sorted`', exists: true}", cls="unknown",
                      examples="{match: [{manifest: {mixed: [2, 1]}}]}")
                 + GOOD.format(id="later", cls="kernel-unsupported", regex="boom", example="boom"))
    engine = Engine.build(pack, pm)
    verdict = engine.classify(make_bundle({"manifest": {"mixed": [None, 1]},
                                           "pt3": {"failure_log_excerpt": "boom"}}))
    assert verdict.matched_rule == "later"
    assert any("rule 'sorts' raised TypeError" in w and "counted as no match" in w for w in verdict.warnings)
    assert engine.classify(make_bundle({"manifest": {"mixed": [2, 1]}})).matched_rule == "sorts"


def test_a_failing_selector_under_not_does_not_turn_into_a_match(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "10.yml",
                 rule("negated", "{not: {select: '$.manifest.mixed.`sorted`', exists: true}}", cls="unknown",
                      examples="{match: [{manifest: {other: 1}}]}"))
    engine = Engine.build(pack, pm)
    assert engine.classify(make_bundle({"manifest": {"mixed": ["a", 1]}})).matched_rule is None


def test_explain_shows_the_failing_rule_instead_of_crashing(tmp_path: Path, bundle_dir) -> None:  # type: ignore[no-untyped-def]
    pack = write(tmp_path / "p", "10.yml",
                 rule("sorts", "{select: '$.manifest.mixed.`sorted`', exists: true}", cls="unknown",
                      examples="{match: [{manifest: {mixed: [2, 1]}}]}"))
    target = bundle_dir({"manifest": {"mixed": [None, 1]}})
    result = CliRunner().invoke(cli, ["explain", "--rules", str(pack), str(target)])
    assert result.exit_code == 0, result.output
    assert "rule 'sorts' raised TypeError" in result.output


@pytest.mark.parametrize("pattern", ["(", "(a+)+$"])
def test_a_regex_in_a_jsonpath_filter_is_refused(tmp_path: Path, pm: pluggy.PluginManager, pattern: str) -> None:
    # jsonpath-ng would search it with re, without the pack's time limit.
    pack = write(tmp_path / "p", "10.yml",
                 rule("filt", f"""{{select: '$.manifest[?(@.model =~ "{pattern}")]', exists: true}}""",
                      cls="unknown", examples="{match: [{manifest: {model: x}}]}"))
    found = problems_of(pack, pm)
    assert "p/10.yml[0] filt (line 4): when.select: selector" in found and "=~ regex runs without the regex time limit" in found
    result = CliRunner().invoke(cli, ["check", "--rules", str(pack)])
    assert result.exit_code == 1 and "internal error" not in result.output


def test_a_regex_in_a_jsonpath_sub_step_is_refused(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    # `sub(/re/, x)` runs re.sub without the time limit: (a|aa)+$ on 45 a's never returns.
    pack = write(tmp_path / "p", "10.yml",
                 rule("sub", "{select: '$.signal.error_text.`sub(/(a|aa)+$/, X)`', regex: X}",
                      cls="unknown", examples="{match: [aaa], no_match: [bbb]}"))
    assert "p/10.yml[0] sub (line 4): when.select: selector" in problems_of(pack, pm)
    result = CliRunner().invoke(cli, ["check", "--rules", str(pack)])
    assert result.exit_code == 1 and "runs its regex without the regex time limit" in result.output


def test_other_jsonpath_string_steps_still_load(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "10.yml",
                 rule("split", "{select: '$.manifest.model.`split(/, 0, -1)`', equals: acme}", cls="unknown",
                      examples="{match: [{manifest: {model: acme/m}}]}"))
    engine = Engine.build(pack, pm)
    assert engine.classify(make_bundle({"manifest": {"model": "acme/m"}})).matched_rule == "split"


def test_other_jsonpath_filters_still_load(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "10.yml",
                 rule("filt", """{select: '$.manifest.tags[?(@.name == "x")]', exists: true}""",
                      cls="unknown", examples="{match: [{manifest: {tags: [{name: x}]}}]}"))
    engine = Engine.build(pack, pm)
    assert engine.classify(make_bundle({"manifest": {"tags": [{"name": "x"}]}})).matched_rule == "filt"
    assert engine.classify(make_bundle({"manifest": {"tags": [{"name": "y"}]}})).matched_rule is None


# -- values of the wrong type ---------------------------------------------------


@pytest.mark.parametrize("cls", ["[unknown]", "{a: 1}"])
def test_a_class_that_is_not_text_is_reported(tmp_path: Path, pm: pluggy.PluginManager, cls: str) -> None:
    pack = write(tmp_path / "p", "10.yml", GOOD.format(id="r", cls=cls, regex="boom", example="boom"))
    assert "p/10.yml[0] r (line 2): unknown class" in problems_of(pack, pm)


@pytest.mark.parametrize("table", ["['abcdefabcdef']", "abcdefabcdef", "5"])
def test_an_exact_table_that_is_not_a_mapping_is_reported(tmp_path: Path, pm: pluggy.PluginManager,
                                                          table: str) -> None:
    # Else the maintainer's decisions in it would be dropped without a word.
    pack = write(tmp_path / "p", "10.yml", f"exact: {table}\n")
    assert "p/10.yml: exact must be a mapping of fingerprint -> class" in problems_of(pack, pm)


def test_an_exact_entry_whose_class_is_not_text_is_reported(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "10.yml", "exact:\n  'abcdefabcdef': [unknown]\n")
    assert "exact: abcdefabcdef: unknown class ['unknown']" in problems_of(pack, pm)


@pytest.mark.parametrize("examples, problem", [("{match: boom}", "examples.match must be a list"),
                                               ("{match: [boom], no_match: bang}", "examples.no_match must be a list")])
def test_each_list_of_examples_that_is_not_a_list_is_named(tmp_path: Path, pm: pluggy.PluginManager, examples: str,
                                                           problem: str) -> None:
    pack = write(tmp_path / "p", "10.yml", rule("r", "{select: $.signal.error_text, contains: boom}", examples=examples))
    assert problem in problems_of(pack, pm)


@pytest.mark.parametrize("case", ["{pt3: 5}", "{manifest: null}", "{manifest: {schema: 2}, pt1: null}"])
def test_example_files_must_be_mappings(tmp_path: Path, pm: pluggy.PluginManager, case: str) -> None:
    pack = write(tmp_path / "p", "10.yml", rule("r", "{select: $.signal.error_text, contains: boom}",
                                                examples=f"{{match: [{case}]}}"))
    assert "must be a mapping of fields" in problems_of(pack, pm)
    result = CliRunner().invoke(cli, ["check", "--rules", str(pack)])
    assert result.exit_code == 1 and "internal error" not in result.output


@pytest.mark.parametrize("operand, shown", [("{equals: 2020-01-01}", "equals"),
                                            ("{in: [a, !!set {b, c}]}", "in[1]")])
def test_values_no_bundle_can_hold_are_reported(tmp_path: Path, pm: pluggy.PluginManager,
                                                operand: str, shown: str) -> None:
    op = operand[1:-1]
    pack = write(tmp_path / "p", "10.yml", rule("r", f"{{select: $.manifest.model, {op}}}"))
    assert f"r (line 4): when.{shown}: must be text, a number, true/false or null" in problems_of(pack, pm)


@pytest.mark.parametrize("operand, shown", [("[]", "[]"), ("other", "'other'")])
def test_in_needs_a_non_empty_list(tmp_path: Path, pm: pluggy.PluginManager, operand: str, shown: str) -> None:
    # in: [] holds for no value at all: the rule could never decide a bundle.
    pack = write(tmp_path / "p", "10.yml", rule("r", f"{{select: $.manifest.model, in: {operand}}}"))
    assert f"r (line 4): when.in: must be a non-empty list, got {shown}" in problems_of(pack, pm)


def test_a_quoted_date_still_compares_as_text(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "10.yml", rule("r", "{select: $.manifest.model, equals: '2020-01-01'}",
                                                examples="{match: [{manifest: {model: '2020-01-01'}}]}"))
    assert Engine.build(pack, pm).classify(make_bundle({"manifest": {"model": "2020-01-01"}})).matched_rule == "r"


@pytest.mark.parametrize("text, problem", [
    ("rules: {}\n", "rules must be a list, got dict"),
    ("rules: ''\n", "rules must be a list, got str"),
])
def test_rules_that_are_not_a_list_are_reported(tmp_path: Path, pm: pluggy.PluginManager,
                                                text: str, problem: str) -> None:
    assert f"p/10.yml: {problem}" in problems_of(write(tmp_path / "p", "10.yml", text), pm)


def test_pack_name_and_description_must_be_text(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "pack.yml", "name: [1]\ndescription: {a: 1}\n")
    found = problems_of(pack, pm)
    assert "pack.yml: name must be text, got [1]" in found
    assert "pack.yml: description must be text" in found


def test_pack_yml_names_and_describes_the_pack(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "pack.yml", "name: acme\ndescription: our own rules\n")
    write(pack, "10.yml", GOOD.format(id="r", cls="unknown", regex="boom", example="boom"))
    built = Engine.build(pack, pm).pack
    assert (built.name, built.settings.description) == ("acme", "our own rules")
    assert "\ncheck: pack acme: 1 rules," in CliRunner().invoke(cli, ["check", "--rules", str(pack)]).output


def test_invalid_yaml_names_the_line_and_column(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "10.yml", "- id: a\n  class: unknown\n   description: d\n")
    with pytest.raises(RuleError, match=r"p/10\.yml: invalid YAML: mapping values are not allowed in this context "
                                        r"\(line 3, column 15\)"):
        Engine.build(pack, pm)


def test_a_broken_symlink_in_a_pack_is_reported(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "10.yml", GOOD.format(id="r", cls="unknown", regex="boom", example="boom"))
    (pack / "20-gone.yml").symlink_to(tmp_path / "nowhere.yml")
    assert "p/20-gone.yml: cannot read" in problems_of(pack, pm)


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems refuse names that are not UTF-8")
def test_a_rule_file_whose_name_is_not_utf8_is_named_not_an_internal_error(tmp_path: Path) -> None:
    pack = write(tmp_path / os.fsdecode(b"pack\xfe"), "10.yml",
                 GOOD.format(id="r", cls="unknown", regex="boom", example="boom"))
    write(pack, os.fsdecode(b"20-odd\xff.yml"), GOOD.format(id="s", cls="unknown", regex="bang", example="bang"))
    runner = CliRunner()

    checked = runner.invoke(cli, ["check", "--rules", str(pack)])
    assert checked.exit_code == 1, checked.output
    assert "pack\\xfe/20-odd\\xff.yml: cannot read: the file name is not UTF-8" in checked.output

    (pack / os.fsdecode(b"20-odd\xff.yml")).unlink()
    write(pack, "30-bad.yml", "- id: x\n")
    refused = runner.invoke(cli, ["classify", "--rules", str(pack), str(tmp_path)])
    assert refused.exit_code == 2, refused.output
    assert "pack\\xfe/30-bad.yml" in refused.output  # the folder's byte as \xfe, as check writes it


def test_conditions_nested_too_deep_are_a_problem_not_a_crash(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    when = "{not: " * 40 + "{select: $.signal.error_text, contains: boom}" + "}" * 40
    pack = write(tmp_path / "p", "10.yml", rule("deep", when, examples="{match: [x]}"))
    found = problems_of(pack, pm)
    assert "deep (line 4): when.not.not" in found and "nest more than 32 levels" in found


def test_yaml_nested_past_pythons_stack_is_invalid_yaml(tmp_path: Path) -> None:
    when = "{not: " * 400 + "{select: $.signal.error_text, contains: boom}" + "}" * 400
    pack = write(tmp_path / "p", "10.yml", rule("deep", when, examples="{match: [x]}"))
    result = CliRunner().invoke(cli, ["check", "--rules", str(pack)])
    assert result.exit_code == 1
    assert "p/10.yml: invalid YAML: nested too deeply" in result.output
    assert "internal error" not in result.output


# -- the Tier-1 signature is searched as one regex ------------------------------


def test_signature_patterns_that_only_break_when_joined_are_reported(
        tmp_path: Path, pm: pluggy.PluginManager) -> None:
    # The comment of a verbose pattern swallows the rest of the joined regex.
    pack = write(tmp_path / "p", "pack.yml",
                 "tier1_oom:\n  signature: ['(?x) cuda \\s out \\s of \\s memory  # the allocator', 'hip oom']\n")
    assert "tier1_oom.signature: the patterns are searched as one regex" in problems_of(pack, pm)


def test_signature_back_references_by_number_are_reported(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "pack.yml", "tier1_oom:\n  signature: ['(cuda) oom \\1', '(hip) oom \\1']\n")
    assert "p/pack.yml: tier1_oom.signature[1]: '(hip) oom \\1' refers to a group by number" in problems_of(pack, pm)
    named = write(tmp_path / "q", "pack.yml",
                  "tier1_oom:\n  signature: ['(cuda) oom \\1', '(?P<h>hip) oom (?P=h)']\n")
    write(named, "10.yml", GOOD.format(id="r", cls="unknown", regex="zzz", example="zzz"))
    engine = Engine.build(named, pm)
    assert engine.classify(make_bundle("hip oom hip")).failure_class.value == "genuine-oom"


def test_signature_patterns_that_refer_to_no_earlier_group_load(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    # A later pattern's \1 means its own group when no earlier pattern has one, and an
    # escaped backslash before a digit is a backslash: neither is refused.
    pack = write(tmp_path / "p", "pack.yml", "tier1_oom:\n  signature: ['cuda oom', '(hip) oom \\1', 'vram\\\\1']\n")
    write(pack, "10.yml", GOOD.format(id="r", cls="unknown", regex="zzz", example="zzz"))
    engine = Engine.build(pack, pm)
    assert engine.classify(make_bundle("hip oom hip")).failure_class.value == "genuine-oom"
    assert engine.classify(make_bundle("out of vram\\1")).failure_class.value == "genuine-oom"
    assert engine.classify(make_bundle("hip oom cuda")).failure_class.value == "unknown"


@pytest.mark.parametrize("key", ["signature", "unless"])
def test_an_empty_pattern_in_the_tier1_lists_is_refused(tmp_path: Path, pm: pluggy.PluginManager, key: str) -> None:
    # An empty pattern matches every text: Tier-1 would call every bundle an OOM, or never.
    pack = write(tmp_path / "p", "pack.yml", f"tier1_oom:\n  {key}: ['cuda oom', '']\n")
    assert f"p/pack.yml: tier1_oom.{key}: must be a list of regular expressions" in problems_of(pack, pm)


# -- the literal prefilter and the regex module's own syntax -----------------------


@pytest.mark.parametrize("pattern, text", [
    ("no[[:space:]]kernel image", "no kernel image"),
    ("x[[:digit:]]yz", "x5yz"),
    ("err[[:^alpha:]]code", "err-code"),
    ("boom [[:digit:]|x]", "INFO x\nboom 7\n"),  # a | inside the set, after the class's ]
])
def test_posix_classes_are_never_prefiltered_away(pattern: str, text: str) -> None:
    import regex

    assert GuardedRegex(regex.compile(pattern)).search(text) is not None
    assert regex.search(pattern, text) is not None


@pytest.mark.parametrize("cache", ["on", "off"])
def test_a_bar_inside_a_set_after_a_posix_class_is_not_an_alternative(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: str) -> None:
    """The set was cut at that bar: with the pack cache the pack was refused
    ("unterminated character set"), without it the rule never matched."""
    monkeypatch.setenv("LOOP_RULES_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LOOP_RULES_CACHE", cache)
    pack = tmp_path / "p"
    shutil.copytree(ROOT / "rules.d", pack)
    (pack / "05-posix.yml").write_text(rule("boom-digit", "{select: $.signal.all_text, regex: "
                                            "'boom [[:digit:]|x]'}", examples="{match: ['boom 7']}"))
    verdict = Engine.build(pack).classify(make_bundle("INFO x\nboom 7\n"))
    assert (verdict.matched_rule, verdict.warnings) == ("boom-digit", ())


def test_a_posix_class_rule_decides_from_check_to_classify(tmp_path: Path) -> None:
    pack = tmp_path / "p"
    shutil.copytree(ROOT / "rules.d", pack)
    (pack / "05-posix.yml").write_text(rule("posix-kernel", "{select: $.signal.all_text, regex: "
                                            "'no[[:space:]]kernel image'}",
                                            examples="{match: ['no kernel image is available']}"))
    result = CliRunner().invoke(cli, ["check", "--rules", str(pack)])
    assert result.exit_code == 0, result.output  # its example matches, and it is not unreachable
    assert "unreachable" not in result.output and "Possible nested set" not in result.output
    engine = Engine.build(pack)
    assert engine.classify(make_bundle("no kernel image is available")).matched_rule == "posix-kernel"


@pytest.mark.parametrize("literal", [" foo\tbarbazqux", " ab\u00a0cdefghijk", "abcdefg\thijk "])
def test_affix_keys_never_span_other_whitespace(literal: str) -> None:
    assert affix_key(literal) is None


def test_affix_keys_of_plain_literals() -> None:
    assert affix_key(" triton_0042") == "^triton_0"
    assert affix_key("cudnn_status_x ") == "$status_x"


def test_many_word_start_rules_match_with_and_without_the_scanner(
        tmp_path: Path, pm: pluggy.PluginManager, lookup: str) -> None:
    # Without the scanner, 64 or more such rules take the affix index of the rule walk
    # (prefilter.RuleIndex); the tab falls within the first AFFIX characters of the word.
    text = "".join(rule(f"r{i}", f'{{select: $.signal.all_text, contains: " f{i:03d}\\tbarbazqux"}}',
                        examples=f'{{match: ["x f{i:03d}\\tbarbazqux"]}}') for i in range(70))
    pack = write(tmp_path / "p", "10.yml", text)
    engine = Engine.build(pack, pm)
    verdict = engine.classify(make_bundle("ERROR engine said: f069\tbarbazqux happened"))
    assert verdict.matched_rule == "r69"


def test_every_bad_item_of_a_condition_is_reported(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    when = ("{any: [{select: $.signal.error_text, regex: '(a'}, {select: $.signal.error_text, contains: ok},"
            " {select: $.signal.nope, contains: x}, [{select: $.signal.error_text, regex: '[b'}], {no_such_kind: 1}]}")
    pack = write(tmp_path / "p", "10.yml", rule("many", when))
    with pytest.raises(RuleError) as info:
        Engine.build(pack, pm, collect_errors=True)
    problems = info.value.problems
    assert len(problems) == 4, problems
    assert "many (line 4): when.any[0]: invalid regex '(a'" in problems[0]
    assert "many (line 4): when.any[2]" in problems[1] and "unknown signal 'nope'" in problems[1]
    assert "many (line 4): when.any[3][0]: invalid regex '[b'" in problems[2]
    assert "many (line 4): when.any[4]: unknown condition 'no_such_kind' (condition kinds: " in problems[3]
    with pytest.raises(RuleError, match=r"when.any\[0\]: invalid regex"):  # without collect: the first
        Engine.build(pack, pm)


def test_every_problem_of_one_select_is_reported(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "10.yml",
                 rule("one", "{select: $.signal.nope, regex: '(foo', bogus: 1, ignore_case: maybe}"))
    found = problems_of(pack, pm).splitlines()
    assert len(found) == 4, found
    assert [line.split("one (line 4): ", 1)[1].split(":")[0] for line in found] == [
        "when.select", "when.ignore_case", "when", "when"]
    assert "unknown signal 'nope'" in found[0] and "unknown keys ['bogus']" in found[2]
    assert "invalid regex '(foo'" in found[3]


# -- what check must catch before classify meets it -------------------------------


def test_check_probes_the_tier1_signature_and_names_the_pattern(tmp_path: Path) -> None:
    # One backtracking entry would time the whole signature out: the OOM fast path never decides.
    pack = write(tmp_path / "p", "pack.yml",
                 "tier1_oom:\n  signature:\n    - 'CUDA out of memory'\n    - 'memory pressure: (a|aa)+$'\n")
    write(pack, "10.yml", GOOD.format(id="r", cls="unknown", regex="boom", example="boom"))
    result = CliRunner().invoke(cli, ["check", "--rules", str(pack)])
    assert result.exit_code == 1
    assert "p/pack.yml: tier1_oom.signature[1]: regex 'memory pressure: (a|aa)+$' exceeded" in result.output


def test_check_warns_of_nested_quantifiers_in_the_tier1_veto(tmp_path: Path) -> None:
    pack = write(tmp_path / "p", "pack.yml", "tier1_oom:\n  unless:\n    - 'host (r+am)+ killed'\n")
    write(pack, "10.yml", GOOD.format(id="r", cls="unknown", regex="boom", example="boom"))
    result = CliRunner().invoke(cli, ["check", "--rules", str(pack)])
    assert any(line.startswith("warning: ") and line.endswith(
        "p/pack.yml: tier1_oom.unless[0]: regex 'host (r+am)+ killed' nests quantifiers; it may backtrack "
        "catastrophically") for line in result.output.splitlines()), result.output


@pytest.mark.parametrize(("pattern", "why"), [
    ("(" * 400 + "NCCL" + ")" * 400, ["groups nest too deeply"]),
    # The regex releases Python 3.10 still gets refuse it with a KeyError of their own.
    ("(?V0)(?V1)NCCL", ["VERSION0 and VERSION1 flags are mutually incompatible",
                        "cannot compile it (KeyError: regex.V0|regex.V1)"]),
])
def test_a_regex_the_regex_module_refuses_oddly_is_a_problem_naming_the_rule(
        tmp_path: Path, pm: pluggy.PluginManager, pattern: str, why: list[str]) -> None:
    pack = write(tmp_path / "p", "10.yml", rule("odd", f"{{select: $.signal.error_text, regex: '{pattern}'}}")
                 + rule("dup", "{select: $.signal.error_text, regex: '('}"))
    found = problems_of(pack, pm)
    assert "p/10.yml[0] odd (line 4): when: invalid regex" in found and any(reason in found for reason in why), found
    assert "p/10.yml[1] dup (line 9): when: invalid regex '('" in found  # every problem at once


def test_conflicting_flags_in_the_tier1_signature_are_a_problem_not_a_crash(
        tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "pack.yml", "tier1_oom:\n  signature: ['(?a)(?u)oom']\n")
    write(pack, "10.yml", GOOD.format(id="r", cls="unknown", regex="boom", example="boom"))
    assert "p/pack.yml: tier1_oom.signature[0]: invalid regex '(?a)(?u)oom'" in problems_of(pack, pm)
    result = CliRunner().invoke(cli, ["classify", "--rules", str(pack), str(ROOT / "examples" / "pull-captures")])
    assert result.exit_code == 2 and "internal error" not in result.output


def test_an_empty_tier1_veto_list_is_no_veto(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "pack.yml", "tier1_oom:\n  unless: []\n")
    write(pack, "10.yml", GOOD.format(id="r", cls="unknown", regex="boom", example="boom"))
    assert Engine.build(pack, pm).pack.settings.tier1_oom_unless == ()


@pytest.mark.parametrize("text", ["tier1_oom: []\n", "tier1_oom: false\n", "tier1_oom: 0\n"])
def test_tier1_settings_that_are_not_a_mapping_are_refused(tmp_path: Path, pm: pluggy.PluginManager,
                                                            text: str) -> None:
    pack = write(tmp_path / "p", "pack.yml", text)
    write(pack, "10.yml", GOOD.format(id="r", cls="unknown", regex="boom", example="boom"))
    assert "p/pack.yml: tier1_oom must be a mapping" in problems_of(pack, pm)


def test_an_empty_tier1_signature_is_refused_not_read_as_the_default(tmp_path: Path,
                                                                     pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "pack.yml", "tier1_oom:\n  signature: []\n")
    write(pack, "10.yml", GOOD.format(id="r", cls="unknown", regex="boom", example="boom"))
    # The message said "leave the key out for none", where leaving it out keeps the reference's.
    assert ("tier1_oom.signature: must be a non-empty list of regular expressions (leave the key out "
            "to keep the reference's signature)") in problems_of(pack, pm)
    write(pack, "pack.yml", "tier1_oom:\n  surface: all_text\n")
    verdict = Engine.build(pack, pm).classify(make_bundle("torch.cuda.OutOfMemoryError: CUDA out of memory"))
    assert (verdict.failure_class.value, verdict.matched_rule) == ("genuine-oom", "tier1-oom-fastpath")


def test_an_id_with_a_trailing_newline_is_not_a_valid_id(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "10.yml", GOOD.format(id="nccl", cls="unknown", regex="NCCL", example="NCCL")
                 + GOOD.format(id='"nccl\\n"', cls="unknown", regex="NCCL", example="NCCL"))
    found = problems_of(pack, pm)
    assert "10.yml[1] (line 6): id must be a letter or digit" in found and "got 'nccl\\n'" in found
    assert "nccl\n" not in found  # the message stays on one line


def test_an_exact_key_with_a_trailing_newline_is_not_a_fingerprint(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    # It would never match: the maintainer's decision would be silently dead.
    pack = write(tmp_path / "p", "00-exact.yml", 'exact:\n  "abcdefabcdef\\n": unknown\n')
    assert "abcdefabcdef\\n" in problems_of(pack, pm)


def test_a_duplicate_id_does_not_hide_the_rules_other_problems(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "10.yml", GOOD.format(id="dup", cls="unknown", regex="boom", example="boom")
                 + rule("dup", "{select: $.signal.error_text, regex: '('}"))
    found = problems_of(pack, pm)
    assert "p/10.yml[1] dup (line 6): duplicate id (first defined at " in found
    assert "p/10.yml[1] dup (line 9): when: invalid regex '('" in found


def test_hidden_files_are_not_part_of_the_pack(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "10-doc.yml", GOOD.format(id="r", cls="unknown", regex="boom", example="boom"))
    (pack / ".#10-doc.yml").symlink_to("user@host.12345:1700000000")  # an editor's lock while a buffer is edited
    (pack / "._10-doc.yml").write_bytes(b"\x00\x05\x16\x07\xff")  # a Mac's resource fork, copied along
    engine = Engine.build(pack, pm)
    assert [r.id for r in engine.pack.rules] == ["r"] and engine.pack.files == ("10-doc.yml",)


def test_a_directory_without_rule_files_is_not_a_pack(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "README.md").write_text("# not a pack\n")
    result = CliRunner().invoke(cli, ["check", "--rules", str(tmp_path / "docs")])
    assert result.exit_code == 1 and "no rule files (*.yml or *.yaml) in this directory" in result.output


def test_the_current_directory_as_a_pack_is_named_after_the_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pack = write(tmp_path / "mypack", "10.yml", GOOD.format(id="r", cls="unknown", regex="boom", example="boom"))
    monkeypatch.chdir(pack)
    result = CliRunner().invoke(cli, ["check", "--rules", "."])
    assert result.exit_code == 0 and "check: pack mypack: 1 rules" in result.output


@pytest.mark.parametrize(("when", "message"), [
    ("{gate_abort_reason: [disk_short, null]}", "abort tokens are non-empty text, got None"),
    ("{gate_abort_reason: ''}", "abort tokens are non-empty text, got ''"),
    ("{gate_abort_reason: []}", "needs an abort token or a non-empty list of tokens"),  # would match no bundle
    ("{structural: [pt3_timeout_but_pt4_green]}", "unknown predicate ['pt3_timeout_but_pt4_green']"),
    ("{structural: pt3_timeout}",
     "unknown predicate 'pt3_timeout' (predicates: pt3_timeout_but_pt4_green, results_detail_http_404)"),
])
def test_built_in_condition_kinds_refuse_odd_arguments_clearly(tmp_path: Path, pm: pluggy.PluginManager,
                                                                when: str, message: str) -> None:
    pack = write(tmp_path / "p", "10.yml", rule("k", when, cls="unknown"))
    assert message in problems_of(pack, pm)


@pytest.mark.parametrize("reason", [["NO_ROW"], {"token": "NO_ROW"}, 5, ""])
def test_an_abort_reason_that_is_not_a_token_matches_none_without_a_warning(
        tmp_path: Path, pm: pluggy.PluginManager, reason: object) -> None:
    pack = write(tmp_path / "p", "10.yml", rule("k", "{gate_abort_reason: [NO_ROW, '5']}", cls="unknown"))
    verdict = Engine.build(pack, pm).classify(make_bundle({"manifest": {"schema": 2}, "pt1": {"abort_reason": reason}}))
    assert verdict.matched_rule != "k" and not verdict.warnings


def test_a_pattern_is_shown_as_the_rule_file_writes_it(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    """Messages showed patterns in Python's quoting, every backslash doubled
    ('\\\\bkilled ('), which is not what the rule file holds and cannot be searched for in it."""
    pack = tmp_path / "p"
    pack.mkdir()
    rule = ("- id: r\n  class: unknown\n  description: d\n"
            "  when: {{any: [{{select: $.signal.error_text, regex: {}}}, {{select: $.signal.error_text, regex: {}}}]}}\n"
            "  examples: {{match: [killed]}}\n")
    (pack / "10.yml").write_text(rule.format("'\\bkilled (it''s'", "x"))
    assert "when.any[0]: invalid regex '\\bkilled (it''s': missing )" in problems_of(pack, pm)
    (pack / "10.yml").write_text(rule.format("'\\bkilled\\b'", '"killed\\n"'))
    traces = Engine.build(pack, pm).explain(make_bundle("nothing"))[1]
    [rules] = [t for t in traces if t.matcher == "tier2-rules"]
    labels = [child.label for child in rules.traces[0].children[0].children]
    assert labels == ["$.signal.error_text regex '\\bkilled\\b'",
                      "$.signal.error_text regex 'killed\\n'"]  # a newline cannot be shown raw: Python's quoting


def test_a_bad_mode_or_description_names_the_line_of_that_key(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    # The message leads to the key at fault, not to the rule's first line.
    pack = write(tmp_path / "p", "10.yml", "- id: r\n  class: unknown\n  description: '  '\n  mode: trial\n"
                                           "  when: {select: $.signal.all_text, contains: boom}\n"
                                           "  examples: {match: [boom]}\n")
    found = problems_of(pack, pm)
    assert "p/10.yml[0] r (line 3): description must be non-empty text" in found
    assert "p/10.yml[0] r (line 4): mode must be active or shadow, got 'trial'" in found


def test_a_complex_mapping_key_is_invalid_yaml_with_its_place(tmp_path: Path) -> None:
    # A key that is a list has no text a rule could mean: refused where it is, not a crash.
    pack = write(tmp_path / "p", "10.yml", "- id: r\n  class: unknown\n  description: d\n"
                                           "  when: {select: $.signal.all_text, contains: boom}\n"
                                           "  examples:\n    match: [boom]\n    ? [no, match]\n    : [bang]\n")
    result = CliRunner().invoke(cli, ["check", "--rules", str(pack)])
    assert result.exit_code == 1
    assert result.output == (f"error: {pack}/10.yml: invalid YAML: mapping keys must be plain text (line 7, column 7)\n"
                             "check: 1 problem(s)\n")


@pytest.mark.parametrize(("when", "message"), [
    # an empty list of conditions would hold for every bundle
    ("[]", "when: needs a non-empty list of conditions"),
    ("{all: []}", "when.all: needs a non-empty list of conditions"),
    ("{any: []}", "when.any: needs a non-empty list of conditions"),
    ("{select: signal.error_text, contains: boom}",
     "when.select: selector must be a JSONPath string starting with '$', got 'signal.error_text'"),
    ("{select: '$.signal[?(', exists: true}", "when.select: invalid JSONPath '$.signal[?('"),
    ("{select: $.signal.all_text, contains: boom, ignore_case: 1}", "when.ignore_case: must be true or false, got 1"),
    ("{select: $.manifest.model, exists: 1}", "when.exists: must be true or false, got 1"),
    ("{select: $.manifest.model, truthy: 0}", "when.truthy: must be true or false, got 0"),
    ("{select: $.manifest.model, equals: [acme/x]}", "when.equals: must be text, a number, true/false or null"),
    ("{select: $.signal.all_text, contains: {any: [boom], all: [bang]}}",
     "when.contains: a mapping must be {any: [...]} or {all: [...]}"),
    ("{gate_abort_reason: []}", "when.gate_abort_reason: needs an abort token"),
])
def test_a_condition_a_rule_cannot_mean_is_refused_with_its_place(tmp_path: Path, pm: pluggy.PluginManager,
                                                                   when: str, message: str) -> None:
    pack = write(tmp_path / "p", "10.yml", rule("r", when, cls="unknown"))
    assert f"p/10.yml[0] r (line 4): {message}" in problems_of(pack, pm)


@pytest.mark.parametrize("text", ["", "# settings to come\n"])
def test_an_empty_pack_yml_keeps_every_default(tmp_path: Path, pm: pluggy.PluginManager, text: str) -> None:
    # Every key of pack.yml is optional, so a file with none of them is no problem.
    pack = write(tmp_path / "p", "pack.yml", text)
    write(pack, "10.yml", GOOD.format(id="r", cls="unknown", regex="boom", example="boom"))
    settings = Engine.build(pack, pm).pack.settings
    assert (settings.regex_timeout, settings.tier1_oom_signature, settings.tier1_oom_surface) == (0.25, (), "reference")


@pytest.mark.parametrize(("rule_id", "valid"), [("a" * 128, True), ("a" * 129, False), ("_private", False),
                                                 ("9.x_y:z-1", True)])
def test_an_id_is_a_letter_or_digit_then_up_to_127_more(tmp_path: Path, pm: pluggy.PluginManager,
                                                        rule_id: str, valid: bool) -> None:
    pack = write(tmp_path / "p", "10.yml", GOOD.format(id=rule_id, cls="unknown", regex="boom", example="boom"))
    if valid:
        assert [r.id for r in Engine.build(pack, pm).pack.rules] == [rule_id]
    else:
        assert f"p/10.yml[0] {rule_id} (line 1): id must be a letter or digit, then up to 127" in problems_of(pack, pm)
