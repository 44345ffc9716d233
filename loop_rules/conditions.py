"""Plugin: condition kinds that are not text selectors (CONTRACTS §3.6.2).

- ``structural: <predicate>`` with the predicates ``pt3_timeout_but_pt4_green``
  and ``results_detail_http_404``;
- ``gate_abort_reason: [token, ...]``: the gate's exact abort token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loop_core import ConditionKind, View, hookimpl


def _timeout_but_green(view: View) -> bool:
    # Boot failed, yet smoke has results, none red and at least one green.
    bundle = view.bundle
    pt3 = bundle.pt3 if isinstance(bundle.pt3, dict) else {}
    results = bundle.pt4.get("results") if isinstance(bundle.pt4, dict) else None
    if pt3.get("ok") or not isinstance(results, dict) or not results:
        return False
    verdicts = list(results.values())
    return "red" not in verdicts and "green" in verdicts


def _http_404(view: View) -> bool:
    pt4 = view.bundle.pt4 if isinstance(view.bundle.pt4, dict) else {}
    details = pt4.get("results_detail")
    if not isinstance(details, dict):
        return False
    # No JSON boolean equals 404 (True == 1), so a plain comparison is exact.
    return any(isinstance(d, dict) and d.get("status") == 404 for d in details.values())


PREDICATES: dict[str, Callable[[View], bool]] = {
    "pt3_timeout_but_pt4_green": _timeout_but_green,
    "results_detail_http_404": _http_404,
}


def _compile_predicate(arg: Any) -> Callable[[View], bool]:
    if not isinstance(arg, str) or arg not in PREDICATES:
        raise ValueError(f"unknown predicate {arg!r} (predicates: {', '.join(sorted(PREDICATES))})")
    return PREDICATES[arg]


def _compile_tokens(arg: Any) -> frozenset[str]:
    if isinstance(arg, str):
        arg = [arg]
    if not isinstance(arg, list) or not arg:
        raise ValueError("needs an abort token or a non-empty list of tokens")
    for token in arg:
        if not isinstance(token, str) or not token:
            raise ValueError(f"abort tokens are non-empty text, got {token!r}")
    return frozenset(arg)


def _abort_reason_in(view: View, tokens: frozenset[str]) -> bool:
    pt1 = view.bundle.pt1
    reason = pt1.get("abort_reason") if isinstance(pt1, dict) else None
    return isinstance(reason, str) and bool(reason) and reason in tokens


@hookimpl
def loop_register_conditions(register: Callable[[ConditionKind], None]) -> None:
    register(ConditionKind(
        "structural", lambda view, predicate: predicate(view), _compile_predicate,
        "a named structural predicate over pt3/pt4"))
    register(ConditionKind(
        "gate_abort_reason", _abort_reason_in, _compile_tokens,
        "the gate's abort token equals one of the listed tokens (case-sensitive)"))
