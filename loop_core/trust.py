"""The inbound-trust pipeline for success anchors: raw -> candidate -> validated -> tier1.

CONTRACTS §4. Every field of a :class:`TrustResult` is computed up front, so a
result is fully populated whatever stage it stops at. The pipeline never
re-decides the failure class and never writes calibration data: a curated
anchor that reaches tier1 yields the would-be calibration row only.

Consensus (§4.4) counts prior submissions whose full 9-tuple equals the
anchor's. Unlike the reference, a submission counts once: priors are keyed
by their submission fingerprint, the anchor's own fingerprint never counts as
a prior, and a prior whose fingerprint does not verify is ignored.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .bundle import Bundle
from .catalog import Catalog
from .keys import ConsensusKey, consensus_key, submission_fingerprint

__all__ = ["ConsensusIndex", "Stage", "TrustResult", "evaluate_trust", "graduation_set", "topology_plausible",
           "trust_of"]

MAX_VRAM_MIB = 1_048_576  # 1 TiB per card


class Stage(str, enum.Enum):
    RAW = "raw"
    CANDIDATE = "candidate"
    VALIDATED = "validated"
    TIER1 = "tier1"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def __str__(self) -> str:
        return self.value


_RANK = {Stage.RAW: 0, Stage.CANDIDATE: 1, Stage.VALIDATED: 2, Stage.TIER1: 3}


@dataclass(frozen=True, slots=True)
class TrustResult:
    """Where one success anchor stopped, and why."""

    stage: Stage
    reason: str
    graduation_set: frozenset[str]
    fingerprint_ok: bool
    rederived_fingerprint: str
    curated: bool
    curated_model: str | None
    consensus_count: int
    consensus_reached: bool
    maintainer_promoted: bool
    calibration_row: dict[str, Any] | None = None

    def at_least(self, stage: Stage) -> bool:
        return self.stage.rank >= stage.rank

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage.value,
            "reason": self.reason,
            "graduation_set": sorted(self.graduation_set),
            "fingerprint_ok": self.fingerprint_ok,
            "rederived_fingerprint": self.rederived_fingerprint,
            "curated": self.curated,
            "curated_model": self.curated_model,
            "consensus_count": self.consensus_count,
            "consensus_reached": self.consensus_reached,
            "maintainer_promoted": self.maintainer_promoted,
            "calibration_row": self.calibration_row,
        }


@dataclass(slots=True)
class ConsensusIndex:
    """Prior submissions indexed by consensus key: a lookup per anchor, not a scan."""

    by_key: dict[ConsensusKey, set[str]] = field(default_factory=dict)

    def add(self, bundle: Bundle) -> bool:
        """Index one prior; False (ignored) for gate bundles and unverifiable fingerprints."""
        key = consensus_key(bundle)
        claimed = bundle.manifest.get("submission_fingerprint")
        if key is None or not fingerprint_verifies(bundle):
            return False
        self.by_key.setdefault(_hashable(key), set()).add(str(claimed))
        return True

    @classmethod
    def of(cls, bundles: Iterable[Bundle]) -> ConsensusIndex:
        index = cls()
        for bundle in bundles:
            index.add(bundle)
        return index

    def count(self, bundle: Bundle) -> int:
        """1 (this submission) + distinct other submissions with the same 9-tuple."""
        key = consensus_key(bundle)
        others = self.by_key.get(_hashable(key), set()) if key is not None else set()
        own = str(bundle.manifest.get("submission_fingerprint"))
        # Not len(others - {own}): that copies the set, and over a run whose anchors
        # share a few keys, every anchor's count would copy thousands of others.
        return 1 + len(others) - (own in others)


def _hashable(key: ConsensusKey) -> Any:
    """``key`` as a dict key that is equal where §4.4's Python equality says the keys
    are: nearly always ``key`` itself; a list or object a producer wrote inside a field
    becomes a tuple (a list stays unequal to a tuple) or a frozenset of its items.

    A ``NaN`` (JSON's ``NaN``, which Python's reader accepts) becomes one stand-in:
    every ``NaN`` a reader gives is the same float object, so two keys holding one
    are equal in the reference, but only while they hold that very object. A bundle
    passed between processes (``run --jobs``) or spilled to disk comes back with a
    ``NaN`` of its own, which equals no other.
    """
    try:
        hash(key)
    except TypeError:
        return tuple(_frozen(value) for value in key)
    if (float in map(type, key) or float in map(type, key[-1])) and _holds_nan(key):  # scans in C first
        return tuple(_frozen(value) for value in key)
    return key


def _holds_nan(value: Any) -> bool:
    if isinstance(value, float):
        return math.isnan(value)
    return isinstance(value, tuple) and any(map(_holds_nan, value))


_NAN = ("nan",)  # no JSON value freezes to a tuple of one string


def _frozen(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return _NAN
    if isinstance(value, list):
        return ("list", tuple(_frozen(v) for v in value))
    if isinstance(value, tuple):
        return ("tuple", tuple(_frozen(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((k, _frozen(v)) for k, v in value.items()))
    return value


def fingerprint_verifies(bundle: Bundle) -> bool:
    claimed = bundle.manifest.get("submission_fingerprint")
    return isinstance(claimed, str) and claimed == submission_fingerprint(bundle.manifest)


def graduation_set(bundle: Bundle) -> frozenset[str]:
    """§4.2: exactly the capabilities whose smoke verdict is ``green``."""
    results = (bundle.pt4 or {}).get("results") if isinstance(bundle.pt4, dict) else None
    if not isinstance(results, dict):
        return frozenset()
    return frozenset(str(cap) for cap, verdict in results.items() if verdict == "green")


def _int(text: str) -> int | None:
    try:
        return int(text)  # Python int() leniency is part of the contract (§4.3)
    except (ValueError, TypeError):
        return None


def _split_topology(topology_class: Any) -> tuple[int, int] | None:
    if not isinstance(topology_class, str) or "x" not in topology_class:
        return None
    head, tail = topology_class.split("x", 1)
    if not tail.endswith("MiB"):
        return None
    count, vram = _int(head), _int(tail[: -len("MiB")])
    return None if count is None or vram is None else (count, vram)


def topology_plausible(manifest: Any) -> bool:
    """§4.3: a basic GPU-count and VRAM floor, not a hardware model."""
    summary = manifest.get("topology_summary_canonical")
    if not isinstance(summary, str) or not summary.strip():
        return False
    parts = _split_topology(manifest.get("topology_class"))
    if parts is None:
        return False
    count, vram = parts
    return count >= 1 and 1 <= vram <= MAX_VRAM_MIB


def _vram_gb(topology_class: Any) -> float | None:
    parts = _split_topology(topology_class)
    return None if parts is None else round(parts[1] / 1024.0, 3)


def calibration_row(bundle: Bundle, curated_id: str, compose: str) -> dict[str, Any]:
    """§4.6: the would-be calibration row, exactly eight keys."""
    m = bundle.manifest
    return {
        "compose": compose,
        "vram_gb": _vram_gb(m.get("topology_class")),
        "measured_peak_gb": None,
        "ctx_override": m.get("selected_ctx"),
        "status": "candidate-tier1",
        "engine_pin": m.get("engine_pin"),
        "genesis_pin": None,
        "source": (f"loop[F]/F4 inbound-trust anchor model={m.get('model')} slug-resolved={curated_id} "
                   f"fingerprint={m.get('submission_fingerprint')} utc_ts={m.get('utc_ts')}"),
    }


def evaluate_trust(
    bundle: Bundle,
    *,
    catalog: Catalog | None = None,
    priors: ConsensusIndex | None = None,
    maintainer_promoted: bool = False,
    consensus_n: int = 2,
) -> TrustResult:
    """Run one schema-1 success anchor through the four stages.

    :param priors: earlier submissions to match the consensus key against.
    :param maintainer_promoted: a maintainer vouches for the anchor (skips consensus).
    :param consensus_n: submissions needed for consensus, this one included.
    :raises ValueError: for a gate-only bundle, which has no trust verdict.
    """
    if bundle.is_gate_only:
        raise ValueError(f"{bundle.path}: gate-only bundles have no trust verdict")
    catalog = catalog or Catalog()
    m = bundle.manifest
    rederived = submission_fingerprint(m)
    fp_ok = m.get("submission_fingerprint") == rederived
    graduation = graduation_set(bundle)
    count = priors.count(bundle) if priors is not None else 1
    reached = count >= int(consensus_n)
    curated_id = catalog.curated_model(m.get("model"))
    promoted = bool(maintainer_promoted)

    def result(stage: Stage, reason: str, row: dict[str, Any] | None = None) -> TrustResult:
        return TrustResult(stage, reason, graduation, fp_ok, rederived, curated_id is not None, curated_id,
                           count, reached, promoted, row)

    if not fp_ok:
        return result(Stage.RAW, "fingerprint-mismatch")
    if not graduation:
        return result(Stage.CANDIDATE, "no-green-capability")
    if not topology_plausible(m):
        return result(Stage.CANDIDATE, "topology-implausible")
    if not (reached or promoted):
        return result(Stage.CANDIDATE, "insufficient-consensus")
    if curated_id is None:
        return result(Stage.VALIDATED, "derived-tier1-deferred-v0.8.1")
    pt1 = bundle.pt1 if isinstance(bundle.pt1, dict) else {}
    compose = catalog.compose_for(curated_id, pt1.get("profile_like"))
    if compose is None:
        return result(Stage.VALIDATED, "curated-no-compose-key")
    return result(Stage.TIER1, "tier1-curated", calibration_row(bundle, curated_id, compose))


def trust_of(pm: Any, bundle: Bundle, *, catalog: Catalog, priors: ConsensusIndex | None,
             maintainer_promoted: bool = False, consensus_n: int = 2) -> TrustResult:
    """What the ``loop_evaluate_trust`` hooks decide for one anchor, held to the hook's
    contract: a hook that raises, or answers anything but a :class:`TrustResult`, is a
    :class:`~loop_core.errors.PluginError` naming the plugins, not a crash later."""
    from .errors import PLUGIN_FAILURES, LoopError, PluginError, failure_text

    def hook() -> str:
        return f"loop_evaluate_trust (plugins {', '.join(i.plugin_name for i in pm.hook.loop_evaluate_trust.get_hookimpls())})"

    try:
        result = pm.hook.loop_evaluate_trust(bundle=bundle, catalog=catalog, priors=priors,
                                             maintainer_promoted=maintainer_promoted, consensus_n=consensus_n)
    except LoopError:
        raise
    except PLUGIN_FAILURES as e:  # a plugin's bug (or its sys.exit), reported as one
        raise PluginError(f"{hook()} raised {failure_text(e)}") from e
    if not isinstance(result, TrustResult):
        raise PluginError(f"{hook()} returned {type(result).__name__}, not a TrustResult")
    return result
