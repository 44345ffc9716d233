"""The main job: every bundle under a captures folder, classified, trusted, filed.

For each bundle: read it (errors are counted, never fatal), classify it, then

- a **failure** (gate-only, download or boot failed, or a red capability):
  ``benign-cold-start`` is suppressed, ``unknown`` goes to the review queue,
  every other class is rendered as a deduplicated issue and filed into the
  tracker (new issue, verified +1, or already counted; a tracker that can
  say it counted the capture before, as SQLite's does, is asked first, so a
  replay of a corpus renders only what is new);
- a **success anchor** (schema 1 with at least one green capability) runs
  through the trust pipeline, with every other anchor of the run as a prior.

Everything before the tracker is a pure function of (bundle, pack, catalog),
so ``jobs > 1`` classifies in worker processes while the parent alone writes
to the tracker, in discovery order.

A run streams: bundles are discovered, processed and routed one at a time
(with ``jobs > 1`` through :func:`~loop_core.parallel.engine_map`, a few
chunks in flight per worker). Fileable failures reach a tracker that offers
``file_many`` in batches of up to :data:`~loop_core.trackers.BATCH` (one
SQLite transaction each; a batch goes out when full, after
:data:`FLUSH_SECONDS`, and at the end); unknowns go to the review queue in
larger batches, at most :data:`REVIEW_FLUSH_SECONDS` apart (each failure's
file written once per batch; by a background thread while the next bundles
are classified, once the run has seen that the disk's syncs wait).
Success anchors are indexed as they come and kept for the trust pass, beyond
the first :data:`ANCHORS_IN_MEMORY` in an unnamed temporary file. Memory
stays flat however many bundles the folder holds (the consensus index, a
few hundred bytes per anchor, aside).
"""

from __future__ import annotations

import functools
import pickle
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .batch import discover_bundle_paths
from .bundle import Bundle, ReadLimits, path_text, read_bundle
from .catalog import Catalog
from .dedup import (
    BODY_LIMIT,
    TITLE_LIMIT,
    IssueDraft,
    Occurrence,
    body_tuple_matches,
    canonical_payload,
    occurrence_of,
    refuse_unfileable,
    sanitize,
)
from .engine import Engine
from .errors import PLUGIN_FAILURES, BundleError, LoopError, PluginError, failure_text
from .keys import dedup_key
from .parallel import engine_map
from .pickling import pickled_by_fields
from .trackers import (
    BATCH,
    FileAction,
    FileResult,
    ReviewQueue,
    Settled,
    Tracker,
    built_in,
    checked_results,
    failures_named,
    review_payload,
    tracker_failure,
)
from .trust import ConsensusIndex, graduation_set, trust_of
from .verdict import Classification, FailureClass, Tier
from .view import View, is_failure

__all__ = ["Processed", "RunSummary", "dismissed", "is_failure", "process_bundle", "run_captures"]


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Processed:
    """One bundle after the pure part of the pipeline (picklable, for worker processes).

    ``path`` is the bundle directory as the caller gave it: a worker is given
    text, and its answer carries no ``Path`` for the parent to parse again.
    """

    path: str | Path
    error: str | None = None
    verdict: Classification | None = None
    failure: bool = False
    draft: IssueDraft | None = None
    occurrence: Occurrence | None = None
    review: dict[str, Any] | None = None
    anchor: Bundle | None = None
    counted: bool = False  # a fileable failure the tracker had already counted: not drafted
    # The review-queue entry (dedup hash) of an occurrence queued as unknown before
    # that is decided now: the run takes it out of the queue.
    settles: str | None = None


