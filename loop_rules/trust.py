"""Plugin: the built-in inbound-trust pipeline (CONTRACTS §4), as the last word."""

from __future__ import annotations

from loop_core import Bundle, hookimpl
from loop_core.catalog import Catalog
from loop_core.trust import ConsensusIndex, TrustResult, evaluate_trust


@hookimpl(trylast=True)
def loop_evaluate_trust(bundle: Bundle, catalog: Catalog, priors: ConsensusIndex | None,
                        maintainer_promoted: bool, consensus_n: int) -> TrustResult:
    return evaluate_trust(bundle, catalog=catalog, priors=priors,
                          maintainer_promoted=maintainer_promoted, consensus_n=consensus_n)
