"""Spool and SQLite trackers: atomic files, exactly-once replay, reference spool files."""

from __future__ import annotations

import json
from pathlib import Path

from loop_core import Engine
from loop_core.dedup import TUPLE_MARKER, draft_issue, occurrence_of, parse_body_tuple
from loop_core.testing import make_bundle
from loop_core.trackers import FileAction, FileResult, SpoolTracker, SqliteTracker, replay_spool

OOM = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB"


def drafted(engine: Engine, text: str = OOM, **manifest: object):  # type: ignore[no-untyped-def]
    bundle = make_bundle({"manifest": manifest, "pt3": {"failure_log_excerpt": text}})
    return draft_issue(bundle, engine.classify(bundle)), occurrence_of(bundle)


def test_spool_accumulates_occurrences_instead_of_overwriting(tmp_path: Path, engine: Engine) -> None:
    spool = SpoolTracker(tmp_path)
    d1, o1 = drafted(engine, utc_ts="20260801T000000Z")
    d2, o2 = drafted(engine, utc_ts="20260802T000000Z")
    assert d1.dedup_hash == d2.dedup_hash and o1.submission != o2.submission
    assert spool.file(d1, o1).action is FileAction.SPOOLED
    assert spool.file(d2, o2).action is FileAction.SPOOLED
    assert spool.file(d2, o2).action is FileAction.ALREADY_COUNTED
    payload = json.loads((tmp_path / "_dedup-queue" / f"{d1.dedup_hash}.json").read_text())
    assert {"body", "canonical", "dedup_hash", "kind", "labels", "schema", "title"} <= set(payload)
    assert payload["kind"] == "would-be-issue"
    assert [o["submission"] for o in payload["occurrences"]] == [o1.submission, o2.submission]
    assert not list((tmp_path / "_dedup-queue").glob(".*.tmp"))


def test_replay_files_each_occurrence_exactly_once(tmp_path: Path, engine: Engine) -> None:
    spool = SpoolTracker(tmp_path)
    for day in ("01", "02", "03"):
        spool.file(*drafted(engine, utc_ts=f"202608{day}T000000Z"))
    db = SqliteTracker(tmp_path / "t.sqlite")
    (result,) = replay_spool(spool, db)
    assert [r.action for r in result.results] == [FileAction.OPENED, FileAction.PLUS_ONE, FileAction.PLUS_ONE]
    assert result.drained and spool.pending() == []
    assert replay_spool(spool, db) == []
    assert [i["occurrences"] for i in db.issues()] == [3]


def test_replay_of_a_reference_spool_file(tmp_path: Path, engine: Engine) -> None:
    draft, _ = drafted(engine)
    reference = draft.spool_payload()  # the reference writes no occurrence list
    reference["body"] = reference["body"].replace("## Loop", "cc @maintainer ## Loop")
    target = tmp_path / "_dedup-queue" / f"{draft.dedup_hash}.json"
    target.parent.mkdir()
    target.write_text(json.dumps(reference, indent=2, sort_keys=True))
    db = SqliteTracker(tmp_path / "t.sqlite")
    (result,) = replay_spool(SpoolTracker(tmp_path), db)
    assert [r.action for r in result.results] == [FileAction.OPENED] and result.drained
    issue = db.issue("1")
    assert issue is not None
    assert "@maintainer" not in issue["body"]  # re-sanitized outside the tuple block
    assert TUPLE_MARKER in issue["body"] and parse_body_tuple(issue["body"]) == list(draft.key)


class FallsBackToSpool:
    name = "flaky"

    def __init__(self, captures: Path) -> None:
        self.spool = SpoolTracker(captures)

    def file(self, draft, occurrence):  # type: ignore[no-untyped-def]
        result = self.spool.file(draft, occurrence, reason="outage")
        return FileResult(result.action, result.dedup_hash, None, result.reason, result.spool_path)

    def close(self) -> None:
        pass


def test_a_target_falling_back_to_the_spool_never_drains_it(tmp_path: Path, engine: Engine) -> None:
    spool = SpoolTracker(tmp_path)
    spool.file(*drafted(engine))
    (result,) = replay_spool(spool, FallsBackToSpool(tmp_path))
    assert not result.drained
    assert len(spool.pending()) == 1  # nothing lost
