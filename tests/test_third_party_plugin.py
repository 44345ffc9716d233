"""A real installable third-party package plugs in through the entry-point group."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loop_core.testing import make_bundle, write_bundle

PLUGIN_SRC = Path(__file__).parent / "fixtures" / "example_plugin"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    source = tmp_path_factory.mktemp("src") / "example_plugin"
    shutil.copytree(PLUGIN_SRC, source)  # pip builds in-tree; keep the repository clean
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(source)],
        check=True, capture_output=True, text=True,
    )
    assert list(target.glob("loop_example_plugin-*.dist-info"))
    return target


def run(site: Path, *args: str, autoload: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("LOOP_RULES_DISABLE_PLUGIN_AUTOLOAD", None)
    if not autoload:
        env["LOOP_RULES_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.run([sys.executable, "-m", "loop_core", *args], env=env, capture_output=True, text=True)


def test_plugins_lists_the_third_party_plugin(site: Path) -> None:
    report = json.loads(run(site, "plugins").stdout)
    plugin = next(p for p in report["plugins"] if p["name"] == "example")
    assert (plugin["distribution"], plugin["version"]) == ("loop-example-plugin", "0.1.0")
    assert "builtin" not in plugin
    assert plugin["hooks"] == ["loop_register_conditions", "loop_register_matchers", "loop_register_rule_packs",
                               "loop_register_trackers"]
    assert {"name": "min_gpu_count", "plugin": "example"} in report["condition_kinds"]
    assert [m["name"] for m in report["matchers"]][:2] == ["tier1-oom-fastpath", "example-hip-no-binary"]
    assert report["trackers"][0] == {"name": "example-spool", "plugin": "example", "takes_repo": False,
                                     "description": "the offline spool, under the example's name"}
    assert [t["plugin"] for t in report["trackers"][1:]] == ["loop_rules.trackers"] * 3


def test_the_tracker_files_and_refuses_a_repo(site: Path, tmp_path: Path) -> None:
    captures = tmp_path / "captures"
    write_bundle(captures / "b", make_bundle("torch.cuda.OutOfMemoryError: CUDA out of memory"))
    filed = run(site, "run", str(captures), "--tracker", "example-spool", "--format", "json")
    assert filed.returncode == 0, filed.stderr
    assert len(list((captures / "_dedup-queue").glob("*.json"))) == 1
    refused = run(site, "run", str(captures), "--tracker", "example-spool", "--repo", "acme/rig")
    assert refused.returncode == 2
    assert "the example-spool tracker files locally and takes no repository" in refused.stderr


def test_tier1_matcher_decides(site: Path, tmp_path: Path) -> None:
    target = write_bundle(tmp_path / "b", make_bundle("RuntimeError: HIP error: hipErrorNoBinaryForGpu: Unable to find code object"))
    row = json.loads(run(site, "classify", "--format", "jsonl", str(target)).stdout)
    assert (row["failure_class"], row["tier"], row["matched_rule"]) == ("kernel-unsupported", "tier1", "example-hip-no-binary")


def test_condition_kind_works_from_yaml(site: Path, tmp_path: Path) -> None:
    two = write_bundle(tmp_path / "two", make_bundle({"manifest": {"topology_class": "2x24576MiB"},
                                                      "pt3": {"failure_log_excerpt": "RuntimeError: NCCL error"}}))
    one = write_bundle(tmp_path / "one", make_bundle({"pt3": {"failure_log_excerpt": "RuntimeError: NCCL error"}}))
    out = run(site, "classify", "--format", "jsonl", "--rules", "example", str(two), str(one)).stdout
    rows = {Path(r["bundle"]).name: r for r in map(json.loads, out.splitlines())}
    assert rows["two"]["matched_rule"] == "example-multi-gpu-nccl"
    assert rows["one"]["matched_rule"] is None
    assert run(site, "check", "--rules", "example").returncode == 0


def test_autoload_env_var_turns_it_off(site: Path, tmp_path: Path) -> None:
    report = json.loads(run(site, "plugins", autoload=False).stdout)
    assert "example" not in {p["name"] for p in report["plugins"]}
    assert "example-spool" not in {t["name"] for t in report["trackers"]}
    target = write_bundle(tmp_path / "b", make_bundle("RuntimeError: HIP error: hipErrorNoBinaryForGpu"))
    row = json.loads(run(site, "classify", "--format", "jsonl", str(target), autoload=False).stdout)
    assert row["matched_rule"] != "example-hip-no-binary"
    failed = run(site, "classify", "--rules", "example", str(target), autoload=False)
    assert failed.returncode == 2
    assert "Error: --rules 'example': neither a registered pack (default, reference) nor a directory" in failed.stderr
    assert "Traceback" not in failed.stderr
