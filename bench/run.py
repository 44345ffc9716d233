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
import gc
import hashlib
import importlib.util
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
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
        self, n: int, seed: int, repeats: int, cold_runs: int, log: Callable[[str], None]
    ) -> None:
        self.n = n
        self.seed = seed
        self.repeats = repeats
        self.cold_runs = cold_runs
        self.log = log
        self.results: dict[str, Row] = {}
        self._corpora: dict[int, Corpus] = {}
        self._bundles: dict[int, list[Any]] = {}

    # corpora -------------------------------------------------------------
    def corpus(self, n: int | None = None) -> Corpus:
        """A generated corpus of ``n`` bundles (default ``--n``), reused when unchanged."""
        n = self.n if n is None else n
        if n in self._corpora:
            return self._corpora[n]
        gen_source = (HERE / "generate.py").read_bytes()
        want = {"n": n, "seed": self.seed, "generator": hashlib.sha256(gen_source).hexdigest()[:16]}
        root = OUT / f"corpus-n{n}-s{self.seed}"
        marker, listing = root / MARKER, root / ".bench-dirs"
        try:
            have = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            have = None
        if have == want and listing.is_file():
            names = listing.read_text(encoding="utf-8").split()
            dirs = [root / name for name in names]
        else:
            self.log(f"generating {n} bundles into {_rel(root)} ...")
            if root.exists():
                shutil.rmtree(root)
            t0 = time.perf_counter()
            dirs = _load_generator().generate(root, n, self.seed)
            self.log(f"  done in {time.perf_counter() - t0:.1f} s")
            listing.write_text("".join(f"{d.relative_to(root)}\n" for d in dirs), encoding="utf-8")
            marker.write_text(json.dumps(want) + "\n", encoding="utf-8")  # last: marks it complete
        corpus = Corpus(root, dirs)
        self._corpora[n] = corpus
        return corpus

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
                      stdout: Callable[[], Any] | None = None) -> Timing:
        """Run ``argv`` (from the repository root) ``runs`` times; CPU is the child's user+sys.

        ``stdout`` opens a fresh sink for each run (default: discard). A non-zero
        exit raises, with the end of stderr.
        """
        timing = Timing([], [])
        for _ in range(runs or self.repeats):
            sink = stdout() if stdout else None
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(argv, cwd=REPO, stdout=sink or subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, check=False)
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


@scenario("parse-floor", "open + read + json.loads of exactly the files read_bundle reads")
def parse_floor(ctx: Context) -> list[Row]:
    from loop_core.bundle import BUNDLE_FILES

    corpus = ctx.corpus()
    files = [os.path.join(d, name) for d in corpus.dirs for name in BUNDLE_FILES
             if os.path.isfile(os.path.join(d, name))]

    def run() -> None:
        loads = json.loads
        for path in files:
            with open(path, "rb") as fh:
                loads(fh.read())

    t = ctx.timed(run)
    return [Row("parse-floor", corpus.n, t.seconds, f"{len(files):,} files; {t.describe()}",
                {**t.extra(), "files": len(files)})]


@scenario("read", "read_bundle() over every bundle directory (strict validation included)")
def read(ctx: Context) -> list[Row]:
    from loop_core import read_bundle

    corpus = ctx.corpus()
    dirs = corpus.dirs

    def run() -> None:
        for d in dirs:
            read_bundle(d)

    t = ctx.timed(run)
    ratio = t.seconds / ctx.floor_seconds()
    return [Row("read", corpus.n, t.seconds, f"{ratio:.1f}x the floor; {t.describe()}",
                {**t.extra(), "vs_floor": ratio})]


@scenario("classify", "Engine.classify over bundles already in memory, default and reference packs")
def classify(ctx: Context) -> list[Row]:
    bundles = ctx.bundles()
    rows = []
    for pack in ("default", "reference"):
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
        mix = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
        rows.append(Row(
            f"classify ({pack})", len(bundles), t.seconds,
            f"{len(engine.pack.rules)} rules (version {engine.pack.version}), engine build "
            f"{build * 1000:.0f} ms; {t.describe()}; {mix}",
            {**t.extra(), "engine_build_s": build, "classes": dict(counts)}))
    return rows


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
    rows = []
    for label, argv, bundles, what in cases:
        ctx.timed_process(argv, runs=1)  # warm the page cache and the .pyc files
        t = ctx.timed_process(argv, runs=ctx.cold_runs)
        rows.append(Row(label, bundles, t.seconds,
                        f"{t.seconds * 1000:.0f} ms, {t.describe('ms')}; {what}",
                        {**t.extra(), "ms": t.seconds * 1000}, rate=False))
    return rows


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
    n = args.n or (QUICK_N if args.quick else DEFAULT_N)
    repeats = args.repeats or (1 if args.quick else 3)
    ctx = Context(
        n,
        args.seed,
        repeats,
        3 if args.quick else 5,
        log=lambda msg: print(msg, file=sys.stderr, flush=True),
    )

    selected = [s for s in SCENARIOS.values() if not only or s.name in only]
    load_start = _loadavg()
    rows: list[Row] = []
    for s in selected:
        ctx.log(f"running {s.name} ...")
        # Each scenario starts clean: no bundles of an earlier one kept alive for the GC to walk.
        ctx.release()
        gc.collect()
        produced = s.run(ctx)
        for row in produced:
            ctx.results.setdefault(s.name, row)
        rows.extend(produced)

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
        "commit": _commit(),
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
            f"{size / 1e6:.1f} MB, seed {args.seed}); warm page cache; 1-min load average "
            f"{meta['loadavg_start']} at start, {meta['loadavg_end']} at end\n"
        )
        print(markdown(rows))
    return 0


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # pragma: no cover - not on every platform
        return None


def _commit() -> str:
    """The checked-out commit, marked ``+dirty`` when the working tree has changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               text=True, capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def _version() -> str:
    try:
        from loop_core import __version__
    except ImportError:  # pragma: no cover
        return "?"
    return __version__


if __name__ == "__main__":
    sys.exit(main())
