"""discover_bundles: which directories are bundles, and in what order they come."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loop_core.batch import discover_bundle_paths, discover_bundles


def _bundle(path: Path, name: str = "manifest.json") -> Path:
    path.mkdir(parents=True)
    (path / name).write_text("{}")
    return path


def test_bundles_come_sorted_depth_first_and_spools_are_skipped(tmp_path: Path) -> None:
    b2 = _bundle(tmp_path / "b-model" / "20260102T000000Z")
    a1 = _bundle(tmp_path / "a-model" / "20260101T000000Z", "pt1-gate.json")
    b1 = _bundle(tmp_path / "b-model" / "20260101T000000Z")
    nested = _bundle(tmp_path / "a-model" / "sub" / "deeper" / "run")
    _bundle(tmp_path / "_review-queue" / "x")  # a spool folder
    _bundle(tmp_path / ".hidden" / "x")
    (tmp_path / "empty" / "dir").mkdir(parents=True)  # holds no bundle: never reported
    (tmp_path / "loose.json").write_text("{}")  # a file, not a folder

    assert list(discover_bundles([tmp_path])) == [a1, nested, b1, b2]


def test_a_bundle_is_not_searched_below(tmp_path: Path) -> None:
    top = _bundle(tmp_path / "run")
    _bundle(top / "inner")
    assert list(discover_bundles([tmp_path])) == [top]


def test_a_path_given_that_is_no_bundle_is_reported_as_one(tmp_path: Path) -> None:
    (tmp_path / "nothing").mkdir()
    missing = tmp_path / "missing"
    assert list(discover_bundles([tmp_path / "nothing", missing])) == [tmp_path / "nothing", missing]


def test_the_string_paths_are_what_the_path_objects_show(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _bundle(tmp_path / "a-model" / "20260101T000000Z")
    _bundle(tmp_path / "b-model" / "x" / "20260101T000000Z")
    monkeypatch.chdir(tmp_path)
    for given in (".", "./", "a-model/", "./b-model//x", str(tmp_path) + "/", "missing/"):
        paths = list(discover_bundle_paths([given]))
        assert paths == [str(p) for p in discover_bundles([given])]
        assert all(isinstance(p, str) for p in paths)
    assert list(discover_bundle_paths(["."])) == [os.path.join("a-model", "20260101T000000Z"),
                                                  os.path.join("b-model", "x", "20260101T000000Z")]
    assert list(discover_bundle_paths(["a-model/"])) == [os.path.join("a-model", "20260101T000000Z")]
