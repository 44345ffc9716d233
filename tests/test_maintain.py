"""Maintainer workflow: learn, diff, shadow mode, lint."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pluggy
import pytest
from click.testing import CliRunner

from loop_core import Engine, LoopError
from loop_core.cli import cli
from loop_core.engine import condition_kinds
from loop_core.maintain import learn
from loop_core.testing import make_bundle, write_bundle
from loop_core.trackers import ReviewQueue

ROOT = Path(__file__).resolve().parent.parent
NOVEL = "RuntimeError: the frobnicator refused to initialise"


@pytest.fixture
def pack(tmp_path: Path) -> Path:
    target = tmp_path / "rules.d"
    shutil.copytree(ROOT / "rules.d", target)
    return target


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args))


def test_learn_from_a_bundle_makes_the_next_identical_bundle_an_exact_hit(
        pack: Path, tmp_path: Path, pm: pluggy.PluginManager) -> None:
    bundle_path = write_bundle(tmp_path / "b", make_bundle(NOVEL))
    assert Engine.build(pack, pm).classify(make_bundle(NOVEL)).failure_class.value == "unknown"
    before = {p.name: p.read_text() for p in pack.glob("*.yml")}
    result = invoke("learn", str(bundle_path), "--as", "kernel-unsupported", "--rules", str(pack))
    assert result.exit_code == 0, result.output
    assert "learned: " in result.output
    verdict = Engine.build(pack, pm).classify(make_bundle(NOVEL))
    assert (verdict.failure_class.value, verdict.tier.value) == ("kernel-unsupported", "tier2")
    assert verdict.matched_rule == verdict.fingerprint  # the exact table decided
    assert result.stdout == f"learned: {verdict.fingerprint} -> kernel-unsupported in {pack / 'exact.yml'}\n"
    # Only exact.yml changed; its key is quoted text.
    after = {p.name: p.read_text() for p in pack.glob("*.yml")}
    assert {k: v for k, v in after.items() if k != "exact.yml"} == before
    assert f"  '{verdict.fingerprint}': kernel-unsupported" in after["exact.yml"]
    again = invoke("learn", str(bundle_path), "--as", "kernel-unsupported", "--rules", str(pack))
    assert "already known" in again.output


def test_learn_keeps_existing_exact_entries_and_comments(pack: Path, pm: pluggy.PluginManager) -> None:
    (pack / "exact.yml").write_text("# hand-kept\nexact:\n  '0123456789ab': unknown  # decided in review\n")
    assert learn(pack, "abcdefabcdef", "genuine-oom", condition_kinds(pm))
    text = (pack / "exact.yml").read_text()
    assert text.startswith("# hand-kept\nexact:\n  '0123456789ab': unknown  # decided in review\n")
    assert dict(Engine.build(pack, pm).pack.exact) == {"0123456789ab": "unknown", "abcdefabcdef": "genuine-oom"}


def test_learn_refuses_classes_outside_the_six_and_conflicts(pack: Path, pm: pluggy.PluginManager) -> None:
    with pytest.raises(LoopError, match="not one of the six classes"):
        learn(pack, "abcdefabcdef", "kv-calc-bug", condition_kinds(pm))
    learn(pack, "abcdefabcdef", "genuine-oom", condition_kinds(pm))
    with pytest.raises(LoopError) as conflict:
        learn(pack, "abcdefabcdef", "unknown", condition_kinds(pm))
    assert str(conflict.value) == (f"abcdefabcdef: already learned as 'genuine-oom'; edit {pack / 'exact.yml'} "
                                   "to change it")
    result = invoke("learn", "--review", "x", "--captures", str(pack), "--as", "bogus-class")
    assert result.exit_code == 2


def test_learn_from_the_review_queue(pack: Path, tmp_path: Path, pm: pluggy.PluginManager) -> None:
    captures = tmp_path / "captures"
    write_bundle(captures / "m" / "20260801T000000Z", make_bundle(NOVEL))
    result = invoke("run", str(captures), "--rules", str(pack), "--format", "json")
    assert json.loads(result.output)["review_queued"] == 1
    (entry,) = json.loads(invoke("review", "list", str(captures), "--format", "json").output)
    # In capitals, as another tool may print it: the same entry, as `tracker show` takes a hash.
    result = invoke("learn", "--review", entry["dedup_hash"].upper(), "--captures", str(captures),
                    "--as", "overlay-arch-drift", "--rules", str(pack))
    assert result.exit_code == 0, result.output
    assert "removed from the review queue" in result.output
    assert json.loads(invoke("review", "list", str(captures), "--format", "json").output) == []
    assert Engine.build(pack, pm).classify(make_bundle(NOVEL)).failure_class.value == "overlay-arch-drift"


def test_learn_takes_no_review_entry_from_outside_the_queue(pack: Path, tmp_path: Path) -> None:
    """--review names an entry by its hash, never by a path: "../x" would read a JSON file
    beside the queue as an entry, learn from it, and delete it once settled."""
    captures = tmp_path / "captures"
    write_bundle(captures / "m" / "20260801T000000Z", make_bundle(NOVEL))
    invoke("run", str(captures), "--rules", str(pack), "--format", "json")
    (queued,) = (captures / "_review-queue").glob("*.json")
    outside = captures / "notes.json"
    outside.write_bytes(queued.read_bytes())  # an entry in all but its place
    queued.unlink()
    exact = (pack / "exact.yml").read_bytes() if (pack / "exact.yml").exists() else None
    for name in ("../notes", str(outside.with_suffix(""))):
        result = invoke("learn", "--review", name, "--captures", str(captures), "--as", "overlay-arch-drift",
                        "--rules", str(pack))
        assert result.exit_code == 2 and f"no review-queue entry {name!r}" in result.output, result.output
    assert outside.exists()
    assert ((pack / "exact.yml").read_bytes() if (pack / "exact.yml").exists() else None) == exact
    queue = ReviewQueue(captures)
    assert queue.entry("../notes") is None and queue.remove("../notes") is False and outside.exists()


def test_a_failure_learned_as_unknown_stays_out_of_the_review_queue(pack: Path, tmp_path: Path) -> None:
    """Deciding "unknown" is the maintainer's answer: the next run used to queue the
    failure again, so the decision could never clear it."""
    captures = tmp_path / "captures"
    write_bundle(captures / "m" / "20260801T000000Z", make_bundle(NOVEL))
    invoke("run", str(captures), "--rules", str(pack))
    (entry,) = json.loads(invoke("review", "list", str(captures), "--format", "json").output)
    learned = invoke("learn", "--review", entry["dedup_hash"], "--captures", str(captures),
                     "--as", "unknown", "--rules", str(pack))
    assert learned.exit_code == 0, learned.output
    summary = json.loads(invoke("run", str(captures), "--rules", str(pack), "--format", "json").output)
    assert summary["review_queued"] == 0 and summary["by_class"] == {"unknown": 1}
    assert json.loads(invoke("review", "list", str(captures), "--format", "json").output) == []
    table = invoke("run", str(captures), "--rules", str(pack)).output.splitlines()
    assert "review queue: 0 newly queued; suppressed (benign): 0; dismissed (learned as unknown): 1" in table
    dry = json.loads(invoke("run", str(captures), "--rules", str(pack), "--dry-run", "--format", "json").output)
    assert (dry["dismissed"], dry["would_file"]) == (1, 0)  # as the run counts it
    row = json.loads(invoke("classify", str(captures), "--rules", str(pack), "--format", "jsonl").output)
    assert (row["failure_class"], row["matched_rule"], row["review_queue"]) == (
        "unknown", entry["fingerprint"], False)


OTHER = "OSError: [Errno 28] No space left on device"
NOVEL_RULE = """\
rules:
  - id: frobnicator-kernel
    class: kernel-unsupported
    description: the frobnicator needs a kernel this GPU lacks
    when: {select: $.signal.all_text, contains: frobnicator}
    examples: {match: [frobnicator refused], no_match: [other]}