def process_bundle(path: str | Path, engine: Engine, limits: ReadLimits | None = None, *,
                   prepare: bool = True, counted: Callable[[str, str], bool] | None = None,
                   queued: AbstractSet[str] = frozenset()) -> Processed:
    """Read and classify one bundle and prepare what the tracker needs; never raises for bad input.

    :param prepare: draft the issue of a fileable failure and the review-queue
        payload of an unknown, and name the occurrence; a dry run, which files
        and queues nothing, skips all three (a failure whose dedup key no issue
        can hold is still refused, as drafting its issue would).
    :param counted: ``counted(dedup_hash, submission)``, the tracker's word that
        it has already counted an occurrence (:meth:`SqliteTracker.counted
        <loop_core.trackers.SqliteTracker.counted>`): such a failure is not
        drafted (``Processed.counted``), filing it again would change nothing.
    :param queued: the dedup hashes with an entry in the review queue: a failure
        decided now (not review-queued) whose ``unknown`` hash is among them was
        queued as unknown before, and is named in ``Processed.settles``.
    """
    try:
        bundle = read_bundle(path, limits=limits)
    except BundleError as e:
        return Processed(path, error=str(e))
    verdict = engine.classify(bundle)
    # The whole bundle: a trust hook is promised the anchor as read, as `trust` gives it
    # (a success's download and boot files are small: 1.7 KB on average in the bench corpus).
    anchor = bundle if not bundle.is_gate_only and graduation_set(bundle) else None
    if not is_failure(bundle):
        return Processed(path, verdict=verdict, anchor=anchor)
    occurrence = occurrence_of(bundle) if prepare else None
    settles = None
    to_review = verdict.failure_class is FailureClass.UNKNOWN and not dismissed(verdict)
    if queued and prepare and not to_review:
        was = dedup_key(bundle, FailureClass.UNKNOWN.value).digest()
        settles = was if was in queued else None
    draft = review = None
    if prepare and to_review:
        key = dedup_key(bundle, FailureClass.UNKNOWN.value)
        review = review_payload(key.digest(), canonical_payload(bundle, key), verdict.error_substring,
                                bundle.manifest.get("model"), bundle.manifest.get("utc_ts"),
                                f"no rule matched (tier {verdict.tier.value})" if verdict.matched_rule is None
                                else f"rule {verdict.matched_rule} decided unknown")
        # Beyond the reference's fields: what a maintainer reads first.
        review["final_error"] = sanitize(View.of(bundle).signal("final_error") or bundle.abort_reason or "")
        review["fingerprint"] = verdict.fingerprint
        review["described_by"] = occurrence.submission if occurrence is not None else None
    elif prepare and verdict.should_file:
        assert occurrence is not None
        # "is True": a tracker's other answers (a plugin's "no", say) must not skip the filing.
        try:  # as failures_named does, without its cost on every bundle
            known = counted is not None and counted(dedup_key(bundle, verdict.failure_class.value).digest(),
                                                    occurrence.submission) is True
        except (LoopError, OSError):
            raise
        except PLUGIN_FAILURES as e:
            owner = getattr(counted, "__self__", counted)
            if built_in(owner):
                raise  # loop-rules' own bug: an internal error, as in failures_named
            raise tracker_failure(owner, "counted", e) from e
        if known:
            return Processed(path, verdict=verdict, failure=True, occurrence=occurrence, anchor=anchor, counted=True,
                             settles=settles)
        try:
            draft = engine.pm.hook.loop_draft_issue(bundle=bundle, verdict=verdict)
        except BundleError as e:  # a key too long for any issue body
            return Processed(path, error=str(e))
        except LoopError:
            raise
        except PLUGIN_FAILURES as e:
            plugins = _other_drafters(engine.pm)
            if not plugins:
                raise  # the built-in drafter's own bug
            raise PluginError(f"loop_draft_issue (plugins {', '.join(plugins)}) raised {failure_text(e)}") from e
        plugins = _other_drafters(engine.pm)
        if plugins:  # the built-in drafter is trusted: nothing to re-check on the usual path
            _check_draft(draft, bundle, verdict, plugins)
    elif not prepare and verdict.should_file:
        try:  # the run would refuse it: a dry run must not count it as one it would file
            refuse_unfileable(bundle, verdict)
        except BundleError as e:
            return Processed(path, error=str(e))
    return Processed(path, verdict=verdict, failure=True, draft=draft, occurrence=occurrence,
                     review=review, anchor=anchor, settles=settles)


def dismissed(verdict: Classification) -> bool:
    """Whether an ``unknown`` was decided to stay unknown (the exact table's ``unknown``
    entries, a Tier-2 ``Match(review=False)``): it is not queued for review again. Every
    other ``unknown`` is, Tier-1's too (whose verdicts never say ``review_queue``)."""
    return verdict.failure_class is FailureClass.UNKNOWN and verdict.tier is Tier.TIER2 and not verdict.review_queue


def _other_drafters(pm: Any) -> tuple[str, ...]:
    """The plugins besides the built-in one that implement ``loop_draft_issue``,
    asked each time: a plugin may be registered between two runs."""
    return tuple(impl.plugin_name for impl in pm.hook.loop_draft_issue.get_hookimpls()
                 if impl.plugin_name != "loop_rules.dedup")


