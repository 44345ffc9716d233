"""Loading rule packs: validation with places, YAML restrictions, ordering, regex timeouts."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pluggy
import pytest
from click.testing import CliRunner

from loop_core import Engine, RuleError
from loop_core.cli import cli
from loop_core.testing import make_bundle

GOOD = """\
- id: {id}
  class: {cls}
  description: test rule
  when: {{select: $.signal.error_text, regex: '{regex}'}}
  examples: {{match: ['{example}']}}
"""


def write(pack: Path, name: str, text: str) -> Path:
    pack.mkdir(exist_ok=True)
    (pack / name).write_text(text)
    return pack


def test_files_load_in_sorted_name_order(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = tmp_path / "p"
    write(pack, "20-b.yml", GOOD.format(id="b", cls="kernel-unsupported", regex="boom", example="boom"))
    write(pack, "10-a.yml", GOOD.format(id="a", cls="quant-unsupported", regex="boom", example="boom"))
    engine = Engine.build(pack, pm)
    assert [r.id for r in engine.pack.rules] == ["a", "b"]
    assert engine.classify(make_bundle("boom")).matched_rule == "a"  # first match wins


def test_every_problem_is_reported_at_once_with_its_place(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = tmp_path / "rules"
    write(pack, "10-bad.yml", """\
- id: bad-regex
  class: quant-unsupported
  description: d
  when: {select: $.signal.error_text, regex: '('}
  examples: {match: [x]}
- id: bad-class
  class: not-a-class
  description: d
  when: {select: $.signal.error_text, contains: x}
  examples: {match: [x]}
- id: bad-signal
  class: unknown
  description: d
  when: {select: $.signal.eror_text, contains: x}
  examples: {match: [x]}
- id: no-examples
  class: unknown
  description: d
  when: {select: $.signal.error_text, contains: x}
  examples: {no_match: [y]}
- id: extra-key
  class: unknown
  description: d
  severity: high
  when: {select: $.signal.error_text, contains: x}
  examples: {match: [x]}
""")
    write(pack, "20-dup.yml", GOOD.format(id="bad-regex", cls="unknown", regex="x", example="x"))
    with pytest.raises(RuleError) as info:
        Engine.build(pack, pm, collect_errors=True)
    problems = info.value.problems
    assert len(problems) == 6
    assert "rules/10-bad.yml[0] bad-regex (line 4): when: invalid regex '('" in problems[0]
    assert any("rules/10-bad.yml[1] bad-class (line 7): unknown class 'not-a-class'" in p for p in problems)
    assert any("rules/10-bad.yml[2] bad-signal" in p and "unknown signal 'eror_text'" in p for p in problems)
    assert any("[3] no-examples (line 20): needs at least one examples.match" in p for p in problems)
    assert any("[4] extra-key (line 21): unknown keys ['severity']" in p for p in problems)
    assert any("rules/20-dup.yml[0] bad-regex (line 1): duplicate id (first defined at " in p
               and "rules/10-bad.yml[0], line 1)" in p for p in problems)
    # Each names the line it is about: where the rule starts, or the part of it at fault.
    assert any("rules/10-bad.yml[2] bad-signal (line 14): when.select: unknown signal" in p for p in problems)


def test_a_rule_with_a_missing_key_still_has_its_other_keys_checked(tmp_path: Path,
                                                                    pm: pluggy.PluginManager) -> None:
    """A missing key used to end the rule's checks: the misspelt select key and the bad
    regex only showed after the first fix, and a misspelt examples key went unnamed."""
    pack = write(tmp_path / "p", "10.yml", """\
- id: first-try
  clas: unknown
  description: d
  when: {selct: $.signal.all_text, regex: '('}
  examples: {match: [x], nomatch: [y]}
- id: -dash
  class: unknown
  description: d
  when: {select: $.signal.all_text, contains: x}
  examples: {match: [x, {pt6: {a: 1}, manifst: {b: 2}}]}
