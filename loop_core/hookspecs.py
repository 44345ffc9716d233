"""The plugin contract: every hook a plugin may implement, grouped by phase.

Hooks are named ``loop_*`` (the pluggy project name is ``loop``). Hooks that
contribute things take a ``register`` callback so the host can check names
and reject duplicates with a :class:`~loop_core.errors.PluginError` naming
both plugins. Registration hooks run once per plugin manager, never at import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from .bundle import Bundle
    from .catalog import Catalog
    from .conditions import ConditionKind
    from .dedup import IssueDraft
    from .engine import Matcher
    from .packs import PackInfo
    from .trackers import TrackerSpec
    from .trust import ConsensusIndex, TrustResult
    from .verdict import Classification

__all__ = ["hookimpl", "hookspec"]

hookspec = pluggy.HookspecMarker("loop")
hookimpl = pluggy.HookimplMarker("loop")


# -- Registration: once per plugin manager, when an engine is built ---------


@hookspec
def loop_register_rule_packs(register: Callable[[PackInfo], None]) -> None:
    """Contribute named rule packs selectable with ``--rules NAME``.

    Call ``register(PackInfo(name, path, description))`` once per pack. A
    name registered twice raises ``PluginError``. The built-in
    ``loop_rules.packs`` plugin registers ``default`` and ``reference``.
    Return value: ignored.
    """


@hookspec
def loop_register_conditions(register: Callable[[ConditionKind], None]) -> None:
    """Contribute condition kinds usable in YAML rules as ``{<name>: <argument>}``.

    Call ``register(ConditionKind(name, evaluate, compile, description))``.
    ``compile(argument)`` runs once when a pack loads and may raise
    ``ValueError`` to reject a bad argument (reported with the rule's file,
    index and id); ``evaluate(view, compiled)`` returns True or False (any other
    answer fails the rule evaluating it, with a warning). Names must
    not clash with another kind or with ``all``/``any``/``not``/``select``.
    Return value: ignored.
    """


@hookspec
def loop_register_matchers(register: Callable[[Matcher], None]) -> None:
    """Contribute matchers to the classification chain.

    Call ``register(Matcher(name, tier, order, match, explain))``. The chain
    runs Tier-1 matchers before Tier-2 ones, and within a tier by ascending
    ``order`` then name; registration order never matters. The first matcher
    whose ``match(context)`` returns a :class:`~loop_core.verdict.Match`
    decides the bundle; ``None`` defers to the next. Built-ins: the Tier-1
    OOM fast path (order 100), the exact-fingerprint table (Tier-2, order
    100) and the YAML condition rows (Tier-2, order 200). Return value:
    ignored.
    """


# -- Trust: once per success anchor ----------------------------------------


@hookspec(firstresult=True)
def loop_evaluate_trust(bundle: Bundle, catalog: Catalog, priors: ConsensusIndex | None,
                        maintainer_promoted: bool, consensus_n: int) -> TrustResult | None:
    """Decide how far one success anchor climbs: raw -> candidate -> validated -> tier1.

    Called for schema-1 bundles only. Return a ``TrustResult`` to decide, or
    None to defer; the first non-None result wins. The built-in
    ``loop_rules.trust`` implementation is ``trylast`` and always decides, so a
    plugin can add stricter gates by returning a result first (e.g. stopping
    anchors from unknown submitters at ``candidate``). Between plugins:
    ``tryfirst`` ones first, the one registered last first, then those without
    a mark, the one registered last first (entry points are registered in name
    order); a plugin's ``trylast`` one comes after the built-in, so never.

    :param bundle: the validated anchor; do not mutate it.
    :param catalog: curated models and composes (empty: every anchor derived).
    :param priors: earlier submissions indexed by consensus key, or None.
    :param maintainer_promoted: a maintainer vouched for this anchor.
    :param consensus_n: submissions needed for consensus, this one included.
    """


# -- Dedup and filing: once per fileable failure -----------------------------


@hookspec(firstresult=True)
def loop_draft_issue(bundle: Bundle, verdict: Classification) -> IssueDraft | None:
    """Render the deduplicated issue (title, body, labels) for one fileable failure.

    Return an ``IssueDraft`` to decide, or None to defer; the first non-None
    result wins. The built-in ``loop_rules.dedup`` implementation is
    ``trylast``; other plugins are asked as for ``loop_evaluate_trust``. A
    replacement must keep the dedup hash, the three labels
    and the machine-readable tuple block, or other tools cannot dedup
    against its issues.
    """


@hookspec
def loop_register_trackers(register: Callable[[TrackerSpec], None]) -> None:
    """Contribute tracker backends selectable with ``--tracker NAME``.

    Call ``register(TrackerSpec(name, factory, description))``;
    ``factory(TrackerOptions)`` returns an object with ``name``,
    ``file(draft, occurrence) -> FileResult`` and ``close()``. ``file`` must
    never raise for a tracker outage: degrade to the spool instead. The
    built-ins are ``sqlite``, ``spool`` and ``github``. Return value: ignored.
    """
