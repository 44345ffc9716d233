"""Measure a rule pack on a labelled corpus of real error logs.

A corpus is a directory of case files (``*.yml``, searched recursively), each
one real log excerpt with its root-cause label::

    id: vllm-oom-003
    engine: vllm
    source: https://github.com/...
    label: genuine-oom
    hard: false          # the text carries another class's words
    split: tune          # or frozen: never looked at while tuning rules
    rationale: ...
    excerpt: |
      ...
    actual: {attempted_alloc_mib: 1997, gpu_worker_reported_mib: null}

Each case becomes a bundle the way the producer writes one: a failed boot
whose container-log tail is ``pt3.failure_log_excerpt`` and whose parsed
numbers are ``pt3.actual``.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .bundle import Bundle
from .conditions import _short  # a value shown in a message, cut to 80 characters
from .engine import Engine
from .errors import LoopError, RuleError
from .rules import load_yaml_text
from .testing import make_bundle
from .verdict import FailureClass

__all__ = ["Case", "Report", "case_bundle", "evaluate", "load_cases"]

CLASSES = [c.value for c in FailureClass]
CASE_KEYS = {"id", "engine", "source", "label", "hard", "split", "rationale", "excerpt"}
CASE_SPLITS = ("tune", "frozen", "holdout")


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    label: str
    excerpt: str
    hard: bool
    split: str
    engine: str = ""
    source: str = ""
    rationale: str = ""
    actual: dict[str, Any] | None = None


def load_cases(root: str | Path, split: str = "all") -> list[Case]:
    """Every case under ``root`` (sorted by id), optionally one split only.

    :raises LoopError: a case file is invalid; the message names it.
    """
    cases = []
    seen: dict[str, Path] = {}
    for path in _case_files(Path(root)):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise LoopError(f"{path}: unreadable case: {e}") from e
        try:
            doc = load_yaml_text(text, str(path))
        except RuleError as e:
            raise LoopError(str(e)) from e
        if not isinstance(doc, dict) or not doc.keys() & {"label", "excerpt"}:
            continue  # not a case file (pack settings, say)
        case = _case(doc, path)
        if case.id in seen:
            raise LoopError(f"{path}: case id {case.id!r} is used by {seen[case.id]} too")
        seen[case.id] = path
        if split in ("all", case.split):
            cases.append(case)
    return sorted(cases, key=lambda c: c.id)


def _case_files(root: Path) -> list[Path]:
    """The ``*.yml`` files under ``root``, following linked folders (each visited once)
    as the other commands do, and passing over hidden ones."""
    found: list[Path] = []
    visited: set[str] = set()
    for folder, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in visited:
            dirs[:] = []
            continue
        visited.add(real)
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found.extend(Path(folder, f) for f in files if f.endswith(".yml") and not f.startswith("."))
    return sorted(found)


def _case(doc: dict[str, Any], path: Path) -> Case:
    missing = sorted(CASE_KEYS - set(doc))
    if missing:
        raise LoopError(f"{path}: a case needs {', '.join(missing)} too")
    for key in ("id", "excerpt"):
        if not isinstance(doc[key], str) or not doc[key].strip():
            raise LoopError(f"{path}: {key} must be non-empty text, got {_short(doc[key])}")
    if doc["label"] not in CLASSES:
        raise LoopError(f"{path}: label {_short(doc['label'])} is not one of the six classes ({', '.join(CLASSES)})")
    if not isinstance(doc["hard"], bool):
        raise LoopError(f"{path}: hard must be true or false, got {_short(doc['hard'])}")
    if doc["split"] not in CASE_SPLITS:
        raise LoopError(f"{path}: split {_short(doc['split'])} is not one of {', '.join(CASE_SPLITS)}")
    texts = {}
    for key in ("engine", "source", "rationale"):
        value = doc.get(key)
        if value is not None and not isinstance(value, str):
            raise LoopError(f"{path}: {key} must be text, got {_short(value)}")
        texts[key] = value or ""
    actual = doc.get("actual")
    if actual is not None and not isinstance(actual, dict):
        raise LoopError(f"{path}: actual must be a mapping of the numbers the producer parsed, got {_short(actual)}")
    return Case(doc["id"], doc["label"], doc["excerpt"], doc["hard"], doc["split"], actual=actual, **texts)


def case_bundle(case: Case) -> Bundle:
    """The bundle the producer would have written for this failed boot."""
    actual = {"attempted_alloc_mib": None, "gpu_worker_reported_mib": None}
    actual.update(case.actual or {})
    return make_bundle({"manifest": {"model": f"corpus/{case.id}", "slug": f"corpus/{case.id}",
                                     "model_id": f"corpus/{case.id}"},
                        "pt3": {"failure_log_excerpt": case.excerpt, "actual": actual}}, path=case.id)


@dataclass(slots=True)
class Report:
    """Per-class precision/recall/F1, macro-F1, accuracy, hard-case accuracy, misses."""

    pack: str
    split: str
    total: int = 0
    correct: int = 0
    hard_total: int = 0
    hard_correct: int = 0
    confusion: Counter[tuple[str, str]] = field(default_factory=Counter)
    misses: list[dict[str, Any]] = field(default_factory=list)

    def per_class(self) -> dict[str, dict[str, float | int | None]]:
        """Precision, recall, F1 and support of each class. For a class with no case
        (support 0) recall and F1 are None, and so is precision when no case was
        classified as it either: nothing was measured, which 0.0 would pass for a
        pack that fails the class (as ``hard_accuracy`` is None without a hard case)."""
        out: dict[str, dict[str, float | int | None]] = {}
        for cls in CLASSES:
            tp = self.confusion[(cls, cls)]
            predicted = sum(n for (_t, p), n in self.confusion.items() if p == cls)
            support = sum(n for (t, _p), n in self.confusion.items() if t == cls)
            if not support:
                out[cls] = {"precision": 0.0 if predicted else None, "recall": None, "f1": None, "support": 0}
                continue
            precision = tp / predicted if predicted else 0.0
            recall = tp / support
            f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
            out[cls] = {"precision": precision, "recall": recall, "f1": f1, "support": support}
        return out

    @property
    def macro_f1(self) -> float:
        rows = [r for r in self.per_class().values() if r["support"]]
        return sum(float(r["f1"] or 0.0) for r in rows) / len(rows) if rows else 0.0

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    @property
    def hard_accuracy(self) -> float | None:
        """None when the split holds no hard case: nothing was measured."""
        return self.hard_correct / self.hard_total if self.hard_total else None

    def to_dict(self) -> dict[str, Any]:
        return {"pack": self.pack, "split": self.split, "cases": self.total, "accuracy": self.accuracy,
                "macro_f1": self.macro_f1, "hard_cases": self.hard_total, "hard_accuracy": self.hard_accuracy,
                "per_class": self.per_class(), "misses": self.misses}


def evaluate(engine: Engine, cases: list[Case], split: str = "all") -> Report:
    report = Report(engine.pack.name, split)
    for case in cases:
        verdict = engine.classify(case_bundle(case))
        got = verdict.failure_class.value
        ok = got == case.label
        report.total += 1
        report.correct += ok
        report.confusion[(case.label, got)] += 1
        if case.hard:
            report.hard_total += 1
            report.hard_correct += ok
        if not ok:
            report.misses.append({"id": case.id, "expected": case.label, "got": got,
                                  "rule": verdict.matched_rule, "hard": case.hard, "split": case.split})
    return report