""")
    with pytest.raises(RuleError) as info:
        Engine.build(pack, pm, collect_errors=True)
    problems = "\n".join(info.value.problems)
    for expected in ("[0] first-try (line 1): unknown keys ['clas']", "[0] first-try (line 1): missing class",
                     "[0] first-try (line 4): when", "selct",
                     "[0] first-try (line 5): examples: unknown keys ['nomatch'] (expected match, no_match)",
                     "[1] -dash (line 6): id must be a letter or digit, then up to 127",
                     "[1] -dash (line 10): examples.match[1]: unknown files ['manifst', 'pt6']"):
        assert expected in problems, (expected, problems)


def test_first_problem_raises_without_collect(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "10.yml", GOOD.format(id="x", cls="nope", regex="x", example="x"))
    with pytest.raises(RuleError, match=r"p/10\.yml\[0\] x \(line 2\): unknown class 'nope'"):
        Engine.build(pack, pm)


def test_alias_bombs_are_rejected(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b, *b]\n"
    pack = write(tmp_path / "p", "10.yml", bomb)
    started = time.monotonic()
    with pytest.raises(RuleError, match=r"p/10\.yml: invalid YAML: anchors are not allowed"):
        Engine.build(pack, pm)
    assert time.monotonic() - started < 1.0


def test_duplicate_yaml_keys_are_rejected(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "10.yml", "- id: a\n  id: b\n")
    with pytest.raises(RuleError, match="duplicate key 'id'"):
        Engine.build(pack, pm)


def test_exact_keys_are_always_text(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    # Unquoted, PyYAML would read 012345670123 as an octal int (§8.2.10).
    pack = write(tmp_path / "p", "10.yml", "rules:\nexact:\n  012345670123: genuine-oom\n  123456789012: unknown\n")
    engine = Engine.build(pack, pm)  # a rules key with no value is no rules
    assert dict(engine.pack.exact) == {"012345670123": "genuine-oom", "123456789012": "unknown"}


def test_exact_entries_are_validated(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "10.yml", "exact:\n  XYZ: genuine-oom\n  '0123456789ab': bogus\n")
    with pytest.raises(RuleError) as info:
        Engine.build(pack, pm, collect_errors=True)
    assert len(info.value.problems) == 2


def test_unknown_pack_name(pm: pluggy.PluginManager) -> None:
    with pytest.raises(RuleError, match=r"--rules 'nope': neither a registered pack \(default, reference\)"):
        Engine.build("nope", pm)


CATASTROPHIC = """\
- id: slow
  class: unknown
  description: nested quantifiers backtrack exponentially
  when: {select: $.signal.error_text, regex: '^(a+)+$'}
  examples: {match: [aaaa]}
