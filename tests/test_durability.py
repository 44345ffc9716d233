"""Durability of the main job: concurrent runs, SIGKILL at random moments, stale temp files.

Whatever happens to a run (another run at the same time, a kill at any
instant), the end state after a full rerun is exact: every submission of a
fileable failure is one row of ``occurrences``, there is one issue per
distinct dedup key, each review-queue file lists each of its submissions
once, and every JSON file under the captures folder parses.

Corpora are small (tens of bundles) so the whole module stays well under a
minute on a 2-core machine; the heavy tests are marked ``slow``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from loop_core import Bundle, Engine
from loop_core.keys import dedup_key
from loop_core.pipeline import run_captures
from loop_core.plugins import AUTOLOAD_ENV
from loop_core.testing import make_bundle, write_bundle
from loop_core.trackers import (
    ReviewQueue,
    SpoolTracker,
    SqliteTracker,
    locked,
    replay_spool,
)

# kind -> (class the default pack gives, boot log excerpt)
KINDS: dict[str, tuple[str, str]] = {
    "oom": ("genuine-oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    "kernel": ("kernel-unsupported",
               "RuntimeError: CUDA error: no kernel image is available for execution on the device"),
    "drift": ("overlay-arch-drift", "AttributeError: module 'vllm' has no attribute 'fused_moe'"),
    "unknown": ("unknown", "the worker went quiet and nobody knows why"),
}
T0 = dt.datetime(2026, 8, 1, 9, 0, 0)


@dataclass(frozen=True)
class Spec:
    """One bundle of a synthetic corpus and what it must end up as."""

    name: str
    bundle: Bundle
    failure_class: str
    dedup_hash: str
    submission: str

    @property
    def fileable(self) -> bool:
        return self.failure_class != "unknown"


def make_specs(count: int, *, start: int = 0, models: int = 5) -> list[Spec]:
    """``count`` bundles numbered from ``start``; bundle i and i + 4*models share a dedup key."""
    kinds = list(KINDS)
    out = []
    for i in range(start, start + count):
        model = f"acme/Model-{i % models}-7B"
        kind = kinds[(i // models) % len(kinds)]
        cls, excerpt = KINDS[kind]
        utc = (T0 + dt.timedelta(minutes=i)).strftime("%Y%m%dT%H%M%SZ")
        bundle = make_bundle({"manifest": {"model": model, "model_id": model, "slug": model, "utc_ts": utc},
                              "pt3": {"failure_log_excerpt": excerpt}})
        name = f"acme-model-{i % models}-7b/{utc}"
        out.append(Spec(name, bundle, cls, dedup_key(bundle, cls).digest(),
                        bundle.manifest["submission_fingerprint"]))
    return out


def write_specs(root: Path, specs: Iterable[Spec]) -> None:
    for spec in specs:
        write_bundle(root / spec.name, spec.bundle)


def check_classes(engine: Engine, specs: Sequence[Spec]) -> None:
    for spec in specs:
        assert engine.classify(spec.bundle).failure_class.value == spec.failure_class, spec.name


# -- reading the end state ------------------------------------------------------


def db_state(path: Path) -> tuple[list[tuple[str, str]], Counter[str], dict[str, int]]:
    """(occurrence rows, issues per dedup hash, occurrences per dedup hash)."""
    if not path.exists():
        return [], Counter(), {}
    db = sqlite3.connect(path)
    try:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"issues", "occurrences"} <= tables:
            # Killed between creating the file and its schema (the rerun creates it): nothing filed yet.
            return [], Counter(), {}
        occ = db.execute("SELECT submission, dedup_hash FROM occurrences").fetchall()
        issues = Counter(h for (h,) in db.execute("SELECT dedup_hash FROM issues"))
        per = dict(db.execute("SELECT i.dedup_hash, COUNT(*) FROM occurrences o "
                              "JOIN issues i ON i.id = o.issue_id GROUP BY i.dedup_hash").fetchall())
    finally:
        db.close()
    return occ, issues, per


def review_state(captures: Path) -> dict[str, list[str]]:
    out = {}
    for path in sorted((captures / "_review-queue").glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert doc["kind"] == "review-queue" and path.stem == doc["dedup_hash"]
        out[path.stem] = [o["submission"] for o in doc["occurrences"]]
    return out


def assert_exact(captures: Path, specs: Sequence[Spec], db_path: Path | None = None,
                 review_root: Path | None = None, *, review_specs: Sequence[Spec] | None = None) -> None:
    """The end state holds each fileable submission once and each unknown one once."""
    fileable = {(s.submission, s.dedup_hash) for s in specs if s.fileable}
    occ, issues, per = db_state(db_path or captures / "_loop" / "tracker.sqlite")
    assert len(occ) == len(set(occ)) and set(occ) == fileable
    assert issues == Counter({h: 1 for _s, h in fileable})  # one issue per distinct key
    assert per == dict(Counter(h for _s, h in fileable))
    expected_review: dict[str, set[str]] = {}
    for s in review_specs if review_specs is not None else specs:
        if not s.fileable:
            expected_review.setdefault(s.dedup_hash, set()).add(s.submission)
    queued = review_state(review_root or captures)
    assert {h: sorted(subs) for h, subs in queued.items()} == \
        {h: sorted(subs) for h, subs in expected_review.items()}  # each exactly once
    assert_json_whole(review_root or captures)


def assert_json_whole(captures: Path) -> None:
    """Every JSON file under ``captures`` parses: nothing torn."""
    for path in captures.rglob("*.json"):
        json.loads(path.read_text(encoding="utf-8"))


def temp_files(captures: Path) -> list[Path]:
    return sorted(p for d in ("_review-queue", "_dedup-queue") for p in (captures / d).glob(".*.tmp"))


def env() -> dict[str, str]:
    return {**os.environ, AUTOLOAD_ENV: "1"}


def cli_run(captures: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "loop_core", "run", str(captures), "--format", "json", *extra]


# -- stale temp files (fast) --------------------------------------------------------


@pytest.fixture
def small(tmp_path: Path, engine: Engine) -> tuple[Path, list[Spec]]:
    specs = make_specs(12)
    check_classes(engine, specs)
    captures = tmp_path / "captures"
    write_specs(captures, specs)
    return captures, specs


def _plant_torn_temp(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.json.k1ll3d.tmp"
    tmp.write_text('{"kind": "review-queue", "occurr', encoding="utf-8")  # what a killed writer leaves
    return tmp


def test_stale_temp_files_are_cleaned_on_the_next_run(small: tuple[Path, list[Spec]], engine: Engine) -> None:
    captures, specs = small
    tracker = SqliteTracker.for_captures(captures)
    try:
        run_captures(captures, engine, tracker)
    finally:
        tracker.close()
    review_tmp = _plant_torn_temp(captures / "_review-queue", "0123456789ab")
    spool_tmp = _plant_torn_temp(captures / "_dedup-queue", specs[0].dedup_hash)
    # Just written: a killed writer's file is as fresh as that; it must still go.
    tracker = SqliteTracker.for_captures(captures)
    try:
        summary = run_captures(captures, engine, tracker)
    finally:
        tracker.close()
    assert summary.filed_new == summary.plus_one == summary.review_queued == 0
    assert not review_tmp.exists()
    SpoolTracker(captures)  # the spool cleans its own folder when opened
    assert not spool_tmp.exists()
    assert temp_files(captures) == []
    assert_exact(captures, specs)


def test_cleaning_never_removes_a_live_writers_temp_file(tmp_path: Path) -> None:
    """Writers hold the folder lock while their temp file exists, so cleaning waits for them."""
    queue_dir = tmp_path / "_review-queue"
    queue_dir.mkdir()
    inside = threading.Event()
    release = threading.Event()
    tmp = queue_dir / ".abc.json.live.tmp"

    def writer() -> None:
        with locked(queue_dir):
            tmp.write_text('{"half": ', encoding="utf-8")
            inside.set()
            release.wait(10)
            tmp.write_text('{"whole": true}', encoding="utf-8")
            os.replace(tmp, queue_dir / "abc.json")

    thread = threading.Thread(target=writer)
    thread.start()
    assert inside.wait(10)
    cleaner_done = threading.Event()
    cleaner = threading.Thread(target=lambda: (ReviewQueue(tmp_path), cleaner_done.set()))
    cleaner.start()
    time.sleep(0.2)
    assert not cleaner_done.is_set() and tmp.exists()  # the cleaner waits for the lock
    release.set()
    thread.join(10)
    cleaner.join(10)
    assert cleaner_done.is_set()
    assert json.loads((queue_dir / "abc.json").read_text()) == {"whole": True}


# -- concurrent runs ------------------------------------------------------------------


def _finish(procs: Sequence[subprocess.Popen[str]], timeout: float = 120) -> list[tuple[int, str, str]]:
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=timeout)
        out.append((proc.returncode, stdout, stderr))
    return out


@pytest.mark.slow
def test_eight_cli_runs_at_once_over_one_captures_folder(tmp_path: Path, engine: Engine) -> None:
    """8 ``python -m loop_core run`` over the same folder: one tracker, one review queue.

    All processes see every bundle, so each write races seven others for the
    same rows and the same review files (and the tracker file is created by
    whichever comes first).
    """
    specs = make_specs(40)
    check_classes(engine, specs)
    captures = tmp_path / "captures"
    write_specs(captures, specs)
    procs = [subprocess.Popen(cli_run(captures), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env(), cwd=tmp_path) for _ in range(8)]
    results = _finish(procs)
    summaries = []
    for code, stdout, stderr in results:
        assert code == 0, stderr
        assert "locked" not in stderr.lower() and "Traceback" not in stderr, stderr
        summaries.append(json.loads(stdout))
    fileable = [s for s in specs if s.fileable]
    unknown = [s for s in specs if not s.fileable]
    for data in summaries:
        assert data["bundles"] == 40 and data["reader_errors"] == 0
        assert data["filed_new"] + data["plus_one"] + data["already_counted"] + data["review_queued"] == 40
    # Across the 8 runs each key was opened once, each submission counted once.
    assert sum(d["filed_new"] for d in summaries) == len({s.dedup_hash for s in fileable})
    assert sum(d["filed_new"] + d["plus_one"] for d in summaries) == len(fileable)
    assert sum(d["review_queued"] for d in summaries) == len(unknown)
    assert_exact(captures, specs)


WORKER = textwrap.dedent("""\
    import json, sys, time
    from pathlib import Path
    from loop_core import Engine, make_plugin_manager
    from loop_core.pipeline import run_captures
    from loop_core.trackers import SqliteTracker

    captures, db, go = (Path(a) for a in sys.argv[1:4])
    engine = Engine.build("default", make_plugin_manager(entry_points=False))
    (go.parent / ("ready-" + captures.name)).touch()
    deadline = time.monotonic() + 60
    while not go.exists():  # start line: every process imported and built its engine
        if time.monotonic() > deadline:
            sys.exit("no start signal")
        time.sleep(0.002)
    tracker = SqliteTracker(db)
    try:
        summary = run_captures(captures, engine, tracker)
    finally:
        tracker.close()
    print(json.dumps(summary.to_dict()))