"""


def _two_errors_one_entry(captures: Path) -> None:
    """Two unknown failures of one model and set-up: one dedup hash, one queue entry."""
    for ts, text in (("20260801T000000Z", NOVEL), ("20260802T000000Z", OTHER)):
        write_bundle(captures / "m" / ts, make_bundle({"manifest": {"utc_ts": ts},
                                                       "pt3": {"failure_log_excerpt": text}}))


def _queue(captures: Path) -> list[dict]:  # type: ignore[type-arg]
    return json.loads(invoke("review", "list", str(captures), "--format", "json").output)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_run_takes_out_of_the_queue_what_a_new_rule_now_decides(pack: Path, tmp_path: Path, jobs: str) -> None:
    """The docs promised a rule empties the queue too; the entry used to wait forever.
    A run with --jobs 2 (which asks the tracker nothing before drafting) does it too."""
    captures = tmp_path / "captures"
    _two_errors_one_entry(captures)
    invoke("run", str(captures), "--rules", str(pack))
    (entry,) = _queue(captures)
    assert len(entry["occurrences"]) == 2 and "frobnicator" in entry["error_substring"]
    (pack / "05-frobnicator.yml").write_text(NOVEL_RULE)
    table = invoke("run", str(captures), "--rules", str(pack), "--jobs", jobs).output.splitlines()
    assert "filed into sqlite: 1 new, 0 +1, 1 already counted, 0 spooled" in table
    assert "review queue: 0 newly queued, 1 decided since and taken out; suppressed (benign): 0" in table
    (left,) = _queue(captures)
    assert [o["utc_ts"] for o in left["occurrences"]] == ["20260802T000000Z"]
    assert "no space left" in left["error_substring"] and "No space left" in left["final_error"]
    (pack / "06-disk.yml").write_text(
        "rules:\n  - id: disk-full\n    class: unknown\n    description: the host disk is full\n"
        "    when: {select: $.signal.all_text, contains: no space left}\n"
        "    examples: {match: [no space left on device], no_match: [other]}\n")
    assert json.loads(invoke("run", str(captures), "--rules", str(pack), "--format", "json").output)[
        "review_settled"] == 0  # a rule deciding "unknown" keeps it queued, as the reference does
    (pack / "06-disk.yml").unlink()
    learned = invoke("learn", "--review", left["dedup_hash"], "--captures", str(captures), "--as", "unknown",
                     "--rules", str(pack))
    assert "removed from the review queue" in learned.output and _queue(captures) == []


def test_learn_from_a_bundle_keeps_the_entry_when_it_decides_none_of_its_occurrences(pack: Path,
                                                                                      tmp_path: Path) -> None:
    captures = tmp_path / "captures"
    _two_errors_one_entry(captures)
    invoke("run", str(captures), "--rules", str(pack))
    (entry,) = _queue(captures)
    third = write_bundle(tmp_path / "third", make_bundle({"manifest": {"utc_ts": "20260803T000000Z"},
                                                          "pt3": {"failure_log_excerpt": "the widgetizer jammed"}}))
    result = invoke("learn", str(third), "--captures", str(captures), "--as", "unknown", "--rules", str(pack))
    assert result.stdout.endswith(f" in {pack / 'exact.yml'}; review-queue entry {entry['dedup_hash']} kept: none "
                                  "of its 2 occurrence(s) is decided by this\n")
    assert _queue(captures) == [entry]


def test_a_capture_the_tracker_already_counted_still_leaves_the_queue(pack: Path, tmp_path: Path) -> None:
    """A rule taken out and put back: the capture it files was counted by the first run,
    queued as unknown by the second, and is counted again (nothing filed) by the third,
    which must still take it out of the queue, or it waits there for ever."""
    captures = tmp_path / "captures"
    write_bundle(captures / "m" / "20260801T000000Z", make_bundle(NOVEL))
    rule = pack / "05-frobnicator.yml"
    rule.write_text(NOVEL_RULE)
    first = json.loads(invoke("run", str(captures), "--rules", str(pack), "--format", "json").output)
    assert first["filed_new"] == 1 and _queue(captures) == []
    rule.unlink()
    second = json.loads(invoke("run", str(captures), "--rules", str(pack), "--format", "json").output)
    assert second["review_queued"] == 1 and len(_queue(captures)) == 1
    rule.write_text(NOVEL_RULE)
    third = json.loads(invoke("run", str(captures), "--rules", str(pack), "--format", "json").output)
    assert (third["filed_new"], third["already_counted"], third["review_settled"]) == (0, 1, 1)
    assert _queue(captures) == []


def test_a_run_takes_out_an_entry_the_reference_wrote_once_its_capture_is_decided(pack: Path,
                                                                                   tmp_path: Path) -> None:
    """The reference's review entries list no occurrences: decided by a rule, they stayed
    in the queue for ever (shown with a count of 0), though their failure was filed."""
    captures = tmp_path / "captures"
    _two_errors_one_entry(captures)
    write_bundle(captures / "n" / "20260803T000000Z", make_bundle({
        "manifest": {"model": "other/Model", "utc_ts": "20260803T000000Z"}, "pt3": {"failure_log_excerpt": NOVEL}}))
    invoke("run", str(captures), "--rules", str(pack))
    for entry in _queue(captures):  # as the reference writes them: its capture named by its time only
        shown = {k: entry[k] for k in ("canonical", "dedup_hash", "error_substring", "kind", "model_slug",
                                        "reason", "schema")}
        Path(entry["_path"]).write_text(json.dumps({**shown, "utc_ts": "20260803T000000Z" if entry[
            "model_slug"] == "other/Model" else "20260802T000000Z"}, indent=2, sort_keys=True))
    (pack / "05-frobnicator.yml").write_text(NOVEL_RULE)
    summary = json.loads(invoke("run", str(captures), "--rules", str(pack), "--format", "json").output)
    assert summary["review_settled"] == 1  # other/Model's; the entry of m also holds a capture still unknown
    (left,) = _queue(captures)
    assert left["model_slug"] == "example/Example-7B"
    assert [o["utc_ts"] for o in left["occurrences"]] == ["20260802T000000Z"]


def test_learn_from_an_entry_the_reference_wrote_decides_its_failure_and_empties_the_queue(
        pack: Path, tmp_path: Path, pm: pluggy.PluginManager) -> None:
    """Such an entry has no fingerprint and lists no occurrences: its fingerprint is worked
    out from its error text and canonical tuple, and the entry, which stands for the one
    capture decided, leaves the queue."""
    captures = tmp_path / "captures"
    write_bundle(captures / "m" / "20260801T000000Z", make_bundle(NOVEL))
    invoke("run", str(captures), "--rules", str(pack))
    (entry,) = _queue(captures)
    Path(entry["_path"]).write_text(json.dumps({k: v for k, v in entry.items() if k in (
        "canonical", "dedup_hash", "error_substring", "kind", "model_slug", "reason", "schema", "utc_ts")}))
    result = invoke("learn", "--review", entry["dedup_hash"], "--captures", str(captures),
                    "--as", "kernel-unsupported", "--rules", str(pack))
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"learned: {entry['fingerprint']} -> kernel-unsupported")
    assert "removed from the review queue" in result.output and _queue(captures) == []
    verdict = Engine.build(pack, pm).classify(make_bundle(NOVEL))
    assert (verdict.failure_class.value, verdict.matched_rule) == ("kernel-unsupported", entry["fingerprint"])


def test_learn_from_the_queue_decides_the_error_still_unknown_not_one_a_new_rule_decides(
        pack: Path, tmp_path: Path) -> None:
    """A rule added since the run decides the error the entry is described by: learn must
    pin the other error, the one still waiting, not a failure the pack decides already."""
    captures = tmp_path / "captures"
    _two_errors_one_entry(captures)
    invoke("run", str(captures), "--rules", str(pack))
    (entry,) = _queue(captures)
    (pack / "05-frobnicator.yml").write_text(NOVEL_RULE)
    other = json.loads(invoke("classify", str(captures / "m" / "20260802T000000Z"), "--rules", str(pack),
                              "--format", "jsonl").output)
    assert other["failure_class"] == "unknown" and other["fingerprint"] != entry["fingerprint"]
    result = invoke("learn", "--review", entry["dedup_hash"], "--captures", str(captures), "--as", "unknown",
                    "--rules", str(pack))
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"learned: {other['fingerprint']} -> unknown")
    assert "removed from the review queue" in result.output and _queue(captures) == []


def test_learn_keeps_an_occurrence_whose_bundle_is_gone_unless_its_entry_is_the_error_learned(
        pack: Path, tmp_path: Path) -> None:
    """An occurrence whose bundle cannot be found is taken for decided only when the entry
    is described by the failure learned: here it is described by the other error, which
    nobody decided, so that occurrence stays in the queue."""
    captures = tmp_path / "captures"
    _two_errors_one_entry(captures)
    invoke("run", str(captures), "--rules", str(pack))
    (entry,) = _queue(captures)
    assert "frobnicator" in entry["error_substring"]
    shutil.move(str(captures / "m" / "20260801T000000Z"), str(tmp_path / "moved-away"))
    result = invoke("learn", "--review", entry["dedup_hash"], "--captures", str(captures), "--as", "unknown",
                    "--rules", str(pack))
    assert result.exit_code == 0, result.output
    assert "1 occurrence(s) taken out" in result.output and "1 with another error left in it" in result.output
    (left,) = _queue(captures)
    assert [o["utc_ts"] for o in left["occurrences"]] == ["20260801T000000Z"]
    assert "frobnicator" in left["error_substring"]


def test_after_learn_an_entry_shows_the_error_the_next_learn_decides(pack: Path, tmp_path: Path) -> None:
    """Three errors in one entry, the first learned: the entry is described afresh by the
    first error still waiting, the one `learn --review` takes next, so a maintainer who
    reads `review list` and learns the entry decides the error they read."""
    captures = tmp_path / "captures"
    third = "RuntimeError: the widget count must be positive"
    for ts, text in (("20260801T000000Z", NOVEL), ("20260802T000000Z", OTHER), ("20260803T000000Z", third)):
        write_bundle(captures / "m" / ts, make_bundle({"manifest": {"utc_ts": ts},
                                                       "pt3": {"failure_log_excerpt": text}}))
    invoke("run", str(captures), "--rules", str(pack))
    (entry,) = _queue(captures)
    assert len(entry["occurrences"]) == 3
    first = invoke("learn", "--review", entry["dedup_hash"], "--captures", str(captures),
                   "--as", "kernel-unsupported", "--rules", str(pack))
    assert "1 occurrence(s) taken out" in first.output and "2 with another error left in it" in first.output
    (left,) = _queue(captures)
    assert "No space left" in left["final_error"]
    second = invoke("learn", "--review", entry["dedup_hash"], "--captures", str(captures), "--as", "unknown",
                    "--rules", str(pack))
    assert second.output.startswith(f"learned: {left['fingerprint']} -> unknown")
    (last,) = _queue(captures)
    assert [o["utc_ts"] for o in last["occurrences"]] == ["20260803T000000Z"] and "widget" in last["final_error"]


def test_learn_from_an_entry_whose_failure_the_table_decides_already_says_so(pack: Path, tmp_path: Path) -> None:
    """Its bundle moved away and its failure learned from the bundle itself: nothing is
    left in the entry to learn from, whatever class is given."""
    captures = tmp_path / "captures"
    bundle = write_bundle(captures / "m" / "20260801T000000Z", make_bundle(NOVEL))
    invoke("run", str(captures), "--rules", str(pack))
    (entry,) = _queue(captures)
    moved = tmp_path / "moved-away"
    shutil.move(str(bundle), str(moved))
    assert invoke("learn", str(moved), "--as", "kernel-unsupported", "--rules", str(pack)).exit_code == 0
    for as_class in ("kernel-unsupported", "genuine-oom"):
        result = invoke("learn", "--review", entry["dedup_hash"], "--captures", str(captures), "--as", as_class,
                        "--rules", str(pack))
        assert result.exit_code == 2, result.output
        assert (f"review-queue entry {entry['dedup_hash']}: the failure it is described by is decided already "
                f"({entry['fingerprint']} -> kernel-unsupported)") in result.output
    assert len(_queue(captures)) == 1


def test_learn_from_an_entry_with_two_errors_takes_out_only_the_one_decided(pack: Path, tmp_path: Path) -> None:
    """learn --review used to delete the whole entry: the other error, which nobody
    had decided, left the queue with it."""
    captures = tmp_path / "captures"
    _two_errors_one_entry(captures)
    invoke("run", str(captures), "--rules", str(pack))
    (entry,) = _queue(captures)
    result = invoke("learn", "--review", entry["dedup_hash"], "--captures", str(captures),
                    "--as", "kernel-unsupported", "--rules", str(pack))
    assert result.exit_code == 0, result.output
    assert f"1 occurrence(s) taken out of review-queue entry {entry['dedup_hash']}, 1 with another error" \
        in result.output
    (left,) = _queue(captures)
    assert [o["utc_ts"] for o in left["occurrences"]] == ["20260802T000000Z"]
    assert "No space left" in left["final_error"] and left["fingerprint"] != entry["fingerprint"]
    summary = json.loads(invoke("run", str(captures), "--rules", str(pack), "--format", "json").output)
    assert (summary["filed_new"], summary["review_queued"], summary["already_counted"]) == (1, 0, 1)


def test_learn_refuses_a_review_hash_given_with_a_bundle_too(pack: Path, tmp_path: Path) -> None:
    bundle_path = write_bundle(tmp_path / "b", make_bundle(NOVEL))
    before = {p.name: p.read_text() for p in pack.glob("*.yml")}
    result = invoke("learn", str(bundle_path), "--review", "0123456789ab", "--captures", str(tmp_path),
                    "--as", "unknown", "--rules", str(pack))
    assert (result.exit_code, result.output) == (2, "Error: --review HASH needs --captures DIR and no BUNDLE\n")
    assert {p.name: p.read_text() for p in pack.glob("*.yml")} == before


@pytest.mark.parametrize("args,error", [
    (["--review", "f928faa9d075"], "--review HASH needs --captures DIR and no BUNDLE"),
    ([], "give a BUNDLE or --review HASH --captures DIR"),
    (["BUNDLE", "--as", "oom"], ("--as 'oom': not one of the six classes (genuine-oom, overlay-arch-drift, "
                                 "kernel-unsupported, quant-unsupported, benign-cold-start, unknown)")),
])
def test_learn_says_what_the_command_lacks_before_where_it_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 args: list[str], error: str) -> None:
    """Run where there is no rules.d (after a plain install, say), a learn missing its
    --captures, its BUNDLE or a valid --as was told only that rules.d is missing; with
    that fixed, it was then told what it had lacked from the start."""
    bundle_path = write_bundle(tmp_path / "b", make_bundle(NOVEL))
    monkeypatch.chdir(tmp_path)
    args = [str(bundle_path) if arg == "BUNDLE" else arg for arg in args]
    result = invoke("learn", "--as", "unknown", *args)
    assert (result.exit_code, result.output) == (2, f"Error: {error}\n")


def test_the_learn_help_names_the_classes_it_takes() -> None:
    """--as said "one of the six": a maintainer had to get it wrong once to learn the names."""
    from loop_core.verdict import FailureClass

    shown = invoke("learn", "--help").output
    taken = re.search(r"CLASS is one of: ([a-z, \n-]+)\.", shown)
    assert taken, shown
    assert taken[1].replace(",", " ").split() == [c.value for c in FailureClass]


def test_learn_refuses_a_failure_without_error_text(pack: Path, tmp_path: Path) -> None:
    """A gate refusal has no error text: its fingerprint hashes only the architecture
    and engine, so learning it decided every gate refusal of that pair at once."""
    captures = tmp_path / "captures"
    shutil.copytree(ROOT / "examples" / "pull-captures", captures, ignore=shutil.ignore_patterns("_*"))
    invoke("run", str(captures), "--rules", str(pack))
    before = (pack / "exact.yml").exists()
    for args in (["--review", "3a0e288f9dcc", "--captures", str(captures)],
                 [str(captures / "meta-llama-llama-3.3-70b-instruct" / "20261127T113000Z")]):
        result = invoke("learn", *args, "--as", "unknown", "--rules", str(pack))
        assert result.exit_code == 2, result.output
        assert "has no error text (a gate refusal, or a failure without a log)" in result.output
        assert "write a rule instead (on $.signal.abort_reason" in result.output
    assert (pack / "exact.yml").exists() == before
    assert "3a0e288f9dcc" in {e["dedup_hash"] for e in _queue(captures)}


def test_learn_leaves_a_damaged_entry_for_a_person(pack: Path, tmp_path: Path) -> None:
    """run refused to touch an entry whose occurrences are not a list; learn deleted it."""
    captures = tmp_path / "captures"
    write_bundle(captures / "m" / "20260801T000000Z", make_bundle(NOVEL))
    invoke("run", str(captures), "--rules", str(pack))
    (entry,) = _queue(captures)
    path = Path(entry["_path"])
    doc = json.loads(path.read_text())
    doc["occurrences"] = {o["submission"]: o for o in doc["occurrences"]}
    path.write_text(json.dumps(doc))
    result = invoke("learn", "--review", entry["dedup_hash"], "--captures", str(captures), "--as", "unknown",
                    "--rules", str(pack))
    assert result.exit_code == 2 and "'occurrences' is a dict, not a list; fix or remove the file" in result.output
    assert json.loads(path.read_text()) == doc


def test_learn_finds_the_bundles_of_a_run_made_from_another_folder(pack: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The queue keeps bundle paths as the run was given them; from another folder they
    did not resolve, and every occurrence was taken for the learned one."""
    work = tmp_path / "work"
    _two_errors_one_entry(work / "captures")
    monkeypatch.chdir(work)
    invoke("run", "captures", "--rules", str(pack))
    (entry,) = _queue(Path("captures"))
    assert entry["occurrences"][0]["bundle"].startswith("captures/")
    monkeypatch.chdir(tmp_path)
    result = invoke("learn", "--review", entry["dedup_hash"], "--captures", str(work / "captures"),
                    "--as", "kernel-unsupported", "--rules", str(pack))
    assert "1 occurrence(s) taken out" in result.output and "1 with another error left in it" in result.output