"""


def test_catastrophic_regex_is_bounded_and_counts_as_no_match(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "10.yml", CATASTROPHIC)
    engine = Engine.build(pack, pm)
    started = time.monotonic()
    verdict = engine.classify(make_bundle("a" * 50_000 + "!"))
    elapsed = time.monotonic() - started
    # The default timeout is 0.25 s; unbounded, this match would backtrack for longer than the
    # universe has existed. The margin is wide so a loaded machine cannot fail the test.
    assert elapsed < 5.0
    assert verdict.matched_rule is None
    assert any("timed out" in w for w in verdict.warnings)


@pytest.mark.parametrize("when, example", [
    ("{select: $.signal.error_text, regex: '^(a+)+$'}", "aaaa"),
    ("{not: {any: [{select: $.signal.error_text, regex: '^(a+)+$'}]}}", "x"),  # probed under not too
])
def test_check_reports_a_catastrophic_regex(tmp_path: Path, when: str, example: str) -> None:
    pack = write(tmp_path / "p", "10.yml", CATASTROPHIC.replace("{select: $.signal.error_text, regex: '^(a+)+$'}",
                                                                when).replace("[aaaa]", f"[{example}]"))
    result = CliRunner().invoke(cli, ["check", "--rules", str(pack)])
    assert result.exit_code == 1
    assert "p/10.yml[0] slow (line 4): regex '^(a+)+$' exceeded its 0.25s timeout" in result.output
    assert "nests quantifiers" in result.output


def test_check_reports_a_regex_that_times_out_on_several_probes_once(tmp_path: Path) -> None:
    pack = write(tmp_path / "p", "10.yml", CATASTROPHIC.replace("'^(a+)+$'", "'^(\\w+)+$'"))
    result = CliRunner().invoke(cli, ["check", "--rules", str(pack)])
    assert result.exit_code == 1
    assert result.output.count("exceeded its 0.25s timeout") == 1, result.output


@pytest.mark.parametrize("command", ["classify", "explain"])
def test_classify_and_explain_report_a_regex_timeout(tmp_path: Path, bundle_dir, command: str) -> None:  # type: ignore[no-untyped-def]
    pack = write(tmp_path / "p", "10.yml", CATASTROPHIC)
    target = bundle_dir("a" * 50_000 + "!")
    result = CliRunner().invoke(cli, [command, "--rules", str(pack), str(target)])
    assert result.exit_code == 0
    assert "warning: rule 'slow': regex '^(a+)+$' on $.signal.error_text timed out" in result.output


def test_pack_settings_are_validated(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "pack.yml", "regex_timeout: -1\ntier1_oom: {surface: everywhere, signature: ['(']}\n")
    with pytest.raises(RuleError) as info:
        Engine.build(pack, pm, collect_errors=True)
    joined = "\n".join(info.value.problems)
    assert "regex_timeout must be a number" in joined
    assert "tier1_oom.surface must be reference or all_text" in joined
    assert "invalid regex '('" in joined


@pytest.mark.parametrize("written, seconds", [("10", 10.0), ("'0.5'", 0.5), ("0.01", 0.01)])
def test_a_regex_timeout_up_to_ten_seconds_is_taken(tmp_path: Path, pm: pluggy.PluginManager, written: str,
                                                    seconds: float) -> None:
    pack = write(tmp_path / "p", "pack.yml", f"regex_timeout: {written}\n")
    write(pack, "10.yml", GOOD.format(id="r", cls="unknown", regex="boom", example="boom"))
    assert Engine.build(pack, pm).pack.settings.regex_timeout == seconds


@pytest.mark.parametrize("written", ["0", "10.5", "true", "fast"])
def test_a_regex_timeout_outside_ten_seconds_is_refused(tmp_path: Path, pm: pluggy.PluginManager,
                                                        written: str) -> None:
    pack = write(tmp_path / "p", "pack.yml", f"regex_timeout: {written}\n")
    with pytest.raises(RuleError, match=r"p/pack\.yml: regex_timeout must be a number of seconds in \(0, 10\]"):
        Engine.build(pack, pm)


def test_pack_settings_problems_name_the_pattern_and_the_keys_taken(tmp_path: Path) -> None:
    """A bad pattern was "tier1_oom.signature: invalid regex", with no place in the list,
    and a misspelt key listed no keys to choose from."""
    pack = write(tmp_path / "p", "pack.yml", "tier1_oom: {signature: ['cuda oom', '(hip'], unles: []}\n")
    write(pack, "10.yml", "- {id: r, class: unknown, description: d, when: {select: $.signal.all_text, "
                          "regex: 'boom'}, examples: {match: [boom], no_match: [bang]}}\n")
    result = CliRunner().invoke(cli, ["check", "--rules", str(pack)])
    assert result.exit_code == 1
    assert result.output == (
        f"error: {pack}/pack.yml: tier1_oom: unknown keys ['unles'] (expected signature, surface, unless)\n"
        f"error: {pack}/pack.yml: tier1_oom.signature[1]: invalid regex '(hip': missing ) at position 4\n"
        "check: 2 problem(s)\n")


def test_check_warns_of_a_regex_escape_yaml_read_in_double_quotes(tmp_path: Path) -> None:
    """In double quotes YAML reads "\\b" as a backspace: the rule's pattern then needs one in
    the log, and a Tier-1 signature, which has no examples, silently never matches."""
    pack = write(tmp_path / "p", "10.yml", '- id: nccl\n  class: unknown\n  description: d\n'
                 '  when: {select: $.signal.final_error, regex: "(?i)\\bnccl error"}\n'
                 '  examples: {match: ["\\bNCCL error"], no_match: [boom]}\n')
    write(pack, "pack.yml", 'tier1_oom:\n  signature: [\'\\bcuda oom\', "\\bhip oom"]\n')
    result = CliRunner().invoke(cli, ["check", "--rules", str(pack)])
    assert result.exit_code == 0
    advice = "which YAML makes of \\b in double quotes; write the pattern in single quotes"
    assert result.output == (
        f"warning: {pack}/10.yml[0] nccl (line 4): regex '(?i)\\x08nccl error' holds the control character '\\x08', "
        f"{advice}\n"
        f"warning: {pack}/pack.yml: tier1_oom.signature[1]: regex '\\x08hip oom' holds the control character "
        f"'\\x08', {advice}\n"
        "check: pack p: 1 rules, 0 exact fingerprints, 2 files; 0 problem(s), 2 warning(s)\n")


@pytest.mark.parametrize("file_name", ["pack.yaml", "Pack.yml"])
def test_settings_in_pack_yaml_say_where_settings_go(tmp_path: Path, pm: pluggy.PluginManager,
                                                    file_name: str) -> None:
    """A pack.yaml was read as a rule file, and its error only listed the keys a rule file takes."""
    pack = write(tmp_path / "p", file_name, "name: acme\nregex_timeout: 0.5\n")
    write(pack, "10.yml", GOOD.format(id="r", cls="unknown", regex="boom", example="boom"))
    with pytest.raises(RuleError, match=re.escape(
            f"p/{file_name}: unknown top-level keys ['name', 'regex_timeout'] (expected rules, exact); pack settings "
            "are read from pack.yml only: rename the file")):
        Engine.build(pack, pm)


def test_both_shipped_packs_check_clean(pm: pluggy.PluginManager) -> None:
    for name in ("default", "reference"):
        result = CliRunner().invoke(cli, ["check", "--rules", name])
        assert result.exit_code == 0, result.output
        assert "0 problem(s)" in result.output


def test_check_probes_a_catastrophic_regex_behind_its_literal(tmp_path: Path) -> None:
    pack = write(tmp_path / "p", "10.yml", CATASTROPHIC.replace("'^(a+)+$'", "'boom (a+)+$'")
                 .replace("[aaaa]", "['boom aaaa']"))
    result = CliRunner().invoke(cli, ["check", "--rules", str(pack)])
    assert result.exit_code == 1, result.output
    assert "p/10.yml[0] slow (line 4): regex 'boom (a+)+$' exceeded its 0.25s timeout" in result.output


@pytest.mark.parametrize("selector, problem", [
    ("$.signal.http_status[*]", "unknown signal 'http_status'"),
    ("$.signals.*", "must start with one of $.manifest"),
    ("$['signal']['nope'][*]", "unknown signal 'nope'"),
])
def test_a_misspelt_name_at_the_start_of_a_general_path_is_named(tmp_path: Path, pm: pluggy.PluginManager,
                                                                 selector: str, problem: str) -> None:
    """Only simple paths had their names checked: these loaded and selected nothing, ever."""
    pack = write(tmp_path / "p", "10.yml", "- id: r\n  class: unknown\n  description: d\n"
                 f"  when: {{select: \"{selector}\", exists: true}}\n  examples: {{match: [x]}}\n")
    with pytest.raises(RuleError, match=re.escape(problem)):
        Engine.build(pack, pm)


@pytest.mark.parametrize("selector", ["$.manifests.model", "$.pt6", "$['Manifest'].model"])
def test_a_simple_path_that_starts_nowhere_in_a_bundle_is_refused(tmp_path: Path, pm: pluggy.PluginManager,
                                                                  selector: str) -> None:
    """Such a path would select nothing, ever: the rule would never decide a bundle."""
    pack = write(tmp_path / "p", "10.yml", "- id: r\n  class: unknown\n  description: d\n"
                 f"  when: {{select: \"{selector}\", exists: true}}\n  examples: {{match: [x]}}\n")
    with pytest.raises(RuleError, match=re.escape(f"selector {selector!r} must start with one of $.manifest, $.pt1")):
        Engine.build(pack, pm)


SIGNAL_LIST = ("(signals: error_source, error_text, error_substring, error_text_lower, all_text, final_error, "
               "boot_ok, download_ok, red_caps, green_caps, unsmoked_caps, first_red_cap, http_statuses, "
               "abort_reason, is_gate_only, schema, outcome, quant_label, arch_family, engine, model)")


@pytest.mark.parametrize("selector, hint", [
    ("$.signal.final_eror", "(did you mean 'final_error'?)"),
    ("$.signal.http_status[*]", "(did you mean 'http_statuses'?)"),
    ("$.signal.nonsense", SIGNAL_LIST),
])
def test_an_unknown_signal_says_which_was_meant_or_lists_them(tmp_path: Path, pm: pluggy.PluginManager,
                                                              selector: str, hint: str) -> None:
    """The message named the bad signal only: the author had to look the right name up."""
    pack = write(tmp_path / "p", "10.yml", "- id: r\n  class: unknown\n  description: d\n"
                 f"  when: {{select: \"{selector}\", exists: true}}\n  examples: {{match: [x]}}\n")
    name = selector.split(".")[2].split("[")[0]
    with pytest.raises(RuleError, match=re.escape(f"unknown signal {name!r} in selector {selector!r} {hint}")):
        Engine.build(pack, pm)


@pytest.mark.parametrize("selector", ["$.signal.http_statuses[*]", "$.pt4.results_detail[*].status", "$..status",
                                      "$.*", "$.signal.red_caps[?(@ == 'tools')]"])
def test_general_paths_with_known_names_load(tmp_path: Path, pm: pluggy.PluginManager, selector: str) -> None:
    pack = write(tmp_path / "p", "10.yml", "- id: r\n  class: unknown\n  description: d\n"
                 f"  when: {{select: \"{selector}\", exists: true}}\n  examples: {{match: [x]}}\n")
    assert Engine.build(pack, pm).pack.rules[0].id == "r"


def test_a_fingerprint_listed_twice_names_where_it_was_first(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    pack = write(tmp_path / "p", "10-a.yml", "exact:\n  'cc8c563478cd': unknown\n")
    write(pack, "15-same.yml", "exact:\n  'cc8c563478cd': unknown\n")  # the same class again: no conflict
    assert Engine.build(pack, pm).pack.exact == {"cc8c563478cd": "unknown"}
    write(pack, "20-b.yml", "exact:\n  'cc8c563478cd': genuine-oom\n")
    with pytest.raises(RuleError, match=r"p/20-b\.yml: exact: cc8c563478cd: listed twice with classes 'unknown' "
                                        r"and 'genuine-oom' \(first in \S*p/10-a\.yml\)"):
        Engine.build(pack, pm)


def _decides(tmp_path: Path, pm: pluggy.PluginManager, when: str, bundle: dict[str, object] | str) -> bool:
    """Whether a pack of one rule, ``when`` as written in YAML, decides ``bundle``."""
    pack = write(tmp_path / "p", "10.yml", f"- id: r\n  class: unknown\n  description: d\n  when: {when}\n"
                                           "  examples: {match: [x]}\n")
    return Engine.build(pack, pm).classify(make_bundle(bundle)).matched_rule == "r"


@pytest.mark.parametrize("when, bundle, decided", [
    # contains {all: [...]} needs every phrase, {any: [...]} one of them
    ("{select: $.signal.all_text, contains: {all: [alpha, beta]}}", "alpha and beta", True),
    ("{select: $.signal.all_text, contains: {all: [alpha, beta]}}", "alpha alone", False),
    ("{select: $.signal.all_text, contains: {any: [alpha, beta]}}", "beta alone", True),
    # exists: false and truthy: false hold when the value is missing, or false
    ("{select: $.manifest.extra, exists: false}", {}, True),
    ("{select: $.manifest.extra, exists: false}", {"manifest": {"extra": 0}}, False),
    ("{select: $.manifest.flag, truthy: false}", {"manifest": {"flag": 0}}, True),
    ("{select: $.manifest.flag, truthy: false}", {"manifest": {"flag": 2}}, False),
    # JSON true is not the number 1, nor 1 true; 1.0 is 1
    ("{select: $.manifest.flag, equals: true}", {"manifest": {"flag": 1}}, False),
    ("{select: $.manifest.flag, equals: 1}", {"manifest": {"flag": True}}, False),
    ("{select: $.manifest.flag, in: [1, 2]}", {"manifest": {"flag": True}}, False),
    ("{select: $.manifest.flag, equals: 1}", {"manifest": {"flag": 1.0}}, True),
    # a file the bundle lacks is missing, not null, to a plain path and to a general one
    ("{select: $.pt5, exists: false}", "x", True),
    ("{select: '$[\"pt5\"]', exists: false}", "x", True),
    # contains on a value that is neither text nor a list holds for no phrase
    ("{select: $.manifest.extra, contains: zzfrob}", {"manifest": {"extra": {"zzfrob": 1}}}, False),
    ("{select: $.manifest.extra, contains: '1'}", {"manifest": {"extra": 1}}, False),
    # the structural predicates read what they expect and pass over the rest
    ("{structural: results_detail_http_404}", {"pt4": {"results_detail": {"chat": {"status": 404}}}}, True),
    ("{structural: results_detail_http_404}", {"pt4": {"results_detail": {"chat": {"status": "404"}}}}, False),
    ("{structural: results_detail_http_404}",
     {"pt4": {"results_detail": {"chat": "refused", "tools": {"status": 404}}}}, True),
    # one abort token may be written without a list
    ("{gate_abort_reason: NO_ROW}", {"manifest": {"schema": 2}, "pt1": {"abort_reason": "NO_ROW"}}, True),
    # ignore_case: for equals, in, regex and the items of a list
    ("{select: $.manifest.model, equals: ACME/X, ignore_case: true}", {"manifest": {"model": "acme/x"}}, True),
    ("{select: $.manifest.model, equals: ACME/X}", {"manifest": {"model": "acme/x"}}, False),
    ("{select: $.manifest.model, in: [other, ACME/X], ignore_case: true}", {"manifest": {"model": "acme/x"}}, True),
    (r"{select: $.signal.all_text, regex: 'FROB\w+ refused', ignore_case: true}", "the frobnicator refused", True),
    (r"{select: $.signal.all_text, regex: 'FROB\w+ refused'}", "the frobnicator refused", False),
    ("{select: $.signal.all_text, contains: ZZFROB, ignore_case: true}", "a ZzFrob b", True),
    ("{select: $.signal.all_text, contains: ZZFROB}", "a ZzFrob b", False),
    ("{select: $.manifest.tags, contains: CHAT, ignore_case: true}", {"manifest": {"tags": ["Chat", "x"]}}, True),
    ("{select: $.manifest.tags, contains: CHAT}", {"manifest": {"tags": ["Chat", "x"]}}, False),
    # contains on a list signal looks for an item equal to the phrase, not for text
    ("{select: $.signal.red_caps, contains: chat}", {"pt4": {"results": {"chat": "red", "tools": "green"}}}, True),
    ("{select: $.signal.red_caps, contains: cha}", {"pt4": {"results": {"chat": "red", "tools": "green"}}}, False),
    # a general path selects several values: a regex holds when it matches any of them
    ("{select: '$.manifest.tags[*]', regex: 'zzfrob'}", {"manifest": {"tags": ["chat", "a zzfrob b"]}}, True),
    # a name or an index below a text selects nothing (no error)
    ("{select: $.manifest.model.acme, exists: false}", {"manifest": {"model": "acme/x"}}, True),
    ("{select: '$.manifest.model[0]', exists: false}", {"manifest": {"model": "acme/x"}}, True),
    # ignore_case compares both sides in lower case; a list's items that are not text are no phrase
    ("{select: $.manifest.model, equals: acme/x, ignore_case: true}", {"manifest": {"model": "ACME/X"}}, True),
    ("{select: $.manifest.tags, contains: '1', ignore_case: true}", {"manifest": {"tags": [1, "x"]}}, False),
    # an index past a list's end selects nothing (no error)
    ("{select: '$.manifest.tags[1]', exists: false}", {"manifest": {"tags": ["a"]}}, True),
    # a regex never matches a value that is not text (no error)
    ("{not: {select: $.manifest.flag, regex: '1'}}", {"manifest": {"flag": 1}}, True),
    # any: an item without a literal to look for (equals) still decides
    ("{any: [{select: $.signal.all_text, contains: zzfrob}, {select: $.manifest.model, equals: acme/x}]}",
     {"manifest": {"model": "acme/x"}}, True),
])
def test_each_operator_decides_as_the_rule_reads(tmp_path: Path, pm: pluggy.PluginManager, when: str,
                                                  bundle: dict[str, object] | str, decided: bool) -> None:
    assert _decides(tmp_path, pm, when, bundle) is decided


def test_explain_marks_a_holding_not_and_every_value(tmp_path: Path, bundle_dir) -> None:  # type: ignore[no-untyped-def]
    pack = write(tmp_path / "p", "10.yml", "- id: r\n  class: unknown\n  description: d\n"
                 "  when: [{not: {select: $.signal.all_text, contains: zzfrob}}, "
                 "{select: '$.manifest.tags[*]', exists: true}]\n  examples: {match: [x]}\n")
    target = bundle_dir({"manifest": {"tags": ["chat", "tools"]}, "pt3": {"failure_log_excerpt": "boom"}})
    out = CliRunner().invoke(cli, ["explain", "--rules", str(pack), str(target)]).output
    lines = [line.strip() for line in out.splitlines()]
    not_at = lines.index("+ not")  # it holds: what it negates does not
    assert lines[not_at + 1].startswith("- $.signal.all_text contains {'any': ['zzfrob']}: value ")
    assert "+ $.manifest.tags[*] exists True: value ['chat', 'tools']" in lines


def test_explain_marks_all_and_any_as_classify_decides_them(tmp_path: Path, bundle_dir) -> None:  # type: ignore[no-untyped-def]
    # An all with one item missed does not hold, an any with one item held does, and
    # contains names only the phrases it found: the rule matches, as classify says.
    pack = write(tmp_path / "p", "10.yml", "- id: r\n  class: unknown\n  description: d\n  when:\n    any:\n"
                 "      - all: [{select: $.signal.all_text, contains: boom}, {select: $.signal.all_text, contains: zz}]\n"
                 "      - {select: $.signal.all_text, contains: {any: [zz, boom, bang]}}\n  examples: {match: [x]}\n")
    out = CliRunner().invoke(cli, ["explain", "--rules", str(pack), str(bundle_dir("boom"))]).output
    lines = [line.strip() for line in out.splitlines()]
    assert "[tier2] tier2-rules: MATCH" in lines and lines[lines.index("+ any") + 1] == "- all"
    assert lines[-3].startswith("+ $.signal.all_text contains {'any': ['zz', 'boom', 'bang']}: value ")
    assert lines[-3].endswith("; found 'boom'")


def test_explain_never_shows_a_regex_matching_a_value_that_is_not_text(tmp_path: Path, bundle_dir) -> None:  # type: ignore[no-untyped-def]
    # As classify decides: the number 1 is not the text "1".
    pack = write(tmp_path / "p", "10.yml", "- id: r\n  class: unknown\n  description: d\n"
                 "  when: {select: $.manifest.flag, regex: '1'}\n  examples: {match: [x]}\n")
    target = bundle_dir({"manifest": {"flag": 1}})
    out = CliRunner().invoke(cli, ["explain", "--rules", str(pack), str(target)]).output
    (line,) = [line for line in out.splitlines() if "$.manifest.flag regex" in line]
    assert line.strip() == "- $.manifest.flag regex '1': value 1"


def test_explain_names_a_timeout_on_any_value(tmp_path: Path, bundle_dir) -> None:  # type: ignore[no-untyped-def]
    # The first value times out, the second does not match: the line must still say the search timed out.
    pack = write(tmp_path / "p", "10.yml", "- id: slow\n  class: unknown\n  description: d\n"
                 "  when: {select: '$.manifest.tags[*]', regex: '^(a+)+$'}\n  examples: {match: [x]}\n")
    target = bundle_dir({"manifest": {"tags": ["a" * 50_000 + "!", "b"]}})
    out = CliRunner().invoke(cli, ["explain", "--rules", str(pack), str(target)]).output
    (line,) = [line for line in out.splitlines() if "$.manifest.tags[*] regex" in line]
    assert line.strip().startswith("- ") and line.endswith("; timed out after 0.25s")


@pytest.mark.parametrize("phrases", ["''", "[boom, '']", "{all: [boom, '']}"])
def test_an_empty_phrase_to_look_for_is_refused(tmp_path: Path, pm: pluggy.PluginManager, phrases: str) -> None:
    """An empty phrase occurs in every text: the rule would decide every bundle."""
    pack = write(tmp_path / "p", "10.yml", "- id: r\n  class: unknown\n  description: d\n"
                 f"  when: {{select: $.signal.all_text, contains: {phrases}}}\n  examples: {{match: [boom]}}\n")
    with pytest.raises(RuleError, match=r"when\.contains: needs a non-empty string or list of non-empty strings"):
        Engine.build(pack, pm)


def test_conditions_may_nest_32_levels_deep_and_no_more(tmp_path: Path, pm: pluggy.PluginManager) -> None:
    def nested(levels: int) -> str:
        return "{not: " * levels + "{select: $.signal.error_text, contains: boom}" + "}" * levels

    pack = write(tmp_path / "p", "10.yml", "- id: r\n  class: unknown\n  description: d\n"
                 f"  when: {nested(32)}\n  examples: {{match: [x]}}\n")
    assert Engine.build(pack, pm).classify(make_bundle("boom")).matched_rule == "r"  # an even number of nots
    write(pack, "10.yml", "- id: r\n  class: unknown\n  description: d\n"
          f"  when: {nested(33)}\n  examples: {{match: [x]}}\n")
    with pytest.raises(RuleError, match="conditions nest more than 32 levels deep"):
        Engine.build(pack, pm)
