"""Spool and SQLite trackers: atomic files, exactly-once replay, reference spool files."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from loop_core import DedupKey, Engine, TrackerError
from loop_core.dedup import (
    TUPLE_MARKER,
    IssueDraft,
    Occurrence,
    draft_issue,
    occurrence_of,
    parse_body_tuple,
)
from loop_core.testing import make_bundle, write_bundle
from loop_core.trackers import (
    FileAction,
    FileResult,
    SpoolTracker,
    SqliteTracker,
    replay_spool,
)

from .captures import copy_examples

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "pull-captures"
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


def test_replay_files_the_spool_in_the_order_of_its_file_names(tmp_path: Path, engine: Engine) -> None:
    """Whatever order the failures were spooled in, or the folder lists them in: two
    replays of one spool number the issues alike, and name its files in one order."""
    spool = SpoolTracker(tmp_path)
    models = ("acme/A-7B", "acme/B-7B", "acme/C-7B", "acme/D-7B")
    filed = sorted((drafted(engine, model=m, model_id=m) for m in models), key=lambda f: f[0].dedup_hash)
    for i in (1, 3, 0, 2):  # neither the names' order nor its reverse
        spool.file(*filed[i])
    hashes = [draft.dedup_hash for draft, _ in filed]
    assert [path.stem for path in spool.pending()] == hashes
    db = SqliteTracker(tmp_path / "t.sqlite")
    try:
        assert [r.path.stem for r in replay_spool(spool, db)] == hashes
        assert [(i["id"], i["dedup_hash"]) for i in db.issues()] == list(enumerate(hashes, start=1))
    finally:
        db.close()


def test_a_file_another_replay_drained_meanwhile_counts_as_drained(tmp_path: Path, engine: Engine) -> None:
    """Two replays at once: the one that found the file gone after filing all of it said
    it was still spooled, and `spool replay` exited 1 over a spool that was empty."""
    spool = SpoolTracker(tmp_path)
    for day in ("01", "02"):
        spool.file(*drafted(engine, utc_ts=f"202608{day}T000000Z"))
    db = SqliteTracker(tmp_path / "t.sqlite")

    class Racing:
        name = "racing"

        def file(self, draft: IssueDraft, occurrence: Occurrence) -> FileResult:
            if spool.pending():  # the other replay, finishing first
                (other,) = replay_spool(SpoolTracker(tmp_path), db)
                assert other.drained
            return db.file(draft, occurrence)

        def close(self) -> None:
            pass

    (result,) = replay_spool(spool, Racing())
    assert [r.action for r in result.results] == [FileAction.ALREADY_COUNTED] * 2
    assert result.drained and spool.pending() == []
    assert [i["occurrences"] for i in db.issues()] == [2]


@contextmanager
def replayed_reference(tmp_path: Path, payload: dict[str, Any]) -> Iterator[tuple[SqliteTracker, dict[str, Any]]]:
    """Write *payload* as the reference's spool writes it, replay it into a fresh SQLite
    tracker, and give that tracker with the one issue the replay opened."""
    target = tmp_path / "_dedup-queue" / f"{payload['dedup_hash']}.json"
    target.parent.mkdir()
    target.write_text(json.dumps(payload, indent=2, sort_keys=True))
    db = SqliteTracker(tmp_path / "t.sqlite")
    try:
        (result,) = replay_spool(SpoolTracker(tmp_path), db)
        assert [r.action for r in result.results] == [FileAction.OPENED] and result.drained
        issue = db.issue("1")
        assert issue is not None
        yield db, issue
    finally:
        db.close()


def test_replay_of_a_reference_spool_file(tmp_path: Path, engine: Engine) -> None:
    draft, _ = drafted(engine)
    reference = draft.spool_payload()  # the reference writes no occurrence list
    reference["body"] = reference["body"].replace("## Loop", "cc @maintainer ## Loop")
    with replayed_reference(tmp_path, reference) as (_db, issue):
        assert "@maintainer" not in issue["body"]  # re-sanitized outside the tuple block
        assert TUPLE_MARKER in issue["body"] and parse_body_tuple(issue["body"]) == list(draft.key)


def test_a_reference_spool_files_tuple_block_is_replayed_byte_exact(tmp_path: Path, engine: Engine) -> None:
    """Text around the tuple block is sanitized again on replay; the block itself is not, or
    a value with an "@" would be published altered, no later capture would verify against
    it, and the next occurrence would open a second issue."""
    model = "acme/@team-7B"
    draft, _ = drafted(engine, model=model, model_id=model, slug=model)
    block = draft.body[draft.body.index(TUPLE_MARKER):]
    block = block[:block.index("\n```\n") + 4]
    assert '"acme/@team-7B"' in block
    reference = draft.spool_payload()
    reference["body"] += "\n\ncc @maintainer"  # the reference published whatever it was given
    with replayed_reference(tmp_path, reference) as (db, issue):
        assert block in issue["body"]
        assert "@maintainer" not in issue["body"]  # sanitized after the block as before it
        again = db.file(*drafted(engine, model=model, model_id=model, slug=model, utc_ts="20260802T000000Z"))
        assert (again.action, again.issue) == (FileAction.PLUS_ONE, 1)


def test_a_reference_spool_files_long_title_is_cut_to_githubs_limit(tmp_path: Path, engine: Engine) -> None:
    """The reference bounds no title (§8.4.4); a replayed one is cut to GitHub's 256 characters."""
    draft, _ = drafted(engine)
    reference = draft.spool_payload()
    reference["title"] = f"[loop][genuine-oom] acme/{'Long' * 80} (dedup {draft.dedup_hash})"
    with replayed_reference(tmp_path, reference) as (_db, issue):
        assert 0 < len(issue["title"]) <= 256
        assert issue["title"].startswith("[loop][genuine-oom] acme/LongLong")


class SpoolsWhileFiling:
    """A target during whose first filing a run spools another occurrence of the same
    failure into the file being replayed (as `run --tracker spool` may, meanwhile)."""

    name = "busy"

    def __init__(self, target: SqliteTracker, spool: SpoolTracker, late: tuple, *,  # type: ignore[type-arg]
                 drained_first: bool = False) -> None:
        self.target, self.spool, self.late, self.drained_first = target, spool, late, drained_first

    def file(self, draft, occurrence):  # type: ignore[no-untyped-def]
        if self.late:
            if self.drained_first:  # another replay removed the file before the run spooled
                (self.spool.directory / f"{draft.dedup_hash}.json").unlink()
            self.spool.file(*self.late)
            self.late = ()
        return self.target.file(draft, occurrence)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("reference,drained_first", [(False, False), (False, True), (True, False)],
                         ids=["ours", "ours-made-again", "reference-file"])
def test_an_occurrence_spooled_during_a_replay_stays_in_the_spool(tmp_path: Path, engine: Engine,
                                                                   reference: bool, drained_first: bool) -> None:
    """The file was removed when it held as many occurrences as were replayed: a reference
    file (one stand-in occurrence) that a run added one to meanwhile held one, and so did
    a file another replay drained and a run made again; the new occurrence was lost."""
    spool = SpoolTracker(tmp_path)
    first, one = drafted(engine, utc_ts="20260801T000000Z")
    late = drafted(engine, utc_ts="20260802T000000Z")
    path = tmp_path / "_dedup-queue" / f"{first.dedup_hash}.json"
    if reference:
        path.parent.mkdir()
        path.write_text(json.dumps(first.spool_payload(), indent=2, sort_keys=True))
    else:
        spool.file(first, one)
    db = SqliteTracker(tmp_path / "t.sqlite")
    try:
        (result,) = replay_spool(spool, SpoolsWhileFiling(db, spool, late, drained_first=drained_first))
        assert not result.drained and path.exists()
        (again,) = replay_spool(spool, db)
        assert again.drained and not path.exists()
        assert [issue["occurrences"] for issue in db.issues()] == [2]  # the late one counted too
    finally:
        db.close()


