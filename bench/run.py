"""Benchmark loop-rules: one command runs every scenario and prints a Markdown table.

    python bench/run.py                    # all scenarios, 2,000 bundles
    python bench/run.py --quick            # small corpus, one repeat: a smoke run
    python bench/run.py --only read,cli    # some scenarios
    python bench/run.py --json             # the rows as JSON instead of a table
    python bench/run.py --list             # the scenarios and what they measure

Corpora come from ``bench/generate.py`` and live under ``bench/out/``
(gitignored); one is reused while its size, seed and generator source are
unchanged. Wall-clock times use ``time.perf_counter``; cheap scenarios report
the median of ``--repeats`` runs (3), cold starts the median of 5. The notes
add the median CPU time (``process_time``, or the child's user+sys), which
moves less than wall time when other work shares the machine.

Adding a scenario: write ``def my_scenario(ctx: Context) -> list[Row]`` and
decorate it with ``@scenario("name", "what it measures")``. ``ctx.corpus(n)``
gives a corpus of any size, ``ctx.bundles(n)`` the bundles read into memory,
``ctx.cli(...)`` the ``loop-rules`` command line, ``ctx.timed(fn)`` and
``ctx.timed_process(argv)`` a :class:`Timing` (wall and CPU seconds of the
repeats). Registration order is run order.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import importlib.util
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"
DEFAULT_N = 2000
QUICK_N = 48
MARKER = ".bench-corpus.json"
RSS_SIZES = (10_000, 100_000)
QUICK_RSS_SIZES = (48, 480)
# The environment the benchmark started in, when it never writes byte-code (else empty).
NO_BYTECODE_ENV: dict[str, str] = {}
GEN_CHUNK = 10_000  # bundles generated between two progress marks (a build resumes from the last)


# --------------------------------------------------------------------------- rows & registry


@dataclass
class Row:
    """One line of the results table."""

    scenario: str
    bundles: int | None
    seconds: float
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    rate: bool = True  # False for start-up rows, where bundles/s means nothing

    @property
    def per_second(self) -> float | None:
        if not self.rate or not self.bundles or self.seconds <= 0:
            return None
        return self.bundles / self.seconds

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["rate"]
        out["bundles_per_s"] = self.per_second
        return out


@dataclass
class Timing:
    """Wall-clock and CPU seconds of repeated runs; the medians are what rows report."""

    wall: list[float]
    cpu: list[float]

    @property
    def seconds(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_seconds(self) -> float:
        return statistics.median(self.cpu)

    def describe(self, unit: str = "s") -> str:
        """``median of 3, range a-b s; CPU c s`` (in ms with ``unit="ms"``)."""
        k = 1000 if unit == "ms" else 1
        fmt = "{:.0f}" if unit == "ms" else "{:.3f}"
        lo, hi, cpu = (fmt.format(x * k)
                       for x in (min(self.wall), max(self.wall), self.cpu_seconds))
        if len(self.wall) < 2:
            return f"1 run; CPU {cpu} {unit}"
        return f"median of {len(self.wall)}, range {lo}-{hi} {unit}; CPU {cpu} {unit}"

    def extra(self) -> dict[str, Any]:
        return {"samples": self.wall, "cpu_samples": self.cpu, "cpu_seconds": self.cpu_seconds}


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Callable[[Context], list[Row]]
    description: str


SCENARIOS: dict[str, Scenario] = {}


def scenario(
    name: str, description: str
) -> Callable[[Callable[[Context], list[Row]]], Callable[[Context], list[Row]]]:
    """Register ``fn`` under ``name``; scenarios run in registration order."""

    def deco(fn: Callable[[Context], list[Row]]) -> Callable[[Context], list[Row]]:
        if name in SCENARIOS:
            raise ValueError(f"scenario {name!r} registered twice")
        SCENARIOS[name] = Scenario(name, fn, description)
        return fn

    return deco


# --------------------------------------------------------------------------- context


def _load_generator() -> ModuleType:
    name = "loop_bench_generate"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _link_tree(src: Path, dst: Path, names: list[str]) -> None:
    """Hard-link (or, across file systems, copy) the bundle directories ``names`` of ``src`` into ``dst``."""
    for name in names:
        target = dst / name
        target.mkdir(parents=True, exist_ok=True)
        for entry in os.scandir(src / name):
            try:
                os.link(entry.path, target / entry.name)
            except OSError:
                shutil.copyfile(entry.path, target / entry.name)


def _rel(path: Path) -> str:
    """A path relative to the repository (never an absolute path of this machine)."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return path.name


@dataclass
class Corpus:
    root: Path
    dirs: list[Path]

    @property
    def n(self) -> int:
        return len(self.dirs)


