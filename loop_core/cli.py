"""The ``loop-rules`` command line. The only module that imports click.

Each command parses its options, calls one library function and renders the
result. Domain errors become one clear line on stderr (exit 2 for a bad
pack or plugin); a traceback is never shown to the user.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import json
import os
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from .__version__ import __version__
from .errors import LoopError, RuleError
from .terminal import shell_word as _shell_word
from .terminal import shown as _shown

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class LoopClickError(click.ClickException):
    exit_code = 2

    def __init__(self, message: str) -> None:
        from .bundle import path_text

        # A path in the message that is not UTF-8 is written as its bytes (\xfe), as
        # everywhere else, not as the lone surrogate Python holds it as.
        super().__init__(path_text(message))


def _prints_to_stderr(data: bool = True) -> contextlib.AbstractContextManager[Any]:
    """While plugins run for a command whose stdout carries data (JSON, Markdown), what
    they print (a debugging print, a notice at import) goes to stderr: stdout holds the
    data only. The data itself is written after, or to a stdout saved before."""
    return contextlib.redirect_stdout(sys.stderr) if data else contextlib.nullcontext()


def _engine(rules: str, option: str = "--rules") -> Any:
    from .engine import Engine, UnknownPack

    try:
        with _prints_to_stderr():  # plugins are imported and their registration hooks run here
            engine = Engine.build(rules)
        _warn_if_shadowing(rules, option, engine)
        return engine
    except UnknownPack as e:
        raise LoopClickError(str(e.for_option(option))) from e
    except RuleError as e:
        raise LoopClickError(str(e) + _more_problems(rules)) from e
    except LoopError as e:
        raise LoopClickError(str(e)) from e


def _warn_if_shadowing(rules: str, option: str, engine: Any) -> None:
    """A pack name typed where a folder of that name stands: the registered pack
    wins, so an edited ./default would be left out without a word (a diff of the
    built-in pack with itself reports nothing changed). Said when the option was
    typed; its default naming a pack is no choice of the user's."""
    root = engine.pack.root
    if root is None or not Path(rules).is_dir() or Path(rules).resolve() == root.resolve():
        return
    ctx = click.get_current_context(silent=True)
    param = next((p for p in ctx.command.params if option in getattr(p, "opts", ())), None) if ctx else None
    if ctx is None or param is None or param.name is None:
        return
    if ctx.get_parameter_source(param.name) in (click.core.ParameterSource.DEFAULT,
                                                click.core.ParameterSource.DEFAULT_MAP):
        return
    click.echo(f"loop-rules: warning: {option} {_shown(rules)} is the registered pack {rules!r}, not the folder "
               f"{_shown(rules)} here: give {option} ./{_shown(rules)} for the folder", err=True)


def _more_problems(rules: str) -> str:
    """Where to see every problem of a pack that failed to load on its first, when it has
    more: loading stops at the first, and ``check`` collects them all."""
    from .engine import Engine

    try:
        Engine.build(rules, collect_errors=True)
    except RuleError as e:
        if len(e.problems) > 1:
            return (f" (one of {len(e.problems)} problems; `loop-rules check --rules {_shell_word(rules)}` "
                    "lists them all)")
    except LoopError:  # a plugin's failure on the second load: the first problem is still the one to fix
        pass
    return ""


def rules_option(f: F) -> F:
    return click.option(
        "--rules", "rules", default="default", show_default=True, metavar="PACK",
        help="Rule pack: a registered name (default, reference) or a directory of YAML rules.",
    )(f)


def catalog_option(f: F) -> F:
    return click.option(
        "--catalog", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
        help="Curated-model catalog (YAML). Accepted by classify so one command line serves "
             "classify and trust; it does not change a class.",
    )(f)


def format_option(*choices: str) -> Callable[[F], F]:
    def deco(f: F) -> F:
        return click.option("--format", "fmt", type=click.Choice(choices), default=choices[0],
                            show_default=True, help="Output format.")(f)
    return deco


SYSTEM_ERROR = 74  # sysexits' EX_IOERR: a read or write the system refused
# The refusals that are the machine's state, not a path the user got wrong (status 74, not 2).
SYSTEM_REFUSALS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})
INTERRUPTED = 130  # the shell's status for a command stopped by Ctrl-C (128 + SIGINT)
TERMINATED = 143  # and by SIGTERM (128 + 15)
OUTPUT_CLOSED = 141  # and by SIGPIPE (128 + 13): what read the output went away


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread: it unwinds (workers stopped, batches
    filed or left for the rerun) exactly as Ctrl-C does."""


def _terminate(_signum: int, _frame: Any) -> None:
    raise Terminated


def _guard(f: F) -> F:
    """Turn any LoopError escaping a command into one line on stderr, and Ctrl-C
    into one line and status 130 (click's own ``Aborted!`` exits 1, which here
    means a command that ran and found something)."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except LoopError as e:
            raise LoopClickError(str(e)) from e
        except KeyboardInterrupt as e:
            _stopped(e)
        except BrokenPipeError as e:
            if _output_gone():  # click would exit 1, which here means a finding
                raise _OutputClosed from e
            raise _Refused(e) from e  # another pipe (a plugin's connection): the system's refusal

    return wrapper  # type: ignore[return-value]


def _output_gone() -> bool:
    """Whether what reads stdout or stderr went away: the pipe reports an error to poll."""
    import select

    poll = select.poll()
    for stream in (sys.stdout, sys.stderr):
        try:
            poll.register(stream.fileno(), select.POLLOUT)
        except (AttributeError, OSError, ValueError):  # no file descriptor behind it (a test's capture)
            continue
    return any(events & (select.POLLERR | select.POLLHUP) for _fd, events in poll.poll(0))


class _Refused(Exception):
    """An OSError that click would take for a closed stdout (EPIPE), carried past it to
    :func:`main` to be reported as the system error it is."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class _OutputClosed(Exception):
    """What read the output went away (``| head``): not an OSError, so that click's
    own handling of a closed pipe (status 1) lets it through to :func:`main`."""


def _stopped(e: BaseException | None) -> NoReturn:
    """One line and the shell's status for Ctrl-C (130) or SIGTERM (143)."""
    terminated = isinstance(e, Terminated)
    click.echo(f"loop-rules: {'terminated' if terminated else 'interrupted'}", err=True)
    sys.exit(TERMINATED if terminated else INTERRUPTED)


def _strict_json(doc: Any) -> str:
    """``doc`` as indented JSON that any parser reads: a bundle may hold NaN or
    Infinity (the reader accepts them), which JSON has no number for, so they are
    written as strings (as classify writes them)."""
    from .jsontext import strict_dumps

    return strict_dumps(lambda value: json.dumps(value, indent=2), doc)


def _interrupt_behind(error: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM that ``error`` was raised while handling, if any: Python
    wraps one that lands in a class's ``__set_name__`` (a module imported late, a
    dataclass being made) in a RuntimeError, which read as an internal error."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from .bundle import describe_json_parser
    from .litscan import describe

    click.echo(f"loop-rules, version {__version__}")
    click.echo(f"literal scanner: {describe()}")
    click.echo(f"JSON parser: {describe_json_parser()}")
    ctx.exit()


@click.group(context_settings=CONTEXT_SETTINGS)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_show_version,
              help="Show the version, the literal scanner and JSON parser in use, and exit.")
def cli() -> None:
    """Classify, trust and deduplicate LLM-serving capture bundles.

    A capture bundle is a directory of JSON files (manifest.json, pt1-gate.json
    ... pt4-smoke.json) written when a model was booted. loop-rules reads each
    bundle strictly, puts every failure into one of six classes with a rule
    pack, and keys it for deduplication.

    \b
    Example:
        loop-rules run examples/pull-captures
        loop-rules classify examples/pull-captures
        loop-rules explain examples/pull-captures/qwen-qwen3-14b/20261126T101112Z
        loop-rules check --rules rules.d
    """


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform says)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


MAX_JOBS = 64  # --jobs at most


