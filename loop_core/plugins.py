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
from .errors import PLUGIN_FAILURES, PluginError, failure_text

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


class _Manager(pluggy.PluginManager):
    """pluggy's plugin manager for the ``loop`` project; it also knows the
    distribution of each plugin :func:`make_plugin_manager` loaded from an entry point."""

    def __init__(self) -> None:
        super().__init__("loop")
        self.entry_point_dists: list[tuple[object, Any]] = []  # (plugin, importlib.metadata.Distribution)
        # Entry points not loaded because their name was taken (``plugin 'x' (module, from
        # dist)`` -> why): `loop-rules plugins` lists them, where an author looks first.
        self.skipped_entry_points: dict[str, str] = {}


def make_plugin_manager(
    *,
    builtins: Sequence[str] = BUILTIN_PLUGINS,
    entry_points: bool = True,
    plugins: Sequence[object] = (),
) -> pluggy.PluginManager:
    """A fresh plugin manager with the built-ins, ``plugins`` and (unless disabled) entry points.

    :raises PluginError: a plugin failed to import, is registered twice, or implements
        a hook that is not in the contract (or with an argument its hookspec lacks).
    """
    pm = _Manager()
    pm.add_hookspecs(hookspecs)
    for name in builtins:
        _register(pm, importlib.import_module(name), name, f"plugin {name!r}")
    for plugin in plugins:
        name = pm.get_canonical_name(plugin)
        if pm.is_registered(plugin) or pm.has_plugin(name):
            raise PluginError(f"plugin {name!r}: a name registered twice (the same plugin given again, "
                              f"or another plugin of that name)")
        _register(pm, plugin, name, f"plugin {name!r}")
    if entry_points and not os.environ.get(AUTOLOAD_ENV) and may_declare_entry_points(ENTRY_POINT_GROUP):
        _load_entry_points(pm, ENTRY_POINT_GROUP)
    _check_hook_names(pm)
    if os.environ.get(TRACE_ENV):
        pm.trace.root.setwriter(sys.stderr.write)
        pm.enable_tracing()
    return pm


def _load_entry_points(pm: _Manager, group: str) -> None:
    """Import and register every entry point of ``group``, as pluggy's
    ``load_setuptools_entrypoints`` does, naming the one that fails and why.

    They are registered in the order of their names, not in the order the
    installed distributions happen to be found in (which depends on how and
    when each was installed): for two plugins implementing a ``firstresult``
    hook with the same ``tryfirst``/``trylast`` mark, pluggy asks the one
    registered last first, and that must not change with the install order.
    """
    from importlib.metadata import entry_points

    def order(ep: Any) -> tuple[str, str, str]:
        return ep.name, str(getattr(getattr(ep, "dist", None), "name", "")), ep.value

    for ep in sorted(entry_points(group=group), key=order):
        dist = getattr(ep, "dist", None)
        where = _entry_point_text(ep, dist)
        if pm.is_blocked(ep.name):
            pm.skipped_entry_points[where] = "the name is blocked"
            continue
        if pm.has_plugin(ep.name):  # a name already taken: pluggy skips it too
            pm.skipped_entry_points[where] = ("the name of a plugin already registered; give the entry point "
                                              "a name of its own")
            continue
        try:
            plugin = ep.load()
        except PLUGIN_FAILURES as e:  # a broken third-party package must name itself
            raise PluginError(f"entry point group {group!r}: cannot load {where}: {failure_text(e)}") from e
        _register(pm, plugin, ep.name, f"entry point group {group!r}: cannot load {where}")
        if dist is not None:
            pm.entry_point_dists.append((plugin, dist))


def _entry_point_text(ep: Any, dist: Any) -> str:
    """``plugin 'name' (module, from distribution)``: how an entry point is named in errors."""
    project = getattr(dist, "name", None) if dist is not None else None
    return f"plugin {ep.name!r} ({ep.value}" + (f", from {project})" if project else ")")


def _register(pm: pluggy.PluginManager, plugin: object, name: str, who: str) -> None:
    """``pm.register(plugin, name=name)``; what keeps it from being registered is a
    one-line :class:`PluginError` starting with ``who``."""
    if pm.is_registered(plugin):
        raise PluginError(f"{who}: the same plugin is already registered, as plugin {pm.get_name(plugin)!r} "
                          "(two entry points naming one module, or a plugin also passed as plugins=[...])")
    try:
        pm.register(plugin, name=name)
    except pluggy.PluginValidationError as e:
        raise PluginError(f"{who}: {_one_line(e)}") from e
    except PLUGIN_FAILURES as e:  # an attribute of the plugin that raises when pluggy looks at it
        raise PluginError(f"{who}: {failure_text(e)}") from e


