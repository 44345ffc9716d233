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

from typing import TYPE_CHECKING, Any

from .__version__ import __version__

# Names resolve on first use (PEP 562): `loop-rules --version` and other light
# commands must not pay for importing the whole engine.
_LAZY = {
    "Bundle": "bundle",
    "BundleError": "errors",
    "Catalog": "catalog",
    "CatalogError": "errors",
    "Classification": "verdict",
    "ConditionKind": "conditions",
    "ConsensusIndex": "trust",
    "ConsensusKey": "keys",
    "DedupKey": "keys",
    "Engine": "engine",
    "FailureClass": "verdict",
    "FileAction": "trackers",
    "FileResult": "trackers",
    "IssueDraft": "dedup",
    "LoopError": "errors",
    "Match": "verdict",
    "MatchContext": "engine",
    "Matcher": "engine",
    "MatcherTrace": "engine",
    "Occurrence": "dedup",
    "PackInfo": "packs",
    "PluginError": "errors",
    "ReadLimits": "bundle",
    "ReviewQueue": "trackers",
    "Rule": "rules",
    "RuleError": "errors",
    "RulePack": "rules",
    "RunSummary": "pipeline",
    "SpoolTracker": "trackers",
    "SqliteTracker": "trackers",
    "Stage": "trust",
    "Tier": "verdict",
    "Trace": "conditions",
    "Tracker": "trackers",
    "TrackerError": "errors",
    "TrackerOptions": "trackers",
    "TrackerSpec": "trackers",
    "TrustResult": "trust",
    "View": "view",
    "WorkerError": "errors",
    "consensus_key": "keys",
    "dedup_key": "keys",
    "dedup_labels": "keys",
    "error_substring": "keys",
    "evaluate_trust": "trust",
    "hookimpl": "hookspecs",
    "kv_calc_version": "keys",
    "load_catalog": "catalog",
    "load_rules": "rules",
    "make_plugin_manager": "plugins",
    "read_bundle": "bundle",
    "run_captures": "pipeline",
    "submission_fingerprint": "keys",
    "tier2_fingerprint": "keys",
}

if TYPE_CHECKING:
    from .bundle import Bundle, ReadLimits, read_bundle
    from .catalog import Catalog, load_catalog
    from .conditions import ConditionKind, Trace
    from .dedup import IssueDraft, Occurrence
    from .engine import Engine, MatchContext, Matcher, MatcherTrace
    from .errors import BundleError, CatalogError, LoopError, PluginError, RuleError, TrackerError, WorkerError
    from .hookspecs import hookimpl
    from .keys import ConsensusKey, DedupKey, consensus_key, dedup_key, dedup_labels, error_substring, kv_calc_version, submission_fingerprint, tier2_fingerprint
    from .packs import PackInfo
    from .pipeline import RunSummary, run_captures
    from .plugins import make_plugin_manager
    from .rules import Rule, RulePack, load_rules
    from .trackers import (FileAction, FileResult, ReviewQueue, SpoolTracker, SqliteTracker, Tracker,
                           TrackerOptions, TrackerSpec)
    from .trust import ConsensusIndex, Stage, TrustResult, evaluate_trust
    from .verdict import Classification, FailureClass, Match, Tier
    from .view import View


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'loop_core' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


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
    "ReviewQueue",
    "Rule",
    "RuleError",
    "RulePack",
    "RunSummary",
    "SpoolTracker",
    "SqliteTracker",
    "Stage",
    "Tier",
    "Trace",
    "Tracker",
    "TrackerError",
    "TrackerOptions",
    "TrackerSpec",
    "TrustResult",
    "View",
    "WorkerError",
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
    "run_captures",
    "submission_fingerprint",
    "tier2_fingerprint",
]