class RewritesTheFileWhileFiling:
    """A target during whose first filing the spool file being replayed is written anew
    with ``doc`` (by hand, or by the reference's spool, which overwrites)."""

    name = "rewritten"

    def __init__(self, target: SqliteTracker, path: Path, doc: dict[str, Any]) -> None:
        self.target, self.path, self.doc = target, path, doc

    def file(self, draft, occurrence):  # type: ignore[no-untyped-def]
        if self.doc:
            self.path.write_text(json.dumps(self.doc), encoding="utf-8")
            self.doc = {}
        return self.target.file(draft, occurrence)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("rewrite", ["occurrences-not-a-list", "reference-file"])
def test_a_spool_file_rewritten_during_a_replay_stays(tmp_path: Path, engine: Engine, rewrite: str) -> None:
    """What the file holds now was not replayed (an occurrence list that is no longer a
    list, or the reference's one would-be issue in place of ours): removing it would lose it."""
    spool = SpoolTracker(tmp_path)
    draft, occurrence = drafted(engine)
    spool.file(draft, occurrence)
    (path,) = spool.pending()
    doc = {**json.loads(path.read_text()), "occurrences": {"s": 1}} if rewrite != "reference-file" \
        else draft.spool_payload()
    db = SqliteTracker(tmp_path / "t.sqlite")
    try:
        (result,) = replay_spool(spool, RewritesTheFileWhileFiling(db, path, doc))
        assert [r.action for r in result.results] == [FileAction.OPENED]
        assert not result.drained and json.loads(path.read_text()) == doc
    finally:
        db.close()


class FallsBackToSpool:
    name = "flaky"

    def __init__(self, captures: Path) -> None:
        self.spool = SpoolTracker(captures)

    def file(self, draft, occurrence):  # type: ignore[no-untyped-def]
        result = self.spool.file(draft, occurrence, reason="outage")
        return FileResult(result.action, result.dedup_hash, None, result.reason, result.spool_path)

    def close(self) -> None:
        pass


class QueuesElsewhere:
    """A plugin's target that keeps every occurrence in an outbox of its own: it answers
    spooled, with no spool file to point at."""

    name = "outbox"

    def file(self, draft, occurrence):  # type: ignore[no-untyped-def]
        return FileResult(FileAction.SPOOLED, draft.dedup_hash, None, "outbox")

    def close(self) -> None:
        pass


@pytest.mark.parametrize("fallback", [FallsBackToSpool, lambda _captures: QueuesElsewhere()],
                         ids=["this-spool", "elsewhere"])
def test_a_target_falling_back_to_the_spool_never_drains_it(tmp_path: Path, engine: Engine,
                                                            fallback: Any) -> None:
    """An occurrence the target only spooled, here or in a queue of its own, has not
    landed: removing the file would lose it should that queue never be sent."""
    spool = SpoolTracker(tmp_path)
    spool.file(*drafted(engine))
    (result,) = replay_spool(spool, fallback(tmp_path))
    assert not result.drained
    assert len(spool.pending()) == 1  # nothing lost


class GoesOfflineAfterTheFirst:
    """A target that lands the first occurrence it is given, then falls back to the
    spool for every other (a remote tracker going offline in the middle of a file)."""

    name = "offline-midway"

    def __init__(self, target: SqliteTracker, captures: Path) -> None:
        self.target, self.spool, self.landed = target, SpoolTracker(captures), 0

    def file(self, draft, occurrence):  # type: ignore[no-untyped-def]
        if self.landed:
            return self.spool.file(draft, occurrence, reason="outage")
        self.landed += 1
        return self.target.file(draft, occurrence)

    def close(self) -> None:
        pass


def test_a_spool_file_only_part_of_which_landed_stays_and_is_replayed_once_on_the_next_try(
        tmp_path: Path, engine: Engine) -> None:
    spool = SpoolTracker(tmp_path)
    for day in ("01", "02", "03"):
        spool.file(*drafted(engine, utc_ts=f"202608{day}T000000Z"))
    (path,) = spool.pending()
    db = SqliteTracker(tmp_path / "t.sqlite")
    try:
        (partial,) = replay_spool(spool, GoesOfflineAfterTheFirst(db, tmp_path))
        assert [r.action for r in partial.results] == [FileAction.OPENED] + [FileAction.ALREADY_COUNTED] * 2
        assert not partial.drained and spool.pending() == [path]  # two of its occurrences never landed
        assert len(json.loads(path.read_text())["occurrences"]) == 3
        (again,) = replay_spool(spool, db)
        assert [r.action for r in again.results] == [FileAction.ALREADY_COUNTED] + [FileAction.PLUS_ONE] * 2
        assert again.drained and spool.pending() == []
        assert [i["occurrences"] for i in db.issues()] == [3]
    finally:
        db.close()


# -- batched filing (SqliteTracker.file_many) ----------------------------------------


def _state(db: SqliteTracker) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]], list[tuple[object, ...]]]:
    issues = db.db.execute("SELECT id, dedup_hash, failure_class, title, body FROM issues ORDER BY id").fetchall()
    labels = db.db.execute("SELECT issue_id, name FROM labels ORDER BY issue_id, name").fetchall()
    occ = db.db.execute("SELECT submission, dedup_hash, issue_id, utc_ts, commit_sha, bundle FROM occurrences "
                        "ORDER BY submission, dedup_hash").fetchall()
    return issues, labels, occ


def _mixed_items(engine: Engine):  # type: ignore[no-untyped-def]
    """Pairs that, filed in order after ``seeded``, give every action inside one batch."""
    kernel = "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    seeded = [drafted(engine, utc_ts="20260801T000000Z")]  # filed before the batch: key A, submission 1
    a2 = drafted(engine, utc_ts="20260802T000000Z")  # key A, a new submission: +1
    b1 = drafted(engine, kernel, model="acme/Kernel-7B", utc_ts="20260803T000000Z")  # key B: new
    b2 = drafted(engine, kernel, model="acme/Kernel-7B", utc_ts="20260804T000000Z")  # key B again, same batch: +1
    assert b1[0].dedup_hash == b2[0].dedup_hash != seeded[0][0].dedup_hash
    assert a2[0].dedup_hash == seeded[0][0].dedup_hash
    items = [a2, seeded[0], b1, b2, b1, a2]  # ... then three repeats: already counted
    return seeded, items


def test_file_many_gives_what_file_gives_one_by_one(tmp_path: Path, engine: Engine) -> None:
    seeded, items = _mixed_items(engine)
    one = SqliteTracker(tmp_path / "one.sqlite")
    many = SqliteTracker(tmp_path / "many.sqlite")
    try:
        for db in (one, many):
            assert [db.file(*p).action for p in seeded] == [FileAction.OPENED]
        expected = [one.file(*p) for p in items]
        got = many.file_many(items)
        assert [r.action for r in got] == [
            FileAction.PLUS_ONE, FileAction.ALREADY_COUNTED, FileAction.OPENED, FileAction.PLUS_ONE,
            FileAction.ALREADY_COUNTED, FileAction.ALREADY_COUNTED]
        assert [(r.action, r.dedup_hash, r.issue, r.reason) for r in got] == \
            [(r.action, r.dedup_hash, r.issue, r.reason) for r in expected]
        assert _state(many) == _state(one)
        assert [i["occurrences"] for i in many.issues()] == [2, 2]
        assert many.file_many(items) == [  # a replay of the whole batch counts nothing
            FileResult(FileAction.ALREADY_COUNTED, r.dedup_hash, r.issue, "occurrence already counted")
            for r in got]
        assert _state(many) == _state(one)
    finally:
        one.close()
        many.close()


