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


def test_a_path_given_whose_folders_hold_no_bundle_is_reported_as_one(tmp_path: Path) -> None:
    """Only an empty folder was: one of empty folders (a mistyped download folder, a
    tree not yet synced) passed as an empty corpus, "0 bundle(s)" and a clean exit."""
    top = tmp_path / "downloads"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "notes.txt").write_text("not a bundle")
    (top / "_loop").mkdir()
    assert list(discover_bundles([top])) == [top]
    # A folder that holds a bundle somewhere is searched as before, and not reported itself.
    inner = _bundle(top / "a" / "b" / "run")
    assert list(discover_bundles([top])) == [inner]


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


def test_overlapping_paths_give_each_bundle_once_where_first_found(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`classify captures captures/m/1` classified, counted and compared m/1 twice."""
    one = _bundle(tmp_path / "captures" / "m" / "1")
    two = _bundle(tmp_path / "captures" / "m" / "2")
    other = _bundle(tmp_path / "captures spare" / "m" / "1")  # a sibling whose name starts alike
    monkeypatch.chdir(tmp_path)
    assert list(discover_bundles(["captures", "captures/m/1"])) == [Path("captures/m/1"), Path("captures/m/2")]
    assert list(discover_bundles(["captures/m/2", "./captures", str(one)])) == [
        Path("captures/m/2"), Path("captures/m/1")]
    assert list(discover_bundles(["captures", "captures"])) == [Path("captures/m/1"), Path("captures/m/2")]
    assert list(discover_bundles(["captures/m/1", "captures spare"])) == [Path("captures/m/1"), Path("captures spare/m/1")]
    assert list(discover_bundles(["captures/m/1", "captures spare", "captures"])) == [
        Path("captures/m/1"), Path("captures spare/m/1"), Path("captures/m/2")]
    # Paths that do not overlap are walked as they come, with nothing to remember.
    assert list(discover_bundles([one, two, other])) == [one, two, other]


def test_symbolic_links_to_folders_are_followed_once(tmp_path: Path) -> None:
    top = tmp_path / "captures"
    own = _bundle(top / "real" / "1")
    elsewhere = tmp_path / "elsewhere"
    _bundle(elsewhere / "model" / "1")
    _bundle(elsewhere / "model" / "2")
    solo = _bundle(tmp_path / "solo" / "1")
    (top / "real" / "2").symlink_to(solo)  # a linked bundle
    (top / "linked").symlink_to(elsewhere)  # a linked folder of bundles
    (top / "again").symlink_to(elsewhere / "model")  # inside what "linked" already searched
    (top / "real" / "up").symlink_to(top)  # a cycle
    (top / "side").symlink_to(top / "real")  # back into the tree
    (top / "_spool").symlink_to(elsewhere)  # skipped by name, like any spool
    found = list(discover_bundle_paths([top]))
    # "again" comes first in sorted order; "linked" then leads to nothing new.
    assert found == [str(top / "again" / "1"), str(top / "again" / "2"), str(own), str(top / "real" / "2")]


def test_a_link_to_a_sibling_whose_name_starts_alike_is_followed(tmp_path: Path) -> None:
    """captures-old is not inside captures, though its path begins with it."""
    top = tmp_path / "captures"
    own = _bundle(top / "a" / "1")
    _bundle(tmp_path / "captures-old" / "m" / "1")
    (top / "old").symlink_to(tmp_path / "captures-old")
    assert list(discover_bundle_paths([top])) == [str(own), str(top / "old" / "m" / "1")]


def test_a_cycle_of_links_outside_the_tree_ends(tmp_path: Path) -> None:
    top = tmp_path / "captures"
    _bundle(top / "a" / "1")
    outside = tmp_path / "outside"
    outside.mkdir()
    (top / "out").symlink_to(outside)
    (outside / "back").symlink_to(outside)
    (outside / "loop").symlink_to(top / "out")
    assert list(discover_bundle_paths([top])) == [str(top / "a" / "1")]


def test_a_folder_that_cannot_be_listed_is_reported_for_the_reader_to_name(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Skipped, its bundles would vanish from the run without a word."""
    first = _bundle(tmp_path / "a-model" / "1")
    locked = tmp_path / "b-model"
    _bundle(locked / "1")
    real_scandir = os.scandir

    def refuse(path: str) -> object:
        if path == str(locked):
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", refuse)
    assert list(discover_bundles([tmp_path])) == [first, locked]