def _one_line(error: pluggy.PluginValidationError) -> str:
    """pluggy's validation message (several lines, the first naming the plugin by
    itself) as one line, e.g. ``hookimpl definition: loop_draft_issue(bundle, verdict,
    extra): Argument(s) {'extra'} are declared in the hookimpl but can not be found in
    the hookspec``."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return ": ".join(lines[1:] or lines)


def _check_hook_names(pm: pluggy.PluginManager) -> None:
    """Every ``loop_*`` function a plugin marked with ``hookimpl`` is a hook of the
    contract (pluggy's ``check_pending``, naming the plugin by its name), and every
    function named as a hook is marked: pluggy passes over an unmarked one (the
    decorator forgotten, or a marker of another project) without a word."""
    specs = [name for name, caller in vars(pm.hook).items() if not name.startswith("_") and caller.has_spec()]
    for hook_name, caller in vars(pm.hook).items():
        if hook_name.startswith("_") or caller.has_spec():
            continue
        for impl in caller.get_hookimpls():
            if not impl.optionalhook:
                import difflib

                meant = difflib.get_close_matches(hook_name, specs, n=1)
                hint = f"did you mean {meant[0]!r}?" if meant else "a misspelt loop_* function?"
                raise PluginError(f"plugin {impl.plugin_name!r}: implements {hook_name!r}, which is not a hook "
                                  f"of loop-rules ({hint})")
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        implemented = {caller.name for caller in pm.get_hookcallers(plugin) or ()}
        for hook_name in specs:
            try:
                unmarked = hook_name not in implemented and callable(getattr(plugin, hook_name, None))
            except PLUGIN_FAILURES:  # an attribute that raises when read: pluggy read past it too
                continue
            if unmarked:
                raise PluginError(f"plugin {name!r}: {hook_name} is not marked with @loop_core.hookimpl, so it "
                                  "is never called (pluggy passes over a function without the project's mark)")


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
    kind: type[T] | None = None,
    callables: Sequence[str] = (),
) -> dict[str, tuple[T, str]]:
    """Call a ``register`` hook on every plugin; return name -> (item, plugin name).

    Each implementation gets its own callback so a duplicate can name both
    plugins, and is called through the plugin manager (a subset caller of
    that plugin alone), so ``LOOP_RULES_TRACE_HOOKS`` traces it like any hook,
    the callback naming the plugin. With ``kind``, an item of another type is
    refused before ``key`` reads it; each field named in ``callables`` must be
    callable (a function, not its name or its result).
    """
    found: dict[str, tuple[T, str]] = {}

    def add(item: T, plugin: str) -> None:
        if kind is not None and not isinstance(item, kind):
            # key() would fail on it with an AttributeError that names neither what was expected nor why.
            named = getattr(item, "name", None)
            if isinstance(named, str):
                raise PluginError(f"plugin {plugin!r}: {what} {named!r} is not a {kind.__name__}")
            shown = repr(item)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise PluginError(f"plugin {plugin!r}: a {what} must be a {kind.__name__}, got "
                              f"{type(item).__name__} {shown}")
        name = key(item)
        if not isinstance(name, str):  # names are sorted, shown and looked up as text
            raise PluginError(f"plugin {plugin!r}: {what} name must be text, got {name!r}")
        for attr in callables:
            value = getattr(item, attr)
            if not callable(value):
                raise PluginError(f"plugin {plugin!r}: {what} {name!r}: {attr} must be callable, got "
                                  f"{type(value).__name__}")
        if name in found:
            raise PluginError(f"{what} {name!r} registered twice: by plugin {found[name][1]!r} "
                              f"and by plugin {plugin!r}")
        found[name] = (item, plugin)

    impls = sorted(getattr(pm.hook, hook_name).get_hookimpls(), key=lambda i: i.plugin_name)
    for impl in impls:
        others = [other.plugin for other in impls if other is not impl]
        try:
            answers = pm.subset_hook_caller(hook_name, remove_plugins=others)(register=_Register(impl.plugin_name, add))
        except PluginError:
            raise
        except PLUGIN_FAILURES as e:
            raise PluginError(f"plugin {impl.plugin_name!r}: {hook_name} failed: {e!r}") from e
        if answers:  # pluggy leaves out None: what it meant to register, returned instead
            raise PluginError(f"plugin {impl.plugin_name!r}: {hook_name} returned {type(answers[0]).__name__}; "
                              f"it must call register() once for each {what} and return None")
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
    dists = {id(plugin): dist for plugin, dist in
             [*pm.list_plugin_distinfo(), *getattr(pm, "entry_point_dists", ())]}
    out = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        if plugin is None:
            continue
        hooks = sorted(h.name for h in (pm.get_hookcallers(plugin) or []))
        entry: dict[str, Any] = {"name": name, "hooks": hooks}
        dist = dists.get(id(plugin))
        if dist is not None:
            entry["distribution"] = dist.metadata["name"]
            entry["version"] = dist.version
        else:
            entry["builtin"] = name in BUILTIN_PLUGINS
        out.append(entry)
    return out