class Context:
    """What scenarios share: options, corpora, bundles in memory, results so far."""

    def __init__(
        self, n: int, seed: int, repeats: int, cold_runs: int, log: Callable[[str], None],
        rss_sizes: Sequence[int] = RSS_SIZES,
    ) -> None:
        self.n = n
        self.rss_sizes = tuple(rss_sizes)
        self.seed = seed
        self.repeats = repeats
        self.cold_runs = cold_runs
        self.log = log
        self.results: dict[str, Row] = {}
        self._corpora: dict[int, Corpus] = {}
        self._bundles: dict[int, list[Any]] = {}

    # corpora -------------------------------------------------------------
    def corpus(self, n: int | None = None) -> Corpus:
        """A generated corpus of ``n`` bundles (default ``--n``), reused when unchanged.

        Written once per (size, seed, generator source) and kept under
        ``bench/out/``. A large corpus starts from the largest complete smaller
        one of the same seed (its files hard-linked: bundle ``i`` is the same in
        both), is written in pieces of :data:`GEN_CHUNK` by two processes, and
        resumes after an interruption from the last piece finished.
        """
        n = self.n if n is None else n
        if n in self._corpora:
            return self._corpora[n]
        want = self._want(n)
        root = OUT / f"corpus-n{n}-s{self.seed}"
        marker, listing = root / MARKER, root / ".bench-dirs"
        if _read_json(marker) == want and listing.is_file():
            names = listing.read_text(encoding="utf-8").split()
        else:
            names = self._build(root, n, want)
        corpus = Corpus(root, [root / name for name in names])
        self._corpora[n] = corpus
        return corpus

    def _want(self, n: int) -> dict[str, Any]:
        gen_source = (HERE / "generate.py").read_bytes()
        return {"n": n, "seed": self.seed, "generator": hashlib.sha256(gen_source).hexdigest()[:16]}

    def _build(self, root: Path, n: int, want: dict[str, Any]) -> list[str]:
        marker, listing = root / MARKER, root / ".bench-dirs"
        partial, partial_marker = root / ".bench-dirs.partial", root / ".bench-partial.json"
        names: list[str] = []
        if _read_json(partial_marker) == want and partial.is_file():
            names = partial.read_text(encoding="utf-8").split()  # resume an interrupted build
            self.log(f"resuming {_rel(root)} at {len(names)} of {n} bundles ...")
        else:
            if root.exists():
                shutil.rmtree(root)
            root.mkdir(parents=True)
            prefix = self._prefix_source(n)
            if prefix is not None:
                src, src_names = prefix
                self.log(f"linking the first {len(src_names)} bundles from {_rel(src)} ...")
                _link_tree(src, root, src_names)
                shutil.copyfile(src / ".last", root / ".last")
                names = src_names
            partial_marker.write_text(json.dumps(want) + "\n", encoding="utf-8")
            partial.write_text("".join(f"{name}\n" for name in names), encoding="utf-8")
        gen = _load_generator()
        t0 = time.perf_counter()
        while len(names) < n:
            stop = min(n, len(names) + GEN_CHUNK)
            self.log(f"generating bundles {len(names)}-{stop - 1} into {_rel(root)} ...")
            dirs = gen.generate(root, stop, self.seed, start=len(names), jobs=min(2, os.cpu_count() or 1))
            added = [str(d.relative_to(root)) for d in dirs]
            with open(partial, "a", encoding="utf-8") as fh:
                fh.write("".join(f"{name}\n" for name in added))
            names.extend(added)
        self.log(f"  corpus ready in {time.perf_counter() - t0:.1f} s")
        listing.write_text("".join(f"{name}\n" for name in names), encoding="utf-8")
        marker.write_text(json.dumps(want) + "\n", encoding="utf-8")  # last: marks it complete
        partial.unlink()
        partial_marker.unlink()
        return names

    def _prefix_source(self, n: int) -> tuple[Path, list[str]] | None:
        """The largest complete corpus of this seed and generator with fewer than ``n`` bundles."""
        best: tuple[Path, list[str]] | None = None
        for other in OUT.glob(f"corpus-n*-s{self.seed}"):
            try:
                m = int(other.name[len("corpus-n"):].split("-s")[0])
            except ValueError:
                continue
            if not 0 < m < n or (best is not None and m <= len(best[1])):
                continue
            if _read_json(other / MARKER) != self._want(m) or not (other / ".last").is_file():
                continue
            names = (other / ".bench-dirs").read_text(encoding="utf-8").split()
            if len(names) == m:
                best = (other, names)
        return best

    def bundles(self, n: int | None = None) -> list[Any]:
        """Every bundle of the corpus, read into memory once."""
        from loop_core import read_bundle

        corpus = self.corpus(n)
        if corpus.n not in self._bundles:
            self._bundles[corpus.n] = [read_bundle(d) for d in corpus.dirs]
        return self._bundles[corpus.n]

    def release(self) -> None:
        """Forget the bundles held in memory (corpora on disk stay)."""
        self._bundles.clear()

    # tools ---------------------------------------------------------------
    def engine(self, pack: str) -> Any:
        from loop_core import Engine, make_plugin_manager

        return Engine.build(pack, make_plugin_manager(entry_points=False))

    def warm(self, corpus: Corpus) -> None:
        """Read every file of ``corpus`` once, untimed, so the timings that follow
        read from the page cache. This machine gives page-cache memory back
        within a minute or two, and a first run that read part of its corpus
        from disk took up to 1.7 times the others."""
        for d in corpus.dirs:
            with os.scandir(d) as entries:
                for entry in entries:
                    if entry.is_file():
                        with open(entry.path, "rb") as fh:
                            fh.read()

    def cli(self, *args: str) -> list[str]:
        """The ``loop-rules`` command line: the console script next to this interpreter."""
        script = Path(sys.executable).with_name("loop-rules")
        if script.is_file() and os.access(script, os.X_OK):
            return [str(script), *args]
        found = shutil.which("loop-rules")
        if found:
            return [found, *args]
        return [sys.executable, "-m", "loop_core", *args]

    def timed(self, fn: Callable[[], Any], repeats: int | None = None) -> Timing:
        """Wall (``perf_counter``) and CPU (``process_time``) times of ``repeats`` calls."""
        timing = Timing([], [])
        for _ in range(repeats or self.repeats):
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            timing.wall.append(time.perf_counter() - t0)
            timing.cpu.append(time.process_time() - c0)
        return timing

    def timed_process(self, argv: Sequence[str], runs: int | None = None,
                      stdout: Callable[[], Any] | None = None,
                      setup: Callable[[], Any] | None = None,
                      env: dict[str, str] | None = None) -> Timing:
        """Run ``argv`` (from the repository root) ``runs`` times; CPU is the child's user+sys.

        ``stdout`` opens a fresh sink for each run (default: discard); ``setup``
        runs, untimed, before each run. A non-zero exit raises, with the end of stderr.
        """
        timing = Timing([], [])
        for _ in range(runs or self.repeats):
            if setup is not None:
                setup()
            sink = stdout() if stdout else None
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(argv, cwd=REPO, stdout=sink or subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, check=False, env=env)
            finally:
                if sink is not None:
                    sink.close()
            timing.wall.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            timing.cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(argv[:3])}... exited {proc.returncode}: "
                                   f"{proc.stderr.decode(errors='replace')[-400:]}")
        return timing

    def floor_seconds(self) -> float:
        """The parse-only floor for the default corpus (measured now if not yet)."""
        if "parse-floor" not in self.results:
            self.results["parse-floor"] = parse_floor(self)[0]
        return self.results["parse-floor"].seconds


# --------------------------------------------------------------------------- scenarios


@scenario("parse-floor", "open + read + parse of exactly the files read_bundle reads, with the "
                         "parser it tries first (orjson when installed, else json.loads)")
def parse_floor(ctx: Context) -> list[Row]:
    from loop_core.bundle import BUNDLE_FILES, FAST_LOADS

    corpus = ctx.corpus()
    files = [os.path.join(d, name) for d in corpus.dirs for name in BUNDLE_FILES
             if os.path.isfile(os.path.join(d, name))]
    loads = FAST_LOADS or json.loads

    def run() -> None:
        for path in files:
            with open(path, "rb") as fh:
                loads(fh.read())

    t = ctx.timed(run)
    parser = "json.loads" if loads is json.loads else f"{getattr(loads, '__module__', '?')}.loads"
    return [Row("parse-floor", corpus.n, t.seconds, f"{len(files):,} files, {parser}; {t.describe()}",
                {**t.extra(), "files": len(files), "parser": parser})]


@scenario("read", "read_bundle() over every bundle directory (strict validation included); where "
                  "orjson parses, again with json alone")
def read(ctx: Context) -> list[Row]:
    from loop_core import bundle, read_bundle

    corpus = ctx.corpus()
    dirs = corpus.dirs

    def run() -> None:
        for d in dirs:
            read_bundle(d)

    t = ctx.timed(run)
    ratio = t.seconds / ctx.floor_seconds()
    rows = [Row("read", corpus.n, t.seconds, f"{ratio:.1f}x the floor; {t.describe()}",
                {**t.extra(), "vs_floor": ratio})]
    if bundle.FAST_LOADS is not None:  # the same, parsing with json alone (LOOP_RULES_ORJSON=off)
        fast, bundle.FAST_LOADS = bundle.FAST_LOADS, None
        try:
            plain = ctx.timed(run)
        finally:
            bundle.FAST_LOADS = fast
        rows.append(Row("read, json alone", corpus.n, plain.seconds,
                        f"LOOP_RULES_ORJSON=off: {plain.seconds / t.seconds:.2f}x the time with orjson; "
                        f"{plain.describe()}", {**plain.extra(), "vs_orjson": plain.seconds / t.seconds}))
    return rows


@scenario("classify", "Engine.classify over bundles already in memory, default and reference packs, "
                      "and the default pack again with one str.find per literal instead of the literal scanner")
def classify(ctx: Context) -> list[Row]:
    from loop_core import litscan

    bundles = ctx.bundles()
    rows = []
    scanning = litscan.scanner() is not None
    # (pack, scanner setting): the process's own, LOOP_RULES_SCANNER=ahocorasick (when
    # hyperscan is there to be left out), and off.
    modes = [("default", None), ("reference", None)]
    if scanning:
        if "hyperscan" in litscan.describe():
            modes.append(("default", "ahocorasick"))
        modes.append(("default", "off"))
    saved = os.environ.get(litscan.ENV)
    for pack, setting in modes:
        if setting is not None:
            os.environ[litscan.ENV] = setting
            litscan.use_scanner(None)
        try:
            t0 = time.perf_counter()
            engine = ctx.engine(pack)
            build = time.perf_counter() - t0
            counts: dict[str, int] = {}

            def run(engine: Any = engine, counts: dict[str, int] = counts) -> None:
                counts.clear()
                for b in bundles:
                    cls = engine.classify(b).failure_class.value
                    counts[cls] = counts.get(cls, 0) + 1

            t = ctx.timed(run)
        finally:
            if saved is None:
                os.environ.pop(litscan.ENV, None)
            else:
                os.environ[litscan.ENV] = saved
            litscan.use_scanner(None)
        mix = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
        label, versus = f"classify ({pack})", ""
        if setting == "off":
            label = f"classify ({pack}), one find per literal"
            versus = f"LOOP_RULES_SCANNER=off: {t.seconds / rows[0].seconds:.2f}x the time with the scanner; "
        elif setting == "ahocorasick":
            label = f"classify ({pack}), ahocorasick_rs only"
            versus = f"LOOP_RULES_SCANNER=ahocorasick: {t.seconds / rows[0].seconds:.2f}x the time with hyperscan; "
        rows.append(Row(
            label, len(bundles), t.seconds,
            f"{versus}{len(engine.pack.rules)} rules (version {engine.pack.version}), engine build "
            f"{build * 1000:.0f} ms; {t.describe()}; {mix}",
            {**t.extra(), "engine_build_s": build, "classes": dict(counts), "scanner": setting or scanning}))
    return rows