def test_counted_says_yes_only_for_an_occurrence_the_tracker_holds(tmp_path: Path, engine: Engine) -> None:
    draft, occurrence = drafted(engine, model="m/a", submission_fingerprint="a" * 64)
    other, elsewhere = drafted(engine, text=OOM + " (other)", model="m/b", submission_fingerprint="b" * 64)
    path = tmp_path / "t.sqlite"
    db = SqliteTracker(path)
    try:
        assert db.file(draft, occurrence).action is FileAction.OPENED
        # Empty when opened: no capture was counted before this run; file() finds this run's.
        assert not db.counted(draft.dedup_hash, occurrence.submission)
    finally:
        db.close()
    db = SqliteTracker(path)
    try:
        assert db.counted(draft.dedup_hash, occurrence.submission)
        assert not db.counted(draft.dedup_hash, elsewhere.submission)  # another capture of the failure
        assert not db.counted(other.dedup_hash, occurrence.submission)  # the capture under another key
        assert db.file(draft, occurrence).action is FileAction.ALREADY_COUNTED
    finally:
        db.close()


def test_file_many_splits_into_transactions_of_batch_items(tmp_path: Path, engine: Engine) -> None:
    seeded, items = _mixed_items(engine)
    whole = SqliteTracker(tmp_path / "whole.sqlite")
    split = SqliteTracker(tmp_path / "split.sqlite")
    begins: list[str] = []
    split.db.set_trace_callback(lambda sql: begins.append(sql) if sql.startswith("BEGIN") else None)
    try:
        a = whole.file_many(seeded + items)
        b = split.file_many(seeded + items, batch=2)
        assert [r.action for r in a] == [r.action for r in b]
        assert _state(whole) == _state(split)
        assert begins == ["BEGIN IMMEDIATE"] * 4  # 7 pairs, 2 per transaction
        assert split.file_many([]) == []
        with pytest.raises(ValueError):
            split.file_many(items, batch=0)
    finally:
        whole.close()
        split.close()


@pytest.mark.parametrize("fails_at", [4, 5, 6], ids=["first-of-batch", "second-of-batch", "last-of-batch"])
def test_file_many_rolls_back_the_failing_batch_only(tmp_path: Path, engine: Engine,
                                                     monkeypatch: pytest.MonkeyPatch, fails_at: int) -> None:
    """Whichever pair of a batch fails, the pairs of that batch filed before it are not
    counted: the batch's transaction rolls back whole, and a rerun files them once."""
    seeded, items = _mixed_items(engine)
    pairs = seeded + items
    db = SqliteTracker(tmp_path / "t.sqlite")
    reference = SqliteTracker(tmp_path / "ref.sqlite")
    try:
        real = SqliteTracker._file
        calls = {"n": 0}

        def fails_at_that_call(self, conn, draft, occurrence):  # type: ignore[no-untyped-def]
            calls["n"] += 1
            if calls["n"] == fails_at:
                raise RuntimeError("disk on fire")
            return real(self, conn, draft, occurrence)

        monkeypatch.setattr(SqliteTracker, "_file", fails_at_that_call)
        with pytest.raises(RuntimeError):
            db.file_many(pairs, batch=3)
        monkeypatch.setattr(SqliteTracker, "_file", real)
        # The first transaction (3 pairs) committed; the second rolled back whole.
        assert len(_state(db)[2]) == 2 and [i["occurrences"] for i in db.issues()] == [2]
        again = db.file_many(pairs)
        assert [r.action for r in again[:3]] == [FileAction.ALREADY_COUNTED] * 3
        for pair in pairs:
            reference.file(*pair)
        assert _state(db)[1:] == _state(reference)[1:]
        assert [(i["dedup_hash"], i["occurrences"]) for i in db.issues()] == \
            [(i["dedup_hash"], i["occurrences"]) for i in reference.issues()]
    finally:
        db.close()
        reference.close()


def test_review_queue_add_many_writes_each_failure_once_and_counts_each_submission_once(tmp_path: Path) -> None:
    from loop_core.dedup import Occurrence
    from loop_core.trackers import ReviewQueue

    queue = ReviewQueue(tmp_path)
    a = {"dedup_hash": "a" * 64, "reason": "no rule matched"}
    b = {"dedup_hash": "b" * 64, "reason": "no rule matched"}

    def occ(submission: str) -> Occurrence:
        return Occurrence(submission, "20261130T000000Z", "abc1234", f"captures/{submission}")

    results = queue.add_many([(a, occ("s1")), (b, occ("s2")), (a, occ("s3")), (a, occ("s1"))])
    assert [added for added, _ in results] == [True, True, True, False]  # s1 twice in one batch: once
    assert queue.add(a, occ("s3"))[0] is False  # already queued by the batch
    assert queue.add(b, occ("s4"))[0] is True
    items = {item["dedup_hash"]: item for item in queue.items()}
    assert [o["submission"] for o in items["a" * 64]["occurrences"]] == ["s1", "s3"]
    assert [o["submission"] for o in items["b" * 64]["occurrences"]] == ["s2", "s4"]
    assert not [p for p in (tmp_path / "_review-queue").iterdir() if p.name.endswith(".tmp")]


WRITE_QUEUE_AND_SPOOL = """
import os, sys
from pathlib import Path
os.umask(int(sys.argv[2], 8))
from loop_core.dedup import Occurrence, draft_issue, occurrence_of
from loop_core.engine import Engine
from loop_core.testing import make_bundle
from loop_core.trackers import ReviewQueue, SpoolTracker
captures = Path(sys.argv[1])
ReviewQueue(captures).add({"dedup_hash": "a" * 64, "reason": "no rule matched"},
                          Occurrence("s1", "20261130T000000Z", "abc1234", "captures/s1"))
bundle = make_bundle({"pt3": {"failure_log_excerpt": "torch.cuda.OutOfMemoryError: CUDA out of memory"}})
SpoolTracker(captures).file(draft_issue(bundle, Engine.build("default").classify(bundle)), occurrence_of(bundle))
"""


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_queue_and_spool_files_get_the_mode_the_umask_gives(tmp_path: Path, mask: int) -> None:
    # They were written as their temporary files are, 0600, beside a 0644 tracker: a
    # maintainer reading what a service account's run left could list no review entry.
    subprocess.run([sys.executable, "-c", WRITE_QUEUE_AND_SPOOL, str(tmp_path), f"{mask:o}"], check=True,
                   cwd=Path(__file__).resolve().parent.parent)
    written = [*(tmp_path / "_review-queue").glob("*.json"), *(tmp_path / "_dedup-queue").glob("*.json")]
    assert len(written) == 2
    assert {p.stat().st_mode & 0o777 for p in written} == {0o666 & ~mask}


def test_review_queue_counts_against_a_stored_list_that_holds_junk(tmp_path: Path) -> None:
    from loop_core.dedup import Occurrence
    from loop_core.trackers import ReviewQueue

    queue = ReviewQueue(tmp_path)
    a = {"dedup_hash": "a" * 64, "reason": "no rule matched"}
    path = tmp_path / "_review-queue" / f"{'a' * 64}.json"
    path.parent.mkdir()
    # Hand-edited: entries that are not occurrences, or whose submission is not a string.
    path.write_text(json.dumps({**a, "occurrences": ["x", {"submission": ["s1"]}, {"submission": "s2"}]}))
    results = queue.add_many([(a, Occurrence(s, None, None, s)) for s in ("s1", "s2", "s3", "s3")])
    assert [added for added, _ in results] == [True, False, True, False]
    stored = json.loads(path.read_text())["occurrences"]
    assert stored[:3] == ["x", {"submission": ["s1"]}, {"submission": "s2"}]  # kept as they were
    assert [o["submission"] for o in stored[3:]] == ["s1", "s3"]


