"""The main job, ``loop-rules run``, end to end on the example captures.

Every test works on a copy of ``examples/pull-captures`` under ``tmp_path``;
nothing is ever written into the repository.

The expected numbers are pinned from the example set (24 bundles):

- 1 unreadable (``broken-upload``: manifest misses two keys);
- 3 successes (``lorbus-qwen3.6`` x2, ``qwen2.5-7b``): no failure, not filed;
- 20 failures: benign-cold-start 2 (gemma, phi-4: suppressed), unknown 5
  (deepseek, smollm3, qwen3-14b and the gate-only llama-3.3-70b and
  qwen3-235b: review queue, 5 distinct keys), and 13 fileable ones
  (genuine-oom 4, kernel-unsupported 4, overlay-arch-drift 2,
  quant-unsupported 3) over 12 distinct dedup keys: the two
  ``qwen2.5-32b-instruct-awq`` captures share ``68d6198d1b55``, so 12 new
  issues and one +1;
- 5 success anchors: the two lorbus captures agree on the consensus key
  (validated), gemma, intel-qwen3-30b and qwen2.5-7b stand alone (candidate).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from loop_core import Engine
from loop_core.cli import cli
from loop_core.dedup import SCHEMA, TUPLE_MARKER, body_tuple_matches, parse_body_tuple
from loop_core.keys import DedupKey
from loop_core.pipeline import run_captures
from loop_core.plugins import AUTOLOAD_ENV
from loop_core.trackers import SqliteTracker

from .captures import copy_examples

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "pull-captures"

BY_CLASS = {
    "benign-cold-start": 2,
    "genuine-oom": 4,
    "kernel-unsupported": 4,
    "overlay-arch-drift": 2,
    "quant-unsupported": 3,
    "unknown": 5,
}
EXPECTED = {
    "bundles": 24,
    "reader_errors": 1,
    "by_class": BY_CLASS,
    "filed_new": 12,
    "plus_one": 1,
    "already_counted": 0,
    "review_queued": 5,
    "suppressed": 2,
    "spooled": 0,
    "successes": 3,
    "anchors": {"raw": 0, "candidate": 3, "validated": 2, "tier1": 0},
    "would_file": 0,
    "dry_run": False,
    "tracker": "sqlite",
}
FILEABLE = 13  # occurrences of fileable failures
ISSUES = 12  # distinct dedup keys among them
UNKNOWN = 5  # unknown occurrences, each its own review key
REPEATED = "68d6198d1b55"  # the key both qwen2.5-32b-instruct-awq captures hit
SPOOL_KEYS = {"body", "canonical", "dedup_hash", "kind", "labels", "schema", "title", "occurrences"}


@pytest.fixture(autouse=True)
def _builtins_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed third-party plugins must not change the pinned numbers."""
    monkeypatch.setenv(AUTOLOAD_ENV, "1")


@pytest.fixture
def captures(tmp_path: Path) -> Path:
    target = tmp_path / "captures"
    copy_examples(target)
    return target


def invoke(*args: Any, code: int = 0) -> Result:
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == code, (result.stdout, result.stderr)
    return result


