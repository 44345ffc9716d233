"""Wire-compatible keys and hashes (CONTRACTS §0.2, §1.8.3, §2.4-§2.6, §3.3-§3.4, §5.1-§5.2, §6).

Every value here must match the reference byte for byte: values are rendered
with Python's ``str()`` (the spec's "pystr"), joined with U+001F and hashed
with SHA-256 of the UTF-8 text.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from .bundle import Bundle

__all__ = [
    "ConsensusKey",
    "DedupKey",
    "KV_CALC_BASE",
    "US",
    "arch_label",
    "consensus_key",
    "dedup_key",
    "dedup_labels",
    "error_substring",
    "kv_calc_version",
    "sha256hex",
    "submission_fingerprint",
    "tier2_fingerprint",
]

US = "\x1f"
KV_CALC_BASE = "kvcalc-v0.8.0"
SUBSTRING_LIMIT = 240
# GitHub refuses labels longer than 50 characters (CONTRACTS §8.4.2); the
# reference keeps 48 characters after "arch:" and so overflows. We keep 45.
LABEL_LIMIT = 50
ARCH_PREFIX = "arch:"
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def sha256hex(text: str) -> str:
    """Lower-case hex SHA-256 of the UTF-8 encoding of ``text``."""
    # surrogatepass: a lone surrogate (refused by the reader, possible in memory)
    # hashes deterministically instead of raising.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _join(parts: Iterable[Any]) -> str:
    return US.join(str(p) for p in parts)


class ConsensusKey(NamedTuple):
    """The §6.2 9-tuple that success anchors must agree on. Compared, never hashed."""

    model: Any
    quant_label: str
    arch_family: Any
    topology_class: Any
    engine_pin: Any
    kv_calc_version: Any
    selected_ctx: Any
    kv_format: Any
    smoke_capability_set: tuple[Any, ...]


class DedupKey(NamedTuple):
    """The §6.3 7-tuple that identifies one distinct failure."""

    model_id: Any
    quant_label: str
    arch_family: Any
    kv_calc_version: Any
    engine_version: Any
    failure_class: Any
    topology_class: Any

    def digest(self) -> str:
        """§2.5: the first 12 hex digits of the SHA-256 of the US-joined fields."""
        return sha256hex(_join(self))[:12]


def consensus_key(bundle: Bundle) -> ConsensusKey | None:
    """§2.4; None for gate-only bundles, which have no consensus key."""
    if bundle.is_gate_only:
        return None
    m = bundle.manifest
    return ConsensusKey(
        m["model"],
        bundle.quant_label,
        m["arch_family"],
        m["topology_class"],
        m["engine_pin"],
        m["kv_calc_version"],
        m["selected_ctx"],
        m["kv_format"],
        _as_tuple(m["smoke_capability_set"]),
    )


def _as_tuple(value: Any) -> tuple[Any, ...]:
    # §2.3: stored order, no re-sorting; null (or any falsy value) is empty.
    if not value:
        return ()
    if isinstance(value, (list, tuple, str, dict)):
        return tuple(value)
    return (value,)


def dedup_key(bundle: Bundle, failure_class: str | None = None) -> DedupKey:
    """§2.5/§2.6 reader tuple, or the §5.1 effective tuple when a class is given.

    Gate-only manifests may omit keys; a missing key renders as ``None`` so a
    minimal manifest still hashes deterministically.
    """
    m = bundle.manifest
    return DedupKey(
        m.get("model"),
        bundle.quant_label,
        m.get("arch_family"),
        m.get("kv_calc_version"),
        m.get("engine_pin"),
        failure_class,
        m.get("topology_class"),
    )


def submission_fingerprint(manifest: Mapping[str, Any]) -> str:
    """§1.8.3: the full 64-hex fingerprint the producer mints, re-derived.

    Note the raw (not lower-cased) ``quant_label`` and ``engine_version``
    rather than ``engine_pin``: that is what the producer hashes.
    """
    parts = (
        manifest.get("model"),
        manifest.get("club3090_commit"),
        manifest.get("topology_summary_canonical"),
        manifest.get("quant_label"),
        manifest.get("kv_calc_version"),
        manifest.get("engine_version"),
        manifest.get("utc_ts"),
        manifest.get("outcome"),
    )
    return sha256hex(_join(parts))


def normalize_text(text: str, limit: int | None = SUBSTRING_LIMIT) -> str:
    """§3.4: collapse whitespace (``str.split``), lower-case, keep ``limit`` code points."""
    if limit is not None:
        # Only the start counts: normalise a prefix, dropping its last word (the cut
        # may split it), and use it when it already gives ``limit`` code points. A
        # quarter more than the limit usually does (splitting costs per word: a log's
        # first lines collapse little), twice the limit nearly always, four times more.
        for size in (limit + limit // 4, 2 * limit, 4 * limit):
            if len(text) <= size:
                break
            words = text[:size].split()
            if words and not text[size].isspace():
                words.pop()
            out = " ".join(words).lower()
            if len(out) >= limit:
                return out[:limit]
    out = " ".join(text.split()).lower()
    return out if limit is None else out[:limit]


def error_source(bundle: Bundle) -> tuple[str, str]:
    """§3.4 source precedence: ``(source, full text)``, both empty when nothing failed.

    ``source`` is ``excerpt``, ``failure``, ``smoke`` or ``""``. Odd but
    readable values (a number where text is expected, a list of results) are
    rendered or skipped instead of crashing, unlike the reference (§8.2.8).
    """
    pt3 = bundle.pt3 or {}
    excerpt = pt3.get("failure_log_excerpt")
    if excerpt:
        return "excerpt", _text(excerpt)
    failure = pt3.get("failure")
    if failure:
        return "failure", _text(failure)
    cap, detail = first_red_capability(bundle)
    if cap is not None:
        return "smoke", detail or f"smoke red:{cap}"
    return "", ""


def first_red_capability(bundle: Bundle) -> tuple[str | None, str]:
    """The alphabetically first ``red`` capability and its error text (maybe empty)."""
    pt4 = bundle.pt4 or {}
    results = pt4.get("results")
    if not isinstance(results, dict):
        return None, ""
    for cap in sorted(results, key=str):
        if results[cap] == "red":
            return cap, _detail_error(pt4.get("results_detail"), cap)
    return None, ""


def _detail_error(details: Any, cap: str) -> str:
    if not isinstance(details, dict):
        return ""
    entry = details.get(cap)
    if isinstance(entry, dict):
        error = entry.get("error")
        return _text(error) if error else ""
    if isinstance(entry, str):
        return entry
    return ""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def error_substring(bundle: Bundle) -> str:
    """§3.4: the reference's normalized, 240-code-point error substring."""
    return normalize_text(error_source(bundle)[1])