def test_spool_file_many_gives_what_file_gives_one_by_one(tmp_path: Path, engine: Engine) -> None:
    seeded, items = _mixed_items(engine)
    one, many = SpoolTracker(tmp_path / "one"), SpoolTracker(tmp_path / "many")
    for spool in (one, many):
        assert [spool.file(*pair).action for pair in seeded] == [FileAction.SPOOLED]
    expected = [one.file(*pair) for pair in items]
    got = many.file_many(items)
    assert [r.action for r in got] == [
        FileAction.SPOOLED, FileAction.ALREADY_COUNTED, FileAction.SPOOLED, FileAction.SPOOLED,
        FileAction.ALREADY_COUNTED, FileAction.ALREADY_COUNTED]
    assert [(r.action, r.dedup_hash, r.reason, r.spool_path.name if r.spool_path else None) for r in got] == \
        [(r.action, r.dedup_hash, r.reason, r.spool_path.name if r.spool_path else None) for r in expected]

    def files(spool: SpoolTracker) -> dict[str, str]:
        return {p.name: p.read_text(encoding="utf-8") for p in spool.pending()}

    assert files(many) == files(one) and len(files(one)) == 2  # byte for byte
    assert [r.action for r in many.file_many(items)] == [FileAction.ALREADY_COUNTED] * len(items)
    assert files(many) == files(one)


def test_spool_file_many_writes_nothing_when_a_file_is_unreadable(tmp_path: Path, engine: Engine) -> None:
    from loop_core.errors import TrackerError

    seeded, items = _mixed_items(engine)
    spool = SpoolTracker(tmp_path)
    spool.file(*seeded[0])
    kernel_hash = items[2][0].dedup_hash
    (tmp_path / "_dedup-queue" / f"{kernel_hash}.json").write_text("{ not json")
    before = {p.name: p.read_bytes() for p in (tmp_path / "_dedup-queue").iterdir()}
    with pytest.raises(TrackerError, match=kernel_hash):
        spool.file_many(items)
    assert {p.name: p.read_bytes() for p in (tmp_path / "_dedup-queue").iterdir()} == before