@scenario("lookup-floor", "Engine.classify (default pack) with every literal lookup answered in "
                          "advance: what the rule walk and regex searches cost alone, a floor that "
                          "no faster literal matcher could go below")
def lookup_floor(ctx: Context) -> list[Row]:
    from loop_core import view as view_module
    from loop_core.fastregex import TextIndex

    bundles = ctx.bundles()
    engine = ctx.engine("default")
    # One TextIndex per distinct text, kept across passes: after the first pass every
    # literal's place, every word set and every window is known, and each later pass
    # pays only for walking the rules and running the regexes that must run.
    known: dict[str, TextIndex] = {}

    def remembered(self: Any, text: str) -> TextIndex:
        index = known.get(text)
        if index is None:
            index = known[text] = TextIndex(text)
        return index

    def run() -> None:
        for b in bundles:
            engine.classify(b)

    plain = ctx.timed(run)
    original = view_module.View.index
    view_module.View.index = remembered  # type: ignore[method-assign]
    try:
        run()  # fill the memo
        t = ctx.timed(run)
    finally:
        view_module.View.index = original  # type: ignore[method-assign]
    share = 1 - t.seconds / plain.seconds
    return [Row("classify (default), lookups free", len(bundles), t.seconds,
                f"{len(known):,} texts remembered; the same classify with lookups costs "
                f"{plain.seconds:.3f} s ({len(bundles) / plain.seconds:,.0f}/s): lookups are "
                f"{share:.0%} of it; {t.describe()}",
                {**t.extra(), "with_lookups_s": plain.seconds, "lookup_share": share})]


@scenario("pipeline", "in-process discover + read + classify + verdict_row + json.dumps: "
                      "the CLI's work without process start-up or stdout")
def pipeline(ctx: Context) -> list[Row]:
    from loop_core.batch import classify_paths, verdict_row

    corpus = ctx.corpus()
    engine = ctx.engine("default")
    root = os.path.relpath(corpus.root, REPO)

    def run() -> None:
        dumps = json.dumps
        for outcome in classify_paths([root], engine):
            dumps(verdict_row(outcome), ensure_ascii=False)

    cwd = os.getcwd()
    os.chdir(REPO)  # relative paths, as a user would type them
    try:
        t = ctx.timed(run)
    finally:
        os.chdir(cwd)
    ratio = t.seconds / ctx.floor_seconds()
    return [Row("pipeline (in-process)", corpus.n, t.seconds,
                f"{ratio:.1f}x the floor; default pack; {t.describe()}",
                {**t.extra(), "vs_floor": ratio})]


@scenario("cli", "`loop-rules classify --format jsonl CORPUS` end to end in a subprocess")
def cli(ctx: Context) -> list[Row]:
    corpus = ctx.corpus()
    argv = ctx.cli("classify", "--format", "jsonl", os.path.relpath(corpus.root, REPO))
    OUT.mkdir(parents=True, exist_ok=True)
    sink = OUT / "cli-classify.jsonl"
    ctx.warm(corpus)
    t = ctx.timed_process(argv, stdout=lambda: open(sink, "wb"))
    with open(sink, "rb") as fh:
        lines = sum(1 for _ in fh)
    if lines != corpus.n:
        raise RuntimeError(f"loop-rules classify printed {lines} rows for {corpus.n} bundles")
    ratio = t.seconds / ctx.floor_seconds()
    size = sink.stat().st_size
    return [Row("cli classify --format jsonl", corpus.n, t.seconds,
                f"{ratio:.0f}x the parse floor; {size / 1e6:.1f} MB of jsonl to a file; "
                f"default pack; {t.describe()}",
                {**t.extra(), "vs_floor": ratio, "output_bytes": size})]


@scenario("cold-start", "process start-up (ms): python -c pass, loop-rules --version, "
                        "classify one bundle")
def cold_start(ctx: Context) -> list[Row]:
    one = os.path.relpath(ctx.corpus().dirs[0], REPO)
    cases = [
        ("cold: python -c pass", [sys.executable, "-c", "pass"], None, "interpreter and site only"),
        ("cold: loop-rules --version", ctx.cli("--version"), None, "console script"),
        ("cold: loop-rules classify 1 bundle", ctx.cli("classify", "--format", "jsonl", one), 1,
         "imports, plugins, pack load, one bundle"),
    ]
    modes: list[tuple[str, dict[str, str] | None, str]] = [("", None, "")]
    if NO_BYTECODE_ENV:
        # The environment the benchmark was started in never writes byte-code, so
        # there every start compiles loop-rules' sources: measure that too.
        modes = [(" (no byte-code cache)", NO_BYTECODE_ENV, "PYTHONDONTWRITEBYTECODE is set: sources "
                  "compiled at every start; "), (" (byte-code cached)", None, "")]
    rows = []
    for label, argv, bundles, what in cases:
        # The interpreter alone has its byte-code either way: one row.
        for suffix, env, why in [("", None, "")] if argv[0] == sys.executable else modes:
            ctx.timed_process(argv, runs=1, env=env)  # warm the page cache (and the byte-code cache)
            t = ctx.timed_process(argv, runs=ctx.cold_runs, env=env)
            rows.append(Row(label + suffix, bundles, t.seconds,
                            f"{t.seconds * 1000:.0f} ms, {t.describe('ms')}; {why}{what}",
                            {**t.extra(), "ms": t.seconds * 1000}, rate=False))
    # Every row above starts with the pack's regex analysis cached (the warm-up run wrote
    # it, as any earlier start would have); this one redoes it, as a first start does.
    label, argv, bundles, what = cases[-1]
    suffix, env, why = modes[-1]
    uncached = {**(env or os.environ), "LOOP_RULES_CACHE": "off"}
    t = ctx.timed_process(argv, runs=ctx.cold_runs, env=uncached)
    rows.append(Row(f"{label}{suffix[:-1] + ', ' if suffix else ' ('}no pack cache)", bundles, t.seconds,
                    f"{t.seconds * 1000:.0f} ms, {t.describe('ms')}; LOOP_RULES_CACHE=off: every regex "
                    f"compiled and analysed at load; {what}", {**t.extra(), "ms": t.seconds * 1000}, rate=False))
    return rows


STATE_DIRS = ("_loop", "_review-queue", "_dedup-queue")


SET_ASIDE = OUT / "run-state-set-aside"  # state of timed runs, deleted when the bench ends
SET_ASIDE_DELETED = OUT / "run-state-deleted.json"  # when the last bench deleted it, and how much
INODE_RECENCY = 360  # s: ext4 without a journal skips inodes freed up to this long ago


def _set_aside_state(root: Path) -> None:
    """Move what ``loop-rules run`` wrote into ``root`` to a new folder under :data:`SET_ASIDE`.

    Between timed runs the state is moved, not deleted, and the moved state
    is deleted only when the whole bench ends (:func:`_delete_set_aside`):
    on ext4 without a journal (the file system of the recorded runs)
    creating a file skips every inode of its group freed in the last one to
    six minutes, so a run started just after deleting the last run's review
    files paid 0.7 ms of kernel time for each file it created (0.5 s of
    system time against 0.15 s over 2,000 bundles): the benchmark was timing
    its own cleanup.
    """
    SET_ASIDE.mkdir(parents=True, exist_ok=True)
    target = Path(tempfile.mkdtemp(dir=SET_ASIDE))
    for name in STATE_DIRS:
        if (root / name).exists():
            os.replace(root / name, target / name)