def _check_draft(draft: Any, bundle: Bundle, verdict: Classification, plugins: tuple[str, ...]) -> None:
    """Hold a plugin's draft to the contract every tracker relies on: the dedup hash of
    the key, the tuple block that verifies, the size limits. A draft that breaks it
    would open a new issue on every repeat, or file under another failure's hash."""
    who = f"loop_draft_issue (plugins {', '.join(plugins)})"
    if not isinstance(draft, IssueDraft):
        raise PluginError(f"{who} returned {type(draft).__name__}, not an IssueDraft")
    key = dedup_key(bundle, verdict.failure_class.value)
    problem = (
        "its key is not the bundle's dedup key" if tuple(draft.key) != tuple(key) else
        f"its dedup_hash {draft.dedup_hash!r} is not its key's ({key.digest()})" if draft.dedup_hash != key.digest()
        else "its body has no tuple block that verifies against the key" if not body_tuple_matches(draft.body, key)
        else f"its title is longer than {TITLE_LIMIT} characters" if len(draft.title) > TITLE_LIMIT
        else f"its body is longer than {BODY_LIMIT} characters" if len(draft.body) > BODY_LIMIT
        else None)
    if problem is not None:
        raise PluginError(f"{who} returned a draft for {path_text(bundle.path)} that no tracker can count on: {problem}")


@dataclass(slots=True)
class RunSummary:
    """Counts of one run; ``to_dict`` is the ``run --format json`` object."""

    bundles: int = 0
    reader_errors: int = 0
    by_class: Counter[str] = field(default_factory=Counter)
    filed_new: int = 0
    plus_one: int = 0
    already_counted: int = 0
    review_queued: int = 0
    review_skipped: int = 0  # unknowns whose review-queue entry is damaged: left for a later run
    review_settled: int = 0
    suppressed: int = 0
    dismissed: int = 0
    spooled: int = 0
    successes: int = 0
    anchors: Counter[str] = field(default_factory=Counter)
    would_file: int = 0
    dry_run: bool = False
    tracker: str = ""
    rules_version: str = ""
    errors: list[dict[str, str]] = field(default_factory=list)
    tracker_problems: list[str] = field(default_factory=list)
    warnings: Counter[str] = field(default_factory=Counter)  # message -> bundles whose verdict carried it

    def warn(self, messages: tuple[str, ...], bundles: int = 1) -> None:
        """Count a verdict's warnings (each distinct message once a bundle, or for
        ``bundles`` bundles); past :data:`WARNINGS_KEPT` distinct ones, the rest are
        counted together."""
        for message in set(messages):
            if message not in self.warnings and len(self.warnings) >= WARNINGS_KEPT:
                message = OTHER_WARNINGS
            self.warnings[message] += bundles

    def to_dict(self) -> dict[str, Any]:
        return {
            "bundles": self.bundles,
            "reader_errors": self.reader_errors,
            "by_class": dict(sorted(self.by_class.items())),
            "filed_new": self.filed_new,
            "plus_one": self.plus_one,
            "already_counted": self.already_counted,
            "review_queued": self.review_queued,
            "review_skipped": self.review_skipped,
            "review_settled": self.review_settled,
            "suppressed": self.suppressed,
            "dismissed": self.dismissed,
            "spooled": self.spooled,
            "successes": self.successes,
            "anchors": {stage: self.anchors.get(stage, 0) for stage in ("raw", "candidate", "validated", "tier1")},
            "would_file": self.would_file,
            "dry_run": self.dry_run,
            "tracker": self.tracker,
            "rules_version": self.rules_version,
            "errors": self.errors,
            "tracker_problems": self.tracker_problems,
            "warnings": dict(self.warnings.most_common()),
        }


WARNINGS_KEPT = 100  # distinct warning messages a run summary lists
OTHER_WARNINGS = "(other warnings)"
ANCHORS_IN_MEMORY = 2048  # success anchors kept in memory for the trust pass; later ones are spilled
FLUSH_SECONDS = 0.25  # the longest a failure waits in a batch before it is filed
# Review batches are larger (this many times the tracker's, unless that is 1) and wait
# longer: each pays a round of file syncs, and one round over many files costs less
# than several over few (490 new files: 45 ms in one batch, 60 ms in four, 83 ms in
# sixteen, on the machine of docs/performance.md).
REVIEW_BATCH_FACTOR = 4
REVIEW_FLUSH_SECONDS = 1.0
# A review batch written slower than this per file (its syncs wait on the disk), and
# in more than REVIEW_STALL seconds in all, sends later batches to a background thread
# (see _Filer).
REVIEW_SYNC_LIMIT = 0.0003
REVIEW_STALL = 0.01


