"""The literal scanner answers exactly what ``str.find`` answers, in one pass."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loop_core import Engine, litscan, make_plugin_manager
from loop_core.fastregex import TextIndex

from .conftest import RULES_D, corpus_bundles

HERE = Path(__file__).parent

pytestmark = pytest.mark.skipif(not litscan.available(), reason="ahocorasick_rs is not installed")


@pytest.fixture
def fresh() -> Iterator[litscan.LiteralScanner]:
    """A scanner of its own for the test, and the process's usual one afterwards."""
    litscan.use_scanner(True)
    made = litscan.scanner()
    assert made is not None
    yield made
    litscan.use_scanner(None)


HYPERSCAN = importlib.util.find_spec("hyperscan") is not None
STAGES = ["early", "long run, ahocorasick_rs"] + (["long run, hyperscan"] if HYPERSCAN else [])


@pytest.fixture(params=STAGES)
def staged(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[litscan.LiteralScanner]:
    """A fresh scanner at each stage of a run: the early automata, and a long run's
    (every build one for a long run: the Aho-Corasick DFA, or Hyperscan's first matches)."""
    if request.param != "early":
        monkeypatch.setattr(litscan, "DFA_AFTER", 0)
    if request.param == "long run, ahocorasick_rs":
        monkeypatch.setenv(litscan.ENV, "ahocorasick")
    litscan.use_scanner(True)
    made = litscan.scanner()
    assert made is not None
    yield made
    litscan.use_scanner(None)


def _all_starts(text: str, literal: str) -> list[int]:
    out, at = [], text.find(literal)
    while at >= 0:
        out.append(at)
        at = text.find(literal, at + 1)
    return out


# A small alphabet, so literals overlap, nest and repeat; "é" and "█" make some texts non-ASCII.
PIECES = ["a", "b", "ab", "ba", "aa", " ", "\n", "é", "█", "out", "of", "memory", "kill"]
# Texts are written in either case, and hold the characters lower() treats oddly: KELVIN
# SIGN (lower-cased to "k"), LATIN CAPITAL LETTER I WITH DOT ABOVE (to two characters),
# LATIN SMALL LETTER LONG S (kept, though it matches (?i)s).
TEXT_PIECES = st.sampled_from([*PIECES, "OUT", "Of", "MEMORY", "Kill", "AB", "É", "\u212a", "\u0130", "\u017f"])
# Rules ask for lower-cased literals; an upper-case one never occurs in lower-cased text.
LITERAL_PIECES = st.sampled_from([*PIECES, "KILL"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.lists(TEXT_PIECES, max_size=80).map("".join), min_size=1, max_size=4),
       literals=st.lists(st.lists(LITERAL_PIECES, min_size=1, max_size=4).map("".join), min_size=1, max_size=12))
def test_every_lookup_equals_find_in_the_lower_cased_text(staged: litscan.LiteralScanner, texts: list[str],
                                                           literals: list[str]) -> None:
    # Texts are read one after another, so later ones are scanned by an automaton
    # that has learnt the literals earlier ones looked for with find.
    for text in texts:
        index = TextIndex(text)
        low = text.lower()
        for literal in literals:
            starts = _all_starts(low, literal)
            assert index.holds(literal) == bool(starts), (text, literal)
            assert index.hits(literal, 3) == starts[:4], (text, literal)
        wanted = frozenset(literals)
        assert index.holds_any_of(wanted, [(lit, None) for lit in literals]) == any(lit in low for lit in literals)
        if index.scanned() is not None:
            assert index.which(wanted) == {lit for lit in literals if lit in low}
        assert index.low == low


def test_a_literal_first_met_with_find_is_scanned_for_later(fresh: litscan.LiteralScanner) -> None:
    first = TextIndex("x" * 100 + "cuda out of memory")
    assert first.holds("out of memory")  # nothing known yet: found with find, and learnt
    assert fresh.known == frozenset()
    second = TextIndex("y" * 100 + "killed process 7, out of memory")
    assert second.scanned() == frozenset({"out of memory"})  # rebuilt on the next text
    assert second.hits("out of memory", 5) == [second.low.index("out of memory")]
    assert not second.holds("cubin")  # not known: looked for with find, learnt for the next rebuild
    assert "cubin" not in fresh.known


def test_seeded_literals_are_all_scanned_for_from_the_first_text(fresh: litscan.LiteralScanner) -> None:
    fresh.seed(["out of memory", "cubin", "killed", "\ud800x"])  # the lone surrogate: find answers it
    assert fresh.learnt() == {"out of memory", "cubin", "killed"} and fresh.builds == 0
    index = TextIndex("x" * 100 + "cuda out of memory; killed")
    assert index.scanned() == {"out of memory", "cubin", "killed"}  # one build, every seeded literal
    assert index.which(frozenset(["out of memory", "cubin", "killed"])) == {"out of memory", "killed"}
    assert fresh.builds == 1 and fresh.known == fresh.learnt()
    assert not index.holds("cubin") and index.hits("killed", 3) == [index.low.index("killed")]
    assert fresh._misses == 0  # seeding is not a run of lookups that missed the automaton


def test_lone_surrogates_and_non_ascii_literals_are_answered_exactly(staged: litscan.LiteralScanner) -> None:
    # A rule may name a lone surrogate (a \\ud800 escape), and a text made in code may hold one:
    # UTF-8 cannot carry either, so find answers them.
    texts = ["abc é de \ud800x", "plain ascii de", "abc \udc80 de é", "only é here", "ascii again de"]
    literals = ["\ud800x", "de", "é", "\udc80 de", "é h"]
    for _ in range(2):  # the second round is scanned by an automaton that has seen them all
        for text in texts:
            index = TextIndex(text)
            for literal in literals:
                assert index.holds(literal) == (literal in text), (text, literal)
                assert index.hits(literal, 3) == _all_starts(text, literal)[:4]
    assert "é" in staged.known and "\ud800x" not in staged.known


def test_rebuilds_come_less_often_as_a_run_goes_on(fresh: litscan.LiteralScanner) -> None:
    for i in range(2000):
        TextIndex(f"line {i} of the log").holds(f"literal-{i}")  # a new literal every time
    # Rebuilds after 1, 2, 4, 8 ... scans, or when the waiting literals are half as many as
    # the known ones: about two per doubling, not one per literal.
    assert fresh.builds <= 24
    assert len(fresh.known) > 1000


def test_a_new_packs_literals_are_scanned_for_without_waiting(fresh: litscan.LiteralScanner) -> None:
    for i in range(5000):  # a long run: the next scheduled rebuild is thousands of scans away
        TextIndex(f"line {i} of the log").holds("kill")
    before = fresh.builds
    index = TextIndex("another pack's text")
    for i in range(10):
        index.holds(f"phrase {i}")  # a new pack's literals, in bulk
    assert TextIndex("the next text").scanned() >= {f"phrase {i}" for i in range(10)}
    assert fresh.builds == before + 1


def test_early_automata_are_quick_to_build_and_a_long_run_gets_a_dfa(fresh: litscan.LiteralScanner) -> None:
    texts = [f"line {i}: cuda out of memory, killed" for i in range(litscan.DFA_AFTER + 10)]
    for i, text in enumerate(texts):
        index = TextIndex(text)
        assert index.holds("out of memory") and index.holds("killed") and not index.holds("cubin")
        assert index.hits("out of memory", 3) == [text.index("out of memory")]
        if i == 5:
            assert fresh._built is not None and not fresh._built.dfa
    assert fresh._built is not None and fresh._built.dfa
    assert fresh.known == {"out of memory", "killed", "cubin"}


@pytest.mark.skipif(not HYPERSCAN, reason="hyperscan is not installed")
def test_a_long_run_scans_ascii_texts_for_first_matches_with_hyperscan(fresh: litscan.LiteralScanner) -> None:
    for i in range(litscan.DFA_AFTER + 3):
        text = f"line {i}: cuda out of memory, out of memory again, killed"
        index = TextIndex(text)
        assert index.holds("out of memory") and index.holds("killed") and not index.holds("cubin")
        assert index.hits("out of memory", 3) == _all_starts(text, "out of memory")
    built = fresh._built
    assert built is not None and built.dfa and built.first is not None and built.ascii is None
    index = TextIndex("x out of memory y out of memory")
    assert index.which(frozenset(["out of memory", "killed", "cubin"])) == {"out of memory"}
    assert index._scan is not None and not index._scan.every
    assert index._scan.first == {"out of memory": 2} and index._scan.positions("out of memory") is None
    assert index.hits("out of memory", 5) == [2, 18]  # every start, found from the first
    # Texts are read as they are, ignoring case, and never lower-cased: a text that is
    # not ASCII as UTF-8, its positions counted in characters.
    other = TextIndex("\u00e9\u2588 Out of Memory, OUT OF MEMORY \u2588 killed")
    assert other.which(frozenset(["out of memory", "killed"])) == {"out of memory", "killed"}
    assert other._scan is not None and other._scan.first == {"out of memory": 3, "killed": 34}
    assert other.hits("out of memory", 5) == [3, 18]
    assert index._low is None and other._low is None
    # A KELVIN SIGN is a "k" once lower-cased, which a case-insensitive read of ASCII
    # letters misses: such a text is lower-cased and that read.
    kelvin = TextIndex("\u212aILLED, \u212ailled")
    assert kelvin.which(frozenset(["killed"])) == {"killed"} and kelvin.hits("killed", 5) == [0, 8]


@pytest.mark.skipif(not HYPERSCAN, reason="hyperscan is not installed")
def test_a_failed_hyperscan_scan_leaves_the_answers_to_find(fresh: litscan.LiteralScanner,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(litscan, "DFA_AFTER", 0)
    assert not TextIndex("a first text").holds("out of memory")  # learnt
    assert TextIndex("x out of memory").holds("out of memory")  # read by Hyperscan
    built = fresh._built
    assert built is not None and built.first is not None

    class Failing:
        def scan(self, *args: object, **kwargs: object) -> None:
            raise RuntimeError("scratch space lost")

    monkeypatch.setattr(built.first, "_database", Failing())
    index = TextIndex("y out of memory, out of memory")
    assert index.scanned() == frozenset()  # no scan: every literal is looked for with find
    assert index.holds("out of memory") and index.hits("out of memory", 5) == [2, 17]


WORDS = [f"word{i:03d}" for i in range(litscan.CACHED_FROM + 20)]


def _long_run_scanner(words: list[str]) -> litscan.LiteralScanner:
    """A fresh scanner at a long run's stage that has learnt ``words`` (its first build)."""
    litscan.use_scanner(True)
    made = litscan.scanner()
    assert made is not None
    made.seed(words)
    assert TextIndex("x word007 y word001").holds("word001")
    return made


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("LOOP_RULES_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(litscan, "DFA_AFTER", 0)  # every build one for a long run
    yield tmp_path / "hyperscan"
    litscan.use_scanner(None)


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many literals each Hyperscan compile in the test was given."""
    import hyperscan

    made: list[int] = []
    real = hyperscan.Database

    class Counted(real):  # type: ignore[misc, valid-type]
        def compile(self, *args: object, **kwargs: object) -> None:
            made.append(int(kwargs.get("elements", 0)))  # type: ignore[call-overload]
            super().compile(*args, **kwargs)

    monkeypatch.setattr(hyperscan, "Database", Counted)
    return made


@pytest.mark.skipif(not HYPERSCAN, reason="hyperscan is not installed")
def test_a_long_runs_database_is_compiled_once_and_loaded_by_the_next_run(cache_dir: Path,
                                                                           compiles: list[int]) -> None:
    first = _long_run_scanner(WORDS)
    assert first._built is not None and first._built.first is not None and compiles == [len(WORDS)]
    assert len(list(cache_dir.glob("*.db"))) == 1
    second = _long_run_scanner(WORDS)  # the next run: same literals, nothing compiled
    assert second._built is not None and second._built.first is not None and compiles == [len(WORDS)]
    text = "word119 and word005, word005 again; no word12 alone"
    index = TextIndex(text)
    assert index.which(frozenset(WORDS)) == {"word119", "word005"}
    assert index.hits("word005", 5) == _all_starts(text, "word005")
    _long_run_scanner(WORDS + ["word999"])  # other literals: another database
    assert compiles == [len(WORDS), len(WORDS) + 1] and len(list(cache_dir.glob("*.db"))) == 2


@pytest.mark.skipif(not HYPERSCAN, reason="hyperscan is not installed")
def test_a_damaged_cached_database_is_compiled_again(cache_dir: Path, compiles: list[int]) -> None:
    _long_run_scanner(WORDS)
    (stored,) = cache_dir.glob("*.db")
    stored.write_bytes(stored.read_bytes()[:1000])  # cut short, as a full disk would leave it
    _long_run_scanner(WORDS)
    assert compiles == [len(WORDS), len(WORDS)]
    assert TextIndex("a word042 b").which(frozenset(WORDS)) == {"word042"}
    _long_run_scanner(WORDS)  # written whole again: loaded
    assert compiles == [len(WORDS), len(WORDS)]


@pytest.mark.skipif(not HYPERSCAN, reason="hyperscan is not installed")
def test_a_database_under_another_literal_sets_name_is_not_used(cache_dir: Path, compiles: list[int]) -> None:
    other = [f"other{i:03d}" for i in range(len(WORDS))]
    _long_run_scanner(other)
    _long_run_scanner(WORDS)
    first, second = sorted(cache_dir.glob("*.db"), key=lambda p: p.stat().st_mtime_ns)
    second.write_bytes(first.read_bytes())  # copied over: a valid database of other literals
    _long_run_scanner(WORDS)
    assert compiles == [len(other), len(WORDS), len(WORDS)]  # refused, compiled again
    assert TextIndex("a word042 b").which(frozenset(WORDS)) == {"word042"}


@pytest.mark.skipif(not HYPERSCAN, reason="hyperscan is not installed")
def test_a_fifo_in_place_of_a_database_does_not_block(cache_dir: Path, compiles: list[int]) -> None:
    _long_run_scanner(WORDS)
    (stored,) = cache_dir.glob("*.db")
    stored.unlink()
    os.mkfifo(stored)
    _long_run_scanner(WORDS)  # would wait forever on the read
    assert compiles == [len(WORDS), len(WORDS)]


@pytest.mark.skipif(not HYPERSCAN, reason="hyperscan is not installed")
def test_cached_databases_are_few_and_only_large_ones(cache_dir: Path, compiles: list[int],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _long_run_scanner(WORDS[: litscan.CACHED_FROM - 1])  # compiles faster than a file is read
    assert not cache_dir.exists()
    monkeypatch.setattr(litscan, "CACHED_FILES", 2)
    for extra in ("a-one", "a-two", "a-three"):
        _long_run_scanner([*WORDS, extra])
    assert len(list(cache_dir.glob("*.db"))) == 2  # the oldest went
    _long_run_scanner([*WORDS, "a-three"])
    assert len(compiles) == 4  # the newest is still there
    monkeypatch.setenv("LOOP_RULES_CACHE", "off")
    _long_run_scanner([*WORDS, "a-four"])
    assert len(compiles) == 5 and len(list(cache_dir.glob("*.db"))) == 2


@pytest.mark.parametrize("value", ["ahocorasick", "AhoCorasick"])  # the setting's case does not matter
def test_ahocorasick_only_keeps_hyperscan_out(fresh: litscan.LiteralScanner, monkeypatch: pytest.MonkeyPatch,
                                              value: str) -> None:
    monkeypatch.setenv(litscan.ENV, value)
    litscan.use_scanner(None)
    scanner = litscan.scanner()
    assert scanner is not None and litscan.describe() == "ahocorasick_rs"
    for i in range(litscan.DFA_AFTER + 3):
        assert TextIndex(f"line {i}: out of memory").holds("out of memory")
    built = scanner._built
    assert built is not None and built.dfa and built.first is None and built.ascii is not None
    index = TextIndex("x out of memory y out of memory")
    assert index.hits("out of memory", 5) == [2, 18] and index._scan is not None and index._scan.every


def test_the_automaton_for_other_texts_becomes_a_dfa_only_after_many_of_them(
        fresh: litscan.LiteralScanner, monkeypatch: pytest.MonkeyPatch) -> None:
    # Without Hyperscan, texts that are not ASCII (rare) have an automaton of their own over
    # every literal: a quick NFA until TEXT_DFA_AFTER of them were scanned, with the same
    # answers either way.
    monkeypatch.setenv(litscan.ENV, "ahocorasick")
    monkeypatch.setattr(litscan, "TEXT_DFA_AFTER", 8)
    for i in range(litscan.DFA_AFTER + 1):
        assert TextIndex(f"line {i}: cuda out of memory, killed").holds("out of memory")
    assert fresh._built is not None and fresh._built.dfa and fresh._built.text is None
    for i in range(12):
        text = f"ligne {i} \u2014 cuda out of memory, \u00abkilled\u00bb"
        index = TextIndex(text)
        assert index.holds("out of memory") and index.holds("killed") and not index.holds("cubin")
        assert index.hits("out of memory", 3) == [text.index("out of memory")]
        assert fresh._built.text is not None and fresh._built.text_dfa is (i + 1 >= 8)


def test_after_the_dfa_a_few_rare_literals_wait_for_enough_finds(fresh: litscan.LiteralScanner,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # A DFA costs milliseconds to build: a literal a rare text first asks about is looked
    # for with find until such lookups add up, not rebuilt for at the next scheduled turn.
    monkeypatch.setattr(litscan, "LATE_MISSES", 50)
    common = [f"phrase {k}" for k in range(40)]  # enough known that one more is not a new pack's bulk
    for i in range(litscan.DFA_AFTER + 200):
        index = TextIndex(f"line {i}: cuda out of memory")
        assert index.holds("out of memory") and not any(index.holds(p) for p in common)
    assert fresh._built is not None and fresh._built.dfa
    builds = fresh.builds
    for i in range(49):  # the scheduled rebuild is long due; 49 finds do not pay for it
        index = TextIndex(f"line {i}: a rare phrase")
        assert index.holds("rare phrase") and not index.holds("out of memory")
    assert fresh.builds == builds and "rare phrase" not in fresh.known
    TextIndex("the 50th: a rare phrase").holds("rare phrase")
    assert TextIndex("the next text").scanned() == {"out of memory", "rare phrase", *common}
    assert fresh.builds == builds + 1
    TextIndex("once more: a second rare one").holds("second rare")
    fresh.settle()  # a long run's rebuild, now: what the benchmark's steady pass counts on
    assert "second rare" in fresh.known and fresh.builds == builds + 2


def test_the_scanner_stops_learning_when_full(fresh: litscan.LiteralScanner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(litscan, "MAX_LITERALS", 5)
    for i in range(40):
        TextIndex(f"text {i}").holds(f"lit{i:02d}")
    assert len(fresh.known) <= 5
    index = TextIndex("lit39 is here")
    assert index.holds("lit39")  # still answered, by find


def test_off_by_environment_or_when_the_package_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(litscan.ENV, "off")
    litscan.use_scanner(None)
    assert litscan.scanner() is None
    monkeypatch.delenv(litscan.ENV)
    litscan.use_scanner(None)
    assert litscan.scanner() is not None
    monkeypatch.setattr(litscan, "_backend", lambda: None)
    litscan.use_scanner(None)
    assert litscan.scanner() is None
    monkeypatch.undo()
    import ahocorasick_rs

    monkeypatch.delattr(ahocorasick_rs, "BytesAhoCorasick")  # an old release
    litscan.use_scanner(None)
    assert litscan.scanner() is None and not litscan.available()
    assert TextIndex("cuda out of memory").holds("out of memory")  # find does the work
    litscan.use_scanner(None)


@pytest.mark.parametrize("pack", ["default", "reference"])
def test_verdicts_are_the_same_with_and_without_the_scanner(pack: str) -> None:
    bundles = corpus_bundles()
    engine = Engine.build(pack, make_plugin_manager(entry_points=False))
    seen = {}
    try:
        for mode in (False, True):
            litscan.use_scanner(mode)
            seen[mode] = [engine.classify(b) for b in bundles]
        if pack == "default":
            assert litscan.scanner().builds > 0  # type: ignore[union-attr]  # it did the work
    finally:
        litscan.use_scanner(None)
    assert len(bundles) > 400
    assert seen[True] == seen[False]


def test_a_rebuild_during_a_scan_does_not_mix_two_builds() -> None:
    # What a second thread can do between two steps of a scan, done from inside it:
    # learn a literal and rebuild. The scan must answer only for the literals of the
    # automaton that ran; the new literal is found with find.
    import ahocorasick_rs

    holder: list[litscan.LiteralScanner] = []

    class Racing:
        def __init__(self, *args: object, **kwargs: object) -> None:
            self._real = ahocorasick_rs.BytesAhoCorasick(*args, **kwargs)

        def find_matches_as_indexes(self, *args: object, **kwargs: object) -> object:
            found = self._real.find_matches_as_indexes(*args, **kwargs)
            if "late" not in holder[0].known:
                holder[0].learn("late")
                holder[0]._build()
            return found

    class Backend:
        AhoCorasick = ahocorasick_rs.AhoCorasick
        BytesAhoCorasick = Racing
        MatchKind = ahocorasick_rs.MatchKind
        Implementation = ahocorasick_rs.Implementation

    scanner = litscan.LiteralScanner(Backend)
    holder.append(scanner)
    litscan._STATE["scanner"] = scanner
    try:
        assert TextIndex("early text").holds("early")  # learnt
        index = TextIndex("early and late")
        assert index.holds("early")
        assert "late" in scanner.known  # the rebuild happened during the scan
        assert index.holds("late")
        assert index.hits("late", 3) == [10]
    finally:
        litscan.use_scanner(None)


def test_threads_classifying_at_once_get_the_verdicts_of_one_thread(tmp_path: Path) -> None:
    # Rebuilds happen while other threads scan: each scan must number its matches
    # with the literals of the automaton that found them.
    bundles = corpus_bundles()
    # Four threads switching every microsecond on a busy machine can stretch one regex
    # search past the pack's 0.25 s: a timeout warning on one verdict is not what this
    # test is about, so the copy of the pack it uses allows 10 s.
    pack = Path(shutil.copytree(RULES_D, tmp_path / "rules.d"))
    settings = (pack / "pack.yml").read_text(encoding="utf-8")
    assert "regex_timeout: 0.25\n" in settings
    (pack / "pack.yml").write_text(settings.replace("regex_timeout: 0.25\n", "regex_timeout: 10\n"), encoding="utf-8")
    engine = Engine.build(pack, make_plugin_manager(entry_points=False))
    try:
        litscan.use_scanner(False)
        expected = [engine.classify(b) for b in bundles]
        litscan.use_scanner(True)
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
        try:
            with ThreadPoolExecutor(4) as pool:
                got = list(pool.map(engine.classify, bundles))
        finally:
            sys.setswitchinterval(interval)
        made = litscan.scanner()
        assert made is not None and made.builds > 1
        # Long enough for a long run's automaton: with hyperscan, a scratch space per thread.
        assert made._built is not None and made._built.dfa and (made._built.first is not None) == HYPERSCAN
    finally:
        litscan.use_scanner(None)
    assert got == expected


def test_the_cli_gives_the_same_rows_with_the_scanner_off() -> None:
    examples = HERE.parent / "examples" / "pull-captures"
    outs = []
    for value in ("off", "on"):
        done = subprocess.run([sys.executable, "-m", "loop_core", "classify", "--format", "jsonl", str(examples)],
                              capture_output=True, text=True, env={**os.environ, litscan.ENV: value}, check=False)
        assert done.returncode in (0, 1), done.stderr
        outs.append(done.stdout)
    assert outs[0] == outs[1] and outs[0].count("\n") >= 10