def jobs_count(value: object, param: click.Parameter | None = None, ctx: click.Context | None = None) -> int:
    """What ``--jobs`` asks for: a number of worker processes, or ``auto`` for one per usable CPU.

    :raises click.BadParameter: not a number, or outside 1 to :data:`MAX_JOBS`.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        jobs = value
    elif str(value).strip().lower() == "auto":
        return min(usable_cpus(), MAX_JOBS)  # the most --jobs takes, on a machine with more CPUs
    else:
        try:
            jobs = int(str(value).strip())
        except ValueError:
            raise click.BadParameter(f"{value!r} is not a number of processes or 'auto'", ctx, param) from None
    if jobs < 1:
        raise click.BadParameter(f"{jobs} is less than 1 (1: one process, 'auto': one per CPU)", ctx, param)
    if jobs > MAX_JOBS:
        # Far more processes than CPUs only slow a run down, and stretch each regex
        # search's wall-clock time limit until it can change a verdict.
        raise click.BadParameter(f"{jobs} is more than {MAX_JOBS} ('auto': one per CPU this process may use)",
                                 ctx, param)
    return jobs


def jobs_option(help: str) -> Callable[[F], F]:
    # A callback, not a click.ParamType: that class is generic from click 8.4 on, and not
    # before, so no one subclass of it type-checks against every click this runs with.
    return click.option("--jobs", "-j", type=str, default="1", show_default=True, metavar="N|auto",
                        callback=lambda ctx, param, value: jobs_count(value, param, ctx),
                        help=help + f" auto: one per CPU this process may use; at most {MAX_JOBS}.")


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@rules_option
@catalog_option
@format_option("table", "json", "jsonl")
@jobs_option("Worker processes for reading and classifying (output stays in discovery order).")
@_guard
def classify(paths: tuple[Path, ...], rules: str, catalog: Path | None, fmt: str, jobs: int) -> None:
    """Classify every bundle under PATHS.

    A PATH is a bundle directory or a folder searched recursively for bundles
    (folders whose names start with '_', as spools do, or '.' are skipped). Rows are printed
    as each bundle is classified, in the same order for any --jobs. Exit
    status 1 when any bundle could not be read, 0 otherwise.

    \b
    Example:
        loop-rules classify examples/pull-captures
        loop-rules classify --format jsonl --rules reference captures/ > verdicts.jsonl
        loop-rules classify --jobs 4 --format jsonl captures/ > verdicts.jsonl
    """
    from .batch import classify_rows, classify_text
    from .catalog import load_catalog

    engine = _engine(rules)
    load_catalog(catalog)  # never changes a class, but a malformed one is refused as trust refuses it
    if fmt == "table":
        bad = _classify_table(classify_rows(paths, engine, jobs=jobs, rules=rules))
    else:
        bad = _emit_texts(classify_text(paths, engine, indent=fmt == "json", jobs=jobs, rules=rules), fmt)
    if bad:
        sys.exit(1)


def _emit_rows(rows: Iterable[dict[str, Any]], fmt: str,
               table: Callable[[Iterable[dict[str, Any]]], int]) -> int:
    """Print rows as jsonl, one json array, or a table; return how many had reader errors."""
    if fmt == "table":
        return table(rows)
    from .jsontext import strict_dumps

    def dumps(row: dict[str, Any]) -> str:
        return json.dumps(row, indent=2 if fmt == "json" else None, ensure_ascii=False)

    return _emit_texts(((row.get("reader_error") is not None, strict_dumps(dumps, row)) for row in rows), fmt)


def _emit_texts(texts: Iterable[tuple[bool, str]], fmt: str) -> int:
    """Print ``(unreadable, JSON text)`` rows as jsonl or one json array; return the unreadable count.

    Both stream: a row is printed when it arrives, never collected. The json
    array is written element by element, byte for byte what
    ``json.dumps(rows, indent=2, ensure_ascii=False)`` gives. What a plugin
    prints while the rows are made goes to stderr: stdout holds the rows only.
    """
    out = sys.stdout
    bad = 0
    with contextlib.redirect_stdout(sys.stderr):
        if fmt == "jsonl":
            for unreadable, text in texts:
                bad += unreadable
                out.write(text + "\n")
            out.flush()
            return bad
        opening = "[\n  "
        for unreadable, text in texts:
            bad += unreadable
            # One level deeper inside the array: every line of the element two more spaces
            # (JSON strings hold no raw newline, so the only newlines are json's own).
            out.write(opening + text.replace("\n", "\n  "))
            opening = ",\n  "
        out.write("[]\n" if opening == "[\n  " else "\n]\n")
        out.flush()
    return bad


def _classify_table(rows: Iterable[dict[str, Any]]) -> int:
    counts: dict[str, int] = {}
    bad = successes = 0
    header = f"{'BUNDLE':40}  {'CLASS':19} {'TIER':12} {'RULE':40} DEDUP"
    click.echo(header)
    for row in rows:
        name = _short_name(row["bundle"])
        if row["reader_error"] is not None:
            bad += 1
            click.echo(f"{name:40}  {'(unreadable)':19} {'':12} {_shown(row['reader_error']['message'])}")
            continue
        # A success is classified too (unknown, as the reference has it: nothing failed);
        # the table says what it is, the JSON rows keep the class beside "failure": false.
        shown = row["failure_class"]
        if row.get("failure") is False:
            successes += 1
            shown = "success"
        else:
            counts[shown] = counts.get(shown, 0) + 1
        click.echo(f"{name:40}  {shown:19} {row['tier']:12} "
                   f"{row['matched_rule'] or '-':40} {row['dedup_hash']}")  # - : no rule decided
        for warning in row.get("warnings") or []:
            click.echo(f"{'':42}warning: {_shown(warning)}")  # a plugin's exception may quote capture text
    extra = {f"success{'es' if successes != 1 else ''}": successes, "unreadable": bad}
    click.echo(_summary_line(counts, extra, "none classified"))
    return bad


def _summary_line(counts: dict[str, int], extra: dict[str, int], empty: str) -> str:
    """A table's last line: ``N bundle(s): a 1, b 2; 3 successes; 1 unreadable``, the
    counts by name, then each nonzero ``extra`` count as a part of its own."""
    parts = [", ".join(f"{name} {n}" for name, n in sorted(counts.items()))] if counts else []
    parts += [f"{n} {name}" for name, n in extra.items() if n]
    total = sum(counts.values()) + sum(extra.values())
    return f"\n{total} bundle(s): {'; '.join(parts) or empty}"


def _short_name(path: str, width: int = 40) -> str:
    parts = Path(path).parts
    name = _shown("/".join(parts[-2:]) if len(parts) >= 2 else path)
    return name if len(name) <= width else "..." + name[-(width - 3):]


def _read_one_bundle(path: Path) -> Any:
    """The bundle at ``path``; a folder that holds bundles rather than being one
    (a model's folder of timestamped captures) is named as such, with its bundles.

    :raises BundleError: it cannot be read.
    """
    from .batch import discover_bundle_paths
    from .bundle import BUNDLE_FILES, path_text, read_bundle
    from .errors import BundleError

    try:
        return read_bundle(path)
    except BundleError:
        if path.is_dir() and not any((path / name).exists() for name in BUNDLE_FILES):
            inside = [p for p in discover_bundle_paths([path]) if p != str(path)]
            if inside:
                shown = ", ".join(path_text(p) for p in inside[:3]) + (", ..." if len(inside) > 3 else "")
                raise BundleError(f"{path_text(path)}: a folder of {len(inside)} bundle(s), not a bundle; "
                                  f"give one of them: {shown}", path=path) from None
        raise


@cli.command()
@click.argument("bundle", type=click.Path(exists=True, file_okay=False, path_type=Path))
@rules_option
@format_option("text", "json")
@_guard
def explain(bundle: Path, rules: str, fmt: str) -> None:
    """Show every matcher in order and why it did or did not match BUNDLE.

    For each rule: the selector's value and the regex span or literal found.
    The first matcher that decides wins; later ones are still shown.

    Exit status 0; 2 when BUNDLE cannot be read (the reader's error names the
    file) or the pack cannot be loaded.

    \b
    Example:
        loop-rules explain --rules reference examples/pull-captures/qwen-qwen3-14b/20261126T101112Z
    """
    from .bundle import path_text
    from .keys import dedup_key

    engine = _engine(rules)
    b = _read_one_bundle(bundle)
    with _prints_to_stderr(fmt == "json"):
        verdict, traces = engine.explain(b)
    key = dedup_key(b, verdict.failure_class.value)
    if fmt == "json":
        from .jsontext import strict_dumps

        click.echo(strict_dumps(lambda doc: json.dumps(doc, indent=2, ensure_ascii=False), {
            "bundle": path_text(bundle), "verdict": verdict.to_dict(), "dedup_hash": key.digest(),
            "matchers": [{"matcher": t.matcher, "tier": t.tier.value, "matched": t.decided,
                          "trace": [line for tr in t.traces for line in tr.lines()]}
                         for t in traces],
        }))
        return
    click.echo(f"bundle: {_shown(path_text(bundle))}")
    click.echo(f"pack: {engine.pack.name} (rules_version {engine.pack.version})")
    click.echo(f"error_substring: {verdict.error_substring!r}")
    click.echo(f"fingerprint: {verdict.fingerprint}\n")
    decided = False
    for t in traces:
        state = "MATCH" if t.decided else "no match"
        if t.decided and decided:
            state = "match (not used: an earlier matcher decided)"
        click.echo(f"[{t.tier.value}] {t.matcher}: {state}")
        decided = decided or t.decided
        for tr in t.traces:
            for line in tr.lines(1):
                click.echo(_shown(line))  # a plugin's trace or exception may quote capture text
    decider = f"rule {verdict.matched_rule}" if verdict.matched_rule else "no rule matched"
    click.echo(f"\nverdict: {verdict.failure_class.value} ({verdict.tier.value}, "
               f"{decider}); should_file={verdict.should_file} "
               f"review_queue={verdict.review_queue} dedup {key.digest()}")
    for warning in verdict.warnings:
        click.echo(f"warning: {_shown(warning)}")


@cli.command()
@rules_option
@click.option("--strict", is_flag=True, help="Exit 1 on warnings (lint) too, not only on errors.")
@_guard
def check(rules: str, strict: bool) -> None:
    """Validate a rule pack: report every problem at once.

    Loads and compiles every file, runs each rule's own examples, and probes
    every regex with long adversarial lines so a catastrophic pattern is
    caught before it meets real logs. Exit status 1 on any problem. (The
    other commands stop at a pack's first problem, and say how many there
    are when there are more.)

    Lint warnings: rules that can never win (an earlier matcher decides all
    of their match examples), rules without no_match examples, regexes with
    nested quantifiers, regexes searched over the whole of a long text (no
    literal, or no bound on the lines a match spans), regexes holding a
    control character (YAML reads "\\b" in double quotes as a backspace:
    quote patterns with single quotes), files that contribute nothing.

    \b
    Example:
        loop-rules check --rules rules.d
        loop-rules check --rules reference
    """
    from .maintain import lint_pack
    from .rules import Locator
    from .selftest import probe_regexes, run_examples

    try:
        engine = _engine_or_problems(rules)
    except RuleError as e:
        for problem in e.problems:
            click.echo(f"error: {problem}")
        click.echo(f"check: {len(e.problems)} problem(s)")
        sys.exit(1)
    problems: list[str] = []
    for case in run_examples(engine):
        if not case.ok:
            why = f" ({case.detail})" if case.detail else ""
            problems.append(f"{case.name}: expected {case.expected}, got {case.got}{why}")
    regex_errors, regex_warnings = probe_regexes(engine.pack.rules, engine.pack)
    problems.extend(regex_errors)
    warnings = regex_warnings + [lint.message for lint in lint_pack(engine)]
    locate = Locator(engine.pack.sources)
    for problem in problems:
        click.echo(f"error: {locate(problem)}")
    for warning in warnings:
        click.echo(f"warning: {locate(warning)}")
    pack = engine.pack
    click.echo(f"check: pack {pack.name}: {len(pack.rules)} rules, {len(pack.exact)} exact "
               f"fingerprints, {len(pack.files)} files; {len(problems)} problem(s), {len(warnings)} warning(s)")
    if problems or (strict and warnings):
        sys.exit(1)


def _engine_or_problems(rules: str) -> Any:
    from .engine import Engine

    return Engine.build(rules, collect_errors=True)


@cli.command()
@rules_option
@click.option("--verbose", "-v", is_flag=True, help="Show passing cases too.")
@click.option("--examples-only", is_flag=True,
              help="Replay only the rules' own examples, not the seed corpus: for a pack of your own that "
                   "does not cover every row of the design.")
@format_option("text", "json")
@_guard
def test(rules: str, verbose: bool, examples_only: bool, fmt: str) -> None:
    """Replay the seed corpus and every rule's examples against a pack.

    The seed corpus holds each Appendix-A row and each gate row as a bundle
    with its expected class. Exit status 1 when any case fails.

    \b
    Example:
        loop-rules test
        loop-rules test --rules reference -v
        loop-rules test --rules ./my-pack --examples-only
    """
    from .rules import Locator
    from .selftest import run_examples, run_seed_corpus

    engine = _engine(rules)
    with _prints_to_stderr(fmt == "json"):
        seeds = [] if examples_only else run_seed_corpus(engine)
        cases = seeds + run_examples(engine)
    failed = [c for c in cases if not c.ok]
    if fmt == "json":
        click.echo(json.dumps({
            "pack": engine.pack.name, "passed": len(cases) - len(failed), "failed": len(failed),
            "cases": [{"name": c.name, "ok": c.ok, "expected": c.expected, "got": c.got,
                       "detail": c.detail} for c in cases],
        }, indent=2))
    else:
        locate = Locator(engine.pack.sources)
        for c in cases:
            if c.ok and verbose:
                click.echo(f"PASS {c.name}")
            elif not c.ok:
                detail = f" ({c.detail})" if c.detail else ""
                click.echo(f"FAIL {locate(c.name)}: expected {c.expected}, got {c.got}{detail}")
        click.echo(f"{len(cases) - len(failed)} passed, {len(failed)} failed")
        seeds_failed = sum(not c.ok for c in seeds)
        if seeds_failed:  # a pack of one's own fails every row of the design it does not cover
            click.echo(f"loop-rules: note: {seeds_failed} of the failures are seed cases (the design's "
                       "Appendix-A and gate rows); --examples-only replays only the pack's own examples",
                       err=True)
    if failed:
        sys.exit(1)


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--catalog", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Curated-model catalog (YAML). Without one every anchor is derived and stops at validated.")
@click.option("--promote", is_flag=True, help="A maintainer vouches for these anchors (skips consensus).")
@click.option("--priors", "priors", type=click.Path(exists=True, path_type=Path), multiple=True,
              help="Earlier submissions to match consensus keys against (bundle or folder; repeatable).")
@click.option("--consensus-n", type=click.IntRange(min=1), default=2, show_default=True,
              help="Submissions with the same 9-tuple needed for consensus, this one included.")
@format_option("table", "json", "jsonl")
@_guard
def trust(paths: tuple[Path, ...], catalog: Path | None, promote: bool, priors: tuple[Path, ...],
          consensus_n: int, fmt: str) -> None:
    """Run the capture bundles under PATHS through the trust pipeline.

    Stages: raw -> candidate (the submission fingerprint re-derives; a bundle
    with no green capability stops here, reason no-green-capability) ->
    validated (a green capability, plausible topology, and consensus or
    --promote) -> tier1 (curated models only; emits the would-be calibration
    row). run passes only its success anchors through trust.
    Gate-only bundles have no trust verdict (stage null). A submission never
    counts twice toward consensus. Exit status 1 when any bundle could not be read.

    Consensus counts the --priors only: the bundles under PATHS are judged
    each on its own, not against each other (run counts every success of its
    captures folder). To judge a folder as run does, give it as --priors too.

    \b
    Example:
        loop-rules trust --catalog examples/catalog.yml examples/pull-captures
        loop-rules trust --priors archive/ --consensus-n 3 --format jsonl captures/
        loop-rules trust --catalog examples/catalog.yml --priors examples/pull-captures examples/pull-captures
    """
    from .batch import trust_rows

    with _prints_to_stderr(fmt != "table"):  # the plugins are loaded here; the rows are made in _emit_rows
        rows = trust_rows(paths, catalog=catalog, promote=promote, priors=priors, consensus_n=consensus_n,
                          warn=lambda message: click.echo(f"loop-rules: warning: {_shown(message)}", err=True))
    bad = _emit_rows(rows, fmt, _trust_table)
    if bad:
        sys.exit(1)


def _trust_table(rows: Iterable[dict[str, Any]]) -> int:
    bad = 0
    stages: dict[str, int] = {}
    click.echo(f"{'BUNDLE':40}  {'STAGE':10} {'REASON':32} GRADUATES")
    for row in rows:
        name = _short_name(row["bundle"])
        if row["reader_error"] is not None:
            bad += 1
            click.echo(f"{name:40}  {'unreadable':10} {_shown(row['reader_error']['message'])}")
            continue
        counted = row["stage"] or "no stage"  # a gate-only bundle
        stages[counted] = stages.get(counted, 0) + 1
        # Capability names are the capture's own keys: escaped like any capture text.
        click.echo(f"{name:40}  {row['stage'] or '-':10} {_shown(row['reason'] or 'gate-only bundle'):32} "
                   f"{_shown(', '.join(map(str, row['graduation_set'] or [])))}")
    click.echo(_summary_line(stages, {"unreadable": bad}, "none"))
    return bad


@cli.command("eval")
@click.option("--corpus", type=click.Path(exists=True, file_okay=False, path_type=Path), required=True,
              help="Directory of labelled case files (searched recursively).")
@rules_option
@click.option("--split", type=click.Choice(["all", "tune", "frozen", "holdout"]), default="all", show_default=True,
              help="Which split of the corpus to measure.")
@click.option("--compare", "compare_with", default=None, metavar="PACK",
              help="A second pack to measure on the same cases, shown beside the first.")
@format_option("table", "json")
@_guard
def eval_(corpus: Path, rules: str, split: str, compare_with: str | None, fmt: str) -> None:
    """Measure a pack on a labelled corpus of real logs: precision, recall, F1.

    Prints per-class precision, recall and F1, macro-F1, accuracy, accuracy on
    hard cases (whose text carries another class's words) and every miss.

    A case is a YAML file under --corpus with the keys id, engine, source,
    label (one of the six classes), hard (true or false), split (tune,
    frozen or holdout), rationale and excerpt (the container-log tail), and
    optionally actual. Misses leave the exit status 0; it is 2 when the split
    holds no case, a case file is malformed, or a pack cannot be loaded.

    \b
    Example:
        loop-rules eval --corpus tests/corpus/real --split tune --compare reference
    """
    from .evaluate import evaluate, load_cases

    every = load_cases(corpus)
    cases = [case for case in every if split in ("all", case.split)]
    if not every:  # a pack's directory, a folder of bundles, a mistyped path
        raise LoopClickError(f"{_shown(corpus)}: no case files here (YAML files with a label and an excerpt)")
    if not cases:
        from collections import Counter

        held = Counter(case.split for case in every)
        raise LoopClickError(f"{_shown(corpus)}: no cases in split {split!r} (it holds "
                             + ", ".join(f"{held[name]} in {name}" for name in sorted(held)) + ")")
    with _prints_to_stderr(fmt == "json"):
        reports = [evaluate(_engine(rules), cases, split)]
        if compare_with:
            reports.append(evaluate(_engine(compare_with, "--compare"), cases, split))
    # Named as the user named them, as diff does: a working copy of rules.d is called
    # `default` by its pack.yml, as the pack it is compared with.
    for r, given in zip(reports, (rules, compare_with)):
        r.pack = str(given)
    if fmt == "json":
        click.echo(json.dumps([r.to_dict() for r in reports], indent=2))
        return
    click.echo(f"{len(cases)} case(s), split {split}")
    # Each pack's cell: its name, then P, R and F1 right-aligned under their headings.
    widths = [max(12, len(r.pack)) for r in reports]
    header = f"{'class':20}" + "".join(f" | {r.pack:{w}} {'P':>5} {'R':>5} {'F1':>5}" for r, w in zip(reports, widths))
    click.echo(header + " | support")
    for cls, row in reports[0].per_class().items():
        cells = "".join(f" | {'':{w}} " + " ".join(_ratio(r.per_class()[cls][key])
                                                    for key in ("precision", "recall", "f1"))
                        for r, w in zip(reports, widths))
        click.echo(f"{cls:20}{cells} | {row['support']}")
    for label, attr in (("macro-F1", "macro_f1"), ("accuracy", "accuracy"), ("hard accuracy", "hard_accuracy")):
        click.echo(f"{label:20}" + "".join(f" | {_measure(getattr(r, attr)):>{w + 18}}"
                                           for r, w in zip(reports, widths)))
    for r in reports:
        click.echo(f"\nmisses of {r.pack} ({len(r.misses)}):")
        for miss in r.misses:
            hard = " (hard)" if miss["hard"] else ""
            by = "(no rule matched)" if miss["rule"] is None else f"by {_shown(miss['rule'])}"
            # The id is the case file's text: escaped as any text from a file is.
            click.echo(f"  {_shown(miss['id'])}: expected {miss['expected']}, got {miss['got']} {by}{hard}")


def _measure(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _ratio(value: Any) -> str:
    """A per-class precision, recall or F1 in its column: ``n/a`` when nothing was measured."""
    return f"{'n/a':>5}" if value is None else f"{value:5.2f}"


@cli.command()
@click.argument("bundle", required=False, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--as", "as_class", required=True, metavar="CLASS",
              help="The class a maintainer decided: one of the six above.")
@click.option("--rules", "rules_dir", default="rules.d", show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="The pack directory to write to (a directory, not a pack name).")
@click.option("--review", "review_hash", default=None, metavar="HASH",
              help="Learn from a review-queue entry (by dedup hash) instead of a bundle.")
@click.option("--captures", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="The captures folder whose _review-queue/ holds --review HASH, or BUNDLE's entry "
                   "(settled when what is learned decides it).")
@_guard
def learn(bundle: Path | None, as_class: str, rules_dir: Path, review_hash: str | None,
          captures: Path | None) -> None:
    """Teach the exact table: this failure's fingerprint is CLASS from now on.

    Appends the bundle's Tier-2 fingerprint -> CLASS to exact.yml in the pack
    directory --rules (keys quoted; the rest of the file kept). With
    --captures, the failure's review-queue entry is settled too. The next
    identical failure is an O(1) exact hit for every command that loads this
    directory; learned as unknown, it is dismissed, not queued again.
    Identical means the same first 240 characters of failure text (explain
    shows them as error_substring): for a log excerpt, the start of the
    log, which timestamps make unique; teach such a failure with a rule.

    \b
    CLASS is one of: genuine-oom, overlay-arch-drift, kernel-unsupported,
    quant-unsupported, benign-cold-start, unknown.

    --rules is a directory, not a pack name. After a plain `pip install`,
    the `default` pack is the copy inside the package, not ./rules.d: give
    classify, run and report `--rules rules.d` to use what you taught it.
    That installed copy is refused: an upgrade would replace what was
    learned.

    Exit status 0 when the fingerprint is learned or was already known; 2 when
    nothing was written: an unreadable bundle, an unknown review entry, a pack
    directory that is missing, invalid or the installed copy, or a fingerprint
    already learned as another class.

    \b
    Example:
        loop-rules learn examples/pull-captures/qwen-qwen3-14b/20261126T101112Z --as unknown \\
            --captures examples/pull-captures
        loop-rules learn --review f928faa9d075 --captures examples/pull-captures --as overlay-arch-drift
    """
    from .engine import Engine, condition_kinds, rule_packs
    from .maintain import check_class, waiting_fingerprint
    from .maintain import learn as learn_fingerprint
    from .plugins import make_plugin_manager
    from .trackers import ReviewQueue

    # What was asked is checked before where to write it, so a mistyped command is told
    # what it lacks first, wherever it runs.
    if review_hash and (bundle is not None or captures is None):
        raise LoopClickError("--review HASH needs --captures DIR and no BUNDLE")
    if not review_hash and bundle is None:
        raise LoopClickError("give a BUNDLE or --review HASH --captures DIR")
    check_class(as_class)
    if not rules_dir.is_dir():
        raise LoopClickError(f"--rules {_shown(rules_dir)}: no such pack directory (learn edits a pack's files: give "
                             "the directory of the pack to teach, such as a copy of rules.d, not a pack name)")
    pm = make_plugin_manager()
    # The folder, even one named as a registered pack (a copy named default): a name
    # alone loads the registered pack, and Path() drops the ./ that would say otherwise.
    pack = f"./{rules_dir}" if str(rules_dir) in rule_packs(pm) else str(rules_dir)

    def pack_to_edit() -> Any:
        try:
            return Engine.build(pack, pm, allow_empty=True)
        except RuleError as e:  # said as every command says it, and that the table is untouched
            raise LoopClickError(f"{e}{_more_problems(pack)}; nothing was learned") from e

    queue = None
    if review_hash:
        review_hash = review_hash.strip().lower()  # as `tracker show` takes a hash: in either case
        assert captures is not None  # checked above
        queue = ReviewQueue(captures)
        fingerprint, substring = waiting_fingerprint(queue, review_hash, pack_to_edit())
        what, origin = f"review-queue entry {review_hash}", f"review {review_hash}"
    else:
        assert bundle is not None  # checked above
        read = _read_one_bundle(bundle)
        ctx = pack_to_edit().context(read)
        fingerprint, substring = ctx.fingerprint, ctx.error_substring
        what, origin = _shown(bundle), f"bundle {bundle.name}"
        if captures is not None:
            from .keys import dedup_key
            from .trackers import occurrence_list

            queue = ReviewQueue(captures)
            review_hash = dedup_key(read, "unknown").digest()
            doc = queue.entry(review_hash)  # a damaged entry stops learn before the table changes
            if doc is not None:
                occurrence_list(doc, queue.directory / f"{review_hash}.json")
    if not substring.strip():
        # The fingerprint hashes the error text with the architecture and engine: without
        # text it would stand for every such failure (every gate refusal) of that pair.
        raise LoopClickError(f"{what}: has no error text (a gate refusal, or a failure without a log), so its "
                             f"fingerprint {fingerprint} would decide every such failure of this architecture "
                             f"and engine; write a rule instead (on $.signal.abort_reason for a gate refusal)")
    added = learn_fingerprint(rules_dir, fingerprint, as_class, condition_kinds(pm), note=origin)
    settled = ""
    if queue is not None and review_hash:
        from .maintain import settle_review_entry

        taken, left = settle_review_entry(queue, review_hash, Engine.build(pack, pm, allow_empty=True), fingerprint)
        if taken and not left:
            settled = "; removed from the review queue"
        elif taken:
            settled = (f"; {taken} occurrence(s) taken out of review-queue entry {review_hash}, {left} with "
                       f"another error left in it")
        elif left:
            settled = f"; review-queue entry {review_hash} kept: none of its {left} occurrence(s) is decided by this"
    click.echo(f"{'learned' if added else 'already known'}: {fingerprint} -> {as_class} in "
               f"{_shown(rules_dir / 'exact.yml')}" + settled)
    note = _registered_elsewhere(pack, pm)
    if note:
        click.echo(f"loop-rules: note: {note}", err=True)


def _registered_elsewhere(pack: str, pm: Any) -> str | None:
    """What to tell someone who edited a copy of a registered pack (``./rules.d`` after
    a plain ``pip install``: its ``pack.yml`` says ``default``) that the pack's name does
    not load: the commands they run next would not see the edit."""
    from .engine import Engine, rule_packs

    name = Engine.build(pack, pm, allow_empty=True).pack.name
    info = rule_packs(pm).get(name)
    if info is None or info.path.resolve() == Path(pack).resolve():
        return None
    return (f"--rules {name} loads {_shown(info.path)}, not {_shown(pack)}: give classify, run and report "
            f"--rules {_shown(pack)} to use what was learned (without it they decide this failure as before)")


@cli.command()
@click.argument("corpus", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--rules", "new_rules", required=True, metavar="PACK", help="The changed pack (name or directory).")
@click.option("--against", "old_rules", default="default", show_default=True, metavar="PACK",
              help="The pack to compare with.")
@format_option("table", "markdown", "json")
@click.option("--fail-on-change", is_flag=True,
              help="Exit 1 when any bundle changes, or when no bundle could be read (nothing compared).")
@_guard
def diff(corpus: tuple[Path, ...], new_rules: str, old_rules: str, fmt: str, fail_on_change: bool) -> None:
    """Preview a rule change: bundles of CORPUS whose class, rule or dedup hash moves.

    Counts each class transition; --format markdown is ready for a pull-request
    comment. Shadow rules of the new pack are listed with how often they would match.
    Unreadable bundles are counted, not compared.

    Exit status 0 (whatever changed, unless --fail-on-change: then 1 when a
    bundle changed or none could be read); 2 when a pack cannot be loaded.

    \b
    Example:
        loop-rules diff --rules ./my-rules.d --against default captures/
        loop-rules diff --rules rules.d --against reference --format markdown tests/conformance/bundles
    """
    from .maintain import diff_packs

    with _prints_to_stderr(fmt != "table"):
        report = diff_packs(corpus, _engine(old_rules, "--against"), _engine(new_rules))
    report.old_pack, report.new_pack = old_rules, new_rules  # as the user named them
    if fmt == "json":
        click.echo(_strict_json(report.to_dict()))
    elif fmt == "markdown":
        click.echo(report.markdown(), nl=False)
    else:
        unreadable = f"; {report.unreadable} unreadable, not compared" if report.unreadable else ""
        click.echo(f"{report.bundles} bundle(s): {len(report.changes)} changed between {report.old_pack} "
                   f"and {report.new_pack}{unreadable}")
        for (a, b), n in sorted(report.transitions().items()):
            click.echo(f"  {a:20} -> {b:20} {n}")
        if report.same_class():
            click.echo(f"  {report.same_class()} kept their class under another rule or dedup hash")
        for c in report.changes:
            click.echo(f"  {_short_name(c.bundle)}: {c.old_class} ({c.old_rule or 'no rule'}) -> {c.new_class} "
                       f"({c.new_rule or 'no rule'}) [{', '.join(c.fields())}]")
        for rule, n in sorted(report.shadow_hits.items()):
            click.echo(f"  shadow rule {rule} would match {n} bundle(s)")
    if report.unreadable == report.bundles:  # a mistyped or empty CORPUS: one unreadable bundle, not a pass
        click.echo(f"loop-rules: no bundle could be read: nothing compared; `loop-rules classify "
                   f"{' '.join(_shell_word(path) for path in corpus)}` names the errors", err=True)
        if fail_on_change:
            sys.exit(1)
    if fail_on_change and report.changes:
        sys.exit(1)


@cli.command()
@click.argument("captures", type=click.Path(exists=True, file_okay=False, path_type=Path))
# A str, not a Path: Path("./-") is Path("-"), and ./- is how a file named - is given.
@click.option("--out", "out", type=click.Path(dir_okay=False), default="report.html",
              show_default=True, help="Where to write the HTML page; - writes it to stdout (and the line "
                                      "counting the bundles to stderr). A file named - is ./-.")
@rules_option
@click.option("--catalog", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Curated-model catalog for the trust funnel.")
@_guard
def report(captures: Path, out: str, rules: str, catalog: Path | None) -> None:
    """Write a self-contained HTML triage report of CAPTURES.

    Counts by class, the top dedup groups, the OOM measured-vs-predicted delta,
    the review queue and the trust funnel, drawn as inline SVG: one file, no
    network assets, nothing filed. The line printed at the end counts the
    unreadable bundles (the page lists them).

    Exit status 0 (unreadable bundles included); 2 when the pack or the
    catalog cannot be loaded, CAPTURES/_review-queue is not a folder, or the
    page cannot be written where --out points; 74 when the system refuses
    the write (a full disk).

    \b
    Example:
        loop-rules report examples/pull-captures --out triage.html
        loop-rules report examples/pull-captures --out - > triage.html
    """
    from .catalog import load_catalog
    from .report import collect_triage, render_html

    to_stdout = out == "-"
    # With --out -, stdout holds the page alone: what plugins print on the way goes to stderr.
    with contextlib.redirect_stdout(sys.stderr) if to_stdout else contextlib.nullcontext():
        data = collect_triage(captures, _engine(rules), load_catalog(catalog))
    # Named as the user named it, as diff and eval do: a working copy of rules.d is called
    # `default` by its pack.yml, and the page is passed around as the report of that pack.
    data.pack = rules
    for problem in data.review_problems:
        click.echo(f"loop-rules: warning: skipped {_shown(problem)}", err=True)
    page = render_html(data)
    if to_stdout:
        stream = getattr(sys.stdout, "buffer", None)  # None: not a text file (a test's capture)
        if stream is None:
            sys.stdout.write(page)
        else:
            stream.write(page.encode("utf-8"))  # the page says charset utf-8, whatever the locale's encoding
        (stream or sys.stdout).flush()
    else:
        try:
            Path(out).write_text(page, encoding="utf-8")
        except OSError as e:
            if e.errno in SYSTEM_REFUSALS:  # the machine's doing, not the path's: status 74
                raise OSError(e.errno, e.strerror, os.fspath(out)) from e
            raise LoopClickError(f"--out {_shown(out)}: could not write the report: {e.strerror or e}") from e
    unreadable = f", {len(data.unreadable)} unreadable" if data.unreadable else ""
    # The counts say whether the page is worth reading (a mistyped CAPTURES is one unreadable
    # bundle): on stderr when the page is on stdout, so a pipe gets the page alone.
    click.echo(f"wrote {'the report to stdout' if to_stdout else _shown(out)} ({data.bundles} bundle(s), "
               f"{sum(data.by_class.values())} failure(s), {len(data.groups)} dedup group(s){unreadable})",
               err=to_stdout)


def _tracker_spec(name: str, pm: Any = None, repo: str | None = None) -> tuple[Any, str]:
    """The registered tracker ``name`` and its plugin (of ``pm``, the command's plugins
    when it has them); a usage error for any other name, or for a ``repo`` given to a
    tracker that takes none."""
    from .plugins import collect, make_plugin_manager
    from .trackers import TrackerSpec

    specs: dict[str, tuple[Any, str]] = collect(pm or make_plugin_manager(), "loop_register_trackers",
                                                lambda t: t.name, "tracker", TrackerSpec, ("factory",))
    if name not in specs:
        raise LoopClickError(f"--tracker {name!r}: unknown tracker (trackers: {', '.join(sorted(specs))})")
    spec = specs[name][0]
    if repo is not None and not getattr(spec, "takes_repo", True):
        # `run captures --repo acme/rig` without --tracker github filed into SQLite, quietly.
        raise LoopClickError(f"--repo {_shown(repo)}: the {name} tracker files locally and takes no "
                             "repository; give --tracker github to file into GitHub")
    return specs[name]


def _tracker(name: str, captures: Path, repo: str | None, pm: Any = None) -> Any:
    from .errors import failure_text
    from .trackers import TrackerOptions

    spec, plugin = _tracker_spec(name, pm, repo)
    try:
        made = spec.factory(TrackerOptions(Path(captures), repo=repo))
    except SystemExit as e:  # a plugin's sys.exit must not end the command quietly with its status
        raise LoopClickError(f"--tracker {name!r}: plugin {plugin!r}: its factory raised {failure_text(e)}") from e
    except OSError as e:  # the system refused what the store needs: status 74 still, but say whose store
        raise OSError(e.errno, f"--tracker {name!r} (plugin {plugin!r}): {e.strerror or e}", e.filename) from e
    except LoopError:
        raise  # a TrackerError: a problem the user must fix, said by the plugin
    except Exception as e:
        from .plugins import BUILTIN_PLUGINS

        if plugin in BUILTIN_PLUGINS:
            raise  # a bug of loop-rules itself: an internal error with its traceback
        # A third-party factory's bug (a wrong signature, say) is the plugin's to fix, not an internal error.
        raise LoopClickError(f"--tracker {name!r}: plugin {plugin!r}: its factory raised {failure_text(e)}") from e
    if not callable(getattr(made, "file", None)):
        # A run without a tracker is a dry run: a factory's None must not turn into one.
        raise LoopClickError(f"--tracker {name!r}: plugin {plugin!r} made {type(made).__name__}, "
                             "not a tracker (an object with file(draft, occurrence))")
    return made


@cli.command()
@click.argument("captures", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--tracker", "tracker_name", default="sqlite", show_default=True, metavar="NAME",
              help="Where failures are filed: sqlite (embedded, <captures>/_loop/tracker.sqlite), "
                   "github (gh CLI, needs --repo or a gh default repo), spool (offline files), or one "
                   "a plugin registers.")
@click.option("--repo", default=None, metavar="OWNER/NAME", help="GitHub repository for --tracker github (sqlite and spool refuse it).")
@rules_option
@click.option("--catalog", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Curated-model catalog for the trust pipeline.")
@click.option("--dry-run", is_flag=True, help="Classify and count, but file and queue nothing.")
@jobs_option("Worker processes for reading and classifying (filing stays in one process).")
@click.option("--batch", type=click.IntRange(min=1), default=256, show_default=True,
              help="Failures filed per tracker transaction (a batch also goes out after 0.25 s); "
                   "unknowns are written to the review queue four times as many at once (or after "
                   "1 s). 1 writes each one at once.")
@format_option("table", "json")
@_guard
def run(captures: Path, tracker_name: str, repo: str | None, rules: str, catalog: Path | None,
        dry_run: bool, jobs: int, batch: int, fmt: str) -> None:
    """The main job: classify every bundle under CAPTURES and file the failures.

    Fileable failures become one deduplicated issue each (a +1 on repeats,
    verified against the issue's tuple; a submission is never counted twice),
    unknowns go to the review queue (<captures>/_review-queue/), benign cold
    starts are suppressed, and success anchors run through the trust pipeline.
    Unreadable bundles are counted and listed, never fatal. Running again over
    the same captures files nothing new.

    Exit status 0 when the run completed (unreadable bundles, spooled
    occurrences and skipped review entries included: the summary counts them);
    2 when it could not run (an invalid pack or catalog, an unknown tracker, a
    spool or review queue that cannot be written, a damaged tracker); 74 when
    the system refuses a write (a full disk).

    \b
    Example:
        loop-rules run examples/pull-captures
        loop-rules run examples/pull-captures --tracker github --repo acme/llm-rig
        loop-rules run examples/pull-captures --dry-run --format json
    """
    from .catalog import load_catalog
    from .pipeline import run_captures

    engine = _engine(rules)
    cat = load_catalog(catalog)
    out = sys.stdout
    # With --format json, what plugins print on the way goes to stderr: stdout holds the summary only.
    with contextlib.redirect_stdout(sys.stderr) if fmt == "json" else contextlib.nullcontext():
        if dry_run:
            _tracker_spec(tracker_name, engine.pm, repo)  # a dry run in CI must refuse what the real run would
        tracker = None if dry_run else _tracker(tracker_name, captures, repo, engine.pm)
        bar = None
        progress = None
        if sys.stderr.isatty() and fmt == "table":
            def progress(done: int, total: int) -> None:
                nonlocal bar
                if bar is None:
                    bar = click.progressbar(length=total, label="classifying", file=sys.stderr)
                    bar.__enter__()
                bar.update(1)
        try:
            summary = run_captures(captures, engine, tracker, catalog=cat, dry_run=dry_run, jobs=jobs,
                                   rules=rules, progress=progress, batch=batch)
        except BaseException:
            # What went wrong before the run stopped (why it spooled, say, when the spool
            # then could not be written): the error itself says only why it stopped.
            _tell_problems(tracker, None)
            raise
        finally:
            if bar is not None:
                bar.__exit__(None, None, None)
            if tracker is not None:
                _close(tracker)
        _tell_problems(tracker, captures)
    data = summary.to_dict()
    if fmt == "json":
        click.echo(_strict_json(data), file=out)
        return
    _run_table(captures, data, tracker_name)


def _close(tracker: Any) -> None:
    """Close a tracker after its filing; a close that fails (a plugin's) is said on
    stderr, not allowed to hide the summary of what was filed."""
    from .errors import PLUGIN_FAILURES, failure_text, show_traceback

    try:
        tracker.close()
    except PLUGIN_FAILURES as e:  # the filing is done; report and go on (a sys.exit too)
        message = f"tracker {getattr(tracker, 'name', '?')!r}: close failed: {failure_text(e)}"
        show_traceback(message, e)
        click.echo(f"loop-rules: warning: {message}", err=True)


def _tell_problems(tracker: Any, captures: Path | None) -> None:
    """Say on stderr what a tracker met (the github tracker's failed ``gh`` calls), and
    where the occurrences it could not file wait; a tracker without ``problems`` met none."""
    problems = getattr(tracker, "problems", None)
    if not problems:
        return
    for problem in problems:
        click.echo(f"loop-rules: {getattr(tracker, 'name', 'tracker')}: {_shown(problem)}", err=True)
    if captures is not None:
        from .trackers import DEDUP_QUEUE

        repo = getattr(tracker, "repo", None)
        target = f" --repo {_shell_word(repo)}" if isinstance(repo, str) and repo else ""
        click.echo(f"loop-rules: what could not be filed waits in {_shown(captures / DEDUP_QUEUE)}; "
                   f"`loop-rules spool replay {_shell_word(captures)} --tracker {_shell_word(tracker.name)}"
                   f"{target}` files it", err=True)


def _run_table(captures: Path, data: dict[str, Any], tracker_name: str) -> None:
    click.echo(f"{data['bundles']} bundle(s) under {_shown(captures)}, rules_version {data['rules_version']}")
    if data["by_class"]:
        click.echo("failures by class:")
        for cls, n in data["by_class"].items():
            click.echo(f"  {cls:20} {n}")
    if data["dry_run"]:
        click.echo(f"dry run: {data['would_file']} would be filed; nothing was written")
    else:
        click.echo(f"filed into {data['tracker']}: {data['filed_new']} new, {data['plus_one']} +1, "
                   f"{data['already_counted']} already counted, {data['spooled']} spooled")
        settled = f", {data['review_settled']} decided since and taken out" if data["review_settled"] else ""
        dismissed = f"; dismissed (learned as unknown): {data['dismissed']}" if data["dismissed"] else ""
        click.echo(f"review queue: {data['review_queued']} newly queued{settled}; "
                   f"suppressed (benign): {data['suppressed']}{dismissed}")
    anchors = data["anchors"]
    click.echo(f"success anchors: raw {anchors['raw']}, candidate {anchors['candidate']}, "
               f"validated {anchors['validated']}, tier1 {anchors['tier1']}")
    if data["warnings"]:
        click.echo("warnings (bundles whose verdict carried each):")
        for message, count in list(data["warnings"].items())[:10]:
            click.echo(f"  {count:>6}  {_shown(message)}")
        if len(data["warnings"]) > 10:
            click.echo(f"  ... {len(data['warnings']) - 10} more in --format json")
    if data["reader_errors"]:
        click.echo(f"unreadable bundles: {data['reader_errors']}")
        for err in data["errors"]:
            click.echo(f"  {_shown(err['message'])}")
    if not data["dry_run"] and tracker_name == "sqlite":
        click.echo(f"browse: loop-rules tracker list {_shell_word(captures)}")


@cli.group()
def tracker() -> None:
    """Browse the embedded SQLite tracker of a captures folder.

    \b
    Example:
        loop-rules tracker list examples/pull-captures
        loop-rules tracker show examples/pull-captures 1
    """


@tracker.command("list")
@click.argument("captures", type=click.Path(exists=True, file_okay=False, path_type=Path))
@format_option("table", "json")
@_guard
def tracker_list(captures: Path, fmt: str) -> None:
    """List the issues of CAPTURES/_loop/tracker.sqlite with their occurrence counts.

    Exit status 2 when there is no tracker there yet (no file, or an empty
    one) or the file is not a tracker this version wrote.

    \b
    Example:
        loop-rules tracker list examples/pull-captures
    """
    db = _open_tracker(captures)
    try:
        issues = db.issues()
    finally:
        db.close()
    if fmt == "json":
        click.echo(_strict_json(issues))
        return
    click.echo(f"{'#':>4}  {'COUNT':>5}  {'CLASS':19} {'DEDUP':12}  TITLE")
    for i in issues:
        click.echo(f"{i['id']:>4}  {i['occurrences']:>5}  {_shown(i['failure_class']):19} "
                   f"{_shown(i['dedup_hash']):12}  {_shown(i['title'])}")
    click.echo(f"\n{len(issues)} issue(s), {sum(i['occurrences'] for i in issues)} occurrence(s)")


@tracker.command("show")
@click.argument("captures", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("issue")
@format_option("text", "json")
@_guard
def tracker_show(captures: Path, issue: str, fmt: str) -> None:
    """Show one issue: labels, body and occurrences.

    ISSUE is an issue number (7 or #7) or a dedup hash, in either case, whole
    or its first 6 digits or more (a prefix that starts several hashes is an
    error naming them). Digits alone are a number, unless there are twelve
    of them or no issue has that number. The hash of an unknown failure is
    no issue: such failures wait in the review queue (loop-rules review list).

    Occurrences are listed by capture time, the earliest first. Each shows
    its capture time, the first 16 digits of its
    submission fingerprint (manifest- and 16 digits of the manifest's digest
    for a bundle without one, such as a gate-only bundle) and its bundle.

    Exit status 0; 2 when CAPTURES has no tracker yet or no issue matches ISSUE.

    \b
    Example:
        loop-rules tracker show examples/pull-captures 1
        loop-rules tracker show examples/pull-captures 68d619
    """
    db = _open_tracker(captures)
    try:
        found = db.issue(issue)
    finally:
        db.close()
    if found is None:
        raise LoopClickError(f"{captures}: no issue {issue!r} in the tracker{_not_an_issue(captures, issue)}")
    if fmt == "json":
        click.echo(_strict_json(found))
        return
    click.echo(f"#{found['id']} {_shown(found['title'])}")
    click.echo(f"labels: {_shown(', '.join(found['labels']))}")
    click.echo(f"state: {found['state']}; occurrences: {found['occurrences']}\n")
    click.echo(_shown(found["body"], keep="\n\t"))
    click.echo("\noccurrences:")
    submissions = [_shown(_short_submission(occ["submission"])) for occ in found["occurrence_list"]]
    width = max(map(len, submissions), default=0)
    for occ, submission in zip(found["occurrence_list"], submissions):
        click.echo(f"  {_shown(occ['utc_ts'])}  {submission:{width}}  {_shown(occ['bundle'])}")


def _short_submission(submission: str) -> str:
    """A submission's first 16 digits; for one a bundle without a fingerprint is known by,
    ``manifest-<sha256>`` (a gate-only bundle), ``manifest-`` and the first 16 of its digest."""
    prefix = "manifest-" if submission.startswith("manifest-") else ""
    return prefix + submission[len(prefix):len(prefix) + 16]


def _not_an_issue(captures: Path, ref: str) -> str:
    """What else ``ref``, which names no issue, may be: the review-queue entry of an
    unknown failure (queued, never filed), or a hash prefix too short to name one."""
    import re

    from .trackers import MIN_HASH_PREFIX, ReviewQueue

    text = ref.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{1,12}", text):
        return ""
    queue = ReviewQueue(captures).directory
    if len(text) >= MIN_HASH_PREFIX:
        with contextlib.suppress(OSError):  # no queue, or not a folder: nothing waits there
            entries = sorted(p for p in queue.glob(f"{text}*.json") if re.fullmatch(r"[0-9a-f]{12}", p.stem))
            listed = f"`loop-rules review list {_shell_word(captures)}` lists them"
            if len(entries) == 1:
                return (f": it is review-queue entry {entries[0].stem}, {entries[0]} (unknown failures wait "
                        f"there, not filed); {listed}")
            if entries:
                return (f": review-queue entries {', '.join(p.stem for p in entries)} start with it (unknown "
                        f"failures wait there, not filed); {listed}")
        return ""
    if text.isdigit():
        return ""
    return f" (a dedup hash prefix needs at least {MIN_HASH_PREFIX} digits)"


def _open_tracker(captures: Path) -> Any:
    from .trackers import DEDUP_QUEUE, STATE_DIR, SqliteTracker

    path = Path(captures) / STATE_DIR / "tracker.sqlite"
    if path.parent.exists() and not path.parent.is_dir():  # a run would refuse it too: say so now
        raise LoopClickError(f"{path.parent}: is a file where the tracker's folder goes; move it aside")
    empty = False
    with contextlib.suppress(OSError):  # no file (or one that cannot be read: said when it is opened)
        empty = path.stat().st_size == 0  # a run killed as it made the file, or a `touch`
    if empty or not path.exists():
        quoted = _shell_word(captures)
        spool = Path(captures) / DEDUP_QUEUE
        spooled = 0
        with contextlib.suppress(OSError):  # no spool, or not a folder: nothing waits there
            spooled = sum(1 for p in spool.iterdir() if p.suffix == ".json")
        if spooled:  # a run filed, but into the spool (--tracker spool, or a tracker it could not reach)
            raise LoopClickError(f"{path}: {'an empty file, ' if empty else ''}no tracker yet; {spooled} spool "
                                 f"file(s) wait in {spool}: `loop-rules spool replay {quoted}` files them into it")
        raise LoopClickError(f"{path}: {'an empty file, ' if empty else ''}no tracker yet; "
                             f"run `loop-rules run {quoted}` first")
    return SqliteTracker(path, readonly=True)


@cli.group()
def review() -> None:
    """The review queue: unknown failures waiting for a maintainer.

    \b
    Example:
        loop-rules review list examples/pull-captures
    """


@review.command("list")
@click.argument("captures", type=click.Path(exists=True, file_okay=False, path_type=Path))
@format_option("table", "json")
@_guard
def review_list(captures: Path, fmt: str) -> None:
    """List CAPTURES/_review-queue/ entries: dedup hash, model, occurrences, error.

    An entry leaves the queue once a maintainer decides it: `loop-rules learn
    --review HASH --captures CAPTURES --as CLASS` pins its class (unknown
    too: it is then dismissed), or a new rule decides it and the next run
    takes out what the pack now decides.

    Exit status 0, or 2 when CAPTURES/_review-queue is not a folder.

    \b
    Example:
        loop-rules review list examples/pull-captures
        loop-rules review list --format json examples/pull-captures
    """
    from .trackers import ReviewQueue, review_count, review_error

    problems: list[str] = []
    items = ReviewQueue(captures).items(problems)
    for problem in problems:  # one damaged file does not hide the others
        click.echo(f"loop-rules: warning: skipped {_shown(problem)}", err=True)
    if fmt == "json":
        click.echo(_strict_json(items))
        return
    click.echo(f"{'DEDUP':12}  {'COUNT':>5}  {'MODEL':40}  ERROR")
    total = 0
    for item in items:
        error = review_error(item)
        held = review_count(item)
        count = "?" if held is None else held  # a file edited by hand
        total += held or 0
        click.echo(f"{_shown(item.get('dedup_hash'))[:12]:12}  {count:>5}  "
                   f"{_shown(item.get('model_slug'))[:40]:40}  {_shown(error)[:60]}")
    # The occurrences are what `run` counts as queued: one entry holds every capture of its failure.
    click.echo(f"\n{len(items)} item(s) waiting for review ({total} occurrence(s))")


@cli.group()
def spool() -> None:
    """The offline spool: failures that could not reach a tracker.

    \b
    Example:
        loop-rules spool replay examples/pull-captures --tracker github --repo acme/llm-rig
    """


@spool.command("replay")
@click.argument("captures", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--tracker", "tracker_name", default="sqlite", show_default=True, metavar="NAME",
              help="Tracker to drain the spool into: sqlite, github, or one a plugin registers.")
@click.option("--repo", default=None, metavar="OWNER/NAME", help="GitHub repository for --tracker github (sqlite and spool refuse it).")
@_guard
def spool_replay(captures: Path, tracker_name: str, repo: str | None) -> None:
    """File everything in CAPTURES/_dedup-queue/ into a tracker, exactly once.

    A spool file is removed once all of its occurrences landed; an
    interrupted replay can simply be run again. Exit status 1 when a file
    stays spooled: the tracker could not take one of its occurrences (run
    the replay again later), or the file is damaged (named on stderr, left
    in place).

    \b
    Example:
        loop-rules spool replay examples/pull-captures
        loop-rules spool replay examples/pull-captures --tracker github --repo acme/llm-rig
    """
    from .trackers import SpoolTracker, replay_spool

    if tracker_name == "spool":
        raise LoopClickError("--tracker spool: replaying the spool into itself does nothing")
    target = _tracker(tracker_name, captures, repo)
    try:
        results = replay_spool(SpoolTracker(captures), target)
    except BaseException:
        _tell_problems(target, None)  # what went wrong before the replay stopped, as in `run`
        raise
    finally:
        _close(target)
    _tell_problems(target, None)  # what is left stays in the spool, as the summary says
    counts: dict[str, int] = {}
    for r in results:
        if r.problem is not None:
            click.echo(f"loop-rules: {r.problem}; left in the spool", err=True)
        for fr in r.results:
            counts[fr.action.value] = counts.get(fr.action.value, 0) + 1
    drained = sum(r.drained for r in results)
    click.echo(f"replayed {len(results)} spool file(s) into {tracker_name}: "
               + (", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                  or ("nothing filed" if results else "nothing to do"))
               + f"; {drained} drained, {len(results) - drained} still spooled")
    if drained < len(results):
        sys.exit(1)


@cli.group()
def labels() -> None:
    """GitHub labels used by the github tracker.

    \b
    Example:
        loop-rules labels bootstrap --repo acme/llm-rig
    """


@labels.command("bootstrap")
@click.option("--repo", default=None, metavar="OWNER/NAME", help="GitHub repository (default: gh's).")
@_guard
def labels_bootstrap(repo: str | None) -> None:
    """Create the six class:* labels in a GitHub repository (idempotent, needs gh).

    Prints ok or FAILED per class. Exit status 1 when any label could not be
    created (what gh said is on stderr).

    \b
    Example:
        loop-rules labels bootstrap --repo acme/llm-rig
    """
    from .github import GitHubTracker

    gh = GitHubTracker(Path("."), repo=repo)
    results = gh.bootstrap_labels()
    for name, ok in results.items():
        click.echo(f"{'ok' if ok else 'FAILED':6} {name}")
    _tell_problems(gh, None)
    if not all(results.values()):
        sys.exit(1)


@cli.command()
@_guard
def plugins() -> None:
    """Print the loaded plugins and what they contribute, as JSON.

    Each plugin with the hooks it implements, then the matcher chain in
    evaluation order, the condition kinds, the rule packs, and the trackers
    --tracker can name (with whether each takes --repo).

    Third-party plugins load from the 'loop_rules' entry-point group; set
    LOOP_RULES_DISABLE_PLUGIN_AUTOLOAD=1 to load only the built-ins. Exit
    status 2 when a plugin cannot be loaded or registers something twice.

    \b
    Example:
        loop-rules plugins
    """
    from .conditions import ConditionKind
    from .engine import condition_kinds, registered_matchers, rule_packs
    from .plugins import collect, make_plugin_manager, plugin_report
    from .trackers import TrackerSpec

    with _prints_to_stderr():
        pm = make_plugin_manager()
        matchers = registered_matchers(pm)  # checked as a run checks them: a bad order cannot be sorted
        kinds: dict[str, tuple[Any, str]] = collect(pm, "loop_register_conditions", lambda k: k.name,
                                                    "condition kind", ConditionKind)
        condition_kinds(pm)
        trackers: dict[str, tuple[Any, str]] = collect(pm, "loop_register_trackers", lambda t: t.name, "tracker",
                                                       TrackerSpec, ("factory",))
    report = {
        "plugins": plugin_report(pm),
        "matchers": [{"name": name, "tier": m.tier.value, "order": m.order, "plugin": plugin}
                     for name, (m, plugin) in sorted(matchers.items(), key=lambda kv: kv[1][0].sort_key())],
        "condition_kinds": [{"name": name, "plugin": plugin} for name, (_k, plugin) in sorted(kinds.items())],
        "rule_packs": [{"name": name, "path": str(info.path)} for name, info in sorted(rule_packs(pm).items())],
        # takes_repo as --repo reads it (see _tracker_spec): whether `run --repo` is refused with that tracker.
        "trackers": [{"name": name, "plugin": plugin, "takes_repo": bool(getattr(spec, "takes_repo", True)),
                      "description": str(spec.description)}
                     for name, (spec, plugin) in sorted(trackers.items())],
        "skipped_entry_points": [{"entry_point": where, "why": why}
                                 for where, why in getattr(pm, "skipped_entry_points", {}).items()],
    }
    for where, why in getattr(pm, "skipped_entry_points", {}).items():
        click.echo(f"loop-rules: warning: entry point {where} not loaded: {why}", err=True)
    click.echo(json.dumps(report, indent=2))


def _failure_behind(error: BaseException) -> BaseException | None:
    """The exception that is not loop-rules' own (a plugin's NameError, say) behind
    an ``Error:`` line, following the chain of causes; None when there is none."""
    cause = error.__cause__
    while cause is not None:
        if not isinstance(cause, (LoopError, click.ClickException)):
            return cause
        cause = cause.__cause__
    return None


def _quiet_stdout() -> None:
    """Flush stdout; when that fails too (the output it writes to is full or gone),
    point it at the null device, so the interpreter's own flush at exit does not
    print a second error."""
    try:
        sys.stdout.flush()
    except OSError:
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.stdout.fileno())
            os.close(null)
        except (OSError, ValueError):  # no file descriptor behind stdout
            pass


OUTPUT_ERRORS = "loop_rules.escape"  # the error handler of stdout and stderr, set by main()


def _escape_unencodable(error: UnicodeError) -> tuple[str, int]:
    """What stdout and stderr write for a character they cannot encode: a byte of a
    name that is not UTF-8 (Python holds it as a lone surrogate) as ``\\xff``, as
    ``path_text`` writes it everywhere else, and any other character as its escape.

    A folder given on the command line reaches the output as it was typed: with the
    default ``strict`` a UTF-8 stdout raised, and the command ended as an internal error.
    """
    if not isinstance(error, UnicodeEncodeError):
        raise error
    return "".join(f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF
                   else c.encode("ascii", "backslashreplace").decode("ascii")
                   for c in error.object[error.start:error.end]), error.end


def _escape_output() -> None:
    import codecs

    codecs.register_error(OUTPUT_ERRORS, _escape_unencodable)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # None: not a text file (a test's capture)
        if reconfigure is not None:
            with contextlib.suppress(ValueError):  # closed
                reconfigure(errors=OUTPUT_ERRORS)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``loop-rules`` console script.

    An unexpected exception is a bug, but the user still gets one line (and
    the traceback only with ``LOOP_RULES_DEBUG=1``). Meant to end the process:
    see the note on ``gc.freeze`` below.
    """
    import gc

    from .envflags import unknown_settings

    _escape_output()
    for problem in unknown_settings():
        click.echo(f"loop-rules: warning: {problem}", err=True)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)
    try:
        # Not standalone: click would answer Ctrl-C during its own parsing, before a
        # command's guard is in place, with "Aborted!" and status 1 (which here means
        # a run that found something).
        status = cli.main(args=argv, prog_name="loop-rules", standalone_mode=False)
    except click.Abort as e:  # Ctrl-C, SIGTERM or end of input outside a command
        _stopped(e.__context__)
    except click.ClickException as e:
        failure = _failure_behind(e) if os.environ.get("LOOP_RULES_DEBUG") else None
        if failure is not None:  # a plugin's exception behind the one line: where in its code
            import traceback

            traceback.print_exception(failure, file=sys.stderr)
        # A path typed or globbed (a folder named with an escape sequence) is quoted as it was.
        shown = io.StringIO()
        e.show(file=shown)
        sys.stderr.write(_shown(shown.getvalue(), keep="\n"))
        sys.exit(e.exit_code)
    except KeyboardInterrupt as e:  # before click took over
        _stopped(e)
    except _OutputClosed:  # as a process that SIGPIPE ended: quietly, with the shell's status
        _quiet_stdout()
        sys.exit(OUTPUT_CLOSED)
    except (OSError, _Refused) as e:  # the system's refusal (a full disk, a closed output), not a bug
        if os.environ.get("LOOP_RULES_DEBUG"):
            raise
        from .bundle import path_text

        error = e.error if isinstance(e, _Refused) else e
        _quiet_stdout()
        where = f": {_shown(path_text(error.filename))}" if error.filename else ""
        click.echo(f"loop-rules: system error: {error.strerror or error}{where}", err=True)
        sys.exit(SYSTEM_ERROR)
    except Exception as e:  # noqa: BLE001 - the last line of defence
        stop = _interrupt_behind(e)
        if stop is not None:  # Ctrl-C inside code that wraps what it raises (a class being made)
            _stopped(stop)
        if os.environ.get("LOOP_RULES_DEBUG"):
            raise
        click.echo(f"loop-rules: internal error: {type(e).__name__}: {e} "
                   f"(set LOOP_RULES_DEBUG=1 for the traceback)", err=True)
        sys.exit(70)
    else:
        if isinstance(status, int) and status:  # an Exit(status) outside a command
            sys.exit(status)
    finally:
        # The command is done and the process ends: the interpreter's collections at
        # exit would walk every object still alive (modules, the pack, the tracker's
        # state) to find garbage that exit frees anyway. Frozen objects are left out of
        # those walks: about 30 million instructions (some 10 ms) less per command.
        # Files and the tracker are closed and synced before this point.
        gc.freeze()
