"""The main job: every bundle under a captures folder, classified, trusted, filed.

For each bundle: read it (errors are counted, never fatal), classify it, then

- a **failure** (gate-only, download or boot failed, or a red capability):
  ``benign-cold-start`` is suppressed, ``unknown`` goes to the review queue,
  every other class is rendered as a deduplicated issue and filed into the
  tracker (new issue, verified +1, or already counted);
- a **success anchor** (schema 1 with at least one green capability) runs
  through the trust pipeline, with every other anchor of the run as a prior.

Everything before the tracker is a pure function of (bundle, pack, catalog),
so ``jobs > 1`` classifies in worker processes while the parent alone writes
to the tracker, in discovery order.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .batch import discover_bundles
from .bundle import Bundle, ReadLimits, read_bundle
from .catalog import Catalog
from .dedup import IssueDraft, Occurrence, canonical_payload, occurrence_of, sanitize
from .engine import Engine
from .errors import BundleError
from .keys import dedup_key
from .trackers import FileAction, ReviewQueue, Tracker, review_payload
from .trust import ConsensusIndex, graduation_set
from .verdict import Classification, FailureClass
from .view import View

__all__ = ["Processed", "RunSummary", "is_failure", "process_bundle", "run_captures"]


def is_failure(bundle: Bundle) -> bool:
    """Gate-only, download or boot failed, or any capability red."""
    if bundle.is_gate_only:
        return True
    view = View(bundle)
    return not view.signal("download_ok") or not view.signal("boot_ok") or bool(view.signal("red_caps"))


@dataclass(frozen=True, slots=True)
class Processed:
    """One bundle after the pure part of the pipeline (picklable, for worker processes)."""

    path: Path
    error: str | None = None
    verdict: Classification | None = None
    failure: bool = False
    draft: IssueDraft | None = None
    occurrence: Occurrence | None = None
    review: dict[str, Any] | None = None
    anchor: Bundle | None = None


def process_bundle(path: Path, engine: Engine, limits: ReadLimits | None = None) -> Processed:
    """Read and classify one bundle and prepare what the tracker needs; never raises for bad input."""
    try:
        bundle = read_bundle(path, limits=limits)
    except BundleError as e:
        return Processed(path, error=str(e))
    verdict = engine.classify(bundle)
    anchor = None
    if not bundle.is_gate_only and graduation_set(bundle):
        # Keep only what trust reads: a slim copy travels cheaply between processes.
        anchor = Bundle(bundle.path, bundle.schema, bundle.manifest, bundle.pt1, None, None, bundle.pt4, None)
    if not is_failure(bundle):
        return Processed(path, verdict=verdict, anchor=anchor)
    occurrence = occurrence_of(bundle)
    draft = review = None
    if verdict.failure_class is FailureClass.UNKNOWN:
        key = dedup_key(bundle, FailureClass.UNKNOWN.value)
        review = review_payload(key.digest(), canonical_payload(bundle, key), verdict.error_substring,
                                bundle.manifest.get("model"), bundle.manifest.get("utc_ts"),
                                f"no rule matched (tier {verdict.tier.value})" if verdict.matched_rule is None
                                else f"rule {verdict.matched_rule} decided unknown")
        # Beyond the reference's fields: what a maintainer reads first.
        review["final_error"] = sanitize(View(bundle).signal("final_error") or bundle.abort_reason or "")
        review["fingerprint"] = verdict.fingerprint
    elif verdict.should_file:
        draft = engine.pm.hook.loop_draft_issue(bundle=bundle, verdict=verdict)
    return Processed(path, verdict=verdict, failure=True, draft=draft, occurrence=occurrence,
                     review=review, anchor=anchor)


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
    suppressed: int = 0
    spooled: int = 0
    successes: int = 0
    anchors: Counter[str] = field(default_factory=Counter)
    would_file: int = 0
    dry_run: bool = False
    tracker: str = ""
    rules_version: str = ""
    errors: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bundles": self.bundles,
            "reader_errors": self.reader_errors,
            "by_class": dict(sorted(self.by_class.items())),
            "filed_new": self.filed_new,
            "plus_one": self.plus_one,
            "already_counted": self.already_counted,
            "review_queued": self.review_queued,
            "suppressed": self.suppressed,
            "spooled": self.spooled,
            "successes": self.successes,
            "anchors": {stage: self.anchors.get(stage, 0) for stage in ("raw", "candidate", "validated", "tier1")},
            "would_file": self.would_file,
            "dry_run": self.dry_run,
            "tracker": self.tracker,
            "rules_version": self.rules_version,
            "errors": self.errors,
        }


_WORKER_ENGINE: Engine | None = None


def _init_worker(rules: str, pack_root: str | None) -> None:
    global _WORKER_ENGINE
    _WORKER_ENGINE = Engine.build(pack_root or rules)


def _work(path: Path) -> Processed:
    assert _WORKER_ENGINE is not None
    return process_bundle(path, _WORKER_ENGINE)


def _processed(paths: Sequence[Path], engine: Engine, jobs: int, rules: str) -> Iterator[Processed]:
    if jobs <= 1 or len(paths) < 2 * jobs:
        for path in paths:
            yield process_bundle(path, engine)
        return
    root = str(engine.pack.root) if engine.pack.root is not None else None
    chunk = max(1, min(256, len(paths) // (jobs * 8)))
    with ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker, initargs=(rules, root)) as pool:
        yield from pool.map(_work, paths, chunksize=chunk)


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
) -> RunSummary:
    """Run the main job over ``captures``; see the module doc.

    :param tracker: where fileable failures go; ignored (may be None) with ``dry_run``.
    :param progress: called as ``progress(done, total)`` after each bundle.
    """
    summary = RunSummary(dry_run=dry_run, tracker="" if dry_run or tracker is None else tracker.name,
                         rules_version=engine.pack.version)
    paths = list(discover_bundles([captures]))
    review = ReviewQueue(captures)
    anchors: list[Bundle] = []
    for done, item in enumerate(_processed(paths, engine, jobs, rules), 1):
        summary.bundles += 1
        if item.error is not None:
            summary.reader_errors += 1
            summary.errors.append({"bundle": str(item.path), "message": item.error})
        else:
            _route(item, summary, tracker, review, dry_run)
            if item.anchor is not None:
                anchors.append(item.anchor)
        if progress is not None:
            progress(done, len(paths))
    index = ConsensusIndex.of(anchors)
    for anchor in anchors:
        result = engine.pm.hook.loop_evaluate_trust(bundle=anchor, catalog=catalog or Catalog(), priors=index,
                                                    maintainer_promoted=False, consensus_n=consensus_n)
        summary.anchors[result.stage.value] += 1
    return summary


def _route(item: Processed, summary: RunSummary, tracker: Tracker | None, review: ReviewQueue,
           dry_run: bool) -> None:
    verdict = item.verdict
    assert verdict is not None
    if not item.failure:
        summary.successes += 1
        return
    summary.by_class[verdict.failure_class.value] += 1
    if verdict.failure_class is FailureClass.BENIGN_COLD_START or (item.draft is None and item.review is None):
        summary.suppressed += 1
        return
    assert item.occurrence is not None
    if item.review is not None:
        if dry_run:
            return
        added, _path = review.add(item.review, item.occurrence)
        if added:
            summary.review_queued += 1
        else:
            summary.already_counted += 1
        return
    assert item.draft is not None
    if dry_run or tracker is None:
        summary.would_file += 1
        return
    result = tracker.file(item.draft, item.occurrence)
    if result.action is FileAction.OPENED:
        summary.filed_new += 1
    elif result.action is FileAction.PLUS_ONE:
        summary.plus_one += 1
    elif result.action is FileAction.ALREADY_COUNTED:
        summary.already_counted += 1
    else:
        summary.spooled += 1


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
