"""Plugin: the Tier-1 OOM fast path (CONTRACTS §3.5).

The signature is searched over the reference's scan surface (§3.5.2) unless
the pack's ``pack.yml`` widens it; a hit is always ``genuine-oom``. The
numbers come from the producer's structured fields, never from log text.

Deliberate fix (CONTRACTS §8.2.1, §8.2.12): the predicted total is not
double-counted. A ``total`` component is used as is; otherwise the
components are summed with ``kv_pool_requested`` dropped when
``kv_pool_actual`` is present; booleans and non-numbers are ignored, and a
NaN or infinite part that counts leaves no prediction at all. A
kv-calc bug is routed only when all three inputs are present *and* both
sides of the delta are usable numbers.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any

import regex

from loop_core import Match, MatchContext, Matcher, RulePack, Tier, Trace, hookimpl
from loop_core.rules import any_of

RULE_ID = "tier1-oom-fastpath"

# §3.5.1, verbatim alternatives; searched case-insensitively.
REFERENCE_SIGNATURE = (
    r"torch\.cuda\.outofmemoryerror",
    r"cuda out of memory",
    r"cuda error: out of memory",
    r"outofmemoryerror: cuda",
    r"kv cache is needed, which is larger than the available kv cache memory",
    r"no available memory for the cache blocks",
)


class _Compiled:
    __slots__ = ("signature", "unless", "surface", "timeout", "surface_key")

    def __init__(self, pack: RulePack) -> None:
        s = pack.settings
        patterns = s.tier1_oom_signature or REFERENCE_SIGNATURE
        self.signature = pack.regex(any_of(patterns), regex.IGNORECASE)
        self.unless = (pack.regex(any_of(s.tier1_oom_unless), regex.IGNORECASE)
                       if s.tier1_oom_unless else None)
        self.surface = s.tier1_oom_surface
        self.timeout = s.regex_timeout
        self.surface_key = (RULE_ID, "surface", self.surface)  # the View.memo key of the scan surface


# Each live pack's compiled signature, keyed by id(pack). The pack is held weakly and
# its entry dropped when it goes: a process that builds engine after engine (a
# service, a test run) would otherwise keep every pack it ever loaded.
_CACHE: dict[int, tuple[weakref.ref[RulePack], _Compiled]] = {}


def _compiled(pack: RulePack) -> _Compiled:
    hit = _CACHE.get(id(pack))
    if hit is not None and hit[0]() is pack:
        return hit[1]
    compiled = _Compiled(pack)
    key = id(pack)
    _CACHE[key] = (weakref.ref(pack, lambda _ref: _CACHE.pop(key, None)), compiled)
    return compiled


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def scan_surface(ctx: MatchContext, mode: str = "reference") -> str:
    """§3.5.2: the capped substring, the full excerpt (or failure), the pt5 summary."""
    if mode == "all_text":
        return str(ctx.view.signal("all_text"))
    bundle = ctx.bundle
    parts = [ctx.error_substring]
    pt3 = bundle.pt3 if isinstance(bundle.pt3, dict) else {}
    full = pt3.get("failure_log_excerpt") or pt3.get("failure")
    if full:
        parts.append(_text(full).lower())
    pt5 = bundle.pt5 if isinstance(bundle.pt5, dict) else None
    if pt5 is not None and pt5.get("exit_error_summary"):
        parts.append(_text(pt5["exit_error_summary"]).lower())
    return " ".join(p for p in parts if p)


def resolve_inputs(ctx: MatchContext) -> dict[str, Any]:
    """§3.5.3 input precedence: pt5 > pt3+pt1 > none."""
    bundle = ctx.bundle
    pt5 = bundle.pt5 if isinstance(bundle.pt5, dict) else None
    pt3 = bundle.pt3 if isinstance(bundle.pt3, dict) else {}
    pt1 = bundle.pt1 if isinstance(bundle.pt1, dict) else {}
    if pt5 is not None and isinstance(pt5.get("actual"), dict):
        actual = pt5["actual"]
        return {
            "predicted_b_breakdown": pt5.get("predicted_b_breakdown"),
            "attempted_alloc_mib": actual.get("boot_peak_mib"),
            "gpu_worker_reported_mib": actual.get("gpu_worker_reported_mib"),
            "source": "pt5",
        }
    if isinstance(pt3.get("actual"), dict) or pt1.get("predicted_b_breakdown") is not None:
        measured: dict[str, Any] = pt3["actual"] if isinstance(pt3.get("actual"), dict) else {}
        return {
            "predicted_b_breakdown": pt1.get("predicted_b_breakdown"),
            "attempted_alloc_mib": measured.get("attempted_alloc_mib"),
            "gpu_worker_reported_mib": measured.get("gpu_worker_reported_mib"),
            "source": "pt3+pt1",
        }
    return {"predicted_b_breakdown": None, "attempted_alloc_mib": None,
            "gpu_worker_reported_mib": None, "source": None}


def _finite(value: float | int) -> bool:
    """Whether ``value`` can be a count of MiB: not NaN or infinite, and not an int
    beyond any float (``math.isfinite`` raises for one: the whole Tier-1 match was
    skipped, and a real OOM read as unknown)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value if _finite(value) else None
    if isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            return None
        return number if _finite(number) else None
    return None


