"""The wheel carries both rule packs and the seed corpus: run from outside the source tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src") / "loop-rules"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "tests", "bench", ".pytest_cache"))
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(wheels), str(src)], check=True, capture_output=True, text=True)
    (wheel,) = wheels.glob("loop_rules-*.whl")
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, text=True)
    return target


def run(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site), "LOOP_RULES_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run([sys.executable, "-m", "loop_core", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)


def test_the_wheel_is_what_runs(installed: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(installed)}
    out = subprocess.run([sys.executable, "-c", "import loop_core, loop_rules.packs as p; "
                          "print(loop_core.__file__); print(p._default_pack_dir())"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout
    module, pack = out.splitlines()
    assert module.startswith(str(installed))
    assert pack.startswith(str(installed)) and pack.endswith("default")
    assert sorted(p.name for p in Path(pack).glob("*.yml")) == sorted(p.name for p in (ROOT / "rules.d").glob("*.yml"))


@pytest.mark.parametrize("args", [("test",), ("test", "--rules", "reference"),
                                  ("check", "--rules", "default"), ("check", "--rules", "reference")])
def test_commands_pass_from_an_installed_wheel(installed: Path, tmp_path: Path, args: tuple[str, ...]) -> None:
    result = run(installed, tmp_path, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (" 0 failed" in result.stdout) or ("0 problem(s)" in result.stdout)
