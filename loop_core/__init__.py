"""loop-rules engine: read capture bundles, classify failures, key and deduplicate them.

Writing a plugin: implement any hook of :mod:`loop_core.hookspecs` in a
module or object decorated with :data:`hookimpl`, and expose it under the
``loop_rules`` entry-point group of your package::

    # my_plugin.py
    from loop_core import ConditionKind, Match, Matcher, Tier, hookimpl

    def _match(ctx):
        if "nvlink timeout" in ctx.view.signal("error_text_lower"):
            return Match("unknown", "my-nvlink-timeout")
        return None

    @hookimpl
    def loop_register_matchers(register):
        register(Matcher("my-nvlink-timeout", Tier.TIER1, 500, _match))

    # pyproject.toml
    [project.entry-points.loop_rules]
    my_plugin = "my_plugin"

Import only names listed in ``__all__``; anything else may change.
"""

from __future__ import annotations

from .__version__ import __version__
from .bundle import Bundle, ReadLimits, read_bundle
from .catalog import Catalog, load_catalog
from .conditions import ConditionKind, Trace
from .dedup import IssueDraft, Occurrence
from .engine import Engine, MatchContext, Matcher, MatcherTrace
from .errors import BundleError, CatalogError, LoopError, PluginError, RuleError, TrackerError
from .hookspecs import hookimpl
from .keys import (
    ConsensusKey,
    DedupKey,
    consensus_key,
    dedup_key,
    dedup_labels,
    error_substring,
    kv_calc_version,
    submission_fingerprint,
    tier2_fingerprint,
)
from .packs import PackInfo
from .plugins import make_plugin_manager
from .rules import Rule, RulePack, load_rules
from .trackers import FileAction, FileResult, Tracker, TrackerOptions, TrackerSpec
from .trust import ConsensusIndex, Stage, TrustResult, evaluate_trust
from .verdict import Classification, FailureClass, Match, Tier
from .view import View

__all__ = [
    "Bundle",
    "BundleError",
    "Catalog",
    "CatalogError",
    "Classification",
    "ConditionKind",
    "ConsensusIndex",
    "ConsensusKey",
    "DedupKey",
    "Engine",
    "FailureClass",
    "FileAction",
    "FileResult",
    "IssueDraft",
    "LoopError",
    "Match",
    "MatchContext",
    "Matcher",
    "MatcherTrace",
    "Occurrence",
    "PackInfo",
    "PluginError",
    "ReadLimits",
    "Rule",
    "RuleError",
    "RulePack",
    "Stage",
    "Tier",
    "Trace",
    "Tracker",
    "TrackerError",
    "TrackerOptions",
    "TrackerSpec",
    "TrustResult",
    "View",
    "__version__",
    "consensus_key",
    "dedup_key",
    "dedup_labels",
    "error_substring",
    "evaluate_trust",
    "hookimpl",
    "kv_calc_version",
    "load_catalog",
    "load_rules",
    "make_plugin_manager",
    "read_bundle",
    "submission_fingerprint",
    "tier2_fingerprint",
]