def test_atomic_write_json_many_writes_every_file_and_syncs_them_before_any_rename(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from loop_core import trackers

    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(trackers.os, "fsync", lambda fd: (events.append("sync"), real_fsync(fd))[1])
    monkeypatch.setattr(trackers.os, "replace", lambda a, b: (events.append("rename"), real_replace(a, b))[1])
    (tmp_path / "old.json").write_text('{"old": true}')
    files = [(tmp_path / f"{name}.json", {"name": name, "n": i}) for i, name in enumerate(["a", "b", "old", "c"])]

    trackers.atomic_write_json_many(files)

    for path, payload in files:
        assert json.loads(path.read_text()) == payload
        assert path.read_text() == json.dumps(payload, indent=2, sort_keys=True)
    # Four file syncs (then the folder's), all before the first rename.
    assert events[:4] == ["sync"] * 4 and events[4:8] == ["rename"] * 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json", "c.json", "old.json"]


def test_atomic_write_json_many_that_fails_leaves_old_files_and_no_temp_files(tmp_path: Path) -> None:
    from loop_core import trackers

    (tmp_path / "a.json").write_text('{"old": true}')
    files = [(tmp_path / "a.json", {"new": True}), (tmp_path / "b.json", {"bad": object()})]
    with pytest.raises(TypeError):
        trackers.atomic_write_json_many(files)
    assert json.loads((tmp_path / "a.json").read_text()) == {"old": True}  # nothing renamed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_replay_names_each_damaged_spool_file_leaves_it_and_drains_the_rest(tmp_path: Path, engine: Engine) -> None:
    from click.testing import CliRunner

    from loop_core.cli import cli

    spool = SpoolTracker(tmp_path)
    good, occurrence = drafted(engine)
    spool.file(good, occurrence)
    queue = tmp_path / "_dedup-queue"
    payload = json.loads((queue / f"{good.dedup_hash}.json").read_text())
    damaged = {
        "a-no-canonical.json": {k: v for k, v in payload.items() if k != "canonical"},
        "b-occurrences-not-a-list.json": {**payload, "occurrences": {"s": 1}},
        "c-entry-without-submission.json": {**payload, "occurrences": [{"bundle": "x"}]},
        "d-not-an-object.json": [payload],
    }
    for name, doc in damaged.items():
        (queue / name).write_text(json.dumps(doc), encoding="utf-8")
    target = SqliteTracker(tmp_path / "t.sqlite")
    try:
        results = {r.path.name: r for r in replay_spool(SpoolTracker(tmp_path), target)}
        assert results[f"{good.dedup_hash}.json"].drained and results[f"{good.dedup_hash}.json"].problem is None
        assert "not a would-be issue (KeyError: 'canonical')" in str(results["a-no-canonical.json"].problem)
        assert "'occurrences' is a dict, not a list" in str(results["b-occurrences-not-a-list.json"].problem)
        assert "occurrences[0] is not an occurrence" in str(results["c-entry-without-submission.json"].problem)
        assert "expected a JSON object, got list" in str(results["d-not-an-object.json"].problem)
        assert [i["occurrences"] for i in target.issues()] == [1]
    finally:
        target.close()
    assert sorted(p.name for p in queue.glob("*.json")) == sorted(damaged)  # left for a person
    result = CliRunner().invoke(cli, ["spool", "replay", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr.count("left in the spool") == 4 and "a-no-canonical.json: not a would-be issue" in result.stderr
    # Not "nothing to do", which is what an empty spool says: four files wait for a person.
    assert result.stdout == "replayed 4 spool file(s) into sqlite: nothing filed; 0 drained, 4 still spooled\n"


def _a_spool_payload(captures: Path, engine: Engine) -> tuple[Path, dict[str, Any]]:
    """The spool folder under ``captures``, empty, and what a spooled draft's file held:
    a valid payload to damage."""
    good, occurrence = drafted(engine)
    SpoolTracker(captures).file(good, occurrence)
    queue = captures / "_dedup-queue"
    good_file = queue / f"{good.dedup_hash}.json"
    payload = json.loads(good_file.read_text())
    good_file.unlink()
    return queue, payload


def test_a_spool_file_holding_a_lone_surrogate_is_named_and_left(tmp_path: Path, engine: Engine) -> None:
    """JSON can write "\\udcff", which neither SQLite nor a UTF-8 request can carry: such a
    file (edited by hand, or another tool's) ended `spool replay` with an internal error
    where a damaged file is named and left in place."""
    from click.testing import CliRunner

    from loop_core.cli import cli

    queue, payload = _a_spool_payload(tmp_path, engine)
    in_tuple = json.loads(json.dumps(payload))
    in_tuple["canonical"]["tuple_ordered"][0] = "acme/\ud800"
    damaged = {
        "a-bundle.json": {**payload, "occurrences": [{**payload["occurrences"][0], "bundle": "x/\udcff"}]},
        "b-commit.json": {**payload, "occurrences": [{**payload["occurrences"][0], "commit": "\ud800"}]},
        "c-tuple.json": in_tuple,
    }
    for name, doc in damaged.items():
        (queue / name).write_text(json.dumps(doc), encoding="utf-8")
    result = CliRunner().invoke(cli, ["spool", "replay", str(tmp_path)])
    assert result.exit_code == 1, result.output
    for name in damaged:
        assert f"{name}: holds a lone surrogate escape, which is not valid Unicode" in result.stderr
    assert sorted(p.name for p in queue.glob("*.json")) == sorted(damaged)  # left for a person


def test_a_spool_file_that_disagrees_with_itself_or_is_anothers_is_left_alone(tmp_path: Path,
                                                                               engine: Engine) -> None:
    """Such files used to be filed: a newer schema or another kind as if ours, an empty
    occurrence list as one made-up occurrence, and a tuple edited away from its body and
    hash as one new issue per occurrence in SQLite but one issue and +1s on GitHub."""
    queue, payload = _a_spool_payload(tmp_path, engine)
    edited = json.loads(json.dumps(payload))
    edited["canonical"]["tuple_ordered"][6] = "2x24576MiB"
    rehashed = json.loads(json.dumps(edited))
    rehashed["dedup_hash"] = rehashed["canonical"]["dedup_hash"] = DedupKey(
        *rehashed["canonical"]["tuple_ordered"]).digest()
    damaged = {
        "a-newer-schema.json": ({**payload, "schema": "club3090-loop-dedup-v2"},
                                "its schema is 'club3090-loop-dedup-v2', not 'club3090-loop-dedup-v1'"),
        "b-review-entry.json": ({**payload, "kind": "review-queue"}, "its kind is 'review-queue'"),
        "c-tuple-edited.json": (edited, "its dedup_hash is not its tuple's"),
        "d-rehashed.json": (rehashed, "its body's tuple block does not hold its tuple"),
        "e-no-occurrence.json": ({**payload, "occurrences": []}, "its occurrence list is empty"),
        "f-canonical-rehashed.json": ({**payload, "canonical": {**payload["canonical"], "dedup_hash": "0" * 12}},
                                      "its canonical dedup_hash is not its dedup_hash"),
    }
    for name, (doc, _why) in damaged.items():
        (queue / name).write_text(json.dumps(doc), encoding="utf-8")
    target = SqliteTracker(tmp_path / "t.sqlite")
    try:
        results = {r.path.name: r for r in replay_spool(SpoolTracker(tmp_path), target)}
        for name, (_doc, why) in damaged.items():
            assert why in str(results[name].problem), (name, results[name].problem)
            assert not results[name].results
        assert target.issues() == []
    finally:
        target.close()
    assert sorted(p.name for p in queue.glob("*.json")) == sorted(damaged)  # left for a person


def test_settling_an_entry_none_of_whose_occurrences_was_decided_leaves_it_as_it_is(tmp_path: Path) -> None:
    from loop_core.trackers import ReviewQueue, Settled

    queue = ReviewQueue(tmp_path)
    ours = {"dedup_hash": "a" * 12, "final_error": "RuntimeError: the frobnicator refused", "described_by": "s1"}
    queue.add(ours, Occurrence("s1", "20260801T000000Z", None, "m/1"))
    theirs = tmp_path / "_review-queue" / f"{'b' * 12}.json"  # the reference's shape: no occurrence list
    theirs.write_text(json.dumps({"dedup_hash": "b" * 12, "final_error": "old", "utc_ts": "20260802T000000Z"}))
    before = {path.name: path.read_bytes() for path in theirs.parent.glob("*.json")}
    fresh = {"final_error": "RuntimeError: something else", "described_by": "s9"}
    taken = queue.settle({"a" * 12: Settled({"s2"}, fresh), "b" * 12: Settled({"s3"}, fresh, {"20260803T000000Z"})})
    assert taken == 0
    assert {path.name: path.read_bytes() for path in theirs.parent.glob("*.json")} == before


def test_an_entry_written_without_described_by_is_described_by_its_first_occurrence(tmp_path: Path) -> None:
    """An entry written before entries named the submission they describe shows its first
    occurrence's error: once that one is decided (and no fresh description came), the entry
    says so; deciding another occurrence leaves its text as it is."""
    from loop_core.trackers import STALE_DESCRIPTION, ReviewQueue, Settled

    queue = ReviewQueue(tmp_path)
    for dedup_hash in ("a" * 12, "b" * 12):
        old = {"dedup_hash": dedup_hash, "final_error": "RuntimeError: the frobnicator refused"}
        queue.add_many([(old, Occurrence(s, None, None, f"m/{s}")) for s in ("s1", "s2")])
    assert queue.settle({"a" * 12: Settled({"s1"}), "b" * 12: Settled({"s2"})}) == 2
    first_decided, other_decided = queue.entry("a" * 12), queue.entry("b" * 12)
    assert first_decided is not None and other_decided is not None
    assert first_decided["final_error"] == STALE_DESCRIPTION["final_error"]
    assert other_decided["final_error"] == "RuntimeError: the frobnicator refused"
    assert [o["submission"] for o in first_decided["occurrences"]] == ["s2"]


def test_review_queue_items_come_sorted_by_file_name_and_a_removal_says_whether_there_was_one(
        tmp_path: Path) -> None:
    from loop_core.trackers import ReviewQueue

    queue = ReviewQueue(tmp_path)
    hashes = [f"{n:012x}" for n in (0x9F, 0x3, 0xFFF, 0x42, 0x0, 0x777, 0x18, 0xABC)]
    for i, dedup_hash in enumerate(hashes):
        queue.add({"dedup_hash": dedup_hash}, Occurrence(f"s{i}", None, None, f"m/{i}"))
    assert [entry["dedup_hash"] for entry in queue.items()] == sorted(hashes)
    assert queue.remove(hashes[0]) is True
    assert queue.remove(hashes[0]) is False  # already gone: nothing was removed
    assert [entry["dedup_hash"] for entry in queue.items()] == sorted(hashes[1:])


def test_a_damaged_review_entry_counts_every_occurrence_it_kept_out(tmp_path: Path, engine: Engine) -> None:
    """Each damaged entry is one warning, with the count of its own bundles: when one
    entry's problem was reported once per occurrence, the next entry's warning was lost."""
    from loop_core.keys import dedup_key
    from loop_core.pipeline import run_captures

    damage = {"frobnicator": '{"occurrences": 5}', "widget": '{"occurrences": "s1"}'}
    bundles = {what: [make_bundle({"manifest": {"model": f"acme/{what}", "utc_ts": f"2026080{i}T000000Z"},
                                   "pt3": {"failure_log_excerpt": f"RuntimeError: the {what} refused"}})
                      for i in range(1, count + 1)]  # submissions of one unknown failure: one entry
               for what, count in (("frobnicator", 3), ("widget", 2))}
    (tmp_path / "c" / "_review-queue").mkdir(parents=True)
    for what, found in bundles.items():
        for i, bundle in enumerate(found):
            write_bundle(tmp_path / "c" / what / f"{i}", bundle)
        damaged = tmp_path / "c" / "_review-queue" / f"{dedup_key(found[0], 'unknown').digest()}.json"
        damaged.write_text(damage[what], encoding="utf-8")
    tracker = SqliteTracker.for_captures(tmp_path / "c")
    try:
        summary = run_captures(tmp_path / "c", engine, tracker)
    finally:
        tracker.close()
    assert (summary.by_class["unknown"], summary.review_queued, summary.already_counted) == (5, 0, 0)
    warned = {warning.rsplit(": ", 1)[1]: kept_out for warning, kept_out in summary.warnings.items()}
    assert warned == {"'occurrences' is a int, not a list; fix or remove the file; not queued": 3,
                      "'occurrences' is a str, not a list; fix or remove the file; not queued": 2}


def test_a_spool_file_whose_tuple_holds_an_object_replays(tmp_path: Path, engine: Engine) -> None:
    """The file is written with sorted keys, so such a value hashes differently read back:
    the self-check refused the tool's own file."""
    spool = SpoolTracker(tmp_path)
    draft, occurrence = drafted(engine, topology_class={"gpus": 2, "card": "3090"})
    spool.file(draft, occurrence)
    db = SqliteTracker(tmp_path / "t.sqlite")
    try:
        (result,) = replay_spool(spool, db)
        assert result.problem is None and result.drained
        assert [r.action for r in result.results] == [FileAction.OPENED]
    finally:
        db.close()


def test_a_queue_file_whose_occurrences_is_not_a_list_is_refused_and_left_alone(tmp_path: Path,
                                                                                engine: Engine) -> None:
    from click.testing import CliRunner

    from loop_core.cli import cli
    from loop_core.dedup import Occurrence
    from loop_core.errors import TrackerError
    from loop_core.trackers import ReviewQueue

    queue = ReviewQueue(tmp_path)
    a = {"dedup_hash": "a" * 64, "reason": "no rule matched"}
    path = tmp_path / "_review-queue" / f"{'a' * 64}.json"
    path.parent.mkdir()
    text = json.dumps({**a, "occurrences": {"s1": "by hand"}})
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TrackerError, match="'occurrences' is a dict, not a list; fix or remove the file"):
        queue.add_many([(a, Occurrence("s2", None, None, "b"))])
    assert path.read_text(encoding="utf-8") == text
    listed = CliRunner().invoke(cli, ["review", "list", str(tmp_path)])
    assert listed.exit_code == 0 and f"{'a' * 12}      ?" in listed.output

    spool = SpoolTracker(tmp_path)
    draft, occurrence = drafted(engine)
    spooled = tmp_path / "_dedup-queue" / f"{draft.dedup_hash}.json"
    spooled.parent.mkdir(exist_ok=True)
    spooled.write_text(json.dumps({**draft.spool_payload(), "occurrences": "s1"}), encoding="utf-8")
    with pytest.raises(TrackerError, match="'occurrences' is a str, not a list"):
        spool.file(draft, occurrence)


class AnotherRun:
    """Another run's connection to a tracker, holding its write lock (BEGIN IMMEDIATE) until
    the tracker has paused ``until`` times, or for good; the pauses (time.sleep) are
    recorded, not slept."""

    def __init__(self, path: Path, monkeypatch: pytest.MonkeyPatch, until: int | None = None) -> None:
        self.until = until
        self.pauses: list[float] = []
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("BEGIN IMMEDIATE")
        monkeypatch.setattr(time, "sleep", self.pause)

    def pause(self, seconds: float) -> None:
        self.pauses.append(seconds)
        if len(self.pauses) == self.until:
            self.db.execute("COMMIT")


def test_a_filing_waits_while_another_run_holds_the_tracker_then_lands(tmp_path: Path, engine: Engine,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite answers "database is locked" when another run's write outlasts the busy
    timeout (here none): the filing pauses and tries again, and lands once the other is done."""
    db = SqliteTracker(tmp_path / "t.sqlite", busy_timeout=0)
    other = AnotherRun(db.path, monkeypatch, until=3)
    try:
        assert db.file(*drafted(engine)).action is FileAction.OPENED
        assert len(other.pauses) == 3
    finally:
        other.db.close()
        db.close()


def test_a_tracker_another_run_never_lets_go_of_is_given_up_after_a_minute(tmp_path: Path, engine: Engine,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    db = SqliteTracker(tmp_path / "t.sqlite", busy_timeout=0)
    other = AnotherRun(db.path, monkeypatch)
    try:
        with pytest.raises(TrackerError, match=r"t\.sqlite: database is locked$"):
            db.file(*drafted(engine))
        assert 60 < sum(other.pauses) < 65
        other.db.execute("COMMIT")
        assert db.file(*drafted(engine)).action is FileAction.OPENED  # nothing of the failed try was left
    finally:
        other.db.close()
        db.close()


def test_the_waits_for_a_lock_add_up_to_the_limit_whatever_the_busy_timeout(tmp_path: Path, engine: Engine,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's own busy wait counts: a 60 s busy timeout tried 50 times over kept a run
    waiting most of an hour. Here each try waits 0.3 s, and all of them 1 s at most."""
    db = SqliteTracker(tmp_path / "t.sqlite", busy_timeout=0.3, lock_wait=1.0)
    other = AnotherRun(db.path, monkeypatch)
    try:
        with pytest.raises(TrackerError, match=r"t\.sqlite: database is locked$"):
            db.file(*drafted(engine))
        assert len(other.pauses) <= 2  # three tries of 0.3 s and their pauses reach 1 s
    finally:
        other.db.close()
        db.close()


def test_a_tracker_error_that_is_no_lock_is_not_tried_again(tmp_path: Path, engine: Engine,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A damaged tracker fails at once, not after a minute of trying."""
    db = SqliteTracker(tmp_path / "t.sqlite")
    db.file(*drafted(engine))
    db.close()
    db = SqliteTracker(tmp_path / "t.sqlite", busy_timeout=0)
    other = AnotherRun(db.path, monkeypatch)
    other.db.execute("DROP TABLE occurrences")
    other.db.execute("COMMIT")
    try:
        with pytest.raises(TrackerError, match="no such table: occurrences"):
            db.counted("0123456789ab", "sub")
        assert other.pauses == []
    finally:
        other.db.close()
        db.close()


def test_a_tracker_file_that_is_no_database_is_named_and_left_alone(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from loop_core.cli import cli
    from loop_core.errors import TrackerError

    captures = tmp_path / "captures"
    copy_examples(captures)
    path = captures / "_loop" / "tracker.sqlite"
    path.parent.mkdir()
    path.write_bytes(b"not a database, someone's notes")
    with pytest.raises(TrackerError, match="tracker.sqlite: file is not a database; move it aside"):
        SqliteTracker(path)
    runner = CliRunner()
    for args in (["run", str(captures)], ["tracker", "list", str(captures)]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 2, args
        assert "tracker.sqlite: file is not a database; move it aside" in result.stderr
        assert "internal error" not in result.output + result.stderr
    assert path.read_bytes() == b"not a database, someone's notes"


@pytest.mark.parametrize(("folder", "args"), [("_review-queue", []), ("_dedup-queue", ["--tracker", "spool"])])
def test_a_file_where_a_queue_folder_belongs_stops_the_run_before_it_files(tmp_path: Path, folder: str,
                                                                           args: list[str]) -> None:
    from click.testing import CliRunner

    from loop_core.cli import cli

    captures = tmp_path / "captures"
    copy_examples(captures)
    (captures / folder).write_text("notes", encoding="utf-8")
    result = CliRunner().invoke(cli, ["run", str(captures), *args])
    assert result.exit_code == 2 and f"{folder}: not a folder; move it aside" in result.stderr
    assert (captures / folder).read_text(encoding="utf-8") == "notes"
    tracker = captures / "_loop" / "tracker.sqlite"
    if tracker.exists():
        db = SqliteTracker(tracker)
        try:
            assert db.issues() == []  # stopped at the start: nothing filed
        finally:
            db.close()


def test_a_hot_queue_file_kept_between_batches_is_written_as_a_whole_write_would(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import trackers
    from loop_core.dedup import Occurrence
    from loop_core.jsontext import dumps_indented
    from loop_core.trackers import ReviewQueue

    monkeypatch.setattr(trackers, "HOT_OCCURRENCES", 4)
    a = {"dedup_hash": "a" * 64, "reason": "no rule matched", "model_slug": "acme/ü-7B"}
    path = tmp_path / "_review-queue" / f"{'a' * 64}.json"

    def occ(i: int) -> Occurrence:
        return Occurrence(f"s{i:03d}", "20261130T000000Z", None, f"captures/b{i}")

    def expected(numbers: list[int]) -> str:
        return dumps_indented({**a, "occurrences": [occ(i).to_dict() for i in numbers]}, sort_keys=True)

    mine, theirs = ReviewQueue(tmp_path), ReviewQueue(tmp_path)
    mine.add_many([(a, occ(i)) for i in range(6)])
    assert path in mine._files._kept and path.read_text(encoding="utf-8") == expected(list(range(6)))
    assert [added for added, _ in mine.add_many([(a, occ(i)) for i in (5, 6, 7)])] == [False, True, True]
    assert path.read_text(encoding="utf-8") == expected(list(range(8)))
    # Another run writes the file between two of this queue's batches: it is read again.
    theirs.add_many([(a, occ(100))])
    assert [added for added, _ in mine.add_many([(a, occ(100)), (a, occ(8))])] == [False, True]
    assert path.read_text(encoding="utf-8") == expected([*range(8), 100, 8])
    # A write that fails keeps nothing stale: the next batch reads the file.
    def broken(files: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(trackers, "write_texts_many", broken)
    with pytest.raises(TrackerError, match="_review-queue: cannot write 1 file.*disk full"):
        mine.add_many([(a, occ(9))])
    assert path not in mine._files._kept
    monkeypatch.undo()
    monkeypatch.setattr(trackers, "HOT_OCCURRENCES", 4)
    mine.add_many([(a, occ(9))])
    assert path.read_text(encoding="utf-8") == expected([*range(8), 100, 8, 9])


def test_only_a_few_hot_queue_files_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import trackers
    from loop_core.dedup import Occurrence
    from loop_core.trackers import ReviewQueue

    monkeypatch.setattr(trackers, "HOT_OCCURRENCES", 2)
    monkeypatch.setattr(trackers, "KEPT_FILES", 3)
    queue = ReviewQueue(tmp_path)
    for k in range(5):
        payload = {"dedup_hash": f"{k:064x}", "reason": "no rule matched"}
        queue.add_many([(payload, Occurrence(f"s{i}", None, None, "b")) for i in range(3)])
    assert [p.stem for p in queue._files._kept] == [f"{k:064x}" for k in (2, 3, 4)]
    assert len(queue.items()) == 5


def test_a_hot_spool_file_is_kept_between_batches_and_written_as_one_by_one_would(
        tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import trackers

    pairs = [drafted(engine, utc_ts=f"202608{day:02d}T000000Z") for day in range(1, 8)]
    one = SpoolTracker(tmp_path / "one")
    for pair in pairs:
        one.file(*pair)
    monkeypatch.setattr(trackers, "HOT_OCCURRENCES", 2)
    many = SpoolTracker(tmp_path / "many")
    for batch in (pairs[:3], pairs[2:5], pairs[5:]):
        many.file_many(batch)
    assert len(many._files._kept) == 1
    assert [p.read_bytes() for p in many.pending()] == [p.read_bytes() for p in one.pending()]


def test_a_big_queue_folder_is_not_listed_at_every_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import trackers
    from loop_core.dedup import Occurrence
    from loop_core.trackers import ReviewQueue

    monkeypatch.setattr(trackers, "LISTING_LIMIT", 3)
    listings = []
    real = trackers._file_names
    monkeypatch.setattr(trackers, "_file_names", lambda d: listings.append(d) or real(d))
    queue = ReviewQueue(tmp_path)

    def payload(k: int) -> dict[str, str]:
        return {"dedup_hash": f"{k:064x}", "reason": "no rule matched"}

    for k in range(5):  # the folder grows past the limit
        queue.add_many([(payload(k), Occurrence("s1", None, None, "b"))])
    assert len(listings) == 4  # until a listing passed the limit (the folder's lock file counts)
    results = queue.add_many([(payload(0), Occurrence("s1", None, None, "b")),  # there already: read, unlisted
                              (payload(0), Occurrence("s2", None, None, "b")),
                              (payload(9), Occurrence("s1", None, None, "b"))])
    assert [added for added, _ in results] == [False, True, True] and len(listings) == 4
    by_hash = {item["dedup_hash"]: [o["submission"] for o in item["occurrences"]] for item in queue.items()}
    assert by_hash[f"{0:064x}"] == ["s1", "s2"] and by_hash[f"{9:064x}"] == ["s1"] and len(by_hash) == 6


def test_an_empty_tracker_file_is_no_tracker_yet(tmp_path: Path) -> None:
    """A 0-byte tracker.sqlite (a run killed as it made the file, or a `touch`) made
    `tracker list` say "no such table: issues"; it is no tracker yet, which a run makes."""
    from click.testing import CliRunner

    from loop_core.cli import cli

    captures = tmp_path / "captures"
    copy_examples(captures)
    path = captures / "_loop" / "tracker.sqlite"
    path.parent.mkdir()
    path.write_bytes(b"")
    runner = CliRunner()
    for args in (["tracker", "list", str(captures)], ["tracker", "show", str(captures), "1"]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 2, args
        assert result.stderr == (f"Error: {path}: an empty file, no tracker yet; run `loop-rules run {captures}` "
                                 "first\n")
    assert path.read_bytes() == b""
    assert runner.invoke(cli, ["run", str(captures)]).exit_code == 0
    assert runner.invoke(cli, ["tracker", "list", str(captures)]).stdout.endswith("12 issue(s), 13 occurrence(s)\n")


@pytest.mark.parametrize(("tables", "missing"), [
    (["notes"], "issues, labels, occurrences"),
    (["issues", "labels"], "occurrences"),
])
def test_an_sqlite_file_without_the_trackers_tables_is_named(tmp_path: Path, tables: list[str],
                                                             missing: str) -> None:
    """Another program's SQLite file, or a tracker cut short, said "no such table: issues"."""
    import sqlite3

    from click.testing import CliRunner

    from loop_core.cli import cli

    captures = tmp_path / "captures"
    path = captures / "_loop" / "tracker.sqlite"
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)
    for table in tables:
        db.execute(f"CREATE TABLE {table} (id INTEGER)")
    db.commit()
    db.close()
    message = (f"{path}: not a tracker this version of loop-rules wrote (no table {missing}); move it aside "
               "and the next run starts a new tracker")
    with pytest.raises(TrackerError, match=re.escape(message)):
        SqliteTracker(path, readonly=True)
    for args in (["tracker", "list", str(captures)], ["tracker", "show", str(captures), "1"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, args
        assert result.stderr == f"Error: {message}\n"


def _edit_body(db: SqliteTracker, issue: int, edit: Any) -> None:
    """Change the tuple block of a stored issue's body, as a person editing the issue might."""
    (body,) = db.db.execute("SELECT body FROM issues WHERE id = ?", (issue,)).fetchone()
    start = body.index("```json") + len("```json")
    end = body.index("```", start)
    block = json.loads(body[start:end])
    db.db.execute("UPDATE issues SET body = ? WHERE id = ?",
                  (body[:start] + "\n" + edit(block) + "\n" + body[end:], issue))


@pytest.mark.parametrize("edit", [
    pytest.param(lambda b: {**b, "tuple_ordered": b["tuple_ordered"][:-1]}, id="a-value-short"),
    pytest.param(lambda b: {**b, "tuple_ordered": [*b["tuple_ordered"], "extra"]}, id="a-value-more"),
    pytest.param(lambda b: {**b, "schema": "another/v9"}, id="another-schema"),
    pytest.param(lambda b: {**b, "tuple_ordered": [b["tuple_ordered"][0].lower(), *b["tuple_ordered"][1:]]},
                 id="a-value-in-another-case"),
])
def test_an_issue_whose_tuple_block_no_longer_verifies_gets_no_plus_one(tmp_path: Path, engine: Engine,
                                                                        edit: Any) -> None:
    """A +1 is only counted on an issue whose body holds the key's seven values in a block
    of this schema: a shorter or longer tuple, a value in another case (§5.6 compares the
    text exactly), or a block of another schema, is some other failure's text, and the
    next capture opens an issue of its own."""
    first = drafted(engine, utc_ts="20260801T000000Z")
    second = drafted(engine, utc_ts="20260802T000000Z")
    db = SqliteTracker(tmp_path / "t.sqlite")
    try:
        opened = db.file(*first)
        assert opened.action is FileAction.OPENED
        _edit_body(db, int(opened.issue), lambda b: json.dumps(edit(b), indent=2, sort_keys=True))
        again = db.file(*second)
        assert again.action is FileAction.OPENED and again.issue != opened.issue
        assert [i["occurrences"] for i in db.issues()] == [1, 1]
    finally:
        db.close()


def test_a_plus_one_goes_to_the_first_issue_whose_tuple_block_verifies(tmp_path: Path, engine: Engine) -> None:
    """Two issues of one failure verify once an edit that made the first open a second
    is undone: +1s go to the first, as the GitHub tracker's lookup (lowest number) does."""
    first, second, third = (drafted(engine, utc_ts=f"2026080{day}T000000Z") for day in (1, 2, 3))
    db = SqliteTracker(tmp_path / "t.sqlite")
    try:
        assert db.file(*first).issue == 1
        (body,) = db.db.execute("SELECT body FROM issues WHERE id = 1").fetchone()
        _edit_body(db, 1, lambda b: json.dumps({**b, "schema": "another/v9"}, indent=2, sort_keys=True))
        assert db.file(*second).issue == 2
        db.db.execute("UPDATE issues SET body = ? WHERE id = 1", (body,))  # the edit undone
        again = db.file(*third)
        assert (again.action, again.issue) == (FileAction.PLUS_ONE, 1)
        assert [i["occurrences"] for i in db.issues()] == [2, 1]
    finally:
        db.close()


def test_a_plus_one_marks_the_issue_updated_and_a_repeat_does_not(tmp_path: Path, engine: Engine,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import trackers

    first, second = drafted(engine, utc_ts="20260801T000000Z"), drafted(engine, utc_ts="20260802T000000Z")
    db = SqliteTracker(tmp_path / "t.sqlite")
    try:
        for when, pair in (("2026-08-01T00:00:00Z", first), ("2026-08-02T00:00:00Z", second),
                           ("2026-08-03T00:00:00Z", first)):
            monkeypatch.setattr(trackers, "_now", lambda when=when: when)
            db.file(*pair)
        (issue,) = db.issues()
        assert (issue["created_at"], issue["updated_at"]) == ("2026-08-01T00:00:00Z", "2026-08-02T00:00:00Z")
    finally:
        db.close()


@pytest.mark.parametrize("quoted", [
    json.dumps({"schema": "another/v9", "tuple_ordered": ["something", "else"]}),
    '{"schema": "club3090-loop-dedup-v1", "tuple_ordered": [cut short',  # no JSON at all
    json.dumps({"schema": "club3090-loop-dedup-v1", "tuple_ordered": "m bf16 llama"}),  # not a list
], ids=["other-schema", "undecodable", "not-a-list"])
def test_the_first_tuple_block_of_this_schema_is_the_one_verified(tmp_path: Path, engine: Engine,
                                                                  quoted: str) -> None:
    """A block before the tuple block (quoted from elsewhere, say) that is of another schema,
    no JSON or no list of values is not the issue's tuple (§5.6): the +1 still lands on the issue."""
    first = drafted(engine, utc_ts="20260801T000000Z")
    second = drafted(engine, utc_ts="20260802T000000Z")
    db = SqliteTracker(tmp_path / "t.sqlite")
    try:
        opened = db.file(*first)
        (body,) = db.db.execute("SELECT body FROM issues WHERE id = ?", (opened.issue,)).fetchone()
        db.db.execute("UPDATE issues SET body = ? WHERE id = ?",
                      (f"Quoted:\n\n```json\n{quoted}\n```\n\n{body}", opened.issue))
        again = db.file(*second)
        assert again.action is FileAction.PLUS_ONE and again.issue == opened.issue
    finally:
        db.close()


@pytest.mark.parametrize("claimed", ["", "not-a-fingerprint", "A" * 64, "a" * 63])
def test_captures_claiming_the_same_malformed_fingerprint_are_counted_apart(tmp_path: Path, engine: Engine,
                                                                             claimed: str) -> None:
    """Only a 64-digit lower-case hex fingerprint names a submission: two captures that
    carry the same malformed one are two submissions (named by their manifests), not
    one capture counted once."""
    first = drafted(engine, utc_ts="20260801T000000Z", submission_fingerprint=claimed)
    second = drafted(engine, utc_ts="20260802T000000Z", submission_fingerprint=claimed)
    assert first[1].submission != second[1].submission
    db = SqliteTracker(tmp_path / "t.sqlite")
    try:
        assert [db.file(*first).action, db.file(*second).action] == [FileAction.OPENED, FileAction.PLUS_ONE]
        assert [i["occurrences"] for i in db.issues()] == [2]
    finally:
        db.close()


def test_a_gate_capture_is_one_submission_whatever_order_its_manifest_keys_come_in(tmp_path: Path,
                                                                                   engine: Engine) -> None:
    """A gate-only capture carries no submission fingerprint; a digest of its manifest names
    it. A copy whose keys were written in another order (an editor's reformat) is the same
    capture and must not add a second +1."""
    from loop_core import Bundle

    token = "engine-support-unknown/no-arch-row"
    first = make_bundle({"manifest": {"schema": 2, "abort_reason": token}, "pt1": {"abort_reason": token}},
                        path=tmp_path / "a")
    copy = Bundle(tmp_path / "b", 2, dict(reversed(list(first.manifest.items()))), first.pt1)
    assert list(copy.manifest) != list(first.manifest) and copy.manifest == first.manifest
    db = SqliteTracker(tmp_path / "t.sqlite")
    try:
        actions = [db.file(draft_issue(b, engine.classify(b)), occurrence_of(b)).action for b in (first, copy)]
        assert actions == [FileAction.OPENED, FileAction.ALREADY_COUNTED]
    finally:
        db.close()


def test_replay_keeps_each_occurrences_capture_time_and_commit(tmp_path: Path, engine: Engine) -> None:
    """What `tracker show` lists for a replayed occurrence is what the capture said."""
    spool = SpoolTracker(tmp_path)
    draft, occurrence = drafted(engine, utc_ts="20260801T000000Z", club3090_commit="c0ffee1")
    spool.file(draft, occurrence)
    db = SqliteTracker(tmp_path / "t.sqlite")
    try:
        (result,) = replay_spool(spool, db)
        assert result.drained
        rows = db.db.execute("SELECT submission, utc_ts, commit_sha FROM occurrences").fetchall()
        assert rows == [(occurrence.submission, "20260801T000000Z", "c0ffee1")]
        (shown,) = db.issue(draft.dedup_hash)["occurrence_list"]
        assert shown["utc_ts"] == "20260801T000000Z"
    finally:
        db.close()


def test_tracker_show_lists_occurrences_by_capture_time(tmp_path: Path, engine: Engine) -> None:
    """Filed in one batch (the same second), they were listed by submission digest:
    a capture of the 22nd above one of the 20th, in no order a reader could see."""
    filed = [drafted(engine, utc_ts=ts) for ts in ("20260803T000000Z", "20260801T000000Z", "20260802T000000Z")]
    db = SqliteTracker(tmp_path / "t.sqlite")
    try:
        db.file_many(filed)
        listed = db.issue(filed[0][0].dedup_hash)["occurrence_list"]
        assert [o["utc_ts"] for o in listed] == ["20260801T000000Z", "20260802T000000Z", "20260803T000000Z"]
    finally:
        db.close()
