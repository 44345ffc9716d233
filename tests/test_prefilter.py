"""The rule index skips only rules that cannot match: same verdicts, fewer rules walked."""

from __future__ import annotations

from pathlib import Path

import pytest

from loop_core import Engine, make_plugin_manager
from loop_core.conditions import Need
from loop_core.fastregex import TextIndex, affix_key, anchor_word
from loop_core.rules import Rule
from loop_core.testing import make_bundle
from loop_core.view import View

from .conftest import corpus_bundles


def _plain_walk(engine: Engine, view: View) -> str | None:
    """The first active rule whose condition holds, walking every rule."""
    for rule in engine.pack.active_rules:
        if rule.matches(view):
            return rule.id
    return None


def _indexed_walk(engine: Engine, view: View) -> str | None:
    for rule in engine.pack.candidates(view):
        if rule.matches(view):
            return rule.id
    return None


def _synthetic_pack(root: Path, count: int) -> Path:
    """Rules shaped like a large third-party pack: each names a tag of its own."""
    root.mkdir()
    (root / "pack.yml").write_text("name: many\n", encoding="utf-8")
    lines = ["rules:"]
    for i in range(count):
        tag = f"w{i:04d}_widget"  # the first eight characters differ from rule to rule
        kinds = [
            (f"regex: '(?i)\\b(runtimeerror|valueerror): widget {tag} failed\\b'",  # anchored on words
             f"RuntimeError: widget {tag} failed"),
            (f"regex: '(?i)loader v?\\d+\\.\\d+ {tag}'", f"loader 1.2 {tag}"),  # starts a word: an affix key
            (f"regex: '(?i)^{tag}$'", tag),  # no literal with a word: checked when reached
            (f"contains: ['errno {tag} (code 7)', 'errno {tag}']", f"errno {tag} (code 7)"),
        ]
        condition, example = kinds[i % len(kinds)]
        lines += [f"  - id: r{i:04d}", "    class: unknown", f"    description: rule {i}", "    when:",
                  "      select: $.signal.all_text", "      ignore_case: true", f"      {condition}",
                  "    examples:", f"      match: ['{example}']", "      no_match: ['RuntimeError: NCCL error']"]
    (root / "10-many.yml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def corpus() -> list:
    return corpus_bundles()


@pytest.mark.parametrize("pack", ["default", "reference"])
def test_indexed_walk_finds_what_a_plain_walk_finds(pack: str, corpus: list, lookup: str) -> None:
    engine = Engine.build(pack, make_plugin_manager(entry_points=False))
    assert len(corpus) > 400
    for bundle in corpus:
        assert _indexed_walk(engine, View(bundle)) == _plain_walk(engine, View(bundle))


def test_a_large_pack_walks_only_the_rules_a_bundle_can_match(tmp_path: Path, lookup: str) -> None:
    engine = Engine.build(_synthetic_pack(tmp_path / "many", 400), make_plugin_manager(entry_points=False))
    info = engine.pack.index.describe()
    assert info == {"rules": 400, "by_word": 300, "checked": 100, "always": 0}
    noise = "\n".join(f"INFO 05-17 10:00:{i % 60:02d} loader step {i} ok" for i in range(200))
    for i, text in [(5, "loader 2.1 w0005_widget"), (8, "RuntimeError: widget w0008_widget failed"),
                    (11, "see errno w0011_widget (code 7) above")]:
        bundle = make_bundle(f"{noise}\n{text}\n{noise}")
        view = View(bundle)
        walked = list(engine.pack.candidates(view))
        # The 100 rules without a word are looked for (cheaply) but are not candidates here.
        assert [r.id for r in walked] == [f"r{i:04d}"]
        assert engine.classify(bundle).matched_rule == f"r{i:04d}"
    unrelated = make_bundle(f"{noise}\nRuntimeError: NCCL error\n{noise}")
    assert list(engine.pack.candidates(View(unrelated))) == []


def _synthetic_example(i: int) -> str:
    """A line that rule ``r{i:04d}`` of :func:`_synthetic_pack` may match."""
    tag = f"w{i:04d}_widget"
    return [f"RuntimeError: widget {tag} failed", f"loader 1.2 {tag}", tag, f"errno {tag} (code 7)"][i % 4]


@pytest.mark.parametrize("hits", [[397, 8, 398, 5, 11, 257, 2, 300], [398, 2, 202, 130]],
                         ids=["indexed-and-checked", "checked-only"])
def test_candidates_come_in_pack_order_so_the_first_match_wins(tmp_path: Path, lookup: str,
                                                               hits: list[int]) -> None:
    """However far apart in the pack the rules a bundle may match are, they are walked
    in file order: the rule a bundle is classified by is the first one that matches."""
    engine = Engine.build(_synthetic_pack(tmp_path / "many", 400), make_plugin_manager(entry_points=False))
    bundle = make_bundle("\n".join(_synthetic_example(i) for i in hits))
    view = View(bundle)
    assert [r.id for r in engine.pack.candidates(view)] == [f"r{i:04d}" for i in sorted(hits)]
    assert _indexed_walk(engine, view) == _plain_walk(engine, view)


def test_synthetic_pack_verdicts_agree_with_a_plain_walk(tmp_path: Path, corpus: list, lookup: str) -> None:
    engine = Engine.build(_synthetic_pack(tmp_path / "many", 40), make_plugin_manager(entry_points=False))
    texts = ["loader 1.0 w0001_widget", "w0002_widget", "x w0002_widget y", "ValueError: widget w0004_widget failed",
             "errno w0007_widget", "LOADER V3.4 W0005_WIDGET", "loader 1.0 w0001_widget1"]
    for text in texts:
        for bundle in (make_bundle(text), make_bundle(("x " * 1500) + text)):
            assert _indexed_walk(engine, View(bundle)) == _plain_walk(engine, View(bundle)), text
    for bundle in corpus[:100]:
        assert _indexed_walk(engine, View(bundle)) == _plain_walk(engine, View(bundle))


def test_non_ascii_text_is_never_ruled_out_by_words() -> None:
    # "İ".lower() is two characters: positions and words of the lowered text cannot be trusted.
    text = "İ" * 10 + " RuntimeError: widget w0001_widget failed"
    assert not TextIndex(text).exact


@pytest.mark.parametrize("inexact", ["İ" * 10, "ſ"], ids=["lower-grows", "folds-to-s"])
@pytest.mark.parametrize("rule, text", [
    ("r0000", "RuntimeError: widget w0000_widget failed"),  # anchored on a word
    ("r0001", "loader 1.2 w0001_widget"),  # an affix key
    ("r0003", "errno w0003_widget (code 7)"),  # a contains list
    ("checked", "boot failed: zz_checked_tag"),  # no word nor affix to index: checked when reached
    ("folded", "boot failed: ZZ_TAG_\u017f"),  # (?i)s takes a long s, which lower() keeps: no literal "s" here
])
def test_a_text_without_an_exact_index_rules_no_rule_out(tmp_path: Path, inexact: str, rule: str,
                                                         text: str) -> None:
    """Words and literals of a text whose lower-casing moves its positions cannot be
    trusted: every rule that may match it is walked, indexed or checked, whatever the
    lookups say, and decides as a plain walk does."""
    pack = _synthetic_pack(tmp_path / "many", 8)
    (pack / "20-checked.yml").write_text(
        "- id: checked\n  class: unknown\n  description: d\n"
        "  when: {select: $.signal.all_text, contains: zz_checked_tag}\n"
        "  examples: {match: [zz_checked_tag], no_match: [zz_checked]}\n"
        "- id: folded\n  class: unknown\n  description: d\n"
        "  when: {select: $.signal.all_text, regex: '(?i)zz_tag_s'}\n"
        "  examples: {match: [zz_tag_s], no_match: [zz_tag]}\n", encoding="utf-8")
    engine = Engine.build(pack, make_plugin_manager(entry_points=False))
    view = View(make_bundle(f"{inexact} start\n{text}\n"))
    assert not view.index(view.signal("all_text")).exact
    assert _plain_walk(engine, view) == rule
    assert _indexed_walk(engine, View(make_bundle(f"{inexact} start\n{text}\n"))) == rule


@pytest.mark.parametrize("literal, anchor, affix", [
    ("cuda out of memory", "out", None),
    (" triton_0042", None, "^triton_0"),
    ("cudnn_status_x ", None, "$status_x"),
    (" short", None, None),
    ("nospace", None, None),
    # a tab splits a text's words as a space does: a piece holding one is no word of it
    ("frob out\tof zork", None, None),
    (" zork\t0042abcd", None, None),
    ("abcd0042\tzork ", None, None),
])
def test_need_keys(literal: str, anchor: str | None, affix: str | None) -> None:
    assert anchor_word(literal) == anchor
    assert (affix_key(literal) if anchor is None else None) == affix


@pytest.mark.parametrize("phrase", ["frob out\tof zork", " zork\t0042abcd", "abcd0042\tzork "])
def test_a_phrase_with_a_tab_between_its_words_is_found_in_a_long_log(tmp_path: Path, lookup: str,
                                                                       phrase: str) -> None:
    pack = tmp_path / "tabbed"
    pack.mkdir()
    written = phrase.replace("\t", "\\t")  # YAML reads the escape back as a tab
    (pack / "10-tabbed.yml").write_text(
        "- id: tabbed\n  class: unknown\n  description: d\n"
        f'  when: {{select: $.signal.all_text, contains: "{written}"}}\n'
        "  examples: {match: [x]}\n", encoding="utf-8")
    engine = Engine.build(pack, make_plugin_manager(entry_points=False))
    text = "x " * 1500 + f"frob{phrase}frob"
    assert _plain_walk(engine, View(make_bundle(text))) == "tabbed"
    assert _indexed_walk(engine, View(make_bundle(text))) == "tabbed"


def test_a_word_no_longer_than_an_affix_key_still_holds_it(tmp_path: Path, lookup: str) -> None:
    # Enough rules keyed by a word's start that they are looked up by key, each tag
    # exactly AFFIX characters long: the whole word is its start and its end.
    pack = tmp_path / "short-tags"
    pack.mkdir()
    lines = ["rules:"]
    for i in range(80):
        lines += [f"  - id: t{i:04d}", "    class: unknown", "    description: d", "    when:",
                  "      select: $.signal.all_text", "      ignore_case: true",
                  f"      regex: '(?i)loader v?\\d+\\.\\d+ t{i:04d}_ab'",
                  "    examples:", f"      match: ['loader 1.2 t{i:04d}_ab']"]
    (pack / "10-short.yml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    engine = Engine.build(pack, make_plugin_manager(entry_points=False))
    text = "INFO start\nloader 1.2 t0042_ab\n" + "x " * 1500
    assert _plain_walk(engine, View(make_bundle(text))) == "t0042"
    assert _indexed_walk(engine, View(make_bundle(text))) == "t0042"


def test_needs_of_conditions(tmp_path: Path) -> None:
    engine = Engine.build(_synthetic_pack(tmp_path / "many", 4), make_plugin_manager(entry_points=False))
    rules: dict[str, Rule] = {r.id: r for r in engine.pack.rules}
    needs = rules["r0003"].when.needs()
    assert needs is not None and {n.literal for n in needs} == {"errno w0003_widget (code 7)", "errno w0003_widget"}
    assert all(isinstance(n, Need) for n in needs)
    assert rules["r0002"].when.needs() is not None  # "^tag$": the tag itself is required


def test_a_case_sensitive_non_ascii_phrase_is_never_skipped(tmp_path: Path) -> None:
    # "ΑΣ".lower() ends in a final sigma: the lower-cased "Σ" (σ) is not in the lower-cased text.
    pack = tmp_path / "greek"
    pack.mkdir()
    (pack / "10-greek.yml").write_text(
        "rules:\n  - id: sigma\n    class: unknown\n    description: d\n"
        "    when: {select: $.signal.all_text, contains: ['Σ']}\n"
        "    examples: {match: ['Σ'], no_match: [x]}\n", encoding="utf-8")
    engine = Engine.build(pack, make_plugin_manager(entry_points=False))
    bundle = make_bundle(("x " * 1500) + "ΑΣ")
    assert _plain_walk(engine, View(bundle)) == "sigma"
    assert _indexed_walk(engine, View(bundle)) == "sigma"



def test_ignore_case_takes_a_final_sigma_for_a_sigma(tmp_path: Path) -> None:
    """A capital sigma lower-cases to ς at a word's end and σ elsewhere: looked for without
    case, "ΚΑΡΤΑΣ" is in "η καρτας" and in "καρτασ", whichever way either side is written."""
    pack = tmp_path / "greek"
    pack.mkdir()
    rule = ("  - id: {id}\n    class: unknown\n    description: d\n    when: {when}\n"
            "    examples: {{match: ['{example}'], no_match: [x]}}\n")
    rules = [("any", "{select: $.signal.all_text, contains: ['ΚΑΡΤΑΣ'], ignore_case: true}", "ΚΑΡΤΑΣ"),
             ("all", "{select: $.signal.all_text, contains: {all: ['out of', 'ΣΦΑΛΜΑ']}, ignore_case: true}",
              "out of ΣΦΑΛΜΑ")]
    (pack / "10-greek.yml").write_text(
        "rules:\n" + "".join(rule.format(id=i, when=w, example=e) for i, w, e in rules), encoding="utf-8")
    engine = Engine.build(pack, make_plugin_manager(entry_points=False))
    noise = "x " * 1500  # long enough for the text's literal index
    for text, expected in [(f"{noise}η καρτας δεν", "any"), (f"{noise}καρτασ", "any"), ("καρτασ", "any"),
                           ("καρταΣ", "any"), (f"{noise}OUT OF σφαλμας", "all"), ("Σφαλμας: out of", "all"),
                           (f"{noise}καρτα", None), (f"{noise}out of σφαλ", None)]:
        view = View(make_bundle(text))
        assert (_plain_walk(engine, view), _indexed_walk(engine, view)) == (expected, expected), text[-20:]
        assert engine.classify(make_bundle(text)).matched_rule == expected, text[-20:]
    exact = tmp_path / "exact"
    exact.mkdir()
    (exact / "10-greek.yml").write_text("rules:\n" + rule.format(
        id="exact", when="{select: $.pt3.failure_log_excerpt, equals: 'ΚΑΡΤΑΣ', ignore_case: true}",
        example="ΚΑΡΤΑΣ"), encoding="utf-8")
    engine = Engine.build(exact, make_plugin_manager(entry_points=False))
    assert [engine.classify(make_bundle(t)).matched_rule for t in ("καρτασ", "καρτας", "καρτα")] == \
        ["exact", "exact", None]


def test_no_need_is_empty_so_an_empty_text_rules_every_need_out() -> None:
    # _may_hold skips an empty text without a look: sound only because "" is never a need.
    from loop_core.conditions import compile_selector

    selector = compile_selector("$.signal.all_text")
    assert Need.of(selector, ["", "zzz"]) == ()  # "" always occurs: no need at all
    assert [n.literal for n in Need.of(selector, ["abc", "zzz"])] == ["abc", "zzz"]
    engine = Engine.build("default")
    booted = {"pt3": {"ok": True, "failure": None}}  # a clean boot: no failure text anywhere
    view = View(make_bundle(booted))
    assert view.signal("all_text") == "" and view.signal("final_error") == ""
    assert _indexed_walk(engine, view) == _plain_walk(engine, View(make_bundle(booted)))


@pytest.mark.parametrize("pack", ["default", "reference"])
def test_every_rule_that_matches_is_a_candidate(pack: str, corpus: list, lookup: str) -> None:
    # Stronger than the first match agreeing: no matching rule is ever skipped.
    engine = Engine.build(pack, make_plugin_manager(entry_points=False))
    for bundle in corpus:
        view = View(bundle)
        walked = {rule.id for rule in engine.pack.candidates(view)}
        assert {rule.id for rule in engine.pack.active_rules if rule.matches(view)} <= walked, bundle.path


def test_checked_rules_with_needs_on_two_selectors(tmp_path: Path, lookup: str) -> None:
    # Literals without a word are checked when the walk reaches the rule, a selector at a
    # time: a rule whose needs sit on two selectors matches through either of them.
    root = tmp_path / "two"
    root.mkdir()
    (root / "pack.yml").write_text("name: two\n", encoding="utf-8")
    rules = ["rules:"]
    for i, (log, model) in enumerate([("^zq{i}a$", "^acme/zq{i}b$"), ("^zq{i}c$", "^acme/zq{i}d$")]):
        rules += [f"  - id: r{i}", "    class: unknown", "    description: d", "    when:", "      any:",
                  f"        - {{select: $.signal.all_text, regex: '(?m){log.format(i=i)}'}}",
                  f"        - {{select: $.manifest.model, regex: '{model.format(i=i)}'}}",
                  f"    examples: {{match: ['{log.format(i=i).strip('^$')}'], no_match: ['nothing']}}"]
    (root / "10-two.yml").write_text("\n".join(rules) + "\n", encoding="utf-8")
    engine = Engine.build(root, make_plugin_manager(entry_points=False))
    assert engine.pack.index.describe()["checked"] == 2
    cases = [({}, None), ({"pt3": {"failure_log_excerpt": "zq0a"}}, "r0"),
             ({"manifest": {"model": "acme/zq0b"}}, "r0"), ({"manifest": {"model": "acme/zq1d"}}, "r1"),
             ({"pt3": {"failure_log_excerpt": "zq1c"}, "manifest": {"model": "acme/zq1d"}}, "r1"),
             ({"pt3": {"failure_log_excerpt": "x\nzq1c\ny"}, "manifest": {"model": "acme/zq0b"}}, "r0")]
    for overrides, expected in cases:
        view = View(make_bundle(overrides))
        assert _indexed_walk(engine, view) == _plain_walk(engine, view) == expected, overrides
