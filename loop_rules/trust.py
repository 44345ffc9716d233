"""Plugin: the built-in inbound-trust pipeline (CONTRACTS §4), as the last word.

The trust module is imported on the first anchor evaluated, so commands
that evaluate none start without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loop_core import Bundle, hookimpl

if TYPE_CHECKING:
    from loop_core.catalog import Catalog
    from loop_core.trust import ConsensusIndex, TrustResult


@hookimpl(trylast=True)
def loop_evaluate_trust(bundle: Bundle, catalog: Catalog, priors: ConsensusIndex | None,
                        maintainer_promoted: bool, consensus_n: int) -> TrustResult:
    from loop_core.trust import evaluate_trust

    return evaluate_trust(bundle, catalog=catalog, priors=priors,
                          maintainer_promoted=maintainer_promoted, consensus_n=consensus_n)
