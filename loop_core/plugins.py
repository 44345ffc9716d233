"""Build plugin managers and collect what plugins register.

There is no module-level manager: the CLI builds one per run, tests one per
test. Built-ins are registered by name first, then third-party plugins from
the ``loop_rules`` entry-point group unless ``LOOP_RULES_DISABLE_PLUGIN_AUTOLOAD``
is set. ``LOOP_RULES_TRACE_HOOKS=1`` traces every hook call to stderr.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pluggy

from . import hookspecs
from .errors import PluginError

__all__ = [
    "AUTOLOAD_ENV",
    "BUILTIN_PLUGINS",
    "ENTRY_POINT_GROUP",
    "collect",
    "make_plugin_manager",
    "plugin_report",
]

BUILTIN_PLUGINS = (
    "loop_rules.packs",
    "loop_rules.conditions",
    "loop_rules.tier1",
    "loop_rules.tier2",
    "loop_rules.trust",
    "loop_rules.dedup",
    "loop_rules.trackers",
)
ENTRY_POINT_GROUP = "loop_rules"
AUTOLOAD_ENV = "LOOP_RULES_DISABLE_PLUGIN_AUTOLOAD"
TRACE_ENV = "LOOP_RULES_TRACE_HOOKS"

T = TypeVar("T")


def _failing_entry_point() -> str:
    """Which entry point of the group does not load (asked again, one by one, only
    once loading them all failed), as ``name = module (distribution)``."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception:  # noqa: BLE001 - this is the one to name
            dist = getattr(getattr(ep, "dist", None), "name", None)
            return f"plugin {ep.name!r} ({ep.value}" + (f", from {dist})" if dist else ")")
    return "a plugin"


def make_plugin_manager(
    *,
    builtins: Sequence[str] = BUILTIN_PLUGINS,
    entry_points: bool = True,
    plugins: Sequence[object] = (),
) -> pluggy.PluginManager:
    """A fresh plugin manager with the built-ins, ``plugins`` and (unless disabled) entry points.

    :raises PluginError: a plugin failed to import or implements an unknown hook.
    """
    pm = pluggy.PluginManager("loop")
    pm.add_hookspecs(hookspecs)
    try:
        for name in builtins:
            pm.register(importlib.import_module(name), name=name)
        for plugin in plugins:
            name = pm.get_canonical_name(plugin)
            if pm.is_registered(plugin) or pm.has_plugin(name):
                raise PluginError(f"plugin {name!r}: a name registered twice (the same plugin given again, "
                                  f"or another plugin of that name)")
            pm.register(plugin)
    except pluggy.PluginValidationError as e:
        raise PluginError(f"plugin {e.plugin!r}: {e}") from e
    if entry_points and not os.environ.get(AUTOLOAD_ENV) and may_declare_entry_points(ENTRY_POINT_GROUP):
        try:
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
        except Exception as e:  # a broken third-party package must name itself
            raise PluginError(f"entry point group {ENTRY_POINT_GROUP!r}: cannot load {_failing_entry_point()}: "
                              f"{e!r}") from e
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as e:
        raise PluginError(f"plugin {e.plugin!r}: {e}") from e
    if os.environ.get(TRACE_ENV):
        pm.trace.root.setwriter(sys.stderr.write)
        pm.enable_tracing()
    return pm


def may_declare_entry_points(group: str) -> bool:
    """Whether an installed distribution may declare entry points of ``group``.

    pluggy reads entry points with ``importlib.metadata``, whose import alone
    (10-17 ms) costs more than the rest of the plugin manager, on every start
    of an install that has no third-party plugin at all. This looks where
    ``importlib.metadata`` looks for installed distributions, the
    ``*.dist-info`` and ``*.egg-info`` folders of each ``sys.path`` folder, for
    an ``entry_points.txt`` with a ``[group]`` section, and says True whenever
    it cannot tell: a zip or other file on the path, or an import finder of
    its own that lists distributions.
    """
    import importlib.machinery

    if any(finder is not importlib.machinery.PathFinder and hasattr(finder, "find_distributions")
           for finder in sys.meta_path):
        return True
    header = re.compile(rf"^[ \t]*\[[ \t]*{re.escape(group)}[ \t]*\][ \t]*$", re.MULTILINE)
    for entry in sys.path:
        folder = entry or "."
        try:
            with os.scandir(folder) as entries:
                found = [e.path for e in entries if e.name.lower().endswith((".dist-info", ".egg-info"))]
        except NotADirectoryError:
            return True  # a zip (or another file) that may hold distributions
        except OSError:
            continue  # missing or unreadable: importlib.metadata finds nothing there either
        for info in found:
            try:
                with open(os.path.join(info, "entry_points.txt"), encoding="utf-8", errors="replace") as fh:
                    if header.search(fh.read()):
                        return True
            except OSError:
                continue  # no entry points (or an egg-info file)
    return False


def collect(
    pm: pluggy.PluginManager,
    hook_name: str,
    key: Callable[[T], str],
    what: str,
) -> dict[str, tuple[T, str]]:
    """Call a ``register`` hook on every plugin; return name -> (item, plugin name).

    Each implementation gets its own callback so a duplicate can name both
    plugins, and is called through the plugin manager (a subset caller of
    that plugin alone), so ``LOOP_RULES_TRACE_HOOKS`` traces it like any hook,
    the callback naming the plugin.
    """
    found: dict[str, tuple[T, str]] = {}

    def add(item: T, plugin: str) -> None:
        name = key(item)
        if name in found:
            raise PluginError(f"{what} {name!r} registered twice: by plugin {found[name][1]!r} "
                              f"and by plugin {plugin!r}")
        found[name] = (item, plugin)

    impls = sorted(getattr(pm.hook, hook_name).get_hookimpls(), key=lambda i: i.plugin_name)
    for impl in impls:
        others = [other.plugin for other in impls if other is not impl]
        try:
            pm.subset_hook_caller(hook_name, remove_plugins=others)(register=_Register(impl.plugin_name, add))
        except PluginError:
            raise
        except Exception as e:
            raise PluginError(f"plugin {impl.plugin_name!r}: {hook_name} failed: {e!r}") from e
    return found


class _Register:
    """The ``register`` callback one plugin receives (its repr names the plugin in traces)."""

    __slots__ = ("plugin", "_add")

    def __init__(self, plugin: str, add: Callable[[Any, str], None]) -> None:
        self.plugin = plugin
        self._add = add

    def __call__(self, item: Any) -> None:
        self._add(item, self.plugin)

    def __repr__(self) -> str:
        return f"<register for plugin {self.plugin!r}>"


def plugin_report(pm: pluggy.PluginManager) -> list[dict[str, Any]]:
    """Every registered plugin with its hooks, for ``loop-rules plugins``."""
    dists = {id(plugin): dist for plugin, dist in pm.list_plugin_distinfo()}
    out = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        if plugin is None:
            continue
        hooks = sorted(h.name for h in (pm.get_hookcallers(plugin) or []))
        entry: dict[str, Any] = {"name": name, "hooks": hooks}
        dist = dists.get(id(plugin))
        if dist is not None:
            entry["distribution"] = dist.project_name
            entry["version"] = dist.version
        else:
            entry["builtin"] = name in BUILTIN_PLUGINS
        out.append(entry)
    return out
