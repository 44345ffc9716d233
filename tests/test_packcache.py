"""The pack cache: a second start restores the regex analysis instead of redoing it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import regex

from loop_core import Engine, fastregex, make_plugin_manager
from loop_core.evaluate import case_bundle, load_cases
from loop_core.packcache import FORMAT

from .conftest import RULES_D

HERE = Path(__file__).parent
EXAMPLES = HERE.parent / "examples" / "pull-captures"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("LOOP_RULES_CACHE_DIR", str(root))
    monkeypatch.delenv("LOOP_RULES_CACHE", raising=False)
    return root


@pytest.fixture
def pack(tmp_path: Path) -> Path:
    return Path(shutil.copytree(RULES_D, tmp_path / "rules.d"))


def _build(pack: Path) -> Engine:
    return Engine.build(pack, make_plugin_manager(entry_points=False))


def _verdicts(engine: Engine) -> list[tuple[str, str | None]]:
    out = []
    for case in load_cases(HERE / "corpus"):
        v = engine.classify(case_bundle(case))
        out.append((v.failure_class.value, v.matched_rule))
    return out


def _compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = regex.compile

    def counting(pattern, flags=0, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(pattern)
        return real(pattern, flags, *args, **kwargs)

    monkeypatch.setattr(regex, "compile", counting)
    return seen


def test_a_second_start_compiles_nothing_up_front_and_decides_the_same(
        cache: Path, pack: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cold = _build(pack)
    (written,) = (cache / "packs").glob("*.json")
    compiles = _compiles(monkeypatch)
    warm = _build(pack)
    assert compiles == []  # every pattern restored, to be compiled when first searched
    assert _verdicts(warm) == _verdicts(cold)
    assert list((cache / "packs").glob("*.json")) == [written]



def test_a_second_start_rebuilds_patterns_from_their_code_without_compiling(
        cache: Path, pack: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cold = _verdicts(_build(pack))
    warm = _build(pack)
    compiles = _compiles(monkeypatch)
    assert _verdicts(warm) == cold
    # Searching the corpus needs many patterns; each comes back from its kept code.
    # The empty pattern is the one compile: it names the call that rebuilds the others.
    assert set(compiles) <= {""}


@pytest.mark.parametrize("damage", ["checksum", "code", "pattern"])
def test_damaged_compiled_code_is_compiled_again(cache: Path, pack: Path, monkeypatch: pytest.MonkeyPatch,
                                                 damage: str) -> None:
    expected = _verdicts(_build(pack))
    (path,) = (cache / "packs").glob("*.json")
    doc = json.loads(path.read_text(encoding="utf-8"))

    def spoil(entry: dict[str, Any]) -> None:
        frozen = entry["code"]
        if damage == "checksum":
            frozen["sum"] = "00000000"
        elif damage == "code":  # a plausible but wrong structure, checksum made to fit
            frozen["args"] = {"tuple": [1, 2, 3]}
            frozen["sum"] = fastregex._checksum(frozen["args"])
        else:  # code that rebuilds some other pattern
            frozen["args"]["tuple"][0] = "something else"
            frozen["sum"] = fastregex._checksum(frozen["args"])
        for _piece, sub in entry["branches"]:
            spoil(sub)

    for entry in doc["regexes"].values():
        spoil(entry)
    path.write_text(json.dumps(doc), encoding="utf-8")
    compiles = _compiles(monkeypatch)
    assert _verdicts(_build(pack)) == expected
    assert len(set(compiles) - {""}) > 10  # the patterns searched were compiled from source


def test_what_a_run_learnt_seeds_the_next_starts_scanner(cache: Path, pack: Path) -> None:
    from loop_core import litscan
    from loop_core.batch import classify_rows

    if not litscan.available():
        pytest.skip("ahocorasick_rs is not installed")
    litscan.use_scanner(True)  # a fresh process's scanner
    try:
        engine = _build(pack)
        rows = list(classify_rows([EXAMPLES], engine))
        learnt = litscan.scanner().learnt()  # type: ignore[union-attr]
        (path,) = (cache / "packs").glob("*.json")
        assert set(json.loads(path.read_text(encoding="utf-8"))["literals"]) == learnt and learnt
        written = path.stat().st_ino  # each write makes a new file and renames it into place
        litscan.use_scanner(True)
        again = _build(pack)
        assert litscan.scanner().learnt() == learnt  # type: ignore[union-attr]  # before any bundle
        assert list(classify_rows([EXAMPLES], again)) == rows
        assert path.stat().st_ino == written  # nothing new learnt: not written again
    finally:
        litscan.use_scanner(None)


def test_the_literals_a_contains_looks_up_are_kept(cache: Path, pack: Path) -> None:
    # A case-insensitive `contains` beside a regex is not what the rule index keys the
    # rule on, yet it asks the text's index for its literals: a start must seed them
    # too, or every run teaches them to its scanner again (a rebuild each time).
    from loop_core import litscan
    from loop_core.testing import make_bundle

    if not litscan.available():
        pytest.skip("ahocorasick_rs is not installed")
    (pack / "05-widget.yml").write_text(
        "rules:\n  - id: widget-broke\n    class: kernel-unsupported\n    description: d\n"
        "    when:\n      all:\n"
        "        - {select: $.signal.all_text, ignore_case: true, contains: [Zorblax Widget, Quuxo Widget, Flim, Flam]}\n"
        "        - {select: $.signal.all_text, regex: '(?i)widget failed'}\n"
        "    examples: {match: ['ZORBLAX WIDGET failed'], no_match: ['zorblax widget ok']}\n", encoding="utf-8")
    litscan.use_scanner(True)
    try:
        engine = _build(pack)
        for text in ("Quuxo widget failed", "ZORBLAX WIDGET failed", "a widget failed"):
            engine.classify(make_bundle(f"RuntimeError: {text}"))
        assert engine.classify(make_bundle("RuntimeError: Zorblax Widget failed")).matched_rule == "widget-broke"
        assert engine.classify(make_bundle("RuntimeError: a widget failed")).matched_rule != "widget-broke"
        engine.pack.remember_literals()
        (path,) = (cache / "packs").glob("*.json")
        kept = set(json.loads(path.read_text(encoding="utf-8"))["literals"])
        assert {"zorblax widget", "quuxo widget"} <= kept
    finally:
        litscan.use_scanner(None)


def test_another_packs_literals_are_not_kept(cache: Path, pack: Path, tmp_path: Path) -> None:
    from loop_core import litscan
    from loop_core.batch import classify_rows
    from loop_core.testing import make_bundle

    if not litscan.available():
        pytest.skip("ahocorasick_rs is not installed")
    other = Path(shutil.copytree(pack, tmp_path / "other.d"))
    (other / "05-new.yml").write_text(
        "rules:\n  - id: brand-new\n    class: kernel-unsupported\n    description: d\n"
        "    when: {select: $.signal.all_text, regex: '(?i)frobnicator kernel missing'}\n"
        "    examples: {match: ['Frobnicator kernel missing'], no_match: ['frobnicator ok']}\n", encoding="utf-8")
    litscan.use_scanner(True)
    try:
        mine, theirs = _build(pack), _build(other)
        for _ in range(3):  # the scanner learns the phrase from the other pack's searches
            assert theirs.classify(make_bundle("RuntimeError: Frobnicator kernel missing")).matched_rule == "brand-new"
        list(classify_rows([EXAMPLES], mine))
        assert "frobnicator kernel missing" in litscan.scanner().learnt()  # type: ignore[union-attr]
        kept = {}
        for path in (cache / "packs").glob("*.json"):
            kept[path] = set(json.loads(path.read_text(encoding="utf-8")).get("literals", []))
        mine_kept = [k for k in kept.values() if k]
        assert len(mine_kept) == 1 and "frobnicator kernel missing" not in mine_kept[0]
    finally:
        litscan.use_scanner(None)


def test_damaged_literals_are_ignored(cache: Path, pack: Path) -> None:
    from loop_core import litscan

    expected = _verdicts(_build(pack))
    (path,) = (cache / "packs").glob("*.json")
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["literals"] = ["fine", 7]
    path.write_text(json.dumps(doc), encoding="utf-8")
    litscan.use_scanner(True)
    try:
        engine = _build(pack)
        found = litscan.scanner()
        assert found is None or "fine" not in found.learnt()
        assert _verdicts(engine) == expected
    finally:
        litscan.use_scanner(None)


def test_a_second_start_parses_no_yaml(cache: Path, pack: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import rules

    cold = _build(pack)
    (written,) = (cache / "packs").glob("*.json")
    assert set(json.loads(written.read_text(encoding="utf-8"))["documents"]) == {p.name for p in pack.glob("*.yml")}

    def no_yaml(text: str, name: str = "") -> None:
        raise AssertionError(f"parsed {name} again")

    monkeypatch.setattr(rules, "load_yaml_text", no_yaml)
    warm = _build(pack)
    assert warm.pack.settings == cold.pack.settings and warm.pack.exact == cold.pack.exact
    def described(engine: Engine) -> list[tuple[object, ...]]:
        return [(r.id, r.failure_class, r.description, r.match_examples, r.no_match_examples, r.source, r.mode)
                for r in engine.pack.rules]

    assert described(warm) == described(cold)
    assert _verdicts(warm) == _verdicts(cold)


def test_a_cached_start_does_not_import_yaml(cache: Path, pack: Path) -> None:
    script = ("import sys\nfrom loop_core import Engine, make_plugin_manager\n"
              f"Engine.build({str(pack)!r}, make_plugin_manager(entry_points=False))\n"
              "print('yaml' in sys.modules)\n")
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                           env={**os.environ, "LOOP_RULES_CACHE_DIR": str(cache)}).stdout.strip()
            for _ in range(2)]
    assert runs == ["True", "False"]  # the first start parses the pack, the second does not


def test_only_files_json_gives_back_unchanged_are_kept() -> None:
    import datetime

    from loop_core.packcache import PackCache

    for odd in ({"reviewed": datetime.date(2026, 8, 1)}, {1: "a number as a key"}, {"tags": {"a", "b"}}):
        cache = PackCache()
        cache.remember({"10-a.yml": {"rules": []}, "20-b.yml": odd})
        assert cache.documents is None and not cache.dirty  # parsed again at every start
    cache = PackCache()
    plain = {"rules": [{"id": "x", "n": 1.5, "k": 3, "on": True, "off": None, "when": {"any": []}}]}
    cache.remember({"10-a.yml": plain})
    assert cache.documents == {"10-a.yml": plain} and cache.dirty
    assert json.loads(json.dumps(cache.documents)) == cache.documents


@pytest.mark.parametrize("damage", [
    "not json at all",
    json.dumps({"format": FORMAT, "regexes": {"0:x": {"literals": 7}}}),
    json.dumps({"format": FORMAT, "regexes": {}, "documents": {"10-benign.yml": {"rules": "not a list"}}}),
    json.dumps({"format": FORMAT}),
    json.dumps({"format": FORMAT, "regexes": ["0:x"]}),
    json.dumps({"format": FORMAT, "regexes": {}, "documents": ["10-benign.yml"]}),
    json.dumps({"format": 1, "regexes": {}}),
    json.dumps({"format": 99, "regexes": {}}),
    json.dumps([1, 2, 3]),
    "[" * 100_000,  # nested past what json reads
])
def test_a_damaged_cache_is_ignored_and_replaced(cache: Path, pack: Path, damage: str) -> None:
    expected = _verdicts(_build(pack))
    (path,) = (cache / "packs").glob("*.json")
    path.write_text(damage, encoding="utf-8")
    assert _verdicts(_build(pack)) == expected
    assert json.loads(path.read_text(encoding="utf-8"))["format"] == FORMAT


def test_a_cache_file_of_another_format_is_not_believed(cache: Path, pack: Path) -> None:
    """Written by other code, its parsed files may not be what this code would parse."""
    from loop_core.rules import PACK_FILE

    expected = _verdicts(_build(pack))
    (path,) = (cache / "packs").glob("*.json")
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["format"] = FORMAT + 1
    doc["documents"] = {name: value if name == PACK_FILE else [] for name, value in doc["documents"].items()}
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert _verdicts(_build(pack)) == expected


def test_a_damaged_entry_is_analysed_again(cache: Path, pack: Path) -> None:
    expected = _verdicts(_build(pack))
    (path,) = (cache / "packs").glob("*.json")
    doc = json.loads(path.read_text(encoding="utf-8"))
    for entry in doc["regexes"].values():
        entry["anchors"] = "broken"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert _verdicts(_build(pack)) == expected


def test_an_edited_pack_gets_a_cache_of_its_own(cache: Path, pack: Path) -> None:
    _build(pack)
    (pack / "05-new.yml").write_text(
        "rules:\n  - id: brand-new\n    class: kernel-unsupported\n    description: d\n"
        "    when: {select: $.signal.all_text, regex: '(?i)frobnicator kernel missing'}\n"
        "    examples: {match: ['Frobnicator kernel missing'], no_match: ['frobnicator ok']}\n", encoding="utf-8")
    engine = _build(pack)
    assert len(list((cache / "packs").glob("*.json"))) == 2
    assert engine.classify(case_bundle(load_cases(HERE / "corpus")[0])) is not None
    from loop_core.testing import make_bundle

    assert engine.classify(make_bundle("RuntimeError: Frobnicator kernel missing")).matched_rule == "brand-new"


def test_the_cache_keeps_the_packs_used_last(cache: Path, pack: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every edit of a pack (every `learn`) is a new content and a new file of some
    400 KB: the folder used to grow without end."""
    import time

    from loop_core import packcache

    monkeypatch.setattr(packcache, "CACHED_PACKS", 3)

    def files() -> set[str]:
        return {p.name for p in (cache / "packs").glob("*.json")}

    _build(pack)
    (first,) = files()
    for i in range(2):
        time.sleep(0.05)  # file times tick coarsely
        (pack / "exact.yml").write_text(f"exact:\n  '{i:012x}': unknown\n")
        _build(pack)
    time.sleep(0.05)
    (pack / "exact.yml").unlink()
    _build(pack)  # the first content again: its file is used, so kept
    time.sleep(0.05)
    (pack / "exact.yml").write_text("exact:\n  'ffffffffffff': unknown\n")
    _build(pack)
    assert len(files()) == 3 and first in files()