def _process(path: str | Path, engine: Engine, queued: AbstractSet[str] = frozenset()) -> Processed:
    return process_bundle(path, engine, queued=queued)


def _process_for_dry_run(path: str | Path, engine: Engine) -> Processed:
    return process_bundle(path, engine, prepare=False)


def _process_asking(counted: Callable[[str, str], bool],
                    queued: AbstractSet[str]) -> Callable[[str | Path, Engine], Processed]:
    """:func:`_process`, asking the tracker first (in this process only: workers have no tracker)."""
    def process(path: str | Path, engine: Engine) -> Processed:
        return process_bundle(path, engine, counted=counted, queued=queued)
    return process


class _Anchors:
    """Success anchors in arrival order: the first ``limit`` in memory, the rest pickled to a temp file."""

    def __init__(self) -> None:
        self.limit = ANCHORS_IN_MEMORY
        self.kept: list[Bundle] = []
        self.spilled = 0
        self._file: IO[bytes] | None = None

    def add(self, anchor: Bundle) -> None:
        if len(self.kept) < self.limit:
            self.kept.append(anchor)
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="loop-rules-anchors-")
        pickle.dump(anchor, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self.spilled += 1

    def __iter__(self) -> Iterator[Bundle]:
        yield from self.kept
        if self._file is not None:
            self._file.flush()
            self._file.seek(0)
            for _ in range(self.spilled):
                yield pickle.load(self._file)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def run_captures(
    captures: Path,
    engine: Engine,
    tracker: Tracker | None,
    *,
    catalog: Catalog | None = None,
    dry_run: bool = False,
    jobs: int = 1,
    rules: str = "default",
    consensus_n: int = 2,
    progress: Callable[[int, int], None] | None = None,
    batch: int = BATCH,
) -> RunSummary:
    """Run the main job over ``captures``; see the module doc.

    :param tracker: where fileable failures go; ignored (may be None) with ``dry_run``.
    :param progress: called as ``progress(done, total)`` after each bundle (the
        bundles are then listed before the first is read, to know the total).
    :param batch: the most occurrences per ``file_many`` call of a tracker that has
        one; 1 files each one at once.
    """
    summary = RunSummary(dry_run=dry_run, tracker="" if dry_run or tracker is None else tracker.name,
                         rules_version=engine.pack.version)
    found: Iterator[str] = discover_bundle_paths([captures])
    total = 0
    if progress is not None:
        listed = list(found)
        total = len(listed)
        found = iter(listed)
    review = ReviewQueue(captures)
    # Entries a decision taken since (a new rule, a learned fingerprint) may settle.
    queued = frozenset() if dry_run else review.hashes()
    filer = _Filer(None if dry_run else tracker, summary, batch, review, queued)
    index = ConsensusIndex()
    anchors = _Anchors()
    try:
        process: Callable[[str | Path, Engine], Processed] = (
            _process_for_dry_run if dry_run else functools.partial(_process, queued=queued))
        counted = getattr(tracker, "counted", None) if not dry_run and jobs <= 1 else None
        if counted is not None:
            process = _process_asking(counted, queued)
        for done, item in enumerate(engine_map(process, found, engine, jobs=jobs, rules=rules), 1):
            summary.bundles += 1
            if item.error is not None:
                summary.reader_errors += 1
                summary.errors.append({"bundle": path_text(item.path), "message": path_text(item.error)})
            else:
                if item.verdict is not None and item.verdict.warnings:
                    summary.warn(item.verdict.warnings)
                _route(item, summary, filer)
                if item.anchor is not None:
                    index.add(item.anchor)
                    anchors.add(item.anchor)
            filer.tick()
            if progress is not None:
                progress(done, total)
        filer.finish()
        summary.tracker_problems = [path_text(p) for p in getattr(tracker, "problems", None) or ()]
        for anchor in anchors:
            result = trust_of(engine.pm, anchor, catalog=catalog or Catalog(), priors=index,
                              consensus_n=consensus_n)
            summary.anchors[result.stage.value] += 1
    finally:
        filer.close()
        anchors.close()
    return summary


# A review batch written: each occurrence added (True), there already (False) or in a
# damaged entry (None), with its file; and the damaged entries' problems.
_ReviewBatch = tuple[list[tuple[bool | None, Path]], list[str]]


class _Filer:
    """Hands fileable failures to the tracker (in batches when it has ``file_many``,
    else one by one) and unknowns to the review queue (in batches).

    A tracker batch goes out when it holds ``batch`` items or its oldest has
    waited :data:`FLUSH_SECONDS`; a review batch when it holds
    :data:`REVIEW_BATCH_FACTOR` times as many (with ``batch`` 1, each item
    goes at once) or its oldest has waited
    :data:`REVIEW_FLUSH_SECONDS` (each review batch pays a round of file
    syncs, which costs less per file the more files share it); both at the
    end of the run. So a kill loses at most the batches in progress (which
    the rerun files) and a concurrent reader sees the run's progress.

    Review-queue batches are written in the caller's thread while writing
    them is quick. Where a batch's files take longer than
    :data:`REVIEW_SYNC_LIMIT` each (a disk whose syncs wait, and a stall
    longer than :data:`REVIEW_STALL`), later batches
    are written by one background thread instead, so the syncs overlap the
    classification of the next bundles; where syncs are quick, such a thread
    only competes with the classification for the interpreter and slows the
    run. Batches are written in order, one at a time: the next waits for the
    one before, whose counts (or error) arrive then. The tracker is only ever
    called from the caller's thread (third-party trackers need not be thread-safe).
    """

    def __init__(self, tracker: Tracker | None, summary: RunSummary, batch: int, review: ReviewQueue,
                 queued: AbstractSet[str] = frozenset()) -> None:
        self.tracker = tracker
        self.summary = summary
        self.batch = max(1, batch)
        self.many = getattr(tracker, "file_many", None) if self.batch > 1 else None
        self.review = review
        self.queued = queued  # the queue's entries when the run started
        self.settled: dict[str, Settled] = {}  # entry -> what this run decided of it
        self.still_unknown: dict[str, dict[str, Any]] = {}  # entry -> a payload seen unknown this run
        # entry -> the submissions seen unknown under it this run: a bundle decided now
        # does not take them out (two bundles can claim one submission, one of them still
        # unknown: taken out, it was queued again by the next run, and so on forever).
        self.unknown_submissions: dict[str, set[str]] = {}
        self.pending: list[tuple[IssueDraft, Occurrence]] = []
        self.reviews: list[tuple[dict[str, Any], Occurrence]] = []
        self.review_batch = 1 if self.batch == 1 else self.batch * REVIEW_BATCH_FACTOR
        self.since = self.review_since = 0.0
        self._background = False  # set once a batch written in this thread was slow
        self._writer: ThreadPoolExecutor | None = None
        self._writing: Future[_ReviewBatch] | None = None

    def file(self, draft: IssueDraft, occurrence: Occurrence) -> None:
        assert self.tracker is not None
        if self.many is None:
            with failures_named(self.tracker, "file"):
                answer = self.tracker.file(draft, occurrence)
            (result,) = checked_results(self.tracker, [answer], 1)
            self._count(result)
            return
        if not self.pending:
            self.since = time.monotonic()
        self.pending.append((draft, occurrence))
        if len(self.pending) >= self.batch:
            self._file_pending()

    def settle(self, dedup_hash: str, occurrence: Occurrence) -> None:
        """Take ``occurrence``, decided now, out of its review-queue entry at the end of the run."""
        settled = self.settled.setdefault(dedup_hash, Settled())
        settled.submissions.add(occurrence.submission)
        if isinstance(occurrence.utc_ts, str):
            settled.times.add(occurrence.utc_ts)

    def queue_review(self, payload: dict[str, Any], occurrence: Occurrence) -> None:
        if self.queued and payload["dedup_hash"] in self.queued:
            self.still_unknown[payload["dedup_hash"]] = payload
            self.unknown_submissions.setdefault(payload["dedup_hash"], set()).add(occurrence.submission)
        if not self.reviews:
            self.review_since = time.monotonic()
        self.reviews.append((payload, occurrence))
        if len(self.reviews) >= self.review_batch:
            self._write_reviews()

    def tick(self) -> None:
        """Send a batch that has waited long enough (called after every bundle)."""
        if self.pending or self.reviews:
            now = time.monotonic()
            if self.pending and now - self.since >= FLUSH_SECONDS:
                self._file_pending()
            if self.reviews and now - self.review_since >= REVIEW_FLUSH_SECONDS:
                self._write_reviews()

    def flush(self) -> None:
        """Send both batches now, full or not."""
        self._write_reviews()
        self._file_pending()

    def _write_reviews(self) -> None:
        if self.reviews:
            reviews, self.reviews = self.reviews, []
            self._collect()  # one batch in flight at a time, in order
            if self._background:
                if self._writer is None:
                    self._writer = ThreadPoolExecutor(1, thread_name_prefix="loop-rules-review")
                self._writing = self._writer.submit(self._add_reviews, reviews)
            else:
                started = time.monotonic()
                written = self._add_reviews(reviews)
                took = time.monotonic() - started
                self._background = took > max(REVIEW_SYNC_LIMIT * len(reviews), REVIEW_STALL)
                self._count_reviews(written)

    def _add_reviews(self, reviews: list[tuple[dict[str, Any], Occurrence]]) -> _ReviewBatch:
        """Queue a batch: what was written, and the damaged entries skipped. One such
        entry used to stop the run, and with it the filing of every other failure."""
        problems: list[str] = []
        return self.review.add_many(reviews, problems), problems

    def _file_pending(self) -> None:
        if not self.pending:
            return
        assert self.many is not None
        pending, self.pending = self.pending, []
        with failures_named(self.tracker, "file_many"):
            answers = self.many(pending)
        for result in checked_results(self.tracker, answers, len(pending)):
            self._count(result)

    def finish(self) -> None:
        """Send what is left and wait until every batch is written (raising the writer's
        error), then settle the review-queue entries the run decided."""
        self.flush()
        self._collect()
        if self.settled:
            for dedup_hash, settled in self.settled.items():
                settled.payload = self.still_unknown.get(dedup_hash)
                settled.submissions -= self.unknown_submissions.get(dedup_hash, set())
            problems: list[str] = []
            self.summary.review_settled += self.review.settle(self.settled, problems)
            # A damaged entry is left for a person, as review list leaves it; the run's
            # filing is done and its summary still comes.
            self.summary.warn(tuple(f"review queue: {p}; not settled" for p in problems))
            self.settled = {}

    def close(self) -> None:
        """Stop the review writer once its batch in flight is written (never raises)."""
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None

    def _collect(self) -> None:
        """Wait for the review batch in flight and count it."""
        writing, self._writing = self._writing, None
        if writing is not None:
            self._count_reviews(writing.result())

    def _count_reviews(self, batch: _ReviewBatch) -> None:
        written, problems = batch
        skipped: Counter[Path] = Counter()  # damaged entries, in the order their problems came
        for added, path in written:
            if added:
                self.summary.review_queued += 1
            elif added is None:
                skipped[path] += 1
                self.summary.review_skipped += 1
            else:
                self.summary.already_counted += 1
        # Left for a person, as `review list` and settling leave it; queued by a later run.
        for problem, bundles in zip(problems, skipped.values()):
            self.summary.warn((f"review queue: {problem}; not queued",), bundles)

    def _count(self, result: FileResult) -> None:
        summary = self.summary
        if result.action is FileAction.OPENED:
            summary.filed_new += 1
        elif result.action is FileAction.PLUS_ONE:
            summary.plus_one += 1
        elif result.action is FileAction.ALREADY_COUNTED:
            summary.already_counted += 1
        else:
            summary.spooled += 1


def _route(item: Processed, summary: RunSummary, filer: _Filer) -> None:
    verdict = item.verdict
    assert verdict is not None
    if not item.failure:
        summary.successes += 1
        return
    summary.by_class[verdict.failure_class.value] += 1
    decided_unknown = dismissed(verdict)
    if summary.dry_run:  # nothing was drafted (process_bundle(prepare=False)): count what a run would do
        if verdict.failure_class is FailureClass.BENIGN_COLD_START:
            summary.suppressed += 1
        elif decided_unknown:
            summary.dismissed += 1
        elif verdict.should_file:
            summary.would_file += 1
        return
    if item.settles is not None:
        assert item.occurrence is not None
        filer.settle(item.settles, item.occurrence)
    if item.counted:  # the tracker had counted this capture before: nothing to file
        summary.already_counted += 1
        return
    if decided_unknown:  # a maintainer decided it stays unknown (the exact table): not queued again
        summary.dismissed += 1
        return
    if verdict.failure_class is FailureClass.BENIGN_COLD_START or (item.draft is None and item.review is None):
        summary.suppressed += 1
        return
    assert item.occurrence is not None
    if item.review is not None:
        filer.queue_review(item.review, item.occurrence)
        return
    assert item.draft is not None
    if filer.tracker is None:
        summary.would_file += 1
        return
    filer.file(item.draft, item.occurrence)

