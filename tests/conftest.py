from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pluggy
import pytest
from hypothesis import settings

from loop_core import Bundle, Engine, litscan, make_plugin_manager
from loop_core.testing import make_bundle, write_bundle

ROOT = Path(__file__).resolve().parent.parent
RULES_D = ROOT / "rules.d"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


# Property tests explore new examples on every local run. Under CI (`.ci/run` sets
# LOOP_RULES_HYPOTHESIS_PROFILE=ci) they draw the same ones every time, so a red CI
# on a clean clone always reproduces; a failure prints the example to replay.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("LOOP_RULES_HYPOTHESIS_PROFILE", "default"))


_OWN_CACHE_DIR: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    # Pack caches of this run go to a directory of their own, never the user's
    # ~/.cache (set in the environment, so CLI subprocesses see it too).
    global _OWN_CACHE_DIR
    if "LOOP_RULES_CACHE_DIR" not in os.environ:
        _OWN_CACHE_DIR = tempfile.mkdtemp(prefix="loop-rules-test-cache-")
        os.environ["LOOP_RULES_CACHE_DIR"] = _OWN_CACHE_DIR


def pytest_unconfigure(config: pytest.Config) -> None:
    # ... and it goes when the run ends, so test runs do not pile up in the temp folder.
    if _OWN_CACHE_DIR is not None:
        shutil.rmtree(_OWN_CACHE_DIR, ignore_errors=True)
        del os.environ["LOOP_RULES_CACHE_DIR"]


def corpus_bundles() -> list[Bundle]:
    """Every labelled corpus case as a bundle, then every readable conformance bundle."""
    from loop_core import read_bundle
    from loop_core.evaluate import case_bundle, load_cases

    here = Path(__file__).resolve().parent
    bundles = [case_bundle(c) for c in load_cases(here / "corpus")]
    for path in sorted((here / "conformance" / "bundles").iterdir()):
        try:
            bundles.append(read_bundle(path))
        except Exception:  # noqa: BLE001 - malformed on purpose; the reader's tests cover them
            continue
    return bundles


@pytest.fixture(params=["scanner", "long run", "find"])
def lookup(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test with the compiled literal scanner as a run starts, as it is in a long
    run (Hyperscan, when installed, reading texts as they are), and with ``str.find``
    lookups only (:mod:`loop_core.litscan`): all must give the same answers."""
    if request.param != "find" and not litscan.available():
        pytest.skip("ahocorasick_rs is not installed (pip install '.[test]' brings it)")
    if request.param == "long run":
        request.getfixturevalue("monkeypatch").setattr(litscan, "DFA_AFTER", 0)
    litscan.use_scanner(request.param != "find")
    yield request.param
    litscan.use_scanner(None)


@pytest.fixture
def pm() -> pluggy.PluginManager:
    """Built-in plugins only: no entry points, so installed third-party plugins never leak in."""
    return make_plugin_manager(entry_points=False)


@pytest.fixture
def engine(pm: pluggy.PluginManager) -> Engine:
    return Engine.build("default", pm)


@pytest.fixture
def reference_engine(pm: pluggy.PluginManager) -> Engine:
    return Engine.build("reference", pm)


@pytest.fixture
def bundle_dir(tmp_path: Path) -> Iterator[Any]:
    """Write a bundle to a fresh directory: ``bundle_dir(overrides)`` -> Path."""
    counter = iter(range(10_000))

    def write(overrides: dict[str, Any] | str | None = None, *, name: str | None = None) -> Path:
        bundle: Bundle = make_bundle(overrides)
        return write_bundle(tmp_path / (name or f"bundle-{next(counter)}"), bundle)

    yield write


@pytest.fixture
def register_plugin(pm: pluggy.PluginManager) -> Iterator[Any]:
    """Register plugin objects on ``pm`` for one test; always unregister them."""
    names: list[str] = []

    def register(plugin: object, name: str) -> object:
        pm.register(plugin, name=name)
        names.append(name)
        return plugin

    try:
        yield register
    finally:
        for name in reversed(names):
            if pm.has_plugin(name):
                pm.unregister(name=name)


@pytest.fixture
def cli_uses_pm(pm: pluggy.PluginManager, monkeypatch: pytest.MonkeyPatch) -> pluggy.PluginManager:
    """Make every plugin manager the CLI builds in this process be ``pm`` (undone afterwards)."""
    import sys

    from loop_core import plugins

    original = plugins.make_plugin_manager
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("loop_core") and \
                getattr(module, "make_plugin_manager", None) is original:
            monkeypatch.setattr(module, "make_plugin_manager", lambda **_kw: pm)
    return pm