def run_json(captures: Path, *extra: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(invoke("run", captures, "--format", "json", *extra).stdout)
    return data


def summary_part(data: dict[str, Any]) -> dict[str, Any]:
    return {k: data[k] for k in EXPECTED}


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def db_rows(captures: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    db = sqlite3.connect(captures / "_loop" / "tracker.sqlite")
    try:
        issues = db.execute("SELECT id, dedup_hash, failure_class, title, body FROM issues ORDER BY id").fetchall()
        occ = db.execute("SELECT submission, dedup_hash, issue_id FROM occurrences "
                         "ORDER BY submission, dedup_hash").fetchall()
    finally:
        db.close()
    return issues, occ


def review_files(captures: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted((captures / "_review-queue").glob("*.json"))}


# -- the summary ------------------------------------------------------------


def test_run_json_summary_of_the_examples(captures: Path) -> None:
    data = run_json(captures)
    assert summary_part(data) == EXPECTED
    assert data["rules_version"]
    # The unreadable bundle is counted and listed, and the run still exits 0.
    assert [Path(e["bundle"]).relative_to(captures).parts[0] for e in data["errors"]] == ["broken-upload"]
    assert "missing keys" in data["errors"][0]["message"]
    issues, occ = db_rows(captures)
    assert len(issues) == ISSUES and len(occ) == FILEABLE
    assert len({h for _i, h, *_ in issues}) == ISSUES
    assert sorted(review_files(captures)) and len(review_files(captures)) == UNKNOWN


def test_run_captures_gives_the_same_summary(captures: Path, engine: Engine) -> None:
    tracker = SqliteTracker.for_captures(captures)
    try:
        summary = run_captures(captures, engine, tracker)
    finally:
        tracker.close()
    data = summary.to_dict()
    assert summary_part(data) == EXPECTED
    assert data["rules_version"] == engine.pack.version
    assert len(data["errors"]) == 1
    # The CLI over the same folder now finds everything counted.
    again = run_json(captures)
    assert again["already_counted"] == FILEABLE + UNKNOWN
    assert again["filed_new"] == again["plus_one"] == again["review_queued"] == 0


def test_run_table_output(captures: Path) -> None:
    out = invoke("run", captures).stdout
    assert f"24 bundle(s) under {captures}" in out
    assert "filed into sqlite: 12 new, 1 +1, 0 already counted, 0 spooled" in out
    assert "review queue: 5 newly queued; suppressed (benign): 2" in out
    assert "success anchors: raw 0, candidate 3, validated 2, tier1 0" in out
    assert "unreadable bundles: 1" in out
    assert f"browse: loop-rules tracker list {captures}" in out
    lines = out.splitlines()
    start = lines.index("failures by class:") + 1
    assert lines[start:start + len(BY_CLASS)] == [f"  {cls:20} {n}" for cls, n in BY_CLASS.items()]


def test_second_run_files_nothing_and_counts_nothing_twice(captures: Path) -> None:
    first = run_json(captures)
    issues, occ = db_rows(captures)
    queue = review_files(captures)
    second = run_json(captures)
    assert second["filed_new"] == second["plus_one"] == second["review_queued"] == 0
    assert second["already_counted"] == first["filed_new"] + first["plus_one"] + first["review_queued"]
    assert second["already_counted"] == FILEABLE + UNKNOWN
    assert second["by_class"] == first["by_class"] and second["anchors"] == first["anchors"]
    assert db_rows(captures) == (issues, occ)
    assert review_files(captures) == queue
    for doc in queue.values():
        assert doc["kind"] == "review-queue" and doc["schema"] == SCHEMA
        assert len(doc["occurrences"]) == 1


def test_dry_run_writes_nothing(captures: Path) -> None:
    before = tree(captures)
    data = run_json(captures, "--dry-run")
    assert data["dry_run"] is True and data["tracker"] == ""
    assert data["would_file"] == FILEABLE
    assert data["filed_new"] == data["plus_one"] == data["review_queued"] == data["already_counted"] == 0
    assert data["by_class"] == BY_CLASS and data["anchors"] == EXPECTED["anchors"]
    for name in ("_loop", "_review-queue", "_dedup-queue"):
        assert not (captures / name).exists()
    assert tree(captures) == before
    out = invoke("run", captures, "--dry-run").stdout
    assert "dry run: 13 would be filed; nothing was written" in out
    assert "browse:" not in out  # no tracker to browse
    assert tree(captures) == before


@pytest.fixture
def drafted(engine: Engine) -> list[str]:
    """The names of the bundles whose issue ``engine`` drafts, as they are drafted."""
    from loop_core import hookimpl

    names: list[str] = []

    class Watcher:
        @hookimpl(tryfirst=True)
        def loop_draft_issue(self, bundle: Any, verdict: Any) -> None:
            names.append(bundle.path.name)  # and falls through to the built-in drafter

    engine.pm.register(Watcher())
    return names


def test_dry_run_drafts_nothing_and_counts_what_a_run_files(captures: Path, engine: Engine,
                                                            drafted: list[str]) -> None:
    for jobs in (1, 2):
        dry = run_captures(captures, engine, None, dry_run=True, jobs=jobs).to_dict()
        assert drafted == []
        assert dry["would_file"] == FILEABLE and dry["by_class"] == BY_CLASS
        assert dry["suppressed"] == EXPECTED["suppressed"] and dry["review_queued"] == 0
    wet = run_captures(captures, engine, SqliteTracker.for_captures(captures)).to_dict()
    assert len(drafted) == FILEABLE
    assert wet["filed_new"] + wet["plus_one"] == dry["would_file"]
    assert wet["suppressed"] == dry["suppressed"] and wet["by_class"] == dry["by_class"]


def test_a_run_without_a_tracker_counts_what_it_would_file(captures: Path, engine: Engine) -> None:
    """Called with no tracker, a run drafts and queues as usual and counts the fileable
    failures it had nowhere to file."""
    data = run_captures(captures, engine, None).to_dict()
    assert data["would_file"] == FILEABLE and data["tracker"] == ""
    assert data["filed_new"] == data["plus_one"] == data["already_counted"] == 0
    assert data["review_queued"] == UNKNOWN and data["suppressed"] == EXPECTED["suppressed"]
    assert not (captures / "_loop").exists()


def test_a_run_reports_its_progress_after_each_bundle_out_of_all_it_found(captures: Path, engine: Engine) -> None:
    calls: list[tuple[int, int]] = []
    run_captures(captures, engine, None, dry_run=True, progress=lambda done, total: calls.append((done, total)))
    assert calls == [(done, EXPECTED["bundles"]) for done in range(1, EXPECTED["bundles"] + 1)]


@pytest.mark.parametrize("consensus_n, candidate, validated", [(1, 0, 5), (2, 3, 2), (3, 5, 0)])
def test_an_anchor_is_validated_by_as_many_agreeing_submissions_as_consensus_n(
        captures: Path, engine: Engine, consensus_n: int, candidate: int, validated: int) -> None:
    """The two lorbus captures agree with each other; the other anchors stand alone."""
    summary = run_captures(captures, engine, None, dry_run=True, consensus_n=consensus_n)
    assert summary.to_dict()["anchors"] == {"raw": 0, "candidate": candidate, "validated": validated, "tier1": 0}


def test_a_replay_drafts_only_the_captures_the_tracker_has_not_counted(captures: Path, engine: Engine,
                                                                         drafted: list[str], tmp_path: Path) -> None:
    # The first run sees the first half of the captures, in a folder of its own.
    names = sorted(p.name for p in captures.iterdir() if p.is_dir())
    half = tmp_path / "half"
    half.mkdir()
    for name in names[: len(names) // 2]:
        shutil.copytree(captures / name, half / name)
    tracker_file = tmp_path / "tracker.sqlite"
    first = run_captures(half, engine, SqliteTracker(tracker_file)).to_dict()
    first_drafted = sorted(drafted)
    assert first["filed_new"] + first["plus_one"] == len(first_drafted) > 0
    # The whole folder into the same tracker: only the captures it had not counted are drafted.
    drafted.clear()
    whole = run_captures(captures, engine, SqliteTracker(tracker_file)).to_dict()
    assert not set(drafted) & set(first_drafted)
    assert len(drafted) == FILEABLE - len(first_drafted)
    assert whole["already_counted"] == len(first_drafted)
    assert whole["review_queued"] == UNKNOWN  # the review queue is the folder's own: this one's is new
    assert whole["filed_new"] + whole["plus_one"] == len(drafted)
    assert whole["filed_new"] + first["filed_new"] == EXPECTED["filed_new"]
    # And a second replay drafts nothing, with the summary a replay always gave.
    drafted.clear()
    again = run_captures(captures, engine, SqliteTracker(tracker_file)).to_dict()
    assert drafted == []
    assert again["already_counted"] == FILEABLE + UNKNOWN
    assert again["filed_new"] == again["plus_one"] == again["review_queued"] == 0
    # Worker processes have no tracker to ask: they draft, and the tracker answers the same.
    assert run_captures(captures, engine, SqliteTracker(tracker_file), jobs=2).to_dict() == again


# -- the spool and its replay ------------------------------------------------


def test_spool_tracker_writes_would_be_issues(captures: Path) -> None:
    data = run_json(captures, "--tracker", "spool")
    assert data["tracker"] == "spool"
    assert data["spooled"] == FILEABLE and data["filed_new"] == data["plus_one"] == 0
    assert data["review_queued"] == UNKNOWN
    assert not (captures / "_loop").exists()
    files = sorted((captures / "_dedup-queue").glob("*.json"))
    assert len(files) == ISSUES
    total = 0
    for path in files:
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert set(doc) == SPOOL_KEYS
        assert doc["kind"] == "would-be-issue" and doc["schema"] == SCHEMA
        assert path.name == f"{doc['dedup_hash']}.json"
        assert doc["canonical"]["dedup_hash"] == doc["dedup_hash"]
        key = DedupKey(*doc["canonical"]["tuple_ordered"])
        assert key.digest() == doc["dedup_hash"]
        assert TUPLE_MARKER in doc["body"] and body_tuple_matches(doc["body"], key)
        assert doc["labels"][:2] == [f"loop:dedup-{doc['dedup_hash']}", f"class:{key.failure_class}"]
        assert doc["title"].endswith(f"(dedup {doc['dedup_hash']})")
        subs = [o["submission"] for o in doc["occurrences"]]
        assert len(subs) == len(set(subs))
        assert len(subs) == (2 if doc["dedup_hash"] == REPEATED else 1)
        total += len(subs)
    assert total == FILEABLE
    # Spooling again adds nothing.
    before = tree(captures / "_dedup-queue")
    again = run_json(captures, "--tracker", "spool")
    assert again["spooled"] == 0 and again["already_counted"] == FILEABLE + UNKNOWN
    assert tree(captures / "_dedup-queue") == before


def test_spool_replay_drains_exactly_once(captures: Path) -> None:
    run_json(captures, "--tracker", "spool")
    out = invoke("spool", "replay", captures, "--tracker", "sqlite").stdout
    assert out.strip() == ("replayed 12 spool file(s) into sqlite: opened 12, plusone 1; "
                           "12 drained, 0 still spooled")
    assert list((captures / "_dedup-queue").glob("*.json")) == []
    issues, occ = db_rows(captures)
    assert len(issues) == ISSUES and len(occ) == FILEABLE
    out = invoke("spool", "replay", captures, "--tracker", "sqlite").stdout
    assert out.strip() == "replayed 0 spool file(s) into sqlite: nothing to do; 0 drained, 0 still spooled"
    assert db_rows(captures) == (issues, occ)
    # The replayed occurrences are the ones a sqlite run would have filed.
    data = run_json(captures)
    assert data["filed_new"] == data["plus_one"] == 0
    assert data["already_counted"] == FILEABLE + UNKNOWN
    assert db_rows(captures) == (issues, occ)


def test_spool_replay_into_the_spool_is_refused(captures: Path) -> None:
    result = invoke("spool", "replay", captures, "--tracker", "spool", code=2)
    assert "replaying the spool into itself" in result.stderr


def test_a_replay_whose_tracker_cannot_open_says_why_and_keeps_the_spool(captures: Path) -> None:
    run_json(captures, "--tracker", "spool")
    (captures / "_loop").write_text("not a folder\n")  # where the SQLite tracker's folder goes
    result = invoke("spool", "replay", captures, code=2)
    assert "_loop: is a file where the tracker's folder goes" in result.stderr and "replayed" not in result.stdout
    assert len(list((captures / "_dedup-queue").glob("*.json"))) == 12


def test_spool_replay_after_a_sqlite_run_counts_nothing_twice(captures: Path) -> None:
    run_json(captures, "--tracker", "spool")
    run_json(captures)  # the same occurrences filed directly
    issues, occ = db_rows(captures)
    out = invoke("spool", "replay", captures).stdout
    assert "already-counted 13" in out and "12 drained" in out
    assert db_rows(captures) == (issues, occ)


@pytest.mark.parametrize("command", [("run", "CAPTURES"), ("run", "CAPTURES", "--tracker", "spool"),
                                     ("run", "CAPTURES", "--dry-run"), ("spool", "replay", "CAPTURES")])
def test_a_repo_given_to_a_local_tracker_is_refused_before_anything_is_filed(captures: Path,
                                                                              command: tuple[str, ...]) -> None:
    """`run captures --repo acme/rig` without --tracker github filed into SQLite, quietly."""
    if command[0] == "spool":
        run_json(captures, "--tracker", "spool")
    spooled = sorted(p.name for p in (captures / "_dedup-queue").glob("*.json")) if command[0] == "spool" else []
    argv = [str(captures) if arg == "CAPTURES" else arg for arg in command]
    result = invoke(*argv, "--repo", "acme/rig", code=2)
    assert "--repo acme/rig: the " in result.stderr and " takes no repository; give --tracker github to file " \
        "into GitHub" in result.stderr
    assert not (captures / "_loop" / "tracker.sqlite").exists()
    assert sorted(p.name for p in (captures / "_dedup-queue").glob("*.json")) == spooled


# -- browsing ------------------------------------------------------------------


def test_tracker_list_and_show(captures: Path) -> None:
    run_json(captures)
    listed = json.loads(invoke("tracker", "list", captures, "--format", "json").stdout)
    assert [i["id"] for i in listed] == list(range(1, ISSUES + 1))
    assert sum(i["occurrences"] for i in listed) == FILEABLE
    assert {i["dedup_hash"]: i["occurrences"] for i in listed}[REPEATED] == 2
    assert all(i["state"] == "open" for i in listed)
    assert {i["failure_class"] for i in listed} == set(BY_CLASS) - {"benign-cold-start", "unknown"}

    table = invoke("tracker", "list", captures).stdout.splitlines()
    assert table[0].split() == ["#", "COUNT", "CLASS", "DEDUP", "TITLE"]
    assert table[-1] == f"{ISSUES} issue(s), {FILEABLE} occurrence(s)"
    assert sum(REPEATED in line for line in table) == 1

    number = next(i["id"] for i in listed if i["dedup_hash"] == REPEATED)
    shown = invoke("tracker", "show", captures, str(number)).stdout
    lines = shown.splitlines()
    assert lines[0].startswith(f"#{number} [loop][genuine-oom] ") and lines[0].endswith(f"(dedup {REPEATED})")
    assert lines[1] == f"labels: arch:qwen2forcausallm, class:genuine-oom, loop:dedup-{REPEATED}"
    assert lines[2] == "state: open; occurrences: 2"
    assert TUPLE_MARKER in shown
    occ_lines = lines[lines.index("occurrences:") + 1:]
    assert len(occ_lines) == 2 and all("qwen-qwen2.5-32b-instruct-awq" in line for line in occ_lines)

    by_hash = json.loads(invoke("tracker", "show", captures, REPEATED, "--format", "json").stdout)
    assert by_hash["id"] == number and by_hash["occurrences"] == 2
    assert by_hash["labels"] == ["arch:qwen2forcausallm", "class:genuine-oom", f"loop:dedup-{REPEATED}"]
    assert len(by_hash["occurrence_list"]) == 2
    parsed = parse_body_tuple(by_hash["body"])
    assert parsed is not None and DedupKey(*parsed).digest() == REPEATED

    missing = invoke("tracker", "show", captures, "999", code=2)
    assert missing.stderr == f"Error: {captures}: no issue '999' in the tracker\n"  # a number, not a short hash


def test_tracker_list_before_any_run(captures: Path) -> None:
    result = invoke("tracker", "list", captures, code=2)
    assert "no tracker yet" in result.stderr
    assert not (captures / "_loop").exists()


def test_a_file_where_the_tracker_folder_goes_is_named_by_run_and_tracker_list(captures: Path) -> None:
    """tracker list said "no tracker yet; run ... first", and that run then failed with
    "cannot make the tracker's folder: File exists"."""
    (captures / "_loop").write_text("notes\n")
    expected = f"Error: {captures}/_loop: is a file where the tracker's folder goes; move it aside\n"
    assert invoke("tracker", "list", captures, code=2).stderr == expected
    assert invoke("run", captures, code=2).stderr.endswith(expected)
    assert (captures / "_loop").read_text() == "notes\n"


def test_tracker_list_after_a_spool_run_points_at_the_spool(captures: Path) -> None:
    """After `run --tracker spool` it said "no tracker yet; run `loop-rules run X` first",
    a run the maintainer had just made: the failures wait in the spool, for `spool replay`."""
    run_json(captures, "--tracker", "spool")
    for command in (("tracker", "list", captures), ("tracker", "show", captures, "1")):
        result = invoke(*command, code=2)
        assert result.stderr == (f"Error: {captures}/_loop/tracker.sqlite: no tracker yet; 12 spool file(s) wait "
                                 f"in {captures}/_dedup-queue: `loop-rules spool replay {captures}` files them "
                                 "into it\n")
    invoke("spool", "replay", captures)
    assert invoke("tracker", "list", captures).stdout.endswith("12 issue(s), 13 occurrence(s)\n")


def test_review_list(captures: Path) -> None:
    empty = invoke("review", "list", captures).stdout
    assert empty.strip().endswith("0 item(s) waiting for review (0 occurrence(s))")
    run_json(captures)
    items = json.loads(invoke("review", "list", captures, "--format", "json").stdout)
    assert len(items) == UNKNOWN
    for item in items:
        assert item["kind"] == "review-queue" and item["schema"] == SCHEMA
        assert Path(item["_path"]).name == f"{item['dedup_hash']}.json"
        assert item["canonical"]["tuple"]["failure_class"] == "unknown"
        assert len(item["occurrences"]) == 1
        assert item["reason"].startswith(("no rule matched", "rule "))
    table = invoke("review", "list", captures).stdout.splitlines()
    assert table[0].split()[:3] == ["DEDUP", "COUNT", "MODEL"]
    assert table[-1] == f"{UNKNOWN} item(s) waiting for review ({UNKNOWN} occurrence(s))"
    assert sum(line.startswith(tuple(i["dedup_hash"] for i in items)) for line in table) == UNKNOWN


def test_a_review_entry_names_its_capture_and_why_it_waits_and_scrubs_its_final_error(tmp_path: Path) -> None:
    from loop_core.testing import make_bundle, write_bundle

    failure = "RuntimeError: the widget jammed, token hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 in /home/alice/run.py"
    write_bundle(tmp_path / "c" / "m" / "20260801T093000Z", make_bundle({"pt3": {"failure_log_excerpt": failure}}))
    shutil.copytree(EXAMPLES / "deepseek-ai-deepseek-r1-distill-qwen-32b", tmp_path / "c" / "deepseek")
    run_json(tmp_path / "c")
    by_model = {entry["model_slug"]: entry for entry in review_files(tmp_path / "c").values()}
    ours = by_model["example/Example-7B"]
    assert (ours["utc_ts"], ours["reason"]) == ("20260801T093000Z", "no rule matched (tier none-unknown)")
    assert ours["final_error"].startswith("RuntimeError: the widget jammed, token hf_")
    assert "AbCdEf" not in ours["final_error"] and "alice" not in ours["final_error"]
    decided = by_model["deepseek-ai/DeepSeek-R1-Distill-Qwen-32B"]
    assert decided["reason"] == "rule unknown-host-ram-oom-kill decided unknown"


def test_review_list_counts_the_occurrences_run_queued(captures: Path) -> None:
    """A second capture of an unknown failure is one more occurrence of its entry: run
    said "6 newly queued" where review list said "5 item(s)", and nothing in the table's
    last line told the two apart (tracker list counts issues and occurrences)."""
    again = captures / "qwen-qwen3-14b" / "20261127T101112Z"
    shutil.copytree(captures / "qwen-qwen3-14b" / "20261126T101112Z", again)
    manifest = json.loads((again / "manifest.json").read_text(encoding="utf-8"))
    manifest["submission_fingerprint"] = "f" * 64
    (again / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert run_json(captures)["review_queued"] == UNKNOWN + 1
    table = invoke("review", "list", captures).stdout.splitlines()
    assert table[-1] == f"{UNKNOWN} item(s) waiting for review ({UNKNOWN + 1} occurrence(s))"


# -- parallelism and bad input --------------------------------------------------


def _relative_errors(data: dict[str, Any], root: Path) -> list[tuple[str, str]]:
    return [(str(Path(e["bundle"]).relative_to(root)), e["message"].replace(str(root), "<root>"))
            for e in data["errors"]]


def test_jobs_2_gives_the_same_summary_as_jobs_1(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    copy_examples(one)
    copy_examples(two)
    a = run_json(one, "--jobs", "1")
    b = run_json(two, "--jobs", "2")
    assert _relative_errors(a, one) == _relative_errors(b, two)
    a.pop("errors")
    b.pop("errors")
    assert a == b
    assert summary_part(a) == EXPECTED
    # Same issues, same order, same bodies.
    ia, oa = db_rows(one)
    ib, ob = db_rows(two)
    assert ia == ib
    assert [(s, h) for s, h, _ in oa] == [(s, h) for s, h, _ in ob]
    assert review_files(one).keys() == review_files(two).keys()


def test_a_worker_killed_in_a_parallel_run_stops_it_with_one_clear_error(captures: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """--jobs 2 reads and classifies in worker processes: one the system kills is said so."""
    import signal

    from loop_core import pipeline

    real, command = pipeline.process_bundle, os.getpid()

    def killed_at_qwen3_14b(path: Any, *args: Any, **kwargs: Any) -> Any:
        if "qwen-qwen3-14b" in str(path) and os.getpid() != command:  # as the kernel's OOM killer would
            os.kill(os.getpid(), signal.SIGKILL)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(pipeline, "process_bundle", killed_at_qwen3_14b)
    result = invoke("run", captures, "--jobs", "2", code=2)
    assert "was killed by signal 9 (out of memory?) before answering" in result.stderr
    assert "internal error" not in result.stderr


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")


def test_unreadable_bundles_are_counted_and_listed_never_fatal(captures: Path) -> None:
    good = captures / "qwen-qwen3-14b" / "20261126T101112Z"
    bad_json = captures / "zz-bad-json" / "20261201T000000Z"
    shutil.copytree(good, bad_json)
    _write(bad_json / "manifest.json", '{"schema": 1, "model": ')
    not_utf8 = captures / "zz-not-utf8" / "20261201T000000Z"
    shutil.copytree(good, not_utf8)
    _write(not_utf8 / "pt3-boot.json", b'{"ok": false, "failure": "\xff\xfe"}')
    lonely = captures / "zz-only-pt1" / "20261201T000000Z"
    _write(lonely / "pt1-gate.json", "{}")
    not_object = captures / "zz-array" / "20261201T000000Z"
    shutil.copytree(good, not_object)
    _write(not_object / "manifest.json", "[1, 2, 3]")

    data = run_json(captures)
    assert data["bundles"] == 28 and data["reader_errors"] == 5
    listed = sorted(Path(e["bundle"]).relative_to(captures).parts[0] for e in data["errors"])
    assert listed == ["broken-upload", "zz-array", "zz-bad-json", "zz-not-utf8", "zz-only-pt1"]
    assert all(e["message"] for e in data["errors"])
    # Everything else went through as usual.
    assert data["filed_new"] == EXPECTED["filed_new"] and data["review_queued"] == UNKNOWN
    out = invoke("run", captures, "--jobs", "2").stdout
    assert "unreadable bundles: 5" in out
    for name in listed:
        assert name in out


def test_run_on_an_empty_folder(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    data = run_json(empty)
    assert data["bundles"] == 1 and data["reader_errors"] == 1  # the folder itself is reported
    assert data["filed_new"] == 0


def test_captures_paths_do_not_leak_between_runs(captures: Path) -> None:
    """A run never touches anything outside its captures folder."""
    parent = captures.parent
    before = sorted(p.name for p in parent.iterdir())
    run_json(captures)
    run_json(captures, "--tracker", "spool")
    assert sorted(p.name for p in parent.iterdir()) == before


# -- batching and memory ------------------------------------------------------------


class RecordingSqlite(SqliteTracker):
    """The SQLite tracker, noting the size of every batch it is handed."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.batches: list[int] = []

    def file_many(self, items, *, batch=256):  # type: ignore[no-untyped-def]
        self.batches.append(len(items))
        return super().file_many(items, batch=batch)


def test_batched_filing_gives_the_same_run_as_filing_one_by_one(tmp_path: Path, engine: Engine,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import pipeline

    monkeypatch.setattr(pipeline, "FLUSH_SECONDS", 3600.0)  # batches close on size only, however slow the machine
    one, many = tmp_path / "one", tmp_path / "many"
    copy_examples(one)
    copy_examples(many)
    t1 = RecordingSqlite(one / "_loop" / "tracker.sqlite")
    t2 = RecordingSqlite(many / "_loop" / "tracker.sqlite")
    try:
        a = run_captures(one, engine, t1, batch=1)
        b = run_captures(many, engine, t2, batch=5)
        again = run_captures(many, engine, t2, batch=5)
    finally:
        t1.close()
        t2.close()
    assert t1.batches == []  # batch=1: file() per occurrence
    assert t2.batches == [5, 5, 3] * 2  # 13 fileable occurrences, in batches of at most 5
    da, db = a.to_dict(), b.to_dict()
    assert _relative_errors(da, one) == _relative_errors(db, many)
    da.pop("errors")
    db.pop("errors")
    assert da == db and summary_part({**db, "errors": []}) == EXPECTED
    assert again.already_counted == FILEABLE + UNKNOWN and again.filed_new == again.plus_one == 0
    ia, oa = db_rows(one)
    ib, ob = db_rows(many)
    assert ia == ib  # same issues, same numbers, same bodies
    assert [(s, h) for s, h, _ in oa] == [(s, h) for s, h, _ in ob]
    assert {h: json.dumps(d).replace(str(one), "<root>") for h, d in review_files(one).items()} == \
        {h: json.dumps(d).replace(str(many), "<root>") for h, d in review_files(many).items()}


def test_a_batch_that_waited_long_enough_is_filed_before_it_is_full(captures: Path, engine: Engine,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import pipeline

    monkeypatch.setattr(pipeline, "FLUSH_SECONDS", 0.0)
    tracker = RecordingSqlite(captures / "_loop" / "tracker.sqlite")
    try:
        summary = run_captures(captures, engine, tracker)
    finally:
        tracker.close()
    assert tracker.batches == [1] * FILEABLE  # each flushed after its own bundle
    assert summary_part(summary.to_dict()) == EXPECTED


def test_no_failure_waits_in_a_batch_longer_than_the_flush_time(captures: Path, engine: Engine,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait is counted from a batch's oldest failure: counted from its newest, a
    steady stream of failures kept the first of them waiting until the batch was full."""
    from types import SimpleNamespace

    from loop_core import pipeline
    from loop_core.batch import discover_bundle_paths
    from loop_core.trackers import ReviewQueue

    clock = [0.0]  # one second a bundle
    monkeypatch.setattr(pipeline, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(pipeline, "FLUSH_SECONDS", 2.0)
    monkeypatch.setattr(pipeline, "REVIEW_FLUSH_SECONDS", 2.0)
    arrived = {path: float(i) for i, path in enumerate(discover_bundle_paths([captures]))}
    waits: dict[str, list[float]] = {"tracker": [], "review queue": []}

    def waited(where: str, items: Any) -> None:
        waits[where].append(clock[0] - min(arrived[occurrence.bundle] for _item, occurrence in items))

    class Timed(SqliteTracker):
        def file_many(self, items, *, batch=256):  # type: ignore[no-untyped-def]
            waited("tracker", items)
            return super().file_many(items, batch=batch)

    add_many = ReviewQueue.add_many

    def timed(self: ReviewQueue, items: Any, problems: Any = None) -> Any:
        waited("review queue", items)
        return add_many(self, items, problems)

    monkeypatch.setattr(ReviewQueue, "add_many", timed)
    tracker = Timed(captures / "_loop" / "tracker.sqlite")
    try:
        summary = run_captures(captures, engine, tracker, progress=lambda done, _total: clock.__setitem__(0, done))
    finally:
        tracker.close()
    assert summary_part(summary.to_dict()) == EXPECTED
    assert len(waits["tracker"]) > 1 and len(waits["review queue"]) > 1
    assert max(waits["tracker"] + waits["review queue"]) <= 2.0


@pytest.mark.parametrize("factor, batch", [(4, 2), (1, 2), (4, 1)])
def test_review_batches_keep_their_own_schedule(factor: int, batch: int, captures: Path, engine: Engine,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Unknowns wait for a larger batch than fileable failures: the tracker's batches
    going out after every bundle do not cut the review queue's into pieces. With a
    batch of 1 (`run --batch 1`), each one is written at once."""
    from loop_core import pipeline
    from loop_core.trackers import ReviewQueue

    monkeypatch.setattr(pipeline, "FLUSH_SECONDS", 0.0)  # a tracker batch after every bundle
    monkeypatch.setattr(pipeline, "REVIEW_FLUSH_SECONDS", 3600.0)
    monkeypatch.setattr(pipeline, "REVIEW_BATCH_FACTOR", factor)  # review batches of 8 or of 2, or 1
    sizes: list[int] = []
    add_many = ReviewQueue.add_many

    def recording(self: ReviewQueue, items: Any, problems: Any = None) -> Any:
        sizes.append(len(items))
        return add_many(self, items, problems)

    monkeypatch.setattr(ReviewQueue, "add_many", recording)
    tracker = RecordingSqlite(captures / "_loop" / "tracker.sqlite")
    try:
        summary = run_captures(captures, engine, tracker, batch=batch)
    finally:
        tracker.close()
    assert tracker.batches == ([1] * FILEABLE if batch > 1 else [])  # with batch 1, file() one by one
    expected = {(4, 2): [UNKNOWN], (1, 2): [2] * (UNKNOWN // 2) + [1] * (UNKNOWN % 2), (4, 1): [1] * UNKNOWN}
    assert sizes == expected[factor, batch]
    assert summary_part(summary.to_dict()) == EXPECTED and len(review_files(captures)) == UNKNOWN


def test_anchors_spilled_to_disk_give_the_same_trust_counts(captures: Path, engine: Engine,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import pipeline

    monkeypatch.setattr(pipeline, "ANCHORS_IN_MEMORY", 1)  # every anchor after the first goes to the temp file
    spilled: list[int] = []
    close = pipeline._Anchors.close

    def noting_close(self: pipeline._Anchors) -> None:
        spilled.append(self.spilled)
        close(self)

    monkeypatch.setattr(pipeline._Anchors, "close", noting_close)
    summary = run_captures(captures, engine, None, dry_run=True)
    assert spilled == [4]  # 5 anchors: 1 kept, 4 read back from the file
    assert summary.to_dict()["anchors"] == EXPECTED["anchors"]
    assert summary.would_file == FILEABLE


@pytest.mark.parametrize("disk", ["quick", "slow", "slow but short"])
def test_review_batches_move_off_the_callers_thread_once_a_write_is_slow(
        disk: str, captures: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from loop_core import pipeline
    from loop_core.trackers import ReviewQueue

    monkeypatch.setattr(pipeline, "REVIEW_FLUSH_SECONDS", 0.0)  # one review batch per unknown
    if disk == "slow":  # every batch counts as slow
        monkeypatch.setattr(pipeline, "REVIEW_SYNC_LIMIT", 0.0)
        monkeypatch.setattr(pipeline, "REVIEW_STALL", 0.0)
    elif disk == "quick":
        monkeypatch.setattr(pipeline, "REVIEW_SYNC_LIMIT", 60.0)
    else:  # slow for each file, but no batch stalls the run long enough to count
        monkeypatch.setattr(pipeline, "REVIEW_SYNC_LIMIT", 0.0)
        monkeypatch.setattr(pipeline, "REVIEW_STALL", 60.0)
    calls: list[tuple[str, list[str]]] = []
    add_many = ReviewQueue.add_many

    def recording(self: ReviewQueue, items: Any, problems: Any = None) -> Any:
        calls.append((threading.current_thread().name, [occ.bundle for _payload, occ in items]))
        return add_many(self, items, problems)

    monkeypatch.setattr(ReviewQueue, "add_many", recording)
    tracker = SqliteTracker.for_captures(captures)
    try:
        summary = run_captures(captures, engine, tracker)
    finally:
        tracker.close()
    assert summary_part(summary.to_dict()) == EXPECTED  # every batch counted by the end
    names = [name for name, _bundles in calls]
    assert len(calls) == UNKNOWN and names[0] == threading.current_thread().name
    writer = [name.startswith("loop-rules-review") for name in names[1:]]
    assert all(writer) if disk == "slow" else not any(writer)
    assert [bundles for _name, (bundles) in calls] == sorted(bundles for _name, bundles in calls)  # in order
    assert len(review_files(captures)) == UNKNOWN
    assert "loop-rules-review" not in " ".join(t.name for t in threading.enumerate())  # the writer stopped


def test_a_failing_review_write_stops_the_run_and_keeps_the_batches_before_it(
        captures: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import pipeline
    from loop_core.errors import TrackerError
    from loop_core.trackers import ReviewQueue

    monkeypatch.setattr(pipeline, "REVIEW_FLUSH_SECONDS", 0.0)
    add_many = ReviewQueue.add_many
    seen: list[int] = []

    def failing_third(self: ReviewQueue, items: Any, problems: Any = None) -> Any:
        seen.append(len(items))
        if len(seen) == 3:
            raise TrackerError("disk full")
        return add_many(self, items, problems)

    monkeypatch.setattr(ReviewQueue, "add_many", failing_third)
    tracker = SqliteTracker.for_captures(captures)
    try:
        with pytest.raises(TrackerError, match="disk full"):
            run_captures(captures, engine, tracker)
    finally:
        tracker.close()
    assert len(review_files(captures)) == 2  # the two batches written before the failure stay
    # The rerun queues the rest and counts nothing twice.
    monkeypatch.setattr(ReviewQueue, "add_many", add_many)
    again = run_json(captures)
    assert again["review_queued"] == UNKNOWN - 2 and len(review_files(captures)) == UNKNOWN


def test_a_key_too_long_for_any_issue_is_refused_not_filed_again_each_run(captures: Path) -> None:
    source = captures / "meta-llama-llama-3.1-8b-instruct"
    [original] = list(source.iterdir())
    huge = "acme/" + "m" * 70_000
    for name in ("a", "b"):  # two captures of the same failure
        target = captures / "zz-huge" / name
        shutil.copytree(original, target)
        manifest = json.loads((target / "manifest.json").read_text(encoding="utf-8"))
        manifest.update(model=huge, model_id=huge, submission_fingerprint=name * 64)
        (target / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    # A dry run says so too: it counted both as failures that "would be filed".
    dry = run_json(captures, "--dry-run")
    for _ in range(2):
        data = run_json(captures)
        refused = [e for e in data["errors"] if "zz-huge" in e["bundle"]]
        assert len(refused) == 2 and all("dedup key takes" in e["message"] for e in refused)
    issues, _occ = db_rows(captures)
    assert len(issues) == ISSUES  # the examples' issues, none for the refused key
    assert dry["errors"] == data["errors"] and dry["by_class"] == data["by_class"] == BY_CLASS
    assert dry["would_file"] == FILEABLE


def test_a_review_folder_that_cannot_be_written_is_a_clear_error(captures: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from loop_core import trackers

    def full(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(trackers, "write_texts_many", full)
    result = invoke("run", captures, code=2)
    assert "_review-queue: cannot write" in result.stderr and "No space left on device" in result.stderr
    assert "internal error" not in result.stderr


# Past 4300 digits int() refuses the text, and SQLite a byte that is not UTF-8 (held as a
# lone surrogate): both ended as an internal error (status 70). Nor does SQLite take an
# integer of 2**63 or more.
@pytest.mark.parametrize("ref", ["99999999999999999999999", "\u00b2", "\u0661", "9" * 5000, os.fsdecode(b"7\xff"),
                                 str(2**63), "9" * 19])
def test_tracker_show_of_an_odd_number_is_no_issue(captures: Path, ref: str) -> None:
    run_json(captures)
    result = invoke("tracker", "show", captures, ref, code=2)
    assert f"no issue {ref!r} in the tracker" in result.stderr


def test_tracker_show_reads_a_number_past_its_leading_zeros(captures: Path) -> None:
    """However many zeros lead it: only digits past them count towards the 19 an issue number may have."""
    run_json(captures)
    for ref in ("0" * 30 + "7", "#" + "0" * 30 + "7"):
        assert json.loads(invoke("tracker", "show", captures, ref, "--format", "json").stdout)["id"] == 7, ref


def test_tracker_show_finds_a_dedup_hash_made_of_digits(captures: Path) -> None:
    """One hash in 300 is all digits: it was read as an issue number, and with leading
    zeros as another issue's number."""
    run_json(captures)
    db = sqlite3.connect(captures / "_loop" / "tracker.sqlite")
    with db:
        db.execute("UPDATE issues SET dedup_hash = '000000000001' WHERE id = 3")
    db.close()
    by_hash = json.loads(invoke("tracker", "show", captures, "000000000001", "--format", "json").stdout)
    assert by_hash["id"] == 3
    assert json.loads(invoke("tracker", "show", captures, "1", "--format", "json").stdout)["id"] == 1
    assert "no issue '000000000002'" in invoke("tracker", "show", captures, "000000000002", code=2).stderr


def _read_only_mount_works() -> bool:
    import shutil as sh

    if sh.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount --bind / /mnt && mount -o remount,bind,ro /mnt"],
                           capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.skipif(not _read_only_mount_works(), reason="needs mount namespaces (unshare -m) to mount read-only")
def test_browsing_a_read_only_captures_folder_works(captures: Path) -> None:
    """tracker list/show and review list only read, yet needed to write: on a snapshot or
    a read-only mount they failed with 'unable to open database file'."""
    run_json(captures)
    script = ("mount --bind \"$1\" \"$1\" && mount -o remount,bind,ro \"$1\" && touch \"$1/x\" 2>/dev/null && exit 9; "
              f"{sys.executable} -m loop_core tracker list \"$1\" && {sys.executable} -m loop_core tracker show \"$1\" 1 "
              f"&& {sys.executable} -m loop_core review list \"$1\"")
    result = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(captures)], capture_output=True,
                            text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "12 issue(s), 13 occurrence(s)" in result.stdout and "#1 [loop]" in result.stdout
    assert "5 item(s) waiting for review" in result.stdout
    # A run killed after a write leaves it in the -wal file, which the read-only fallback
    # cannot read: said, not an old state shown as the tracker's.
    db = captures / "_loop" / "tracker.sqlite"
    killed = ("import os, sqlite3, sys\ndb = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
              "db.execute('PRAGMA wal_autocheckpoint = 0')\n"
              "db.execute(\"UPDATE issues SET title = 'edited' WHERE id = 1\")\nos._exit(0)\n")
    subprocess.run([sys.executable, "-c", killed, str(db)], check=True)
    (db.parent / "tracker.sqlite-shm").unlink()
    assert (db.parent / "tracker.sqlite-wal").stat().st_size > 0
    result = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(captures)], capture_output=True,
                            text=True, check=False, timeout=120)
    assert result.returncode == 2
    assert "a run's last changes wait in tracker.sqlite-wal" in result.stderr


def test_a_dry_run_refuses_a_tracker_the_real_run_would(captures: Path) -> None:
    result = invoke("run", captures, "--dry-run", "--tracker", "jira", code=2)
    assert "--tracker 'jira': unknown tracker (trackers: github, spool, sqlite)" in result.stderr


def test_the_browse_hint_can_be_pasted_into_a_shell(tmp_path: Path) -> None:
    odd = copy_examples(tmp_path / "sp ü dir" / "caps")
    last = invoke("run", odd).stdout.splitlines()[-1]
    assert last == f"browse: loop-rules tracker list '{odd}'"


TITLE = "\x1b]0;OWNED\x07"  # sets the terminal's title; not a colour, so no output strips it


def _pasted(word: str) -> bytes:
    """What bash makes of ``word`` pasted into a command line."""
    return subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, check=True).stdout


def test_a_captures_folder_named_with_an_escape_cannot_drive_the_terminal(tmp_path: Path) -> None:
    """A glob over uploads (``loop-rules run captures/*``) passes folder names nobody
    typed: the run's header and its browse hint wrote them to the terminal as they were."""
    odd = copy_examples(tmp_path / f"caps{TITLE}")
    out = CliRunner().invoke(cli, ["run", str(odd)], color=True).stdout
    assert "\x1b" not in out and "\x07" not in out
    assert f"24 bundle(s) under {tmp_path}/caps\\x1b]0;OWNED\\x07, rules_version" in out
    hint = out.splitlines()[-1].removeprefix("browse: loop-rules tracker list ")
    assert hint.startswith("$'") and _pasted(hint) == os.fsencode(odd)  # pasted, it names the folder


@pytest.mark.parametrize("name", ["plain", "sp ace", "it's", "a\\b", f"t{TITLE}", "nl\nx", "zw\u200bj",
                                  os.fsdecode(b"not-utf8-\xff")])
def test_a_shell_word_names_the_same_thing_in_bash_and_prints_safely(name: str) -> None:
    from loop_core.cli import _shell_word

    word = _shell_word(name)
    assert word.isprintable() and word.encode("utf-8")  # no lone surrogate: any terminal takes it
    assert _pasted(word) == os.fsencode(name)


def test_a_report_written_to_a_file_named_with_an_escape_says_so_safely(captures: Path) -> None:
    out = captures.parent / f"r{TITLE}.html"
    said = CliRunner().invoke(cli, ["report", str(captures), "--out", str(out)], color=True).stdout
    assert out.is_file() and said.startswith(f"wrote {captures.parent}/r\\x1b]0;OWNED\\x07.html (24 bundle(s)")


def test_an_error_naming_a_folder_with_an_escape_quotes_it(tmp_path: Path) -> None:
    """An error's one line names the folder given; main() writes it escaped."""
    odd = copy_examples(tmp_path / f"caps{TITLE}")
    result = subprocess.run([sys.executable, "-m", "loop_core", "tracker", "show", str(odd), "99"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert result.stderr.startswith(f"Error: {tmp_path}/caps\\x1b]0;OWNED\\x07/_loop/tracker.sqlite: no tracker yet")
    hint = result.stderr.split("`loop-rules run ", 1)[1].split("`", 1)[0]
    assert _pasted(hint) == os.fsencode(odd)



def test_capture_text_cannot_drive_the_terminal(captures: Path) -> None:
    escape = "\x1b]0;OWNED\x07\x1b[2J"
    for path in captures.rglob("manifest.json"):
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if manifest.get("schema") == 1:
            manifest["utc_ts"] = manifest["utc_ts"] + escape
            manifest["model"] = manifest["model"] + escape
            path.write_text(json.dumps(manifest), encoding="utf-8")
    run_json(captures)
    outputs = [invoke("review", "list", captures).stdout, invoke("tracker", "show", captures, "1").stdout]
    for out in outputs:
        assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;OWNED\\x07" in outputs[1]  # shown, escaped


def test_an_unknown_from_a_tier1_plugin_is_still_queued_for_review(tmp_path: Path) -> None:
    """Tier-1 verdicts never say review_queue (CONTRACTS §3.7), yet the run has always
    queued their unknowns; only the exact table's decided unknowns are dismissed."""
    from loop_core import Match, Matcher, Tier, hookimpl, make_plugin_manager
    from loop_core.testing import make_bundle, write_bundle

    class BusFault:
        @hookimpl
        def loop_register_matchers(self, register: Any) -> None:
            register(Matcher("acme-bus", Tier.TIER1, 5, lambda ctx: Match("unknown", "acme-bus")
                             if "fallen off the bus" in ctx.view.signal("error_text_lower") else None))

    write_bundle(tmp_path / "c" / "m" / "1", make_bundle("NVRM: Xid 79, GPU has fallen off the bus."))
    engine = Engine.build("default", make_plugin_manager(entry_points=False, plugins=[BusFault()]))
    tracker = SqliteTracker.for_captures(tmp_path / "c")
    try:
        summary = run_captures(tmp_path / "c", engine, tracker)
    finally:
        tracker.close()
    assert (summary.review_queued, summary.dismissed) == (1, 0)
    assert len(list((tmp_path / "c" / "_review-queue").glob("*.json"))) == 1


def test_a_fifo_or_device_in_the_review_queue_is_skipped_not_waited_on(captures: Path) -> None:
    """A FIFO in place of an entry made `review list`, `report` and `run` wait forever,
    and a link to /dev/zero read until memory ran out."""
    queue = captures / "_review-queue"
    queue.mkdir()
    os.mkfifo(queue / "53882704cbe1.json")
    (queue / "aaaaaaaaaaaa.json").symlink_to("/dev/zero")
    result = subprocess.run([sys.executable, "-m", "loop_core", "review", "list", str(captures)],
                            capture_output=True, text=True, timeout=60, check=True)
    assert "53882704cbe1.json: not a regular file; remove it" in result.stderr
    assert "aaaaaaaaaaaa.json: not a regular file; remove it" in result.stderr
    result = subprocess.run([sys.executable, "-m", "loop_core", "run", str(captures), "--format", "json"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr  # the run goes past the skipped entries
    summary = json.loads(result.stdout)
    assert any("53882704cbe1.json: not a regular file" in w for w in summary["warnings"])
    assert summary["filed_new"] > 0


def test_a_damaged_review_entry_is_skipped_and_the_run_goes_on(captures: Path, tmp_path: Path) -> None:
    """It stopped the run (status 2) at the first review batch, and with it the filing of
    every other failure; `review list` and settling already left such a file alone."""
    clean = tmp_path / "clean"
    copy_examples(clean)
    expected = json.loads(invoke("run", str(clean), "--format", "json").output)
    damaged = captures / "_review-queue" / "53882704cbe1.json"
    damaged.parent.mkdir()
    damaged.write_text('{"dedup_hash": ', encoding="utf-8")
    summary = json.loads(invoke("run", str(captures), "--format", "json").output)
    assert damaged.read_text(encoding="utf-8") == '{"dedup_hash": '  # left for a person
    assert (summary["filed_new"], summary["plus_one"]) == (expected["filed_new"], expected["plus_one"])
    assert summary["review_queued"] == expected["review_queued"] - 1 and summary["review_skipped"] == 1
    # The counts still add up (by_class = the fates of the failures).
    assert sum(summary["by_class"].values()) == sum(summary[k] for k in (
        "filed_new", "plus_one", "already_counted", "review_queued", "review_skipped", "suppressed", "dismissed",
        "spooled"))
    (warning,) = [w for w in summary["warnings"] if w.startswith("review queue: ")]
    assert "53882704cbe1.json: unreadable file" in warning and warning.endswith("; not queued")
    assert summary["warnings"][warning] == 1  # the bundles not queued, as every warning counts
    assert sorted(p.name for p in damaged.parent.glob("*.json")) == sorted(
        p.name for p in (clean / "_review-queue").glob("*.json"))


def test_tracker_show_takes_a_hash_sign_an_upper_case_hash_and_a_hash_prefix(captures: Path) -> None:
    """`#7` (as the list and the titles write numbers), a hash copied in upper case and
    the first digits of a hash were each "no issue"."""
    run_json(captures)
    number = next(i["id"] for i in json.loads(invoke("tracker", "list", captures, "--format", "json").stdout)
                  if i["dedup_hash"] == REPEATED)
    for ref in (f"#{number}", REPEATED.upper(), REPEATED[:6], REPEATED[:8].upper(), REPEATED[:11]):
        assert json.loads(invoke("tracker", "show", captures, ref, "--format", "json").stdout)["id"] == number, ref
    assert invoke("tracker", "show", captures, REPEATED[:5], code=2).stderr == (
        f"Error: {captures}: no issue {REPEATED[:5]!r} in the tracker (a dedup hash prefix needs at least "
        "6 digits)\n")
    assert "no issue '#68d6198d1b55'" in invoke("tracker", "show", captures, f"#{REPEATED}", code=2).stderr


def test_tracker_show_names_the_issues_an_ambiguous_hash_prefix_matches(captures: Path) -> None:
    run_json(captures)
    db = sqlite3.connect(captures / "_loop" / "tracker.sqlite")
    with db:
        db.execute(f"UPDATE issues SET dedup_hash = '{REPEATED[:6]}000000' WHERE id = 3")
    db.close()
    result = invoke("tracker", "show", captures, REPEATED[:6], code=2)
    assert result.stderr == (f"Error: {captures}/_loop/tracker.sqlite: dedup hash prefix {REPEATED[:6]!r} "
                             f"matches 2 issues: #3 ({REPEATED[:6]}000000), #7 ({REPEATED}); give more of "
                             "the hash\n")
    assert json.loads(invoke("tracker", "show", captures, REPEATED[:7], "--format", "json").stdout)["id"] == 7


def test_a_hash_prefix_of_more_than_ten_issues_names_the_first_ten(captures: Path) -> None:
    """The message names at most ten issues, the first opened first, and says when there are more."""
    run_json(captures)
    db = sqlite3.connect(captures / "_loop" / "tracker.sqlite")
    for number, count in ((10, "10"), (11, "more than 10")):
        with db:
            db.execute("UPDATE issues SET dedup_hash = printf('abcdef%06d', 20 - id) WHERE id <= ?", (number,))
        named = ", ".join(f"#{i} (abcdef{20 - i:06d})" for i in range(1, 11))
        more = ", ..." if number > 10 else ""
        assert invoke("tracker", "show", captures, "ABCDEF", code=2).stderr == (
            f"Error: {captures}/_loop/tracker.sqlite: dedup hash prefix 'abcdef' matches {count} issues: {named}{more}; "
            "give more of the hash\n")
    db.close()


def test_tracker_show_of_a_review_queue_hash_points_at_the_queue(captures: Path) -> None:
    """An unknown failure is queued, not filed: its hash, copied from `run` or the
    queue's folder, was a bare "no issue"."""
    run_json(captures)
    queued = min(review_files(captures))
    entry = captures / "_review-queue" / f"{queued}.json"
    for ref in (queued, queued[:6].upper()):
        assert invoke("tracker", "show", captures, ref, code=2).stderr == (
            f"Error: {captures}: no issue {ref!r} in the tracker: it is review-queue entry {queued}, {entry} "
            f"(unknown failures wait there, not filed); `loop-rules review list {captures}` lists them\n")


def test_tracker_show_shortens_a_manifest_submission_to_16_digits_as_the_others(captures: Path) -> None:
    """A bundle without a submission fingerprint (a gate-only one) is identified by
    `manifest-<sha256>`: cut at 16 characters as a fingerprint is, it read
    `manifest-6530552`, seven digits where every other line shows sixteen."""
    run_json(captures)
    digest = "6530552" + "0123456789abcdef" * 3 + "012345678"
    db = sqlite3.connect(captures / "_loop" / "tracker.sqlite")
    with db:
        (fingerprint,) = db.execute("SELECT submission FROM occurrences WHERE dedup_hash = ? "
                                    "ORDER BY submission LIMIT 1", (REPEATED,)).fetchone()
        db.execute("UPDATE occurrences SET submission = ? WHERE submission = ?", (f"manifest-{digest}", fingerprint))
    db.close()
    lines = invoke("tracker", "show", captures, REPEATED).stdout.splitlines()
    shown = [line.split()[1] for line in lines[lines.index("occurrences:") + 1:]]
    assert f"manifest-{digest[:16]}" in shown
    assert [len(s.removeprefix("manifest-")) for s in shown] == [16, 16]
    # The bundles stay in one column.
    columns = {line.index(str(captures)) for line in lines[lines.index("occurrences:") + 1:]}
    assert len(columns) == 1


def test_tracker_show_prints_the_issue_body_line_by_line(captures: Path) -> None:
    run_json(captures)
    shown = invoke("tracker", "show", captures, "1").stdout
    assert "## Loop deduped failure issue" in shown.splitlines() and "\\n" not in shown


def test_run_table_lists_ten_warnings_and_counts_the_others(tmp_path: Path) -> None:
    from loop_core.testing import make_bundle, write_bundle

    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "pack.yml").write_text("regex_timeout: 0.01\n")
    (pack / "10.yml").write_text("".join(
        f"- {{id: slow{i}, class: unknown, description: d, examples: {{match: [aaaa]}}, "
        "when: {select: $.signal.error_text, regex: '^(a+)+$'}}\n"
        for i in range(12)))
    write_bundle(tmp_path / "captures" / "m" / "20260801T000000Z", make_bundle("a" * 50_000 + "!"))
    out = invoke("run", "--dry-run", "--rules", pack, tmp_path / "captures").stdout.splitlines()
    listed = out[out.index("warnings (bundles whose verdict carried each):") + 1:]
    assert len(listed) == 11 and all(line.endswith("timed out after 0.01s; the rule does not match")
                                     for line in listed[:10])
    assert listed[10] == "  ... 2 more in --format json"


def test_a_run_counts_each_warning_once_a_bundle_most_frequent_first_and_at_most_100(tmp_path: Path) -> None:
    """As docs/cli.md has the summary's warnings: the bundles whose verdict carried each
    message, most frequent first, at most 100 messages, the rest under one count."""
    from loop_core import Matcher, Tier, hookimpl, make_plugin_manager
    from loop_core.pipeline import OTHER_WARNINGS
    from loop_core.testing import make_bundle, write_bundle

    def raising(about: str | None = None) -> Callable[[Any], None]:
        def match(ctx: Any) -> None:
            if about in (None, ctx.bundle.manifest["model"]):
                raise ValueError(ctx.bundle.manifest["model"])
        return match

    class Noisy:
        @hookimpl
        def loop_register_matchers(self, register: Any) -> None:
            register(Matcher("model", Tier.TIER2, 1, raising()))
            for i in range(100):  # 100 messages more, about model b only
                register(Matcher(f"b-{i}", Tier.TIER2, 2, raising("acme/b")))

    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "pack.yml").write_text("regex_timeout: 0.01\n")
    slow = "{select: $.signal.error_text, regex: '^(a+)+$'}"  # one message, said twice about every bundle
    (pack / "10.yml").write_text(f"- {{id: slow, class: unknown, description: d, examples: {{match: [aaaa]}}, "
                                 f"when: {{any: [{slow}, {slow}]}}}}\n")
    for model, where in (("acme/a", "a/1"), ("acme/b", "b/1"), ("acme/b", "b/2")):
        write_bundle(tmp_path / "captures" / where, make_bundle({"manifest": {"model": model},
                                                                 "pt3": {"failure_log_excerpt": "a" * 50_000 + "!"}}))
    engine = Engine.build(str(pack), make_plugin_manager(entry_points=False, plugins=[Noisy()]))
    warnings = run_captures(tmp_path / "captures", engine, None, dry_run=True).to_dict()["warnings"]
    assert len(warnings) == 101 and warnings[OTHER_WARNINGS] == 6  # 3 messages over the 100, on 2 bundles
    (timed_out,) = [message for message in warnings if message.startswith("rule 'slow'")]
    assert warnings[timed_out] == 3
    assert list(warnings.values()) == sorted(warnings.values(), reverse=True)
    assert list(warnings)[-1] == "matcher 'model' raised ValueError: acme/a; skipped"


def _run_on_a_terminal(captures: Path, *extra: str) -> tuple[int, str, str]:
    """``loop-rules run`` with stderr on a pseudo-terminal (as in an interactive shell)
    and stdout on a pipe: its status, stdout, and what the terminal was sent."""
    import pty

    master, slave = pty.openpty()
    try:
        process = subprocess.Popen([sys.executable, "-m", "loop_core", "run", str(captures), *extra],
                                   stdout=subprocess.PIPE, stderr=slave)
    finally:
        os.close(slave)
    sent = bytearray()
    try:
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: the process closed its end of the terminal
                break
            if not data:
                break
            sent += data
    finally:
        os.close(master)
    assert process.stdout is not None
    out = process.stdout.read().decode()
    process.stdout.close()
    return process.wait(), out, sent.decode()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs a pseudo-terminal")
def test_a_run_on_a_terminal_shows_its_progress_there_and_not_in_its_output(captures: Path) -> None:
    status, out, terminal = _run_on_a_terminal(captures)
    assert status == 0
    assert "classifying" in terminal and "  0%" in terminal and "100%" in terminal
    assert terminal.rstrip("\r\n").endswith("\x1b[?25h")  # the cursor the bar hid is shown again
    assert out.startswith(f"24 bundle(s) under {captures}") and "classifying" not in out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs a pseudo-terminal")
def test_a_json_run_draws_no_progress_even_on_a_terminal(captures: Path) -> None:
    status, out, terminal = _run_on_a_terminal(captures, "--format", "json")
    assert status == 0 and json.loads(out)["bundles"] == 24
    assert "classifying" not in terminal
