"""Plugin: Tier-2, the exact-fingerprint table then the YAML condition rows.

CONTRACTS §3.3 steps 5-6: an exact hit decides with the fingerprint as the
matched rule; otherwise the rows of the pack are walked in file order and
the first whose ``when`` holds decides.
"""

from __future__ import annotations

from collections.abc import Callable

from loop_core import Match, MatchContext, Matcher, Tier, Trace, hookimpl


def _exact(ctx: MatchContext) -> Match | None:
    cls = ctx.pack.exact.get(ctx.fingerprint)
    # A maintainer's decision: an `unknown` here has been reviewed, and is not queued again.
    return None if cls is None else Match(cls, ctx.fingerprint, review=False)


def _explain_exact(ctx: MatchContext) -> list[Trace]:
    cls = ctx.pack.exact.get(ctx.fingerprint)
    detail = f"fingerprint {ctx.fingerprint} -> {cls}" if cls else (
        f"fingerprint {ctx.fingerprint} not among {len(ctx.pack.exact)} entries")
    return [Trace("exact fingerprint table", cls is not None, detail)]


def _rows(ctx: MatchContext) -> Match | None:
    for rule in ctx.pack.candidates(ctx.view):  # the rules that cannot match are skipped
        if rule.matches(ctx.view):  # a regex timeout inside the rule means no match
            return Match(rule.failure_class.value, rule.id)
    return None


def _explain_rows(ctx: MatchContext) -> list[Trace]:
    out = []
    for rule in ctx.pack.rules:
        trace, matched = rule.explain(ctx.view)
        shadow = " [shadow: never decides]" if rule.shadow else ""
        detail = "a regex timed out: the rule does not match" if trace.matched and not matched else ""
        out.append(Trace(f"{rule.id} -> {rule.failure_class.value} ({rule.source}){shadow}",
                         matched, detail, children=(trace,)))
    return out


@hookimpl
def loop_register_matchers(register: Callable[[Matcher], None]) -> None:
    register(Matcher("tier2-exact", Tier.TIER2, 100, _exact, _explain_exact,
                     "maintainer-classified fingerprints from the pack's exact tables"))
    register(Matcher("tier2-rules", Tier.TIER2, 200, _rows, _explain_rows,
                     "the pack's YAML condition rows in file order; first match wins"))
