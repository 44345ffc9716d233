"""Compare our verdicts with the reference verdicts in expected.jsonl, field group by group.

The same groups and comparison rules as the public conformance checker, run
in-process so the test suite needs nothing outside the repository.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
BUNDLES = HERE / "bundles"
EXPECTED = HERE / "expected.jsonl"
DEVIATIONS = HERE / "deviations.yml"

# group -> (command key, fields, only bundles the reference accepted)
GROUPS: dict[str, tuple[str, list[str], bool]] = {
    "reader": ("classify", ["accepted"], False),
    "keys": ("classify", ["consensus_key", "fingerprint", "error_substring"], True),
    "class": ("classify", ["failure_class", "tier", "matched_rule", "should_file", "review_queue"], True),
    "dedup": ("classify", ["dedup_tuple", "dedup_hash", "labels"], True),
    "kvcalc-route": ("classify", ["route_as_kv_calc_bug", "delta_mib"], True),
    "trust": ("trust", ["stage", "reason", "graduation_set", "fingerprint_ok", "curated"], True),
    "trust-promoted": ("trust_promoted", ["stage", "reason", "calibration_row"], True),
    "trust-consensus": ("trust_consensus", ["stage", "reason", "consensus_count"], True),
}


def expected_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in EXPECTED.read_text().splitlines() if line.strip()]


def deviations() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for item in yaml.safe_load(DEVIATIONS.read_text()) or []:
        assert item.get("reason"), f"deviation {item.get('id')} has no reason"
        out.setdefault(str(item["id"]), set()).update(item.get("fields") or ["*"])
    return out


def _expected(exp: dict[str, Any], cmd: str, field: str) -> Any:
    if field == "accepted":
        return exp.get("reader_error") is None
    if cmd == "classify":
        if field == "delta_mib":
            return exp.get("delta")
        if field == "labels":
            return sorted(exp.get("labels") or [])
        return exp.get(field)
    value = (exp.get(cmd) or {}).get(field)
    return sorted(value or []) if field == "graduation_set" else value


def _actual(row: dict[str, Any] | None, field: str) -> Any:
    if row is None:
        return "<missing row>"
    if field == "accepted":
        return row.get("reader_error") is None
    value = row.get(field)
    if field in ("labels", "graduation_set"):
        return sorted(value or [])
    return list(value) if isinstance(value, tuple) else value


def compare(group: str, rows: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Undocumented mismatches of ``group``: [(bundle id, {field: (want, got)})]."""
    cmd, fields, accepted_only = GROUPS[group]
    allowed = deviations()
    out = []
    for exp in expected_rows():
        bid = exp["id"]
        if exp.get("errors"):
            continue  # the reference itself crashed on this bundle
        if accepted_only and exp.get("reader_error") is not None:
            continue
        if cmd != "classify" and exp.get(cmd) is None:
            continue
        row = rows.get(bid)
        diff = {f: (_expected(exp, cmd, f), _actual(row, f)) for f in fields}
        diff = {f: pair for f, pair in diff.items() if pair[0] != pair[1]}
        if diff and not ("*" in allowed.get(bid, set()) or set(diff) <= allowed.get(bid, set())):
            out.append((bid, diff))
    return out


def by_name(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {Path(str(r["bundle"])).name: r for r in rows}


RowSource = Callable[[], dict[str, dict[str, Any]]]