def _delete_set_aside() -> None:
    """Delete the state timed runs left (this bench's, and an interrupted one's)
    and note when, for :func:`_recent_deletion`."""
    if not SET_ASIDE.exists():
        return
    files = sum(len(names) for _dir, _dirs, names in os.walk(SET_ASIDE))
    shutil.rmtree(SET_ASIDE, ignore_errors=True)
    SET_ASIDE_DELETED.write_text(json.dumps({"at": time.time(), "files": files}), encoding="utf-8")


def _recent_deletion() -> str:
    """A warning for the notes when an earlier bench deleted its runs' state
    less than :data:`INODE_RECENCY` seconds ago, else ``""``."""
    try:
        last = json.loads(SET_ASIDE_DELETED.read_text(encoding="utf-8"))
        ago, files = time.time() - float(last["at"]), int(last["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    if files < 100 or not 0 <= ago < INODE_RECENCY:  # a handful of files costs nothing to notice
        return ""
    return (f"; started {ago:.0f} s after an earlier bench deleted {files:,} files here: on ext4 "
            f"without a journal, creating files is slower for {INODE_RECENCY // 60} minutes after that")


@scenario("run", "`loop-rules run CORPUS --format json` end to end in a subprocess: SQLite "
                 "tracker, review queue, trust, a fresh tracker each repeat; the same run again into "
                 "the state it left (a replay: every capture already counted); and --dry-run (runs "
                 "alternating); over the corpus and over the smaller `rss` size, where start-up weighs less")
def run_cli(ctx: Context) -> list[Row]:
    rows = []
    for n in sorted({ctx.n, max(ctx.n, ctx.rss_sizes[0])}):
        rows += _run_cli(ctx, ctx.corpus(n), "" if n == ctx.n else f" ({n:,} bundles)")
    return rows


def _run_cli(ctx: Context, corpus: Corpus, suffix: str) -> list[Row]:
    rel = os.path.relpath(corpus.root, REPO)
    sink = OUT / "cli-run.json"
    # (label, extra arguments, starts from no state): the replay runs right after the
    # fresh run, into the tracker and queues it left, as a rerun after a rule change does.
    cases = (("run (sqlite)", (), True), ("run (sqlite), replay", (), False), ("run --dry-run", ("--dry-run",), True))
    timings = {label: Timing([], []) for label, _, _ in cases}
    summaries: dict[str, dict[str, Any]] = {}
    warning = _recent_deletion()
    ctx.warm(corpus)
    try:
        for _ in range(ctx.repeats):  # alternate, so a slow spell of the machine hits both
            for label, extra, fresh in cases:
                t = ctx.timed_process(ctx.cli("run", rel, "--format", "json", *extra), runs=1,
                                      stdout=lambda: open(sink, "wb"),
                                      setup=(lambda: _set_aside_state(corpus.root)) if fresh else None)
                timings[label].wall += t.wall
                timings[label].cpu += t.cpu
                summaries[label] = json.loads(sink.read_text(encoding="utf-8"))
    finally:
        _set_aside_state(corpus.root)
    rows = []
    for label, extra, fresh in cases:
        data, t = summaries[label], timings[label]
        if data["bundles"] != corpus.n:
            raise RuntimeError(f"loop-rules run saw {data['bundles']} bundles of {corpus.n}")
        if extra:
            what = f"{data['would_file']} would be filed"
        elif fresh:
            what = (f"filed {data['filed_new']} new + {data['plus_one']} +1, {data['review_queued']} queued "
                    f"for review")
        else:
            if data["filed_new"] or data["plus_one"] or data["review_queued"]:
                raise RuntimeError(f"a replay filed or queued something: {data}")
            what = f"{data['already_counted']} already counted, nothing new; the tracker of the run before"
        rows.append(Row(label + suffix, corpus.n, t.seconds,
                        f"{what}; default pack; {t.describe()}; CPU {corpus.n / t.cpu_seconds:,.0f} bundles/s"
                        f"{warning}",
                        {**t.extra(), "summary": {k: v for k, v in data.items() if k != "errors"}}))
    return rows


@scenario("tracker", "filing the corpus's fileable failures into a fresh SQLite tracker: "
                     "one transaction each (file) vs batches (file_many)")
def tracker(ctx: Context) -> list[Row]:
    import tempfile

    from loop_core.pipeline import process_bundle
    from loop_core.trackers import BATCH, SqliteTracker

    corpus = ctx.corpus()
    engine = ctx.engine("default")
    items = []
    for d in corpus.dirs:
        item = process_bundle(d, engine)
        if item.draft is not None and item.occurrence is not None:
            items.append((item.draft, item.occurrence))
    rows = []
    with tempfile.TemporaryDirectory(dir=OUT) as tmp:
        counter = iter(range(10**6))

        def one_by_one() -> None:
            db = SqliteTracker(Path(tmp) / f"t{next(counter)}.sqlite")
            for pair in items:
                db.file(*pair)
            db.close()

        def batched() -> None:
            db = SqliteTracker(Path(tmp) / f"t{next(counter)}.sqlite")
            db.file_many(items)
            db.close()

        for label, fn in (("tracker: file, one transaction each", one_by_one),
                          (f"tracker: file_many, {BATCH} per transaction", batched)):
            t = ctx.timed(fn)
            rows.append(Row(label, len(items), t.seconds,
                            f"{len(items):,} occurrences ({len(items) / t.seconds:,.0f}/s, fresh tracker, "
                            f"open and close included); {t.describe()}", t.extra()))
    return rows


@scenario("consensus", "the trust pass over success anchors that all share one consensus key (many "
                       "users running one popular set-up), at two sizes: per-anchor cost should not grow")
def consensus(ctx: Context) -> list[Row]:
    from loop_core.testing import make_bundle
    from loop_core.trust import ConsensusIndex, evaluate_trust

    rows, per_anchor = [], {}
    for n in (max(2, ctx.n // 2), ctx.n * 5):
        # One model, set-up and green capability; each anchor its own commit, so its own submission.
        anchors = [make_bundle({"manifest": {"outcome": "ok", "club3090_commit": f"{i:040x}",
                                             "smoke_capability_set": ["chat"]},
                                "pt4": {"results": {"chat": "green"}, "smoke_capability_set": ["chat"]}})
                   for i in range(n)]

        def run(anchors: list[Any] = anchors) -> None:
            index = ConsensusIndex.of(anchors)
            for anchor in anchors:
                evaluate_trust(anchor, priors=index)

        t = ctx.timed(run)
        per_anchor[n] = t.seconds / n
        rows.append(_growth_row(f"consensus: trust pass, {n:,} anchors on one key", n, t, per_anchor, "anchor",
                                "index built and every anchor evaluated"))
    return rows


def _growth_row(label: str, n: int, t: Timing, per_item: dict[int, float], unit: str, what: str) -> Row:
    """A row giving the cost per item and, past the first size, its ratio to the cost there."""
    first = min(per_item)
    growth = f"; per {unit} {per_item[n] / per_item[first]:.2f}x the cost at {first:,}" if n != first else ""
    return Row(label, n, t.seconds, f"{per_item[n] * 1e6:.1f} µs per {unit} ({what}){growth}; {t.describe()}",
               {**t.extra(), "per_item_s": per_item[n]})


@scenario("hot-unknown", "one unknown failure hit by many submissions, queued for review in run-sized "
                         "batches (ReviewQueue.add_many), at two sizes")
def hot_unknown(ctx: Context) -> list[Row]:
    import tempfile

    from loop_core.dedup import Occurrence
    from loop_core.pipeline import REVIEW_BATCH_FACTOR
    from loop_core.trackers import BATCH, ReviewQueue, review_payload

    batch = BATCH * REVIEW_BATCH_FACTOR
    payload = review_payload("0" * 64, {"tuple": {}}, "unrecognised error", "acme/Model-7B", "20260801T093000Z",
                             "no rule matched (tier none-unknown)")
    rows, per_item = [], {}
    with tempfile.TemporaryDirectory(dir=OUT) as tmp:
        fresh = (Path(tmp) / str(i) for i in range(10**6))  # a fresh queue for every timed run
        for n in (max(2, ctx.n // 2), ctx.n * 5):
            items = [(payload, Occurrence(f"{i:064x}", "20260801T093000Z", "0123456", f"captures/b{i}"))
                     for i in range(n)]

            def run(items: list[Any] = items) -> None:
                queue = ReviewQueue(next(fresh))
                for start in range(0, len(items), batch):
                    queue.add_many(items[start:start + batch])

            t = ctx.timed(run)
            per_item[n] = t.seconds / n
            rows.append(_growth_row(f"hot unknown: {n:,} occurrences of one failure", n, t, per_item,
                                    "occurrence", f"batches of {batch:,}"))
    return rows


@scenario("jobs", "--jobs 1 vs --jobs 2, runs alternating: `loop-rules classify --format jsonl` "
                  "and `loop-rules run --dry-run` in a subprocess (wall-clock speed-up), over the "
                  "corpus and over the smaller `rss` size, where start-up weighs less")
def jobs(ctx: Context) -> list[Row]:
    rows = []
    for n in sorted({ctx.n, max(ctx.n, ctx.rss_sizes[0])}):
        rows += _jobs(ctx, ctx.corpus(n), "" if n == ctx.n else f" ({n:,} bundles)")
    return rows


def _jobs(ctx: Context, corpus: Corpus, suffix: str) -> list[Row]:
    rel = os.path.relpath(corpus.root, REPO)
    rows = []
    outputs: dict[int, bytes] = {}
    ctx.warm(corpus)
    for label, base in (("classify", ("classify", "--format", "jsonl", rel)),
                        ("run --dry-run", ("run", "--dry-run", "--format", "json", rel))):
        timings = {1: Timing([], []), 2: Timing([], [])}
        for _ in range(ctx.repeats):  # alternate, so a slow spell of the machine hits both
            for j in (1, 2):
                sink = OUT / f"cli-jobs{j}.out"
                t = ctx.timed_process(ctx.cli(*base, "--jobs", str(j)), runs=1,
                                      stdout=lambda s=sink: open(s, "wb"))
                timings[j].wall += t.wall
                timings[j].cpu += t.cpu
                outputs[j] = sink.read_bytes()
        if outputs[1] != outputs[2]:
            raise RuntimeError(f"{label}: --jobs 2 printed something else than --jobs 1")
        # Each --jobs 2 run against the --jobs 1 run just before it: on a machine whose
        # speed drifts, a pair minutes apart from the next says more than two medians.
        pairs = sorted(one / two for one, two in zip(timings[1].wall, timings[2].wall))
        speedup = statistics.median(pairs)
        for j in (1, 2):
            t = timings[j]
            note = (f"{speedup:.2f}x the speed of --jobs 1 (the median over {len(pairs)} pair(s), each run "
                    f"against the --jobs 1 run just before it: {pairs[0]:.2f}-{pairs[-1]:.2f}x; same output); "
                    if j == 2 else "") + t.describe()
            rows.append(Row(f"{label} --jobs {j}{suffix}", corpus.n, t.seconds, note,
                            {**t.extra(), **({"speedup": speedup} if j == 2 else {})}))
    return rows


# Vocabulary for synthetic packs: components, failure phrasings and exception names an
# engine log could plausibly hold, combined into phrases no two rules share.
_COMPONENTS = ("nccl", "cublas", "cudnn", "flashinfer", "triton", "marlin", "machete", "cutlass", "xformers",
               "awq", "gptq", "gguf", "bitsandbytes", "moe", "rope", "tokenizer", "sampler", "scheduler",
               "kv cache", "block manager", "prefix cache", "lora adapter", "speculative decoder",
               "detokenizer", "cuda graph", "torch.compile", "allreduce", "pipeline stage", "expert router",
               "paged attention", "rotary embedding", "logits processor", "guided decoding", "vision tower")
_FAILURES = ("failed to initialize", "is not supported for", "returned an invalid handle in",
             "timed out waiting for", "could not allocate workspace for", "raised an unexpected error in",
             "refused the request from", "lost its connection to", "found a corrupted entry in",
             "exceeded the limit of", "rejected the config of", "cannot be loaded with")
_EXCEPTIONS = ("RuntimeError", "ValueError", "AssertionError", "NotImplementedError", "KeyError",
               "TypeError", "OSError", "ImportError")
_CLASSES = ("genuine-oom", "quant-unsupported", "overlay-arch-drift", "kernel-unsupported",
            "benign-cold-start", "unknown")


def synthetic_pack(root: Path, count: int, seed: int = 0) -> Path:
    """Write a pack of ``count`` realistic rules to ``root`` (the first k of any two sizes agree).

    Half are regexes over the whole failure text (an exception name, a component, a failure
    phrase and a code or version), a quarter ``contains`` lists of two or three phrases,
    the rest combine a ``select`` on a manifest field with a text condition. Every rule
    names phrases of its own, so on the generated corpus almost none match and every
    bundle that Tier 1 does not decide walks the whole pack, the worst case.
    """
    import random

    root.mkdir(parents=True, exist_ok=True)
    (root / "pack.yml").write_text(f"name: synthetic-{count}\nregex_timeout: 0.25\n", encoding="utf-8")
    lines = ["rules:"]
    for i in range(count):
        rng = random.Random(f"loop-bench-pack:{seed}:{i}")
        comp, fail, exc = rng.choice(_COMPONENTS), rng.choice(_FAILURES), rng.choice(_EXCEPTIONS)
        code = f"{rng.randrange(100, 1000)}"
        tag = f"{comp.replace(' ', '_').replace('.', '_')}_{i:04d}"
        phrase = f"{comp} {fail} {tag}"
        cls = _CLASSES[i % len(_CLASSES)]
        lines += [f"  - id: synthetic-{i:04d}", f"    class: {cls}",
                  f"    description: synthetic rule {i} ({comp}, {fail})"]
        kind = i % 4
        hit = f"{exc}: {comp} {fail} {tag}"
        if kind == 3:
            field_ = ("quant_label", "arch_family", "topology_class")[i % 3]
            example = (f"{{manifest: {{{field_}: {yaml_quote(tag)}}}, "
                       f"pt3: {{ok: false, failure_log_excerpt: {yaml_quote(hit)}}}}}")
        else:
            example = yaml_quote(hit)
        examples = ["    examples:", f"      match: [{example}]", "      no_match: ['RuntimeError: NCCL error']"]
        if kind in (0, 1):
            spaced = fail.replace(" ", r"\s+")
            pattern = (rf"(?i)\b{exc}: {re_escape(comp)} {spaced} {tag}\b"
                       rf"|{re_escape(tag)} \((?:code|errno) {code}\)|{re_escape(comp)} v?\d+\.\d+ {re_escape(tag)}")
            lines += ["    when:", "      select: $.signal.all_text", f"      regex: {yaml_quote(pattern)}"]
        elif kind == 2:
            lits = [phrase, f"{tag} (code {code})", f"{exc.lower()}: {tag}"][: 2 + i % 2]
            lines += ["    when:", "      select: $.signal.all_text", "      ignore_case: true",
                      "      contains: [" + ", ".join(yaml_quote(x) for x in lits) + "]"]
        else:
            lines += ["    when:", "      all:",
                      f"        - {{select: $.manifest.{field_}, in: [{yaml_quote(tag)}, {yaml_quote(tag.upper())}]}}",
                      f"        - {{select: $.signal.all_text, regex: {yaml_quote(rf'(?i){re_escape(comp)} {fail}')}}}"]
        lines += examples
    (root / "10-synthetic.yml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def re_escape(text: str) -> str:
    import re

    return re.escape(text).replace("\\ ", " ")


def yaml_quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@scenario("rules-scaling", "Engine.classify of the same bundles with synthetic packs of 50 and "
                           "500 realistic rules (regex, contains, select)")
def rules_scaling(ctx: Context) -> list[Row]:
    import tempfile

    from loop_core import Engine, make_plugin_manager

    bundles = ctx.bundles()
    rows = []
    results: dict[int, Timing] = {}
    with tempfile.TemporaryDirectory(dir=OUT) as tmp:
        for count in (50, 500):
            t0 = time.perf_counter()
            engine = Engine.build(str(synthetic_pack(Path(tmp) / f"pack-{count}", count)),
                                  make_plugin_manager(entry_points=False))
            build = time.perf_counter() - t0
            matched: dict[str, int] = {}

            def run(engine: Any = engine, matched: dict[str, int] = matched) -> None:
                matched.clear()
                for b in bundles:
                    rule = engine.classify(b).matched_rule or "none"
                    if rule.startswith("synthetic-"):
                        matched[rule] = matched.get(rule, 0) + 1

            t = results[count] = ctx.timed(run)
            ratio = f"; {t.seconds / results[50].seconds:.2f}x the time of 50 rules" if count != 50 else ""
            rows.append(Row(f"classify, {count} synthetic rules", len(bundles), t.seconds,
                            f"engine build {build * 1000:.0f} ms; {sum(matched.values())} decided by a "
                            f"synthetic rule{ratio}; {t.describe()}",
                            {**t.extra(), "engine_build_s": build, "rules": count}))
    return rows


_MEASURE = """\
import json, resource, subprocess, sys, time
out = open(sys.argv[1], "wb")
t0 = time.perf_counter()
proc = subprocess.run(sys.argv[2:], stdout=out, stderr=subprocess.PIPE, check=False)
wall = time.perf_counter() - t0
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"code": proc.returncode, "wall": wall, "cpu": usage.ru_utime + usage.ru_stime,
                  "user": usage.ru_utime, "maxrss": usage.ru_maxrss, "stderr": proc.stderr[-400:].decode(errors="replace")}))
"""


def measure_process(argv: Sequence[str], sink: Path) -> dict[str, Any]:
    """Run ``argv`` under a fresh Python whose only child it is: wall, CPU and peak RSS (MB).

    ``RUSAGE_CHILDREN.ru_maxrss`` is a high-water mark over every child a
    process ever waited for, so each measurement gets its own parent.
    """
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(sink), *argv], cwd=REPO,
                          capture_output=True, text=True, check=True)
    data: dict[str, Any] = json.loads(done.stdout)
    if data["code"] not in (0, 1):
        raise RuntimeError(f"{' '.join(argv[:3])}... exited {data['code']}: {data['stderr']}")
    # Linux reports kilobytes, macOS bytes.
    data["rss_mb"] = data["maxrss"] / (1 << 20 if sys.platform == "darwin" else 1 << 10)
    return data


@scenario("rss", "peak RSS and cost per bundle of `loop-rules classify --format jsonl` and "
                 "`loop-rules run --dry-run` over 10,000 and 100,000 bundles (one run each)")
def rss(ctx: Context) -> list[Row]:
    rows = []
    first: dict[str, dict[str, Any]] = {}
    for n in ctx.rss_sizes:
        corpus = ctx.corpus(n)
        rel = os.path.relpath(corpus.root, REPO)
        ctx.log(f"  reading the {corpus.n:,} bundles once (untimed) ...")
        ctx.warm(corpus)
        for label, argv in (("classify --format jsonl", ctx.cli("classify", "--format", "jsonl", rel)),
                            ("run --dry-run", ctx.cli("run", "--dry-run", "--format", "json", rel))):
            ctx.log(f"  {label} over {corpus.n:,} bundles ...")
            data = measure_process(argv, OUT / "rss.out")
            us_wall, us_cpu = data["wall"] / corpus.n * 1e6, data["cpu"] / corpus.n * 1e6
            us_user = data["user"] / corpus.n * 1e6
            note = (f"peak RSS {data['rss_mb']:.0f} MB; {us_wall:,.0f} µs/bundle wall, "
                    f"{us_cpu:,.0f} µs/bundle CPU ({us_user:,.0f} user)")
            base = first.setdefault(label, {**data, "n": corpus.n})
            if base["n"] != corpus.n:
                # User CPU too: system time also counts the kernel reading back files
                # the page cache dropped, which grows with the corpus, not with loop-rules.
                note += (f"; per bundle {us_cpu / (base['cpu'] / base['n'] * 1e6):.2f}x the CPU "
                         f"and {us_user / (base['user'] / base['n'] * 1e6):.2f}x the user CPU "
                         f"of {base['n']:,} bundles")
            rows.append(Row(f"rss: {label}", corpus.n, data["wall"], f"{note}; 1 run; default pack",
                            {"rss_mb": data["rss_mb"], "cpu_seconds": data["cpu"],
                             "user_seconds": data["user"], "us_per_bundle_wall": us_wall,
                             "us_per_bundle_cpu": us_cpu, "us_per_bundle_user": us_user}))
        (OUT / "rss.out").unlink(missing_ok=True)
    return rows


# Classify the first N bundles of a corpus once to warm up (compiling what they need,
# teaching the literal scanner), let the scanner build with what it learnt (as a long
# run's rebuilds do), then PASSES more times, in process: run under callgrind, the
# difference between 1 and 3 passes is what two steady passes cost, start-up and the
# one-off work cancelled out. (Counted without that build, a rebuild due in a later
# pass landed in the difference: 0.93 against 0.65 million over 300 bundles at 2a776cc.)
_PASSES = """\
import sys
from loop_core import Engine, litscan, make_plugin_manager, read_bundle
from loop_core.batch import discover_bundles
root, n, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
paths = [p for _, p in zip(range(n), discover_bundles([root]))]
bundles = [read_bundle(p) for p in paths]
engine = Engine.build("default", make_plugin_manager(entry_points=False))
for bundle in bundles:
    engine.classify(bundle)
scanner = litscan.scanner()
if scanner is not None:
    scanner.settle()
for _ in range(passes):
    for bundle in bundles:
        engine.classify(bundle)
"""
INSTRUCTION_BUNDLES = 300


@contextlib.contextmanager
def _counting_env(extra: dict[str, str] | None = None) -> Iterator[dict[str, str]]:
    """The environment of a count: fixed hashing, so that two counts of the same code
    agree to the instruction, and a cache directory of its own, which the scenario
    warms before counting. (Counted against the user's cache, a count depended on
    what earlier runs had left there: a Hyperscan database compiled or loaded, the
    literals a start is seeded with.)"""
    with tempfile.TemporaryDirectory(prefix="callgrind-cache-", dir=OUT) as cache:
        yield {**os.environ, "PYTHONHASHSEED": "0", "LOOP_RULES_CACHE_DIR": cache, **(extra or {})}


def _instructions(root: Path, n: int, passes: int, env: dict[str, str]) -> int:
    """Instructions callgrind counts for :data:`_PASSES` over ``n`` bundles."""
    return _callgrind([sys.executable, "-c", _PASSES, str(root), str(n), str(passes)], env)


def _callgrind(argv: Sequence[str], env: dict[str, str]) -> int:
    """The instructions callgrind counts for the process ``argv`` (run from the repository root)."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
                          cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                          check=False)
    found = re.search(r"Collected\s*:\s*(\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"callgrind run failed ({done.returncode}): {done.stderr[-400:]}")
    return int(found.group(1))


@scenario("instructions", "instructions per bundle of a warmed classify pass (default pack, with and "
                          "without the literal scanner), counted by callgrind: unlike time, the "
                          "same on a busy machine as on a quiet one")
def instructions(ctx: Context) -> list[Row]:
    corpus = ctx.corpus()
    n = min(INSTRUCTION_BUNDLES, corpus.n)
    if shutil.which("valgrind") is None:
        ctx.log("  valgrind is not installed: instructions not counted")
        return [Row("instructions per bundle", n, 0.0, "not counted: valgrind is not installed", rate=False)]
    rows = []
    modes = [("scanner", "on"), ("one find per literal", "off")]
    from loop_core import litscan

    if not litscan.available():
        modes = [("one find per literal", "off")]
    elif "hyperscan" in litscan.describe():
        modes.insert(1, ("ahocorasick_rs only", "ahocorasick"))
    for label, value in modes:
        with _counting_env({litscan.ENV: value}) as env:
            # Seeded, as any start is, by what earlier runs over the corpus learnt.
            _warm([sys.executable, "-c", _CONSOLE, "classify", "--format", "jsonl", str(corpus.root)], env)
            # And once by the counting script itself, uncounted: what it caches on its first
            # start (a small corpus's literals met no earlier run) would land in the one-pass
            # count and make the difference negative.
            _warm([sys.executable, "-c", _PASSES, str(corpus.root), str(n), "1"], env)
            t0 = time.perf_counter()
            one, three = (_instructions(corpus.root, n, passes, env) for passes in (1, 3))
        per_bundle = (three - one) / (2 * n)
        rows.append(Row(f"instructions per bundle ({label})", n, time.perf_counter() - t0,
                        f"{per_bundle / 1e6:.3f} million instructions per bundle of a warmed pass over "
                        f"{n} bundles (callgrind, after a warm-up pass, one pass and three, PYTHONHASHSEED=0)",
                        {"instructions_per_bundle": per_bundle}, rate=False))
    return rows


RUN_INSTRUCTION_BUNDLES = 500
# The console script's own lines, so that callgrind counts the interpreter, not a wrapper.
_CONSOLE = "import sys\nfrom loop_core.console import main\nsys.argv[0] = 'loop-rules'\nsys.exit(main())\n"


@scenario("run-instructions", "instructions of whole `loop-rules run --format json` processes over "
                              "the corpus's first 500 bundles, counted by callgrind (start-up "
                              "included, byte-code and pack caches warm): a fresh SQLite run, a "
                              "replay into the state it left, and --dry-run")
def run_instructions(ctx: Context) -> list[Row]:
    corpus = ctx.corpus(min(RUN_INSTRUCTION_BUNDLES, ctx.n))
    if shutil.which("valgrind") is None:
        ctx.log("  valgrind is not installed: instructions not counted")
        return [Row("instructions: run", corpus.n, 0.0, "not counted: valgrind is not installed", rate=False)]
    argv = [sys.executable, "-c", _CONSOLE, "run", os.path.relpath(corpus.root, REPO), "--format", "json"]
    cases = (("run (sqlite)", (), True), ("run (sqlite), replay", (), False), ("run --dry-run", ("--dry-run",), True))
    rows = []
    with _counting_env() as env:
        _warm([*argv, "--dry-run"], env)
        try:
            for label, extra, fresh in cases:
                if fresh:
                    _set_aside_state(corpus.root)
                t0 = time.perf_counter()
                count = _callgrind([*argv, *extra], env)
                rows.append(Row(f"instructions: {label}", corpus.n, time.perf_counter() - t0,
                                f"{count / 1e6:,.1f} million instructions, the whole process "
                                f"({count / corpus.n / 1e6:.3f} million a bundle, start-up included; "
                                f"callgrind, PYTHONHASHSEED=0)", {"instructions": count}, rate=False))
        finally:
            _set_aside_state(corpus.root)
    return rows


def _warm(argv: Sequence[str], env: dict[str, str]) -> None:
    """Run ``argv`` twice, untimed: the byte-code and pack caches written, the literals
    a run learns kept for the next start and the Hyperscan database over them stored,
    as they are for any later run."""
    for _ in range(2):
        subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, check=True)


@scenario("jobs-instructions", "how `loop-rules classify --format jsonl --jobs 2` splits its work, counted by "
                               "callgrind in the parent and in each worker (what it did before the fork, its "
                               "own after), against `--jobs 1` over the same corpus: the speed-up two "
                               "uncontended CPUs would give, whatever the machine's spell")
def jobs_instructions(ctx: Context) -> list[Row]:
    corpus = ctx.corpus()
    if shutil.which("valgrind") is None:
        ctx.log("  valgrind is not installed: instructions not counted")
        return [Row("instructions: --jobs 2 split", corpus.n, 0.0, "not counted: valgrind is not installed",
                    rate=False)]
    argv = [sys.executable, "-c", _CONSOLE, "classify", "--format", "jsonl", os.path.relpath(corpus.root, REPO)]
    with _counting_env() as env, tempfile.TemporaryDirectory(prefix="jobs-callgrind-", dir=OUT) as tmp:
        _warm(argv, env)
        t0 = time.perf_counter()
        one = _callgrind([*argv, "--jobs", "1"], env)
        # Each forked child dumps what it inherited (the parent's count at the fork, file
        # <pid>.1) before its own work (file <pid>); the parent writes one file.
        proc = subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=yes",
                               "--dump-before=PyOS_AfterFork_Child", f"--callgrind-out-file={tmp}/cg.%p",
                               *argv, "--jobs", "2"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"callgrind run failed ({proc.returncode}): {proc.stderr[-400:]}")
        counts = {path.name: _callgrind_total(path) for path in Path(tmp).glob("cg.*")}
    workers = sorted({name.split(".")[1] for name in counts if name.endswith(".1")})
    parents = [name for name in counts if name.count(".") == 1 and name.split(".")[1] not in workers]
    if len(workers) != 2 or len(parents) != 1:
        raise RuntimeError(f"expected a parent and two workers, callgrind wrote {sorted(counts)}")
    forked = [counts[f"cg.{pid}.1"] for pid in workers]  # the parent's count when each was forked
    own = [counts[f"cg.{pid}"] for pid in workers]
    parent_after = counts[parents[0]] - max(forked)
    # On two CPUs the work after the fork takes at least its larger part and at least half of it all.
    path = max(forked) + max(max(own), (sum(own) + parent_after) / 2)
    return [Row("instructions: --jobs 2 split", corpus.n, time.perf_counter() - t0,
                f"{one / path:.2f}x the speed of --jobs 1 on two uncontended CPUs: --jobs 1 "
                f"{one / 1e6:,.0f} million instructions; --jobs 2 {max(forked) / 1e6:,.0f} million before "
                f"the workers start, then {own[0] / 1e6:,.0f} and {own[1] / 1e6:,.0f} million in the workers "
                f"and {parent_after / 1e6:,.0f} million in the parent beside them (callgrind, PYTHONHASHSEED=0)",
                {"jobs1": one, "before_fork": max(forked), "workers": own, "parent_after": parent_after,
                 "split_speedup": one / path}, rate=False)]


def _callgrind_total(path: Path) -> int:
    """The instructions a callgrind output file counts (its ``summary:`` line)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"{path.name}: no summary line")


@scenario("breakdown", "CPU per matcher (and per Tier-2 rule) of the default pack, bundles "
                       "in memory, first match wins as in classify")
def breakdown(ctx: Context) -> list[Row]:
    bundles = ctx.bundles()
    engine = ctx.engine("default")
    rules = engine.pack.rules
    clock = time.process_time
    cost: dict[str, float] = {}

    def add(name: str, seconds: float) -> None:
        cost[name] = cost.get(name, 0.0) + seconds

    start = clock()
    for bundle in bundles:
        t0 = clock()
        mctx = engine.context(bundle)
        add("context", clock() - t0)
        for matcher in engine.matchers:
            if matcher.name == "tier2-rules":  # the built-in row walker: time each rule
                hit = False
                for rule in rules:
                    t0 = clock()
                    hit = rule.when.evaluate(mctx.view)
                    add(rule.id, clock() - t0)
                    if hit:
                        break
                if hit:
                    break
                continue
            t0 = clock()
            decided = matcher.match(mctx) is not None
            add(matcher.name, clock() - t0)
            if decided:
                break
    total = clock() - start
    top = sorted(cost.items(), key=lambda kv: -kv[1])[:6]
    shown = ", ".join(f"{name} {sec:.2f}" for name, sec in top)
    return [Row("breakdown (default, CPU s)", len(bundles), total,
                f"top costs: {shown}; {len(rules)} rules", {"cpu_by_part": cost}, rate=False)]


# --------------------------------------------------------------------------- output


def markdown(rows: list[Row]) -> str:
    out = ["| scenario | bundles | seconds | bundles/s | notes |", "|---|---:|---:|---:|---|"]
    for r in rows:
        rate = f"{r.per_second:,.0f}" if r.per_second is not None else "—"
        count = f"{r.bundles:,}" if r.bundles is not None else "—"
        out.append(f"| {r.scenario} | {count} | {r.seconds:.3f} | {rate} | {r.notes} |")
    return "\n".join(out)


def _scanner() -> str:
    """Which literal lookups the scenarios use (loop_core/litscan.py), with its version."""
    from importlib.metadata import PackageNotFoundError, version

    from loop_core import litscan

    found = litscan.describe()
    if not found.startswith("ahocorasick_rs"):
        return found
    try:
        shown = f"ahocorasick_rs {version('ahocorasick_rs')}"
        if "hyperscan" in found:
            shown += f", hyperscan {version('hyperscan')} for long runs"
        return shown
    except PackageNotFoundError:  # pragma: no cover - importable but not installed as a distribution
        return found


def _json_parser() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from loop_core.bundle import FAST_LOADS

    if FAST_LOADS is None:
        return "json"
    try:
        return f"orjson {version('orjson')}"
    except PackageNotFoundError:  # pragma: no cover - importable but not installed as a distribution
        return "orjson"


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "system": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the loop-rules benchmarks.")
    parser.add_argument(
        "--n", type=int, default=None, help=f"bundles in the corpus (default {DEFAULT_N})"
    )
    parser.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: {QUICK_N} bundles, one repeat, three cold starts",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="SCENARIO",
        help="run only these scenarios (comma-separated or repeated)",
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="repeats per timed scenario (default 3)"
    )
    parser.add_argument(
        "--rss-sizes", default=None, metavar="N,M",
        help=f"corpus sizes of the rss scenario (default {','.join(map(str, RSS_SIZES))}; "
             f"--quick: {','.join(map(str, QUICK_RSS_SIZES))})",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    args = parser.parse_args(argv)

    if args.list:
        for s in SCENARIOS.values():
            print(f"{s.name:12} {s.description}")
        return 0
    only = [name for chunk in args.only for name in chunk.split(",") if name]
    unknown = [name for name in only if name not in SCENARIOS]
    if unknown:
        parser.error(
            f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}"
        )
    if not _lock_out():
        print(f"bench: another run is using {_rel(OUT)} (it writes the same corpora and outputs, "
              "and its timings and this run's would disturb each other); wait until it ends",
              file=sys.stderr)
        return 2
    n = args.n or (QUICK_N if args.quick else DEFAULT_N)
    repeats = args.repeats or (1 if args.quick else 3)
    # Pack caches of the benchmark stay under bench/out (every process started below inherits it).
    os.environ.setdefault("LOOP_RULES_CACHE_DIR", str(OUT / "pack-cache"))
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        # loop-rules runs as an installed copy does, its byte-code cached (pip compiles
        # it at install): where the environment never writes byte-code, every start
        # would compile every module again, a cost no install pays. The cache goes
        # under bench/out; cold-start still measures a start without it.
        NO_BYTECODE_ENV.update(os.environ)
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        os.environ.setdefault("PYTHONPYCACHEPREFIX", str(OUT / "pycache"))
    ctx = Context(
        n,
        args.seed,
        repeats,
        3 if args.quick else 5,
        log=lambda msg: print(msg, file=sys.stderr, flush=True),
        rss_sizes=(tuple(int(x) for x in args.rss_sizes.split(",") if x) if args.rss_sizes
                   else QUICK_RSS_SIZES if args.quick else RSS_SIZES),
    )

    selected = [s for s in SCENARIOS.values() if not only or s.name in only]
    load_start = _loadavg()
    code_start = _code_state()
    rows: list[Row] = []
    try:
        for s in selected:
            ctx.log(f"running {s.name} ...")
            # Each scenario starts clean: no bundles of an earlier one kept alive for the GC to walk.
            ctx.release()
            gc.collect()
            produced = s.run(ctx)
            for row in produced:
                ctx.results.setdefault(s.name, row)
            rows.extend(produced)
    finally:
        _delete_set_aside()  # after every timing: see _set_aside_state

    code_end = _code_state()
    if code_end[1] != code_start[1]:
        ctx.log("warning: the code changed during the run (a commit or an edit): rows after the "
                "change measured other code; rerun on an unchanged tree to compare")
    corpus = ctx.corpus()
    files = [os.path.join(d, f) for d in corpus.dirs for f in os.listdir(d)]
    size = sum(os.path.getsize(f) for f in files)
    meta = {
        **machine(),
        "n": n,
        "seed": args.seed,
        "repeats": repeats,
        "corpus": _rel(corpus.root),
        "corpus_files": len(files),
        "corpus_bytes": size,
        "loop_rules": _version(),
        "commit": _commit(code_start, code_end),
        "literal_scanner": _scanner(),
        "json_parser": _json_parser(),
        "loadavg_start": load_start,
        "loadavg_end": _loadavg(),
    }
    if args.json:
        print(json.dumps({"meta": meta, "rows": [r.to_dict() for r in rows]}, indent=2))
    else:
        print(
            f"loop-rules {meta['loop_rules']} at {meta['commit']}, "
            f"Python {meta['python']} on {meta['system']}, "
            f"{meta['cpus']} CPUs; corpus {meta['corpus']} ({n:,} bundles, {len(files):,} files, "
            f"{size / 1e6:.1f} MB, seed {args.seed}); literal scanner: {meta['literal_scanner']}; "
            f"JSON parser: {meta['json_parser']}; warm page cache; 1-min load average "
            f"{meta['loadavg_start']} at start, {meta['loadavg_end']} at end\n"
        )
        print(markdown(rows))
    return 0


_LOCK: list[int] = []  # the open lock file of this run, held until the process ends


def _lock_out() -> bool:
    """Take bench/out for this run; False when another run holds it."""
    import fcntl

    OUT.mkdir(parents=True, exist_ok=True)
    fd = os.open(OUT / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    _LOCK.append(fd)
    return True


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # pragma: no cover - not on every platform
        return None


def _code_state() -> tuple[str, str]:
    """The checked-out commit, marked ``+dirty`` when tracked files have changes, and
    a digest of those changes: two states that differ mean other code was measured."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                              capture_output=True, check=True).stdout.strip()
        diff = subprocess.run(["git", "diff", "HEAD", "--binary"], cwd=REPO,
                              capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown", ""
    return head + ("+dirty" if diff else ""), hashlib.sha256(head.encode() + b"\0" + diff).hexdigest()


def _commit(start: tuple[str, str], end: tuple[str, str]) -> str:
    """What the header says of the code: its commit, or that it changed while the run went on
    (a commit or an edit mid-run: the rows after it measured other code, and a changed
    module invalidates the pack cache the counting scenarios warmed)."""
    if start[1] == end[1]:
        return start[0]
    return f"{start[0]}, changed during the run to {end[0]}"


def _version() -> str:
    try:
        from loop_core import __version__
    except ImportError:  # pragma: no cover
        return "?"
    return __version__


if __name__ == "__main__":
    sys.exit(main())
