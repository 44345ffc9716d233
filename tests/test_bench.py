"""Smoke test of the benchmark corpus generator (bench/generate.py). No timings."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from loop_core import Engine, make_plugin_manager, read_bundle
from loop_core.bundle import MANIFEST_KEYS_V1
from loop_core.keys import submission_fingerprint

GENERATE = Path(__file__).resolve().parent.parent / "bench" / "generate.py"
REQUIRED_CLASSES = {
    "genuine-oom",
    "quant-unsupported",
    "overlay-arch-drift",
    "kernel-unsupported",
    "benign-cold-start",
    "unknown",
}


@pytest.fixture(scope="module")
def generator() -> Iterator[ModuleType]:
    name = "loop_bench_generate"
    spec = importlib.util.spec_from_file_location(name, GENERATE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module while the class is built
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)


def test_generated_bundles_read_and_span_every_class(generator: ModuleType, tmp_path: Path) -> None:
    paths = generator.generate(tmp_path, 12, seed=0)
    assert len(paths) == 12
    assert all(p.parent.parent == tmp_path for p in paths), "layout is <out>/<slug>/<utc_ts>/"

    engine = Engine.build("reference", make_plugin_manager(entry_points=False))
    classes = set()
    for path in paths:
        bundle = read_bundle(path)
        if bundle.schema == 1:
            assert set(bundle.manifest) == MANIFEST_KEYS_V1
            assert bundle.manifest["submission_fingerprint"] == submission_fingerprint(
                bundle.manifest
            )
            assert path.name == bundle.manifest["utc_ts"]
        classes.add(engine.classify(bundle).failure_class.value)
    assert REQUIRED_CLASSES <= classes


def test_files_are_written_like_the_producer(generator: ModuleType, tmp_path: Path) -> None:
    first = generator.generate(tmp_path / "a", 3, seed=7)
    again = generator.generate(tmp_path / "b", 3, seed=7)
    for a, b in zip(first, again, strict=True):
        assert a.relative_to(tmp_path / "a") == b.relative_to(tmp_path / "b")
        for f in sorted(a.iterdir()):
            text = f.read_text(encoding="utf-8")
            doc = json.loads(text)
            assert text == json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
            assert (b / f.name).read_text(encoding="utf-8") == text, "deterministic for a seed"