def tier2_fingerprint(substring: str, arch_family: Any, engine_version: Any) -> str:
    """§3.3: ``sha256(substring + arch + engine)[:12]``; plain concatenation, no separator."""
    return sha256hex(substring + str(arch_family) + str(engine_version))[:12]


def arch_label(arch_family: Any) -> str:
    """§5.2 ``arch:`` label, cut so the whole label fits GitHub's 50 characters."""
    return _arch_label(str(arch_family))


@functools.lru_cache(maxsize=1024)  # a run meets a few dozen architectures, each in many bundles
def _arch_label(arch_family: str) -> str:
    slug = _NON_ALNUM.sub("-", arch_family.lower()).strip("-")
    slug = re.sub("-{2,}", "-", slug)
    slug = slug[: LABEL_LIMIT - len(ARCH_PREFIX)].strip("-")
    return ARCH_PREFIX + slug


def dedup_labels(key: DedupKey, digest: str | None = None) -> tuple[str, str, str]:
    """§5.2: exactly three bounded labels, in this order (``digest``: the key's, if known)."""
    return (f"loop:dedup-{key.digest() if digest is None else digest}", f"class:{key.failure_class}",
            arch_label(key.arch_family))


def kv_calc_version(root: str | os.PathLike[str]) -> str:
    """§6: the content-derived version of a kv-calc tree, or the bare base on any error.

    Hashes ``tools/kv-calc.py`` then, for every
    ``scripts/lib/profiles/calibration/*.yml`` in code-point order, the file
    name and its bytes, all joined with U+001F.
    """
    base = Path(root)
    try:
        parts = [(base / "tools" / "kv-calc.py").read_bytes()]
        calibration = base / "scripts" / "lib" / "profiles" / "calibration"
        if calibration.is_dir():
            for path in sorted(calibration.glob("*.yml"), key=lambda p: p.name):
                parts.append(path.name.encode("utf-8"))
                parts.append(path.read_bytes())
        digest = hashlib.sha256(b"\x1f".join(parts)).hexdigest()[:12]
    except Exception:  # noqa: BLE001 - §6: provenance must never crash the caller
        return KV_CALC_BASE
    return f"{KV_CALC_BASE}+{digest}"