def test_a_damaged_entry_a_run_would_settle_is_a_warning_not_the_end_of_the_run(pack: Path, tmp_path: Path) -> None:
    captures = tmp_path / "captures"
    write_bundle(captures / "m" / "20260801T000000Z", make_bundle(NOVEL))
    invoke("run", str(captures), "--rules", str(pack))
    (entry,) = _queue(captures)
    Path(entry["_path"]).write_text("not json")
    (pack / "05-frobnicator.yml").write_text(NOVEL_RULE)
    result = invoke("run", str(captures), "--rules", str(pack), "--format", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["filed_new"] == 1 and summary["review_settled"] == 0
    (warning,) = summary["warnings"]
    assert warning.startswith("review queue: ") and "unreadable file" in warning and warning.endswith("not settled")


def test_learn_finds_each_occurrences_own_bundle_wherever_the_run_was_made(
        pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stored paths are relative to where the run was made: two levels deep, they did
    not resolve from elsewhere (both occurrences were taken for the learned one), and an
    unrelated bundle at the same relative path here was taken for the occurrence's."""
    work = tmp_path / "work"
    _two_errors_one_entry(work / "data" / "captures")
    other = work / "data" / "captures" / "m" / "20260802T000000Z"
    odd = other.parent / os.fsdecode(b"2026\xff0802")  # a folder name that is not UTF-8, stored escaped
    other.rename(odd)
    monkeypatch.chdir(work)
    invoke("run", "data/captures", "--rules", str(pack))
    (entry,) = _queue(Path("data/captures"))
    elsewhere = tmp_path / "elsewhere"
    write_bundle(elsewhere / "data" / "captures" / "m" / "20260801T000000Z", make_bundle("ValueError: zzz"))
    monkeypatch.chdir(elsewhere)
    result = invoke("learn", "--review", entry["dedup_hash"], "--captures", str(work / "data" / "captures"),
                    "--as", "kernel-unsupported", "--rules", str(pack))
    assert f"'{entry['fingerprint']}': kernel-unsupported" in (pack / "exact.yml").read_text()
    assert "1 occurrence(s) taken out" in result.output and "1 with another error left in it" in result.output


def test_an_entry_whose_description_was_decided_says_so(pack: Path, tmp_path: Path) -> None:
    """A run that takes out the occurrence an entry is described by, and sees none of
    the others, used to leave the old text: learn then pinned the decided failure."""
    captures = tmp_path / "captures"
    _two_errors_one_entry(captures)
    invoke("run", str(captures), "--rules", str(pack))
    shutil.move(str(captures / "m" / "20260802T000000Z"), str(tmp_path / "moved-away"))
    (pack / "05-frobnicator.yml").write_text(NOVEL_RULE)
    summary = json.loads(invoke("run", str(captures), "--rules", str(pack), "--format", "json").output)
    assert summary["review_settled"] == 1
    (entry,) = _queue(captures)
    assert entry["fingerprint"] is None and "has been decided" in entry["final_error"]
    result = invoke("learn", "--review", entry["dedup_hash"], "--captures", str(captures), "--as", "genuine-oom",
                    "--rules", str(pack))
    assert result.exit_code == 2 and "the failure it was described by has been decided" in result.output
    assert not (pack / "exact.yml").exists()


def _queued_without_its_bundle(pack: Path, captures: Path, edit: Any = None) -> tuple[dict[str, Any], Any]:
    """One unknown failure queued by a run, its bundle moved away since; ``edit(doc)`` edits
    its entry's file. Returns the entry as `review list` showed it and the result of
    `learn --review` on it, as unknown."""
    write_bundle(captures / "m" / "1", make_bundle(NOVEL))
    invoke("run", str(captures), "--rules", str(pack))
    (entry,) = _queue(captures)
    shutil.move(str(captures / "m"), str(captures.parent / "moved-away"))
    if edit is not None:
        path = captures / "_review-queue" / f"{entry['dedup_hash']}.json"
        doc = json.loads(path.read_text())
        edit(doc)
        path.write_text(json.dumps(doc))
    return entry, invoke("learn", "--review", entry["dedup_hash"], "--captures", str(captures), "--as", "unknown",
                         "--rules", str(pack))


def test_learn_from_an_entry_without_a_fingerprint_works_it_out_from_its_tuple(pack: Path, tmp_path: Path) -> None:
    """An entry whose fingerprint was edited away (or the reference wrote without one), its
    bundle gone: the fingerprint is worked out again from the error and the tuple."""
    def edit(doc: dict[str, Any]) -> None:
        doc["fingerprint"] += " (see the thread)"

    entry, result = _queued_without_its_bundle(pack, tmp_path / "captures", edit)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"learned: {entry['fingerprint']} -> unknown in ")
    assert f"'{entry['fingerprint']}': unknown" in (pack / "exact.yml").read_text()


def test_learn_takes_out_an_occurrence_whose_bundle_is_gone_when_its_entry_is_the_error_learned(
        pack: Path, tmp_path: Path) -> None:
    _, result = _queued_without_its_bundle(pack, tmp_path / "captures")
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("exact.yml; removed from the review queue\n") and _queue(tmp_path / "captures") == []


def test_learn_keeps_an_occurrence_edited_into_something_else_and_settles_the_rest(
        pack: Path, tmp_path: Path) -> None:
    captures = tmp_path / "captures"
    write_bundle(captures / "m" / "1", make_bundle(NOVEL))
    invoke("run", str(captures), "--rules", str(pack))
    (entry,) = _queue(captures)
    path = captures / "_review-queue" / f"{entry['dedup_hash']}.json"
    doc = json.loads(path.read_text())
    doc["occurrences"].append("see the thread")
    path.write_text(json.dumps(doc))
    result = invoke("learn", "--review", entry["dedup_hash"], "--captures", str(captures), "--as", "unknown",
                    "--rules", str(pack))
    assert result.exit_code == 0, result.output
    assert f"; 1 occurrence(s) taken out of review-queue entry {entry['dedup_hash']}, 1 " in result.stdout
    assert json.loads(path.read_text())["occurrences"] == ["see the thread"]


def test_learn_from_an_entry_with_a_cut_tuple_says_it_has_nothing_to_learn_from(pack: Path, tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        del doc["fingerprint"]
        doc["canonical"]["tuple_ordered"] = doc["canonical"]["tuple_ordered"][:5]

    entry, result = _queued_without_its_bundle(pack, tmp_path / "captures", edit)
    assert result.exit_code == 2
    assert f"review entry '{entry['dedup_hash']}': no fingerprint and no canonical tuple" in result.output
    assert not (pack / "exact.yml").exists()


def test_learn_from_a_bundle_without_a_queue_entry_says_nothing_of_the_queue(pack: Path, tmp_path: Path) -> None:
    """A bundle never queued (no run yet): there is no entry to keep or settle."""
    captures = tmp_path / "captures"
    bundle = write_bundle(captures / "m" / "1", make_bundle(NOVEL))
    result = invoke("learn", str(bundle), "--captures", str(captures), "--as", "unknown", "--rules", str(pack))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("learned: ") and result.stdout.endswith(f" -> unknown in {pack / 'exact.yml'}\n")
    assert not (captures / "_review-queue").exists() or not list((captures / "_review-queue").iterdir())


def test_learn_from_a_bundle_leaves_the_table_alone_when_its_entry_is_damaged(pack: Path, tmp_path: Path) -> None:
    captures = tmp_path / "captures"
    bundle = write_bundle(captures / "m" / "20260801T000000Z", make_bundle(NOVEL))
    invoke("run", str(captures), "--rules", str(pack))
    (entry,) = _queue(captures)
    Path(entry["_path"]).write_text(json.dumps({**entry, "occurrences": {"x": 1}}))
    result = invoke("learn", str(bundle), "--captures", str(captures), "--as", "kernel-unsupported",
                    "--rules", str(pack))
    assert result.exit_code == 2 and "fix or remove the file" in result.output
    assert not (pack / "exact.yml").exists()


SHADOW_RULE = """\
- id: trial-frobnicator
  class: overlay-arch-drift
  mode: shadow
  description: trial rule
  when: {select: $.signal.all_text, contains: frobnicator}
  examples: {match: [frobnicator], no_match: [other]}
"""


def test_shadow_rules_never_decide_but_are_reported(pack: Path, tmp_path: Path, pm: pluggy.PluginManager) -> None:
    (pack / "05-trial.yml").write_text(SHADOW_RULE)
    verdict = Engine.build(pack, pm).classify(make_bundle(NOVEL))
    assert verdict.failure_class.value == "unknown"
    assert verdict.shadow_matches == ("trial-frobnicator",)
    path = write_bundle(tmp_path / "b", make_bundle(NOVEL))
    out = invoke("explain", "--rules", str(pack), str(path)).output
    assert "+ trial-frobnicator -> overlay-arch-drift (" in out
    assert "rules.d/05-trial.yml[0]) [shadow: never decides]" in out
    assert "\nverdict: unknown (none-unknown, no rule matched); should_file=False review_queue=True dedup " in out
    report = json.loads(invoke("diff", "--rules", str(pack), "--format", "json", str(path)).output)
    assert report["shadow_matches"] == {"trial-frobnicator": 1} and report["changed"] == 0
    table = invoke("diff", "--rules", str(pack), str(path)).output.splitlines()
    assert table[1:] == ["  shadow rule trial-frobnicator would match 1 bundle(s)"]
    row = json.loads(invoke("classify", "--rules", str(pack), "--format", "jsonl", str(path)).output)
    assert (row["failure_class"], row["shadow_matches"]) == ("unknown", ["trial-frobnicator"])


def test_diff_lists_changes_with_transitions(pack: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    write_bundle(corpus / "a" / "1", make_bundle(NOVEL))
    write_bundle(corpus / "b" / "1", make_bundle("RuntimeError: CUDA error: no kernel image is available"))
    (pack / "45-frob.yml").write_text(SHADOW_RULE.replace("  mode: shadow\n", "").replace("trial-", "new-"))
    result = invoke("diff", "--rules", str(pack), "--against", "default", "--format", "json", str(corpus))
    report = json.loads(result.output)
    assert report["bundles"] == 2 and report["changed"] == 1
    assert report["transitions"] == [{"from": "unknown", "to": "overlay-arch-drift", "count": 1}]
    (change,) = report["changes"]
    assert change["fields"] == ["class", "rule", "dedup_hash"]
    assert change["new"]["rule"] == "new-frobnicator"
    table = invoke("diff", "--rules", str(pack), str(corpus)).output.splitlines()
    assert table[2:] == ["  a/1: unknown (no rule) -> overlay-arch-drift (new-frobnicator) [class, rule, dedup_hash]"]
    md = invoke("diff", "--rules", str(pack), "--format", "markdown", str(corpus)).output
    assert "| `unknown` | `overlay-arch-drift` | 1 |" in md
    assert "| `unknown` → `overlay-arch-drift` | no rule → `new-frobnicator` | `" in md  # not `None`
    assert md.endswith(" |\n")  # ready to paste: no blank line after the table
    assert invoke("diff", "--rules", str(pack), "--fail-on-change", str(corpus)).exit_code == 1
    assert invoke("diff", "--rules", "default", "--fail-on-change", str(corpus)).exit_code == 0


def test_the_diff_table_lists_transitions_in_order_of_class(pack: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    write_bundle(corpus / "a" / "1", make_bundle(NOVEL))
    write_bundle(corpus / "b" / "1", make_bundle("RuntimeError: the widgetizer refused"))
    rule = SHADOW_RULE.replace("  mode: shadow\n", "").replace("trial-", "new-")
    (pack / "45-frob.yml").write_text(rule + rule.replace("frobnicator", "widgetizer").replace(
        "overlay-arch-drift", "kernel-unsupported"))
    shadow = SHADOW_RULE.replace("trial-frobnicator", "zz-trial") + SHADOW_RULE.replace(
        "trial-frobnicator", "aa-trial").replace("frobnicator", "widgetizer")
    (pack / "05-trial.yml").write_text(shadow)  # zz-trial matches the first bundle read, aa-trial the second
    table = invoke("diff", "--rules", str(pack), str(corpus)).output.splitlines()
    assert table[1:3] == ["  unknown              -> kernel-unsupported   1",
                          "  unknown              -> overlay-arch-drift   1"]
    report = json.loads(invoke("diff", "--rules", str(pack), "--format", "json", str(corpus)).output)
    assert [t["to"] for t in report["transitions"]] == ["kernel-unsupported", "overlay-arch-drift"]
    md = invoke("diff", "--rules", str(pack), "--format", "markdown", str(corpus)).output
    assert md.index("`unknown` | `kernel-unsupported`") < md.index("`unknown` | `overlay-arch-drift`")
    assert md.endswith("- `aa-trial` would match 1 bundle(s)\n- `zz-trial` would match 1 bundle(s)\n")


def test_a_change_of_rule_alone_is_no_class_transition(pack: Path, tmp_path: Path) -> None:
    """It was listed as `quant-unsupported -> quant-unsupported`, a transition that is none."""
    corpus = tmp_path / "corpus"
    write_bundle(corpus / "a" / "1", make_bundle("ValueError: Unknown quantization method: frob"))
    write_bundle(corpus / "b" / "1", make_bundle(NOVEL))
    quant = pack / "50-quant.yml"
    assert "id: quant-weightload-dtype\n" in quant.read_text()
    quant.write_text(quant.read_text().replace("id: quant-weightload-dtype\n", "id: quant-weightload-renamed\n"))
    (pack / "45-frob.yml").write_text(SHADOW_RULE.replace("  mode: shadow\n", "").replace("trial-", "new-"))
    report = json.loads(invoke("diff", "--rules", str(pack), "--format", "json", str(corpus)).output)
    assert report["changed"] == 2
    assert report["transitions"] == [{"from": "unknown", "to": "overlay-arch-drift", "count": 1}]
    assert [c["fields"] for c in report["changes"]] == [["rule"], ["class", "rule", "dedup_hash"]]
    table = invoke("diff", "--rules", str(pack), str(corpus)).output.splitlines()
    assert table[1:3] == ["  unknown              -> overlay-arch-drift   1",
                          "  1 kept their class under another rule or dedup hash"]
    md = invoke("diff", "--rules", str(pack), "--format", "markdown", str(corpus)).output
    assert "| `unknown` | `overlay-arch-drift` | 1 |\n\n1 kept their class under another rule or dedup hash.\n" in md
    assert "`quant-unsupported` | `quant-unsupported`" not in md
    # the class cell of that bundle is its one class, no arrow to itself
    assert "| `quant-unsupported` | `quant-weightload-dtype` → `quant-weightload-renamed` | `" in md


def test_a_markdown_diff_of_rule_changes_alone_has_no_transition_table(pack: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    write_bundle(corpus / "a" / "1", make_bundle("ValueError: Unknown quantization method: frob"))
    quant = pack / "50-quant.yml"
    quant.write_text(quant.read_text().replace("id: quant-weightload-dtype\n", "id: quant-weightload-renamed\n"))
    md = invoke("diff", "--rules", str(pack), "--format", "markdown", str(corpus)).output
    assert "**1 changed**\n\n1 kept their class under another rule or dedup hash.\n\n| bundle |" in md
    assert "| from | to |" not in md


def test_a_diff_shows_a_folder_name_that_is_not_utf8_as_its_escapes(pack: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    write_bundle(corpus / os.fsdecode(b"ts\xff") / "1", make_bundle(NOVEL))
    (pack / "45-frob.yml").write_text(SHADOW_RULE.replace("  mode: shadow\n", ""))
    result = invoke("diff", "--rules", str(pack), "--format", "json", str(corpus))
    assert result.exit_code == 0, result.output
    (change,) = json.loads(result.output)["changes"]
    assert change["bundle"].endswith("ts\\xff/1")
    md = invoke("diff", "--rules", str(pack), "--format", "markdown", str(corpus)).output
    assert "ts\\xff/1` |" in md


def test_a_backtick_in_a_pack_name_keeps_the_markdown_heading_whole(pack: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    write_bundle(corpus / "a" / "1", make_bundle(NOVEL))
    odd = pack.rename(tmp_path / "my`rules")
    md = invoke("diff", "--rules", str(odd), "--format", "markdown", str(corpus)).output
    shown = str(odd).replace("`", "'")
    assert md.splitlines()[0] == f"### Rule pack diff: `default` → `{shown}`"


def test_the_diff_table_counts_unreadable_bundles_as_the_markdown_does(tmp_path: Path) -> None:
    """The table left them out: a mistyped or empty corpus (one unreadable bundle,
    `<path>/manifest.json: missing`) read "1 bundle(s): 0 changed", a clean diff."""
    corpus = tmp_path / "corpus"
    write_bundle(corpus / "a" / "1", make_bundle(NOVEL))
    (corpus / "b" / "1").mkdir(parents=True)
    (corpus / "b" / "1" / "manifest.json").write_text("{")
    result = invoke("diff", "--rules", "reference", str(corpus))
    assert result.exit_code == 0
    assert result.output.splitlines()[0] == ("2 bundle(s): 0 changed between default and reference; "
                                             "1 unreadable, not compared")
    markdown = invoke("diff", "--rules", "reference", "--format", "markdown", str(corpus)).output
    assert "2 bundle(s), **0 changed**, 1 unreadable" in markdown
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "; 1 unreadable, not compared" in invoke("diff", "--rules", "reference", str(empty)).output


@pytest.mark.parametrize("name, shown", [("smol\nlm", "smol\\nlm"), ("smol|lm", "smol\\|lm")])
def test_an_odd_folder_name_keeps_a_markdown_diff_row_whole(pack: Path, tmp_path: Path, name: str,
                                                             shown: str) -> None:
    # Unescaped, a newline ends the row, and a bar splits the bundle's cell in two and
    # shifts the class into the rule's column.
    corpus = tmp_path / "corpus"
    write_bundle(corpus / name / "1", make_bundle(NOVEL))
    (pack / "45-frob.yml").write_text(SHADOW_RULE.replace("  mode: shadow\n", "").replace("trial-", "new-"))
    md = invoke("diff", "--rules", str(pack), "--format", "markdown", str(corpus)).output
    (row,) = [line for line in md.splitlines() if "new-frobnicator" in line]
    assert row.startswith("| ") and row.endswith(" |") and shown in row
    assert row.replace("\\|", "").count("|") == 5


def test_a_markdown_diff_longer_than_its_table_counts_the_rows_left_out() -> None:
    """The Markdown lists 50 changed bundles: the 51st must be counted below them, or the
    pull-request comment reads as if nothing more changed."""
    from loop_core.maintain import Change, DiffReport

    changes = [Change(f"corpus/m{i:02d}/1", "unknown", "genuine-oom", None, "oom", "aaaaaaaaaaaa", "bbbbbbbbbbbb")
               for i in range(51)]
    lines = DiffReport("default", "mine", bundles=51, changes=changes).markdown().splitlines()
    assert len([line for line in lines if line.startswith("| `corpus/m")]) == 50
    assert lines[-1] == "| … 1 more | | | |"


@pytest.mark.parametrize(("option", "command"), [
    ("--against", ["diff", "--rules", "default", "--against", "nope", "."]),
    ("--compare", ["eval", "--corpus", ".", "--compare", "nope"]),
])
def test_a_second_pack_that_is_not_found_is_named_by_its_own_option(tmp_path: Path, option: str, command: list[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.yml").write_text("id: c1\nengine: e\nsource: s\nlabel: unknown\nhard: false\nsplit: tune\n"
                                    "rationale: r\nexcerpt: x\n")
    monkeypatch.chdir(tmp_path)
    result = invoke(*command)
    assert result.exit_code == 2
    assert f"Error: {option} 'nope': neither a registered pack (default, reference) nor a directory" in result.output


def test_learn_into_a_pack_that_does_not_load_says_so_as_every_command_does(tmp_path: Path) -> None:
    """It gave the first problem alone, without the count and the check command the other
    commands add, and did not say whether the table had changed."""
    pack = tmp_path / "mine"
    pack.mkdir()
    (pack / "10-bad.yml").write_text("- {id: a, class: oom, description: d, when: {select: $.signal.x, regex: b},"
                                     " examples: {match: [b]}}\n")
    bundle = write_bundle(tmp_path / "b" / "1", make_bundle(NOVEL))
    result = invoke("learn", str(bundle), "--as", "unknown", "--rules", str(pack))
    assert result.exit_code == 2
    assert result.output == (
        f"Error: {pack}/10-bad.yml[0] a (line 1): unknown class 'oom' (classes: genuine-oom, overlay-arch-drift, "
        "kernel-unsupported, quant-unsupported, benign-cold-start, unknown) (one of 2 problems; "
        f"`loop-rules check --rules {pack}` lists them all); nothing was learned\n")
    assert sorted(p.name for p in pack.iterdir()) == ["10-bad.yml"]


def test_learn_starts_a_new_pack_in_an_empty_folder(tmp_path: Path) -> None:
    # A folder without rule files is refused as a --rules for classify; learn starts one there.
    bundle = write_bundle(tmp_path / "b" / "1", make_bundle(NOVEL))
    result = invoke("learn", str(bundle), "--as", "unknown", "--rules", str(tmp_path / "new"))
    assert result.exit_code == 2  # no such folder: a usage error
    (tmp_path / "new").mkdir()
    result = invoke("learn", str(bundle), "--as", "unknown", "--rules", str(tmp_path / "new"))
    assert result.exit_code == 0, result.output
    assert invoke("classify", "--rules", str(tmp_path / "new"), "--format", "jsonl", str(bundle)).exit_code == 0
    # the new table says what it is, and each entry when and from what it was learned
    assert re.fullmatch(r"# Maintainer decisions: Tier-2 fingerprint -> class, written by `loop-rules learn`\.\n"
                        r"# Keys are quoted so YAML reads them as text\.\nexact:\n"
                        r"  '[0-9a-f]{12}': unknown  # learned \d{4}-\d\d-\d\d from bundle 1\n",
                        (tmp_path / "new" / "exact.yml").read_text())


def _broad_pack(tmp_path: Path) -> Path:
    """A pack whose first rule, ``broad``, decides every text with ``Error`` in it."""
    pack = tmp_path / "p"
    pack.mkdir()
    (pack / "10-broad.yml").write_text(
        "- id: broad\n  class: unknown\n  description: d\n  when: {select: $.signal.all_text, contains: Error}\n"
        "  examples: {match: [KeyError], no_match: [fine]}\n")
    return pack


def test_lint_finds_unreachable_rules_and_idle_files(tmp_path: Path) -> None:
    pack = _broad_pack(tmp_path)
    (pack / "20-narrow.yml").write_text(
        "- id: narrow\n  class: quant-unsupported\n  description: d\n"
        "  when: {select: $.signal.all_text, contains: QuantError}\n  examples: {match: [QuantError]}\n")
    (pack / "30-empty.yml").write_text("rules: []\n")
    (pack / "40-pins.yml").write_text("exact:  # pinned by hand\n  'aaaaaaaaaaaa': unknown\n")
    (pack / "50-no-pins.yml").write_text("exact:\n")
    result = invoke("check", "--rules", str(pack))
    assert result.exit_code == 0  # warnings only
    out = result.output
    assert ("p/20-narrow.yml[0] narrow (line 1): unreachable, can never win: every match example is decided earlier by "
            f"broad ({pack}/10-broad.yml[0])\n") in out
    assert "narrow (line 5): no no_match examples" in out
    assert "p/30-empty.yml: contributes nothing (no rules, no exact entries)" in out
    assert "p/50-no-pins.yml: contributes nothing (no rules, no exact entries)" in out
    assert "40-pins.yml" not in out  # a comment on its exact: line hid its entry
    assert "p/20-narrow.yml: contributes nothing: all of its rules are unreachable" in out
    assert invoke("check", "--strict", "--rules", str(pack)).exit_code == 1


def test_lint_calls_neither_a_rule_that_wins_one_example_nor_a_shadow_rule_unreachable(tmp_path: Path) -> None:
    # `broad` decides QuantError first, but Quant refused is narrow's own; the shadow rule never decides
    wins_one = "{match: [QuantError, Quant refused], no_match: [fine]}"
    narrow = (f"- id: narrow\n  class: quant-unsupported\n  description: d\n  examples: {wins_one}\n"
              "  when: {select: $.signal.all_text, contains: Quant}\n")
    trial = ("- id: trial\n  class: kernel-unsupported\n  mode: shadow\n  description: d\n"
             "  when: {select: $.signal.all_text, contains: KeyError}\n  examples: {match: [KeyError], no_match: [x]}\n")
    (_broad_pack(tmp_path) / "20-narrow.yml").write_text(narrow + trial)
    result = invoke("check", "--rules", str(tmp_path / "p"))
    assert result.exit_code == 0, result.output
    assert "unreachable" not in result.output and "contributes nothing" not in result.output


def test_lint_says_where_what_decides_first_is(tmp_path: Path) -> None:
    """"decided earlier by broad" left the maintainer to search the pack for broad, and an
    exact-table hit was a bare fingerprint."""
    from loop_core.keys import tier2_fingerprint

    pack = tmp_path / "p"
    pack.mkdir()
    fingerprint = tier2_fingerprint("valueerror: pinned", "LlamaForCausalLM", "vllm/vllm-openai:v0.21.0")
    (pack / "10-pins.yml").write_text(f"exact:\n  '{fingerprint}': quant-unsupported\n")
    (pack / "20-late.yml").write_text(
        "- id: late\n  class: kernel-unsupported\n  description: d\n"
        "  when: {select: $.signal.all_text, regex: '(?i)pinned|out of memory'}\n"
        "  examples: {match: ['ValueError: pinned', 'torch.cuda.OutOfMemoryError: CUDA out of memory'], "
        "no_match: [fine]}\n")
    out = invoke("check", "--rules", str(pack)).output
    assert ("late (line 1): unreachable, can never win: every match example is decided earlier by "
            f"exact entry '{fingerprint}', tier1-oom-fastpath\n") in out


def test_lint_names_regexes_that_are_searched_over_whole_logs(tmp_path: Path) -> None:
    pack = tmp_path / "p"
    pack.mkdir()
    rule = ("- id: {id}\n  class: unknown\n  description: d\n  when: {{select: {sel}, regex: '{rx}'}}\n"
            "  examples: {{match: ['{ex}'], no_match: [fine]}}\n")
    (pack / "10-slow.yml").write_text(
        rule.format(id="no-literal", sel="$.signal.all_text", rx=r"[A-Z]{3}\d+ \w{2}", ex="ABC1 ok")
        + rule.format(id="unbounded", sel="$.signal.all_text", rx=r"(?i)killed\s*process", ex="Killed process")
        + rule.format(id="one-slow-alternative", sel="$.signal.all_text", rx=r"(?i)no kernel image|x\d{1,3}y",
                      ex="no kernel image")
        + rule.format(id="short-text", sel="$.signal.final_error", rx=r"^[A-Z]{2}\d$", ex="AB1")
        + rule.format(id="windowed", sel="$.signal.all_text", rx=r"(?i)error\s{1,3}code \d+", ex="error code 7"))
    out = invoke("check", "--rules", str(pack)).output
    assert r"no-literal (line 4): regex '[A-Z]{3}\d+ \w{2}' on $.signal.all_text has no literal of 3" in out
    assert r"unbounded (line 9): regex '(?i)killed\s*process' on $.signal.all_text can cross lines without bound" in out
    assert r"one-slow-alternative (line 14): regex 'x\d{1,3}y' on $.signal.all_text has no literal" in out
    assert "short-text" not in out and "windowed" not in out  # a short text, and a pattern with a reach


def test_lint_leaves_regexes_on_manifest_fields_alone_and_cuts_a_long_pattern(tmp_path: Path) -> None:
    pack = tmp_path / "p"
    pack.mkdir()
    long_rx = r"[A-Z]{3}\d+ \w{2}" * 4
    (pack / "10-slow.yml").write_text(
        "- id: manifest-field\n  class: unknown\n  description: d\n"
        "  when: {select: $.manifest.model, regex: '^[a-z]{2}/\\w+$'}\n"
        "  examples: {match: [{manifest: {model: ab/cd}}], no_match: [fine]}\n"
        f"- id: long\n  class: unknown\n  description: d\n  when: {{select: $.signal.all_text, regex: '{long_rx}'}}\n"
        "  examples: {match: ['ABC1 okABC1 okABC1 okABC1 ok'], no_match: [fine]}\n")
    out = invoke("check", "--rules", str(pack)).output
    assert "manifest-field" not in out  # a manifest field is short: searching it whole costs nothing
    assert f"long (line 9): regex '{long_rx[:57]}...' on $.signal.all_text has no literal of 3" in out


def test_lint_counts_the_exact_entries_of_a_file_whose_rules_are_unreachable(tmp_path: Path) -> None:
    pack = _broad_pack(tmp_path)
    (pack / "20-narrow.yml").write_text(
        "rules:\n  - id: narrow\n    class: quant-unsupported\n    description: d\n"
        "    when: {select: $.signal.all_text, contains: QuantError}\n"
        "    examples: {match: [QuantError], no_match: [fine]}\n"
        "exact:\n  'aaaaaaaaaaaa': unknown\n")
    out = invoke("check", "--rules", str(pack)).output
    assert "narrow (line 2): unreachable, can never win" in out
    assert "contributes nothing" not in out  # its exact entry decides


def test_an_empty_exact_table_is_where_learn_writes_not_an_idle_file(tmp_path: Path) -> None:
    # Every decision turned into a rule and taken out of exact.yml by hand: `check --strict` in CI still passes.
    pack = tmp_path / "p"
    pack.mkdir()
    (pack / "10-rule.yml").write_text(
        "- id: frob\n  class: unknown\n  description: d\n  when: {select: $.signal.all_text, contains: frobnicator}\n"
        "  examples: {match: [frobnicator], no_match: [fine]}\n")
    (pack / "exact.yml").write_text("# Maintainer decisions, written by `loop-rules learn`.\nexact:\n")
    result = invoke("check", "--strict", "--rules", str(pack))
    assert result.exit_code == 0, result.output
    assert "exact.yml" not in result.output


def test_rules_version_is_stamped_into_verdicts_and_issue_bodies(pack: Path, pm: pluggy.PluginManager) -> None:
    from loop_core.dedup import draft_issue

    engine = Engine.build(pack, pm)
    verdict = engine.classify(make_bundle("RuntimeError: CUDA error: no kernel image is available"))
    assert verdict.rules_version == engine.pack.version and len(verdict.rules_version) == 12
    assert f"rules_version `{verdict.rules_version}`" in draft_issue(make_bundle("x"), verdict).body
    (pack / "99-more.yml").write_text(SHADOW_RULE)
    assert Engine.build(pack, pm).pack.version != engine.pack.version


def test_a_rule_that_misses_its_own_example_is_not_called_unreachable(tmp_path: Path) -> None:
    pack = tmp_path / "p"
    pack.mkdir()
    (pack / "10-wrong.yml").write_text(
        "- id: wrong\n  class: unknown\n  description: d\n  when: {select: $.signal.all_text, contains: Frob}\n"
        "  examples: {match: [nothing here], no_match: [fine]}\n"
        "- id: later\n  class: unknown\n  description: d\n  when: {select: $.signal.all_text, contains: here}\n"
        "  examples: {match: [here], no_match: [fine]}\n")
    out = invoke("check", "--rules", str(pack)).output
    assert "wrong (line 5) examples.match[0]: expected match, got no match" in out
    assert "unreachable" not in out and "None" not in out


@pytest.mark.parametrize("existing", ["", "# nothing learned yet\n", "exact:\n", "exact: null\n",
                                      "exact: {}\n", "exact:\n  '0123456789ab': unknown\nrules: []\n",
                                      "exact:\n    '0123456789ab': unknown\n",  # another indentation
                                      "\ufeffexact:\n  '0123456789ab': unknown\n",  # a byte-order mark
                                      "exact:  # pinned by hand\n  '0123456789ab': unknown\n",
                                      "exact:\n  '0123456789ab': unknown",  # no newline at the end
                                      "exact:\n  '0123456789ab': unknown\n" + NOVEL_RULE])  # a block after it
def test_learn_adds_to_any_exact_file_the_pack_loads(pack: Path, pm: pluggy.PluginManager, existing: str) -> None:
    (pack / "exact.yml").write_text(existing)
    assert learn(pack, "abcdefabcdef", "genuine-oom", condition_kinds(pm))
    assert Engine.build(pack, pm).pack.exact["abcdefabcdef"] == "genuine-oom"
    if "nothing learned" in existing or "'0123456789ab'" in existing:
        assert (pack / "exact.yml").read_text().startswith(existing.split("rules:")[0])


def test_learn_leaves_a_flow_style_table_as_it_was(pack: Path, pm: pluggy.PluginManager) -> None:
    flow = "exact: {'0123456789ab': unknown}\n"
    (pack / "exact.yml").write_text(flow)
    with pytest.raises(LoopError, match="could not add the entry as text") as refused:
        learn(pack, "abcdefabcdef", "genuine-oom", condition_kinds(pm))
    assert (pack / "exact.yml").read_text() == flow
    # Not "invalid YAML: duplicate key 'exact'", which blamed the file kept for the edit.
    assert "write its exact: table as a block mapping" in str(refused.value)


def test_learn_on_a_full_disk_keeps_the_table_whole(pack: Path, pm: pluggy.PluginManager,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Writing the table in place truncated it first: a full disk left it empty,
    every earlier decision lost, and the undo never ran."""
    import errno
    import os

    table = "# hand-kept\nexact:\n  '0123456789ab': unknown  # decided in review\n"
    (pack / "exact.yml").write_text(table)

    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(LoopError, match=r"exact\.yml: could not write: No space left on device"):
        learn(pack, "abcdefabcdef", "genuine-oom", condition_kinds(pm))
    monkeypatch.undo()
    assert (pack / "exact.yml").read_text() == table
    assert [p.name for p in pack.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_learn_keeps_the_tables_permissions_and_link(pack: Path, tmp_path: Path, pm: pluggy.PluginManager) -> None:
    shared = tmp_path / "shared-exact.yml"
    shared.write_text("exact:\n  '0123456789ab': unknown\n")
    shared.chmod(0o664)
    (pack / "exact.yml").symlink_to(shared)
    assert learn(pack, "abcdefabcdef", "genuine-oom", condition_kinds(pm))
    assert (pack / "exact.yml").is_symlink()
    assert "'abcdefabcdef': genuine-oom" in shared.read_text()
    assert shared.stat().st_mode & 0o777 == 0o664


def test_a_table_learn_starts_can_be_read_by_whoever_reads_the_pack(pack: Path, pm: pluggy.PluginManager) -> None:
    # It was written as a temp file is, 0600: a service reading the pack as another
    # user could no longer load it.
    from loop_core import trackers

    trackers.new_file_mode.cache_clear()  # read again under the umask set here
    mask = os.umask(0o022)
    try:
        assert learn(pack, "abcdefabcdef", "genuine-oom", condition_kinds(pm))
    finally:
        os.umask(mask)
        trackers.new_file_mode.cache_clear()
    assert (pack / "exact.yml").stat().st_mode & 0o777 == 0o644


def test_learn_from_a_bundle_whose_folder_name_is_not_utf8(pack: Path, tmp_path: Path,
                                                           pm: pluggy.PluginManager) -> None:
    """The note naming the bundle could not be written as UTF-8: the table was left
    empty (every earlier decision gone) and the run ended in an internal error."""
    table = "exact:\n  '0123456789ab': unknown\n"
    (pack / "exact.yml").write_text(table)
    name = os.fsdecode(b"ts\xff\x1b[31m")
    bundle_path = write_bundle(tmp_path / "m" / name, make_bundle(NOVEL))
    result = invoke("learn", str(bundle_path), "--as", "kernel-unsupported", "--rules", str(pack))
    assert result.exit_code == 0, result.output
    text = (pack / "exact.yml").read_text(encoding="utf-8")
    assert text.startswith(table)
    assert text.rstrip().endswith("from bundle ts\\xff\\x1b[31m")
    assert len(Engine.build(pack, pm).pack.exact) == 2


def test_learn_into_a_copy_of_a_registered_pack_says_the_name_loads_another(pack: Path, tmp_path: Path) -> None:
    """A checkout's rules.d after a plain `pip install .` is such a copy: `default` loads
    the package's own, and classify and run went on deciding the failure as before
    with nothing said."""
    bundle_path = write_bundle(tmp_path / "b", make_bundle(NOVEL))
    result = CliRunner().invoke(cli, ["learn", str(bundle_path), "--as", "unknown", "--rules", str(pack)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("learned: ")
    assert result.stderr.startswith("loop-rules: note: --rules default loads ")
    assert f"give classify, run and report --rules {pack} to use what was learned" in result.stderr
    # A pack of its own name is loaded by its directory alone: nothing to say.
    text = (pack / "pack.yml").read_text(encoding="utf-8")
    (pack / "pack.yml").write_text(text.replace("name: default", "name: my-rules"), encoding="utf-8")
    again = CliRunner().invoke(cli, ["learn", str(bundle_path), "--as", "unknown", "--rules", str(pack)])
    assert again.exit_code == 0 and again.stderr == "", again.output


def test_learn_into_a_folder_named_as_a_registered_pack_settles_with_that_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the installed pack kept its folder name, default: learn wrote the folder's
    table, then settled the queue with the registered pack (`--rules ./default` is
    `default` to Path), so the entry it had just decided was kept, and the note said to
    give classify and run `--rules default`, the very name that leaves the folder out."""
    shutil.copytree(ROOT / "rules.d", tmp_path / "default")
    write_bundle(tmp_path / "captures" / "m" / "20260801T000000Z", make_bundle(NOVEL))
    monkeypatch.chdir(tmp_path)
    assert json.loads(invoke("run", "captures", "--format", "json").output)["review_queued"] == 1
    (entry,) = json.loads(invoke("review", "list", "captures", "--format", "json").output)
    result = invoke("learn", "--review", entry["dedup_hash"], "--captures", "captures", "--as", "kernel-unsupported",
                    "--rules", "./default")
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("in default/exact.yml; removed from the review queue\n")
    assert result.stderr.endswith(": give classify, run and report --rules ./default to use what was learned "
                                  "(without it they decide this failure as before)\n")
    row = json.loads(invoke("classify", "--rules", "./default", "captures", "--format", "jsonl").output)
    assert row["failure_class"] == "kernel-unsupported"


def test_learn_refuses_the_copy_of_a_pack_a_python_package_installed(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """After `pip install`, `--rules default` is loop_rules/packs/default in site-packages:
    learning there worked until the next upgrade put the shipped table back."""
    from loop_core import maintain

    site = tmp_path / "site-packages"
    installed = site / "loop_rules" / "packs" / "default"
    shutil.copytree(ROOT / "rules.d", installed)
    monkeypatch.setattr(maintain, "_install_dirs", lambda: [site.resolve()])
    before = sorted((p.name, p.read_bytes()) for p in installed.iterdir())
    bundle_path = write_bundle(tmp_path / "b", make_bundle(NOVEL))
    result = invoke("learn", str(bundle_path), "--as", "unknown", "--rules", str(installed))
    assert result.exit_code == 2
    assert f"{installed}: is a pack installed with a Python package (under {site.resolve()})" in result.output
    assert "copy it (cp -r" in result.output and "learn into the copy" in result.output
    assert sorted((p.name, p.read_bytes()) for p in installed.iterdir()) == before
    # A copy outside it is the way: the same learn goes through.
    copy = tmp_path / "my-rules"
    shutil.copytree(installed, copy)
    assert invoke("learn", str(bundle_path), "--as", "unknown", "--rules", str(copy)).exit_code == 0


def test_the_install_directories_are_where_installed_packages_are() -> None:
    from loop_core import maintain

    assert maintain._installed_under(Path(pluggy.__file__).parent) is not None
    assert maintain._installed_under(ROOT / "rules.d") is None


def test_learn_without_its_pack_directory_says_what_it_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle_path = write_bundle(tmp_path / "b", make_bundle(NOVEL))
    monkeypatch.chdir(tmp_path)  # no rules.d here
    result = CliRunner().invoke(cli, ["learn", str(bundle_path), "--as", "unknown"])
    assert result.exit_code == 2
    assert "--rules rules.d: no such pack directory" in result.output
    assert "registered pack" not in result.output  # a name would be refused anyway


def test_two_learns_at_once_keep_both_entries(pack: Path, pm: pluggy.PluginManager,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Each learn read the table, added its line and wrote it back: run together, the
    second write dropped the first's entry though both said 'learned'. Here the writes
    wait for each other (up to a second), as they would when both had read the table."""
    import threading

    from loop_core import maintain

    kinds = condition_kinds(pm)
    both_read = threading.Barrier(2, timeout=1.0)
    real_replace = maintain._replace_text

    def replace_when_both_read(path: Path, text: str) -> None:
        try:
            both_read.wait()
        except threading.BrokenBarrierError:
            pass  # the other learn is waiting for the pack: it reads after this write
        real_replace(path, text)

    monkeypatch.setattr(maintain, "_replace_text", replace_when_both_read)
    errors: list[BaseException] = []

    def teach(fingerprint: str) -> None:
        try:
            learn(pack, fingerprint, "unknown", kinds, note="a test")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=teach, args=(f"{digit}" * 12,)) for digit in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    exact = Engine.build(pack, pm).pack.exact
    assert exact.get("a" * 12) == "unknown" and exact.get("b" * 12) == "unknown"


def test_two_bundles_claiming_one_submission_do_not_flip_the_queue_run_after_run(tmp_path: Path) -> None:
    """One decided (an OOM) and one still unknown, with the same manifest and so the same
    submission: the decided one took the other's occurrence out of the queue, the next
    run queued it again, and so on, every other run."""
    captures = tmp_path / "captures"
    manifest = {"utc_ts": "20260801T000000Z"}
    oom = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    write_bundle(captures / "a" / "20260801T000000Z", make_bundle({"manifest": manifest,
                                                                   "pt3": {"failure_log_excerpt": oom}}))
    write_bundle(captures / "b" / "20260801T000000Z", make_bundle({"manifest": manifest,
                                                                   "pt3": {"failure_log_excerpt": NOVEL}}))
    counts = []
    for _ in range(3):
        summary = json.loads(invoke("run", str(captures), "--format", "json").output)
        counts.append((summary["review_queued"], summary["review_settled"]))
        (entry,) = _queue(captures)
        assert len(entry["occurrences"]) == 1
    assert counts == [(1, 0), (0, 0), (0, 0)]


def test_review_list_and_the_report_count_an_entry_the_reference_wrote_as_one(tmp_path: Path) -> None:
    """Such an entry lists no occurrences but stands for one capture: it was shown with
    a count of 0, and the queue as "N item(s) waiting for review (0 occurrence(s))"."""
    captures = tmp_path / "captures"
    write_bundle(captures / "m" / "20260801T000000Z", make_bundle(NOVEL))
    invoke("run", str(captures))
    (entry,) = _queue(captures)
    Path(entry["_path"]).write_text(json.dumps({k: v for k, v in entry.items() if k in (
        "canonical", "dedup_hash", "error_substring", "kind", "model_slug", "reason", "schema", "utc_ts")}))
    listed = invoke("review", "list", str(captures)).output.splitlines()
    assert listed[1].startswith(f"{entry['dedup_hash']}      1  ")
    assert listed[-1] == "1 item(s) waiting for review (1 occurrence(s))"
    assert invoke("report", str(captures), "--out", str(tmp_path / "r.html")).exit_code == 0
    assert f'<td class="num">1</td><td><code>{entry["dedup_hash"]}' in (tmp_path / "r.html").read_text()


def test_review_list_shows_the_error_message_not_its_log_decorations(tmp_path: Path) -> None:
    # vLLM V1 puts 60 characters of decorations before its message (tests/corpus/real,
    # vllm-unknown-903): the column showed "(EngineCore_DP0 pid=1789245) ERROR 11-19 12:54:26 [core.py:7".
    line = ("(EngineCore_DP0 pid=1789245) ERROR 11-19 12:54:26 [core.py:710] RuntimeError: Worker failed "
            "with error 'LoRA rank 32 is greater than max_lora_rank 16.'")
    captures = tmp_path / "captures"
    write_bundle(captures / "m" / "20260801T000000Z", make_bundle(f"INFO starting\n{line}"))
    assert json.loads(invoke("run", str(captures), "--format", "json").output)["review_queued"] == 1
    (row,) = [r for r in invoke("review", "list", str(captures)).output.splitlines() if "example/" in r]
    assert row.endswith("  RuntimeError: Worker failed with error 'LoRA rank 32 is grea")
    # A line that is all decoration is shown as it is, its runs of blanks collapsed.
    write_bundle(captures / "n" / "20260801T000000Z",
                 make_bundle({"manifest": {"model": "acme/Other"}, "pt3": {"failure_log_excerpt": "ok\n0.1.42"}}))
    invoke("run", str(captures))
    (row,) = [r for r in invoke("review", "list", str(captures)).output.splitlines() if "acme/Other" in r]
    assert row.endswith("  0.1.42")


BROKEN_RULES = ("- {id: bad, class: unknown, when: [{select: $.x, regex: '('}]}\n"
                "- {id: bad2, class: nope, when: [{select: $.x, regex: 'a'}]}\n")


@pytest.mark.parametrize(("option", "command"), [
    ("--rules", ["diff", "--rules", "{pack}", "corpus"]),
    ("--against", ["diff", "--rules", "default", "--against", "{pack}", "corpus"]),
    ("--rules", ["eval", "--corpus", "cases", "--rules", "{pack}"]),
    ("--compare", ["eval", "--corpus", "cases", "--compare", "{pack}"]),
    ("--rules", ["report", "corpus", "--rules", "{pack}", "--out", "r.html"]),
])
def test_a_broken_pack_names_its_first_problem_and_how_to_see_them_all(
        tmp_path: Path, option: str, command: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`check --rules X` lists every problem of a pack; the commands that load one named
    the first and stopped, so a maintainer fixed one problem per attempt."""
    write_bundle(tmp_path / "corpus" / "a" / "1", make_bundle(NOVEL))
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "a.yml").write_text("id: c1\nengine: e\nsource: s\nlabel: unknown\nhard: false\n"
                                              "split: tune\nrationale: r\nexcerpt: x\n")
    (tmp_path / "my pack").mkdir()
    (tmp_path / "my pack" / "10-bad.yml").write_text(BROKEN_RULES)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, [arg.replace("{pack}", "my pack") for arg in command])
    assert result.exit_code == 2
    assert result.stderr == ("Error: my pack/10-bad.yml[0] bad (line 1): missing description, examples (one of 6 "
                             "problems; `loop-rules check --rules 'my pack'` lists them all)\n")
    assert not (tmp_path / "r.html").exists()
    (tmp_path / "my pack" / "10-bad.yml").write_text(  # one problem: the selector
        "- {id: bad2, class: unknown, description: d, when: [{select: $.x, regex: 'a'}], examples: {match: [a]}}\n")
    result = CliRunner().invoke(cli, [arg.replace("{pack}", "my pack") for arg in command])
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: my pack/10-bad.yml[0] bad2 (line 1): ") and "check" not in result.stderr


@pytest.mark.parametrize("fmt", ["table", "markdown", "json"])
def test_a_diff_that_could_read_no_bundle_fails_on_change_all_the_same(tmp_path: Path, fmt: str) -> None:
    """A mistyped or empty corpus compared nothing and passed `--fail-on-change`
    (status 0), a CI gate that never closes; the Markdown said "1 bundles"."""
    empty = tmp_path / "empty"
    empty.mkdir()
    note = (f"loop-rules: no bundle could be read: nothing compared; `loop-rules classify {empty}` "
            "names the errors\n")
    result = invoke("diff", "--rules", "reference", "--fail-on-change", "--format", fmt, str(empty))
    assert result.exit_code == 1
    assert result.stderr == note
    result = invoke("diff", "--rules", "reference", "--format", fmt, str(empty))
    assert result.exit_code == 0 and result.stderr == note
    if fmt == "markdown":
        assert "1 bundle(s), **0 changed**, 1 unreadable" in result.stdout
    corpus = tmp_path / "corpus"
    write_bundle(corpus / "a" / "1", make_bundle(NOVEL))
    result = invoke("diff", "--rules", "reference", "--fail-on-change", "--format", fmt, str(corpus), str(empty))
    assert result.exit_code == 0 and result.stderr == ""  # one bundle compared, unchanged
