"""The closed set of failure classes, the tiers, and a classification result."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .pickling import pickled_by_fields

__all__ = ["Classification", "FailureClass", "Match", "Tier", "coerce_class"]


class FailureClass(str, enum.Enum):
    """Exactly the six classes of the failure taxonomy; nothing else can leak out."""

    GENUINE_OOM = "genuine-oom"
    OVERLAY_ARCH_DRIFT = "overlay-arch-drift"
    KERNEL_UNSUPPORTED = "kernel-unsupported"
    QUANT_UNSUPPORTED = "quant-unsupported"
    BENIGN_COLD_START = "benign-cold-start"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


_BY_VALUE = {c.value: c for c in FailureClass}


def coerce_class(value: Any) -> FailureClass:
    """Map anything outside the six (case-sensitive) to ``unknown``."""
    if isinstance(value, FailureClass):
        return value
    return _BY_VALUE.get(value, FailureClass.UNKNOWN) if isinstance(value, str) else FailureClass.UNKNOWN


class Tier(str, enum.Enum):
    """Which stage decided: the Tier-1 fast path, Tier-2 rules, or nothing."""

    TIER1 = "tier1"
    TIER2 = "tier2"
    NONE = "none-unknown"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Match:
    """What a matcher returns when it decides a bundle.

    ``failure_class`` may be any string; the engine coerces it into the six (one
    outside them is ``unknown``, with a warning on the verdict).
    ``route_as_kv_calc_bug``, ``delta_mib`` and ``tier1_inputs`` are only
    honoured from Tier-1 matchers. ``review`` only from Tier-2 ones: whether
    an ``unknown`` goes to the review queue. None (the default) queues it, as
    every Tier-2 ``unknown`` is (CONTRACTS §3.7); False says a maintainer has
    already looked and decided it stays ``unknown`` (the exact table does).
    ``tier1_inputs`` is a mapping of JSON data (the verdict keeps a plain
    dict copy); a Match with anything else in it is skipped with a warning.
    """

    failure_class: Any
    rule_id: str
    route_as_kv_calc_bug: bool = False
    delta_mib: int | None = None
    tier1_inputs: Mapping[str, Any] | None = None
    review: bool | None = None


@pickled_by_fields
@dataclass(frozen=True, slots=True, init=False)
class Classification:
    """The verdict for one bundle (CONTRACTS §3.2), plus provenance."""

    failure_class: FailureClass
    tier: Tier
    matched_rule: str | None
    fingerprint: str
    error_substring: str
    should_file: bool
    review_queue: bool
    route_as_kv_calc_bug: bool = False
    delta_mib: int | None = None
    tier1_inputs: dict[str, Any] | None = None
    rules_version: str = ""
    warnings: tuple[str, ...] = field(default=())
    shadow_matches: tuple[str, ...] = field(default=())

    def __init__(self, failure_class: FailureClass, tier: Tier, matched_rule: str | None, fingerprint: str,
                 error_substring: str, should_file: bool, review_queue: bool, route_as_kv_calc_bug: bool = False,
                 delta_mib: int | None = None, tier1_inputs: dict[str, Any] | None = None, rules_version: str = "",
                 warnings: tuple[str, ...] = (), shadow_matches: tuple[str, ...] = ()) -> None:
        """The fields, in order (a test holds this to them). Every bundle makes one, and
        the frozen dataclass's own ``__init__`` looked ``object.__setattr__`` up again
        for each field, about a twentieth of what classifying a bundle costs: bound
        once, it costs a third less."""
        store = object.__setattr__.__get__(self)
        store("failure_class", failure_class)
        store("tier", tier)
        store("matched_rule", matched_rule)
        store("fingerprint", fingerprint)
        store("error_substring", error_substring)
        store("should_file", should_file)
        store("review_queue", review_queue)
        store("route_as_kv_calc_bug", route_as_kv_calc_bug)
        store("delta_mib", delta_mib)
        store("tier1_inputs", tier1_inputs)
        store("rules_version", rules_version)
        store("warnings", warnings)
        store("shadow_matches", shadow_matches)

    def to_dict(self) -> dict[str, Any]:
        return {
            "failure_class": self.failure_class.value,
            "tier": self.tier.value,
            "matched_rule": self.matched_rule,
            "fingerprint": self.fingerprint,
            "error_substring": self.error_substring,
            "should_file": self.should_file,
            "review_queue": self.review_queue,
            "route_as_kv_calc_bug": self.route_as_kv_calc_bug,
            "delta_mib": self.delta_mib,
            "tier1_inputs": self.tier1_inputs,
            "rules_version": self.rules_version,
            "warnings": list(self.warnings),
            "shadow_matches": list(self.shadow_matches),
        }
