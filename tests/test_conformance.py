"""The reference's verdicts on 202 real-shaped bundles, reproduced with the reference pack."""

from __future__ import annotations

import pytest

from loop_core import Engine
from loop_core.batch import classify_paths, verdict_row
from tests.conformance.compare import BUNDLES, GROUPS, by_name, compare, expected_rows


@pytest.fixture(scope="module")
def classify_rows() -> dict:
    from loop_core import make_plugin_manager

    engine = Engine.build("reference", make_plugin_manager(entry_points=False))
    return by_name(verdict_row(o) for o in classify_paths([BUNDLES], engine))


def test_corpus_is_complete(classify_rows: dict) -> None:
    ids = {e["id"] for e in expected_rows()}
    assert len(ids) == 202
    assert ids == set(classify_rows)


@pytest.mark.parametrize("group", [g for g, spec in GROUPS.items() if spec[0] == "classify"])
def test_classify_group_agrees_with_reference(group: str, classify_rows: dict) -> None:
    mismatches = compare(group, classify_rows)
    assert mismatches == [], f"{len(mismatches)} undocumented mismatches, first: {mismatches[:3]}"


def test_deviations_are_real(classify_rows: dict) -> None:
    """Every documented deviation still differs; a stale entry would hide a regression."""
    from tests.conformance.compare import _actual, _expected, deviations

    expected = {e["id"]: e for e in expected_rows()}
    for bid, fields in deviations().items():
        for field in fields:
            assert _expected(expected[bid], "classify", field) != _actual(classify_rows[bid], field), (bid, field)


TRUST_RUNS = {
    "trust": {},
    "trust_promoted": {"promote": True},
    "trust_consensus": {"priors": [BUNDLES]},
}


@pytest.mark.parametrize("group", [g for g, spec in GROUPS.items() if spec[0] != "classify"])
def test_trust_group_agrees_with_reference(group: str) -> None:
    from loop_core import make_plugin_manager
    from loop_core.batch import trust_rows
    from tests.conformance.compare import HERE

    cmd = GROUPS[group][0]
    rows = by_name(trust_rows([BUNDLES], catalog=HERE / "catalog.yml",
                              pm=make_plugin_manager(entry_points=False), **TRUST_RUNS[cmd]))
    mismatches = compare(group, rows)
    assert mismatches == [], f"{len(mismatches)} undocumented mismatches, first: {mismatches[:3]}"
