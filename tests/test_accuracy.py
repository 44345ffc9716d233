"""Quality floors of the default pack on the labelled corpus of real logs.

These are accuracy floors, not timings: the default pack must classify real
engine failures correctly (macro-F1 over the six classes, and accuracy on the
hard cases whose text carries another class's vocabulary). The reference pack
is measured on the same cases for comparison; it has no floor.

The ``frozen`` split is held out (docs/labelling.md): rules are tuned on
``tune`` only, and a drop on ``frozen`` is fixed by better general rules, not
by a rule for the failing case. The numbers are in docs/accuracy.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loop_core import Engine, make_plugin_manager
from loop_core.evaluate import CLASSES, Report, evaluate, load_cases

CORPUS = Path(__file__).resolve().parent / "corpus" / "real"
HOLDOUT = Path(__file__).resolve().parent / "corpus" / "holdout"

TUNE_MACRO_F1 = 0.90
# The first frozen split was measured once at 0.835 and then used for
# development (docs/accuracy.md): its floor only guards against regressions.
# The later fresh samples keep the misses whose text names no single cause,
# some of them frozen by their ids' hash, so the floor sits below 0.95
# (0.934 with the seventh sample's two frozen misses, 0.929 with the eighth
# sample's one, 0.91996 with the eleventh sample's two, 0.9104 with the twelfth
# sample's one, 0.9119 after the thirteenth sample's three, none of them a miss,
# 0.9144 after the fourteenth sample's five, none of them a miss either,
# 0.9179 after the fifteenth sample's three, none of them a miss, 0.9204 after
# the sixteenth sample's four, none of them a miss either, 0.9166 after the
# seventeenth sample's three, one of them a kept miss, 0.9146 after the
# eighteenth sample's four, one of them a kept miss, 0.9201 after the
# nineteenth sample's nine, none of them a miss, 0.9171 after the twentieth
# sample's four, one of them a kept miss, 0.9184 after the twenty-first
# sample's three, none of them a miss, 0.9196 after the twenty-second
# sample's four, none of them a miss either, 0.9163 after the twenty-third
# sample's two, one of them a kept miss).
FROZEN_MACRO_F1 = 0.91
# The fresh holdout, measured once after the rules were final: 0.877 / 0.806.
HOLDOUT_MACRO_F1 = 0.85
HARD_ACCURACY = 0.80


@pytest.fixture(scope="module")
def engines() -> dict[str, Engine]:
    pm = make_plugin_manager(entry_points=False)
    return {name: Engine.build(name, pm) for name in ("default", "reference")}


@pytest.fixture(scope="module")
def reports(engines: dict[str, Engine]) -> dict[tuple[str, str], Report]:
    out = {}
    for split in ("tune", "frozen", "all"):
        cases = load_cases(CORPUS, split)
        for name, engine in engines.items():
            out[(name, split)] = evaluate(engine, cases, split)
    for name, engine in engines.items():
        out[(name, "holdout")] = evaluate(engine, load_cases(HOLDOUT), "holdout")
    return out


def _misses(report: Report) -> str:
    return "\n".join(f"  {m['id']}: expected {m['expected']}, got {m['got']} by {m['rule']}"
                     for m in report.misses)


def test_corpus_has_both_splits_and_every_class() -> None:
    cases = load_cases(CORPUS)
    assert {c.split for c in cases} == {"tune", "frozen"}
    assert {c.label for c in cases} == set(CLASSES)
    assert sum(c.hard for c in cases) >= 40


def test_default_pack_macro_f1_on_tune(reports: dict[tuple[str, str], Report]) -> None:
    report = reports[("default", "tune")]
    assert report.macro_f1 >= TUNE_MACRO_F1, _misses(report)


def test_default_pack_macro_f1_on_frozen(reports: dict[tuple[str, str], Report]) -> None:
    report = reports[("default", "frozen")]
    assert report.macro_f1 >= FROZEN_MACRO_F1, _misses(report)


def test_default_pack_on_the_fresh_holdout(reports: dict[tuple[str, str], Report]) -> None:
    report = reports[("default", "holdout")]
    assert report.total >= 60 and report.hard_total >= 20
    assert report.macro_f1 >= HOLDOUT_MACRO_F1, _misses(report)
    assert report.hard_accuracy >= HARD_ACCURACY, _misses(report)
    assert report.macro_f1 > reports[("reference", "holdout")].macro_f1


def test_default_pack_hard_case_accuracy(reports: dict[tuple[str, str], Report]) -> None:
    report = reports[("default", "all")]
    assert report.hard_total >= 40
    assert report.hard_accuracy >= HARD_ACCURACY, _misses(report)


def test_reference_pack_is_measured_too(reports: dict[tuple[str, str], Report]) -> None:
    for split in ("tune", "frozen", "all"):
        report = reports[("reference", split)]
        assert report.pack == "reference"
        assert report.total == reports[("default", split)].total > 0
        assert 0.0 <= report.macro_f1 <= 1.0
        assert report.hard_total == reports[("default", split)].hard_total


CASE = ("id: {id}\nengine: vllm\nsource: https://example.invalid/1\nlabel: genuine-oom\nhard: false\n"
        "split: tune\nrationale: r\nexcerpt: 'torch.OutOfMemoryError: CUDA out of memory'\n")


@pytest.mark.parametrize("edit, problem", [
    (lambda t: t.replace("label:", "lable:"), r"a case needs label too"),
    (lambda t: t.replace("hard: false", "hard: 'false'"), r"hard must be true or false, got 'false'"),
    (lambda t: t.replace("split: tune", "split: Tune"), r"split 'Tune' is not one of tune, frozen, holdout"),
    (lambda t: t.replace("id: b", "id: a"), r"case id 'a' is used by .*a\.yml too"),
])
def test_a_mislabelled_case_is_named_not_skipped_or_miscounted(tmp_path: Path, edit, problem: str) -> None:  # type: ignore[no-untyped-def]
    """A mistyped key used to drop the case silently, a quoted 'false' made it hard,
    an unknown split left it out of every split but 'all'."""
    from loop_core import LoopError

    (tmp_path / "a.yml").write_text(CASE.format(id="a"))
    (tmp_path / "b.yml").write_text(edit(CASE.format(id="b")))
    with pytest.raises(LoopError, match=problem):
        load_cases(tmp_path)


def test_a_split_loads_only_its_own_cases(tmp_path: Path) -> None:
    (tmp_path / "a.yml").write_text(CASE.format(id="a"))
    (tmp_path / "b.yml").write_text(CASE.format(id="b").replace("split: tune", "split: frozen"))
    assert [c.id for c in load_cases(tmp_path, "frozen")] == ["b"]
    assert [c.id for c in load_cases(tmp_path, "tune")] == ["a"]
    assert [c.id for c in load_cases(tmp_path)] == ["a", "b"]


def test_yaml_files_that_are_not_cases_are_left_alone(tmp_path: Path) -> None:
    (tmp_path / "a.yml").write_text(CASE.format(id="a"))
    (tmp_path / "pack.yml").write_text("name: p\ndescription: not a case\n")
    (tmp_path / ".b.yml").write_text(CASE.format(id="b"))  # hidden: an editor's copy, say
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "c.yml").write_text(CASE.format(id="c"))
    assert [c.id for c in load_cases(tmp_path)] == ["a"]