def test_an_invalid_pack_writes_no_cache(cache: Path, pack: Path) -> None:
    from loop_core import RuleError

    (pack / "05-bad.yml").write_text(
        "rules:\n  - id: bad\n    class: unknown\n    description: d\n"
        "    when: {select: $.signal.all_text, regex: '(unclosed'}\n"
        "    examples: {match: [x], no_match: [y]}\n", encoding="utf-8")
    with pytest.raises(RuleError, match="invalid regex"):
        _build(pack)
    assert not (cache / "packs").exists()


@pytest.mark.parametrize("value", ["off", "0", "No", "FALSE"])
def test_the_cache_can_be_turned_off(cache: Path, pack: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("LOOP_RULES_CACHE", value)
    _build(pack)
    assert not cache.exists()


@pytest.mark.parametrize("value", ["", "on", "1", "offline"])
def test_other_values_leave_the_cache_on(cache: Path, pack: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("LOOP_RULES_CACHE", value)
    _build(pack)
    assert list((cache / "packs").iterdir())


@pytest.mark.parametrize("xdg", [True, False])
def test_without_loop_rules_cache_dir_the_cache_goes_where_xdg_or_home_says(
        tmp_path: Path, pack: Path, monkeypatch: pytest.MonkeyPatch, xdg: bool) -> None:
    monkeypatch.delenv("LOOP_RULES_CACHE_DIR")
    monkeypatch.delenv("LOOP_RULES_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if xdg:
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    else:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    _build(pack)
    expected = tmp_path / "xdg" if xdg else tmp_path / "home" / ".cache"
    assert list((expected / "loop-rules" / "packs").glob("*.json"))


def test_pruning_removes_only_older_cache_files(tmp_path: Path) -> None:
    """A write in progress (a dot file), a file of another kind and the file just
    written stay, however old their times say they are."""
    from loop_core import packcache

    names = ["old-1.json", "old-2.json", "kept.json", ".tmp-writing.json", "notes.txt", "just-written.json"]
    for age, name in enumerate(reversed(names)):
        (tmp_path / name).write_text("{}")
        os.utime(tmp_path / name, (1_000_000 - age, 1_000_000 - age))  # old-1 is the oldest
    packcache.prune(tmp_path / "just-written.json", 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[2:])


def test_a_cache_file_that_cannot_be_replaced_leaves_no_temp_file(tmp_path: Path) -> None:
    from loop_core import packcache

    (tmp_path / "taken.json").mkdir()  # a directory where the file would go
    with pytest.raises(OSError):
        packcache.write_cache_file(tmp_path / "taken.json", b"{}")
    assert [p.name for p in tmp_path.iterdir()] == ["taken.json"]


def test_an_unwritable_cache_directory_only_costs_speed(tmp_path: Path, pack: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("LOOP_RULES_CACHE_DIR", str(blocker / "cache"))
    assert _verdicts(_build(pack))  # loads and classifies; nothing written


def test_with_and_without_the_literal_scanner_the_analyses_are_kept_apart(cache: Path, pack: Path,
                                                                           lookup: str) -> None:
    # With the scanner the analysis looks for more (rarer) literals than without:
    # each mode restores its own, and both classify alike.
    from loop_core import litscan

    scanning = lookup != "find"
    first = _verdicts(_build(pack))
    litscan.use_scanner(not scanning)
    try:
        second = _verdicts(_build(pack))
    finally:
        litscan.use_scanner(scanning)
    assert len(list((cache / "packs").glob("*.json"))) == 2
    assert first == second
    assert _verdicts(_build(pack)) == first  # restored from the first mode's file
    assert len(list((cache / "packs").glob("*.json"))) == 2


def test_a_fifo_in_place_of_the_cache_file_does_not_block_a_start(cache: Path, pack: Path) -> None:
    import os
    import subprocess
    import sys

    _build(pack)
    (path,) = (cache / "packs").glob("*.json")
    path.unlink()
    os.mkfifo(path)
    # In a process of its own: a blocked read would otherwise hang the test run.
    done = subprocess.run([sys.executable, "-m", "loop_core", "check", "--rules", str(pack)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr



def test_a_prune_that_fails_does_not_make_the_written_cache_look_unwritten(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import packcache

    def refuse(path: Path, keep: int) -> None:
        raise PermissionError("read-only neighbour")

    monkeypatch.setattr(packcache, "prune", refuse)
    written = packcache.PackCache()
    written.dirty = True
    path = packcache.save(written, "0" * 64)
    assert path is not None and path.is_file()


def test_a_pack_holding_a_nan_is_still_read_from_the_cache(cache: Path, pack: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # json.dumps writes a YAML .nan as NaN, which orjson refuses: json reads the file then,
    # rather than the pack being parsed and analysed again at every start.
    from loop_core import rules

    (pack / "90-nan.yml").write_text(
        "- id: nan-example\n  class: unknown\n  description: d\n"
        "  when: {select: $.signal.error_text, contains: frobnicator}\n"
        "  examples: {match: [{pt3: {failure: frobnicator broke, ratio: .nan}}]}\n")
    cold = _build(pack)
    (written,) = (cache / "packs").glob("*.json")
    assert "NaN" in written.read_text(encoding="utf-8")

    def no_yaml(text: str, name: str = "") -> None:
        raise AssertionError(f"parsed {name} again")

    monkeypatch.setattr(rules, "load_yaml_text", no_yaml)
    warm = _build(pack)
    assert [r.id for r in warm.pack.rules] == [r.id for r in cold.pack.rules]