def predicted_total_mib(breakdown: Any) -> int | None:
    """The predicted total in MiB, counting each component once (see module doc)."""
    if not isinstance(breakdown, dict):
        return None
    numbers = {k: v for k, v in breakdown.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if not numbers:
        return None
    if "total" in numbers:
        numbers = {"total": numbers["total"]}
    elif "kv_pool_actual" in numbers:
        numbers.pop("kv_pool_requested", None)
    if not all(_finite(v) for v in numbers.values()):
        return None  # a NaN or infinite part: the sum of the others would be a made-up prediction
    gb = sum(numbers.values())
    mib = gb * 1024
    return round(mib) if math.isfinite(mib) else None  # huge finite parts can sum to infinity


def route_and_delta(inputs: dict[str, Any]) -> tuple[bool, int | None]:
    total = predicted_total_mib(inputs["predicted_b_breakdown"])
    worker = _number(inputs["gpu_worker_reported_mib"])
    attempted = _number(inputs["attempted_alloc_mib"])
    delta = int(worker) - total if worker is not None and total is not None else None
    route = total is not None and worker is not None and attempted is not None
    return route, delta


def _match(ctx: MatchContext) -> Match | None:
    compiled = _compiled(ctx.pack)
    surface = ctx.view.memo(compiled.surface_key, scan_surface, ctx, compiled.surface)
    index = ctx.view.index(surface)
    try:
        if not compiled.signature.test(surface, timeout=compiled.timeout, index=index):
            return None
        if compiled.unless is not None and compiled.unless.test(surface, timeout=compiled.timeout, index=index):
            return None
    except TimeoutError:
        ctx.view.warnings.append(f"{RULE_ID}: signature search timed out; counted as no match")
        return None
    inputs = resolve_inputs(ctx)
    route, delta = route_and_delta(inputs)
    return Match("genuine-oom", RULE_ID, route, delta, inputs)


def _explain(ctx: MatchContext) -> list[Trace]:
    compiled = _compiled(ctx.pack)
    surface = scan_surface(ctx, compiled.surface)
    m = compiled.signature.search(surface, timeout=compiled.timeout)
    detail = f"span {m.span()} {m.group()!r}" if m else f"no OOM signature in {len(surface)} characters"
    traces = [Trace(f"OOM signature over the {compiled.surface} surface", m is not None, detail)]
    if m and compiled.unless is not None:
        veto = compiled.unless.search(surface, timeout=compiled.timeout)
        traces.append(Trace("unless (veto)", veto is not None,
                            f"span {veto.span()} {veto.group()!r}" if veto else ""))
    return traces


@hookimpl
def loop_register_matchers(register: Callable[[Matcher], None]) -> None:
    register(Matcher(RULE_ID, Tier.TIER1, 100, _match, _explain,
                     "the definitive CUDA OOM signature; routes kv-calc bugs when all inputs are present"))
