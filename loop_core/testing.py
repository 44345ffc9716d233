"""Builders for in-memory bundles: rule examples, tests and benchmarks use them.

``make_bundle()`` returns a schema-1 bundle of a failed boot that carries no
failure text; overrides are deep-merged into it. A ``manifest.schema`` of 2
in the overrides starts from a gate-only bundle instead.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .bundle import BUNDLE_FILES, Bundle
from .keys import submission_fingerprint

__all__ = ["FILE_NAMES", "base_documents", "make_bundle", "write_bundle"]

_BASE_V1: dict[str, Any] = {
    "manifest": {
        "arch_family": "LlamaForCausalLM",
        "capture_points": ["gate", "download", "boot", "smoke"],
        "club3090_commit": "0123456789abcdef0123456789abcdef01234567",
        "engine_pin": "vllm/vllm-openai:v0.21.0",
        "engine_version": "vllm/vllm-openai:v0.21.0",
        "failure_class": None,
        "kv_calc_version": "kvcalc-v0.8.0+1a2b3c4d5e6f",
        "kv_format": "fp8_e5m2",
        "model": "example/Example-7B",
        "model_id": "example/Example-7B",
        "outcome": "failed",
        "quant_label": "BF16",
        "schema": 1,
        "selected_ctx": 32768,
        "slug": "example/Example-7B",
        "smoke_capability_set": [],
        "submission_fingerprint": "",
        "topology_class": "1x24576MiB",
        "topology_summary_canonical": "[(NVIDIA GeForce RTX 3090, 24576)]",
        "utc_ts": "20260801T093000Z",
    },
    "pt1": {
        "confidence": "estimated-lower-bound", "hardware_sm": 8.6, "point": "gate",
        "predicted_b_breakdown": None, "profile_like": "vllm/minimal",
        "raw_verdict": "fits-clean", "schema": 1, "slug": "example/Example-7B",
        "terminal": "proceed",
    },
    "pt2": {"bytes": 1, "failure": None, "files": ["model.safetensors"], "ok": True,
            "point": "download", "sha_verified": True},
    "pt3": {"actual": {"attempted_alloc_mib": None, "gpu_worker_reported_mib": None},
            "failure": "server did not become ready before timeout",
            "failure_log_excerpt": None, "ok": False, "point": "boot", "seconds": 60.0},
    "pt4": {"partial": False, "point": "smoke", "results": {}, "results_detail": {},
            "smoke_capability_set": []},
}

_BASE_V2: dict[str, Any] = {
    "manifest": {
        "schema": 2, "slug": "example/Example-7B", "model": "example/Example-7B",
        "model_id": "example/Example-7B", "utc_ts": "20260801T093000Z",
        "club3090_commit": "0123456789abcdef0123456789abcdef01234567",
        "outcome": "hard-block", "abort_reason": "disk-short", "failure_class": None,
        "arch_family": None, "quant_label": None, "is_gate_only": True,
        "capture_points": ["gate"],
    },
    "pt1": {"schema": 2, "point": "gate", "slug": "example/Example-7B",
            "abort_reason": "disk-short", "detail": "", "is_gate_only": True},
}


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def base_documents(gate: bool = False) -> dict[str, Any]:
    """A fresh copy of the base documents (``manifest``, ``pt1``..)."""
    return copy.deepcopy(_BASE_V2 if gate else _BASE_V1)


def make_bundle(overrides: Mapping[str, Any] | str | None = None, *,
                path: str | Path = "<example>") -> Bundle:
    """Build a bundle in memory; a string is shorthand for the boot log excerpt.

    The submission fingerprint is minted from the final manifest unless the
    overrides set one, so trust sees a consistent bundle.
    """
    if isinstance(overrides, str):
        overrides = {"pt3": {"failure_log_excerpt": overrides}}
    overrides = overrides or {}
    manifest_over = overrides.get("manifest") or {}
    gate = isinstance(manifest_over, Mapping) and manifest_over.get("schema") == 2
    docs = _merge(base_documents(gate), overrides)
    if gate:
        if "abort_reason" not in manifest_over:
            docs["manifest"]["abort_reason"] = docs["pt1"].get("abort_reason")
        return Bundle(Path(path), 2, docs["manifest"], docs["pt1"])
    if not (isinstance(manifest_over, Mapping) and "submission_fingerprint" in manifest_over):
        docs["manifest"]["submission_fingerprint"] = submission_fingerprint(docs["manifest"])
    return Bundle(Path(path), 1, docs["manifest"], docs["pt1"], docs["pt2"], docs["pt3"],
                  docs["pt4"], docs.get("pt5"))


# document key -> file name, in the order the producer writes them
FILE_NAMES = dict(zip(("manifest", "pt1", "pt2", "pt3", "pt4", "pt5"), BUNDLE_FILES))


def write_bundle(directory: str | Path, bundle: Bundle | Mapping[str, Any]) -> Path:
    """Write a bundle (or a mapping of ``manifest``/``pt1``.. documents) the way the producer does.

    Files are ``json.dumps(indent=2, sort_keys=True, ensure_ascii=False)`` plus
    a newline; documents that are None are not written.
    """
    import json

    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    docs = bundle.to_document() if isinstance(bundle, Bundle) else bundle
    for key, name in FILE_NAMES.items():
        doc = docs.get(key)
        if doc is None:
            continue
        text = json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        (target / name).write_text(text, encoding="utf-8")
    return target