""")


@pytest.mark.slow
def test_eight_processes_over_overlapping_folders_share_one_tracker(tmp_path: Path, engine: Engine) -> None:
    """8 processes, each over its own folder holding an overlapping subset of 40 bundles.

    One SQLite file is shared (the CLI keeps its tracker under CAPTURES, so a
    small script calls ``run_captures`` with ``SqliteTracker(shared)``). A
    start line makes all 8 file at the same instant: the same submission
    reaches the tracker from several processes through different bundle
    paths, and different submissions of one key race to open its issue.
    """
    specs = make_specs(40)
    check_classes(engine, specs)
    rng = random.Random(20260801)
    folders: list[list[Spec]] = [[] for _ in range(8)]
    for j, spec in enumerate(specs):
        holders = rng.sample(range(8), rng.randint(2, 5)) if j % 4 else [j % 8]
        for f in holders:
            folders[f].append(spec)
    script = tmp_path / "worker.py"
    script.write_text(WORKER, encoding="utf-8")
    shared = tmp_path / "shared" / "tracker.sqlite"
    go = tmp_path / "go"
    roots = []
    for f, subset in enumerate(folders):
        root = tmp_path / f"captures-{f}"
        write_specs(root, subset)
        roots.append(root)
    assert len({s.name for subset in folders for s in subset}) == 40
    procs = [subprocess.Popen([sys.executable, str(script), str(root), str(shared), str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=tmp_path)
             for root in roots]
    deadline = time.monotonic() + 60
    while sum((tmp_path / f"ready-{r.name}").exists() for r in roots) < len(roots):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "workers did not start"
        time.sleep(0.01)
    go.touch()
    summaries = []
    for (code, stdout, stderr), subset in zip(_finish(procs), folders):
        assert code == 0, stderr
        assert "locked" not in stderr.lower() and "Traceback" not in stderr, stderr
        data = json.loads(stdout)
        assert data["bundles"] == len(subset)
        assert data["filed_new"] + data["plus_one"] + data["already_counted"] + data["review_queued"] == len(subset)
        summaries.append(data)
    fileable = {(s.submission, s.dedup_hash) for s in specs if s.fileable}
    assert sum(d["filed_new"] for d in summaries) == len({h for _s, h in fileable})
    assert sum(d["filed_new"] + d["plus_one"] for d in summaries) == len(fileable)
    for root, subset in zip(roots, folders):  # each folder has its own review queue
        assert_exact(root, specs, shared, root, review_specs=subset)


# -- SIGKILL at random moments ------------------------------------------------------


def _kill_at(cmd: list[str], delay: float, cwd: Path) -> int:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env(), cwd=cwd)
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
    return proc.wait()


def _wipe(captures: Path) -> None:
    for name in ("_loop", "_review-queue", "_dedup-queue"):
        shutil.rmtree(captures / name, ignore_errors=True)


def _progress(captures: Path) -> int:
    occ, _issues, _per = db_state(captures / "_loop" / "tracker.sqlite")
    queued = sum(len(v) for v in review_state(captures).values()) if (captures / "_review-queue").is_dir() else 0
    return len(occ) + queued


@pytest.mark.slow
def test_sigkill_at_random_moments_then_rerun_counts_everything_once(tmp_path: Path, engine: Engine) -> None:
    """20 runs killed with SIGKILL, each followed by a full rerun: the end state is always exact.

    Even kills start from an empty tracker (the killed run does every
    write); odd kills first add a batch of new captures (some new keys,
    most repeats) so the killed run appends to existing issues and review
    files. Delays lie between 0 and the measured length of a full run;
    when none of them landed while the run was writing, up to 12 more kills
    look for such a moment.
    """
    specs = make_specs(300)
    check_classes(engine, specs[:20])
    captures = tmp_path / "captures"
    write_specs(captures, specs)

    # Small batches spread the writes over the run, so random kill moments land
    # between them (with the default batch a 300-bundle run writes in one go at the end).
    def argv(where: Path) -> list[str]:
        return cli_run(where, "--batch", "4")

    # A full run, measured twice (on a copy, so the kills below start from scratch).
    probe = tmp_path / "probe"
    write_specs(probe, specs)
    durations = []
    for _ in range(2):
        _wipe(probe)
        started = time.monotonic()
        done = subprocess.run(argv(probe), check=False, capture_output=True, text=True, env=env(),
                              cwd=tmp_path)
        durations.append(time.monotonic() - started)
        assert done.returncode == 0, done.stderr
        data = json.loads(done.stdout)
        assert data["bundles"] == 300 and data["filed_new"] == 15 and data["plus_one"] == 210
        assert data["review_queued"] == 75
    duration = min(durations)

    # Seeded, jittered (one delay in each twentieth of the run, in shuffled order):
    # random moments that still cover the whole run, the writing part included.
    rng = random.Random(3090)
    delays = [duration * (k + rng.random()) / 20 for k in range(20)]
    rng.shuffle(delays)
    outcomes: Counter[str] = Counter()
    temp_seen = 0
    batch = 0

    def kill_once(delay: float, add_captures: bool) -> str:
        """Kill a run after ``delay`` seconds, rerun it whole and check the end state;
        what the kill interrupted."""
        nonlocal specs, temp_seen, batch
        if add_captures:
            new = make_specs(20, start=1000 + 20 * batch, models=7)
            batch += 1
            write_specs(captures, new)
            specs = specs + new
        else:
            _wipe(captures)
        before = _progress(captures)
        code = _kill_at(argv(captures), delay, tmp_path)
        after = _progress(captures)
        total = len(specs)
        assert_json_whole(captures)  # nothing torn, even right after the kill
        leftovers = temp_files(captures)
        temp_seen += len(leftovers)
        tracker = SqliteTracker.for_captures(captures)
        try:
            rerun = run_captures(captures, engine, tracker)
        finally:
            tracker.close()
        assert rerun.reader_errors == 0 and rerun.bundles == total
        assert rerun.filed_new + rerun.plus_one + rerun.already_counted + rerun.review_queued == total
        assert all(not p.exists() for p in leftovers)  # the rerun cleaned what the kill left
        assert temp_files(captures) == []
        assert_exact(captures, specs)
        return ("finished" if code == 0 else "killed before any write" if after == before
                else "killed mid-way" if after < total else "killed after the last write")

    for kill in range(20):
        outcomes[kill_once(delays[kill], add_captures=kill % 2 == 1)] += 1
    # On a busy machine every run can take longer or shorter than the measured one, so
    # that no random moment falls while it writes. Then the writing part is looked for:
    # a run killed before its first write needed more time, one that ended, less.
    low, high = 0.0, 8 * duration
    for _ in range(12):
        if outcomes["killed mid-way"]:
            break
        delay = (low + high) / 2
        outcome = kill_once(delay, add_captures=False)
        outcomes[outcome] += 1
        if outcome == "killed before any write":
            low = delay
        elif outcome != "killed mid-way":
            high = delay
    print(f"\nsigkill: full run {duration:.2f}s, {len(specs)} bundles at the end; "
          f"{dict(outcomes)}; {temp_seen} stale temp file(s) left by kills, all cleaned")
    assert outcomes["killed mid-way"] >= 1  # the kills did land while writing


@pytest.mark.slow
def test_sigkill_during_spool_replay_then_replay_again(tmp_path: Path, engine: Engine) -> None:
    """A killed ``spool replay`` rerun to the end files every spooled occurrence exactly once."""
    specs = make_specs(40)
    captures = tmp_path / "captures"
    write_specs(captures, specs)
    cmd = [sys.executable, "-m", "loop_core", "spool", "replay", str(captures), "--tracker", "sqlite"]
    rng = random.Random(65536)
    duration = None
    for attempt in range(6):
        _wipe(captures)
        spooled = run_captures(captures, engine, SpoolTracker(captures))
        assert spooled.spooled == sum(s.fileable for s in specs)
        if duration is None:
            started = time.monotonic()
            subprocess.run(cmd, env=env(), cwd=tmp_path, check=True, capture_output=True)
            duration = time.monotonic() - started
            assert_exact(captures, specs)
            continue
        _kill_at(cmd, rng.uniform(0, duration), tmp_path)
        assert_json_whole(captures)
        target = SqliteTracker.for_captures(captures)
        try:
            results = replay_spool(SpoolTracker(captures), target)
        finally:
            target.close()
        assert all(r.drained for r in results)
        assert list((captures / "_dedup-queue").glob("*.json")) == []
        assert temp_files(captures) == []
        assert_exact(captures, specs)
