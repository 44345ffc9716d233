"""Keep the docs honest: examples run, every hook and command is documented and tested."""

from __future__ import annotations

import ast
import inspect
import json
import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pluggy
import pytest
from click.testing import CliRunner

import loop_core
from loop_core import Engine, hookspecs
from loop_core.batch import classify_paths, verdict_row
from loop_core.cli import cli
from loop_core.conditions import OPERATORS
from loop_core.plugins import plugin_report
from loop_core.rules import PACK_FILE, load_yaml_text
from loop_core.selftest import probe_regexes, run_examples
from loop_core.testing import make_bundle, write_bundle
from loop_core.view import SIGNALS

from .captures import copy_examples

try:
    import jsonschema
except ImportError:  # optional: the schema part of a check is skipped without it
    jsonschema = None

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RULES_MD = DOCS / "rules.md"
PLUGINS_MD = DOCS / "plugins.md"
CLI_MD = DOCS / "cli.md"

HOOKSPECS = sorted(
    (name, fn) for name, fn in vars(hookspecs).items()
    if name.startswith("loop_") and inspect.isfunction(fn)
)

# <!-- rule-file -->, <!-- rule-file: 20-x.yml -->, <!-- rule-file: 20-x.yml with=my_plugin -->
# directly before a ```yaml block marks a complete rule file (or pack.yml).
_RULE_FILE = re.compile(
    r"<!--\s*rule-file(?::\s*(?P<name>[\w.-]+\.ya?ml))?(?:\s+with=(?P<plugin>\w+))?\s*-->\n"
    r"```yaml\n(?P<body>.*?)^```", re.S | re.M)
# <!-- plugin: module_name --> directly before a ```python block marks a complete plugin module.
_PLUGIN = re.compile(
    r"<!--\s*plugin:\s*(?P<name>\w+)\s*-->\n```python\n(?P<body>.*?)^```", re.S | re.M)


def _blocks(pattern: re.Pattern[str]) -> list[Any]:
    out = []
    for doc in sorted(DOCS.glob("*.md")):
        text = doc.read_text(encoding="utf-8")
        for m in pattern.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append(pytest.param(m, id=f"{doc.name}:{line}"))
    return out


# <!-- script --> directly before a ```python block, and the ```text block right after
# it: a script run in a folder holding copies of the example captures and catalog,
# and exactly what it prints.
_SCRIPT = re.compile(
    r"<!--\s*script\s*-->\n```python\n(?P<body>.*?)^```\n\n```text\n(?P<out>.*?)^```", re.DOTALL | re.MULTILINE)

RULE_BLOCKS = _blocks(_RULE_FILE)
PLUGIN_BLOCKS = _blocks(_PLUGIN)
PLUGIN_SOURCES = {p.values[0]["name"]: p.values[0]["body"] for p in PLUGIN_BLOCKS}


def _plugin_module(name: str, tmp_path: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = str(tmp_path / f"{name}.py")
    code = compile(PLUGIN_SOURCES[name], f"<docs plugin {name}>", "exec")
    exec(code, module.__dict__)  # noqa: S102 - our own docs
    return module


@pytest.fixture
def doc_plugins(pm: pluggy.PluginManager) -> Iterator[Any]:
    """Register plugin modules from the docs on ``pm``; unregister them afterwards."""
    names: list[str] = []

    def register(module: types.ModuleType) -> types.ModuleType:
        pm.register(module, name=module.__name__)
        names.append(module.__name__)
        return module

    try:
        yield register
    finally:
        for name in names:
            if pm.has_plugin(name):
                pm.unregister(name=name)


# -- examples in the docs run ----------------------------------------------


@pytest.mark.parametrize("block", _blocks(_SCRIPT))
def test_python_example_prints_what_the_docs_show(block: re.Match[str], tmp_path: Path) -> None:
    import shutil
    import subprocess
    import sys

    shutil.copytree(ROOT / "examples" / "pull-captures", tmp_path / "pull-captures",
                    ignore=shutil.ignore_patterns("_*"))
    shutil.copy(ROOT / "examples" / "catalog.yml", tmp_path / "catalog.yml")
    result = subprocess.run([sys.executable, "-c", block["body"]], cwd=tmp_path, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == block["out"]


def test_the_python_api_page_has_examples() -> None:
    assert len(_blocks(_SCRIPT)) >= 2


def test_docs_have_rule_examples() -> None:
    assert sum(p.id.startswith("rules.md") for p in RULE_BLOCKS) >= 10
    assert sum(p.id.startswith("plugins.md") for p in PLUGIN_BLOCKS) >= 3


@pytest.mark.parametrize("doc", sorted(p.name for p in DOCS.glob("*.md")))
def test_every_marker_is_followed_by_its_block(doc: str) -> None:
    text = (DOCS / doc).read_text(encoding="utf-8")
    assert len(_RULE_FILE.findall(text)) == text.count("<!-- rule-file")
    assert len(_PLUGIN.findall(text)) == text.count("<!-- plugin:")
    assert len(_SCRIPT.findall(text)) == text.count("<!-- script")


@pytest.mark.parametrize("block", RULE_BLOCKS)
def test_rule_file_example_loads_and_passes(block: re.Match[str], pm: pluggy.PluginManager,
                                            doc_plugins: Any, tmp_path: Path) -> None:
    if block["plugin"]:
        doc_plugins(_plugin_module(block["plugin"], tmp_path))
    pack = tmp_path / "pack"
    pack.mkdir()
    name = block["name"] or "10-example.yml"
    (pack / name).write_text(block["body"], encoding="utf-8")

    engine = Engine.build(pack, pm, collect_errors=True)

    failed = [f"{c.name}: expected {c.expected}, got {c.got} {c.detail}"
              for c in run_examples(engine) if not c.ok]
    assert failed == []
    assert probe_regexes(engine.pack.rules) == ([], [])
    if name != PACK_FILE:
        assert engine.pack.rules or engine.pack.exact
    if jsonschema is not None:
        schema_name = "pack.schema.json" if name == PACK_FILE else "rules.schema.json"
        schema_path = ROOT / "loop_core" / "schema" / schema_name
        schema = json.loads(schema_path.read_text(encoding="utf-8"))
        validator = jsonschema.Draft7Validator(schema)
        assert [e.message for e in validator.iter_errors(load_yaml_text(block["body"]))] == []


@pytest.mark.parametrize("block", PLUGIN_BLOCKS)
def test_plugin_example_registers(block: re.Match[str], pm: pluggy.PluginManager,
                                  doc_plugins: Any, tmp_path: Path) -> None:
    module = doc_plugins(_plugin_module(block["name"], tmp_path))
    Engine.build("reference", pm)  # every registration hook runs without a PluginError
    hooks = {name for name in vars(module) if name.startswith("loop_")}
    assert hooks, f"plugin example {block['name']} implements no hook"
    report = {entry["name"]: entry["hooks"] for entry in plugin_report(pm)}
    assert sorted(hooks) == report[block["name"]]


def test_every_signal_is_documented() -> None:
    text = RULES_MD.read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(\w+)` \|", text, re.M))
    assert set(SIGNALS) <= documented


def test_every_operator_is_documented() -> None:
    text = RULES_MD.read_text(encoding="utf-8")
    for op in OPERATORS:
        assert f"| `{op}` |" in text, op


def test_every_classify_field_is_documented(tmp_path: Path) -> None:
    write_bundle(tmp_path / "ok", make_bundle("torch.cuda.OutOfMemoryError: CUDA out of memory"))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "manifest.json").write_text("{", encoding="utf-8")
    engine = Engine.build("reference", loop_core.make_plugin_manager(entry_points=False))
    rows = [verdict_row(outcome) for outcome in classify_paths([tmp_path], engine)]
    readable = next(row for row in rows if row["reader_error"] is None)
    text = CLI_MD.read_text(encoding="utf-8")
    section = text[text.index("### JSON and JSONL output"):]
    table = section[:section.index("\n\n", section.index("| Field | Value |"))]
    # "Keys always come in this order": the table lists every key of a row, in order.
    assert re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE) == list(readable)


def test_the_classify_json_outputs_shown_have_the_keys_a_row_has(tmp_path: Path) -> None:
    """The jsonl and json examples left out `failure`, the last key of a readable row."""
    write_bundle(tmp_path / "ok", make_bundle("torch.cuda.OutOfMemoryError: CUDA out of memory"))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "manifest.json").write_text("{", encoding="utf-8")
    engine = Engine.build("reference", loop_core.make_plugin_manager(entry_points=False))
    rows = [verdict_row(outcome) for outcome in classify_paths([tmp_path], engine)]
    keys = {row["reader_error"] is None: list(row) for row in rows}
    text = CLI_MD.read_text(encoding="utf-8")
    shown = []
    for m in re.finditer(r"^\$ loop-rules classify [^\n]*--format (?P<format>jsonl?) [^\n]*\n(?P<out>.*?)^```",
                         text, re.DOTALL | re.MULTILINE):
        if m["format"] == "jsonl":
            shown += [json.loads(line) for line in m["out"].splitlines()]
        else:
            shown += json.loads(m["out"])
    assert len(shown) >= 3
    for row in shown:
        assert list(row) == keys[row["reader_error"] is None], row["bundle"]


def test_the_explain_json_verdict_keys_are_the_documented_ones(tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "b", make_bundle("torch.cuda.OutOfMemoryError: CUDA out of memory"))
    shown = json.loads(CliRunner().invoke(cli, ["explain", "--format", "json", str(bundle)]).output)
    text = CLI_MD.read_text(encoding="utf-8")
    section = text[text.index("`--format json` prints `{\"bundle\", \"verdict\""):]
    listed = section[section.index("fields of a classification:"):section.index("the keys `classify` adds")]
    assert list(shown) == ["bundle", "verdict", "dedup_hash", "matchers"]
    assert re.findall(r"`(\w+)`", listed) == list(shown["verdict"])


def test_every_rules_version_shown_is_a_shipped_packs_own() -> None:
    """The outputs in cli.md are real ones of the two shipped packs: one shown after a
    pack changed is stale (the reference pack's was, after examples were added to it)."""
    pm = loop_core.make_plugin_manager(entry_points=False)
    versions = {Engine.build(name, pm).pack.version for name in ("default", "reference")}
    shown = set(re.findall(r"rules_version\W{1,4}([0-9a-f]{12})\b", CLI_MD.read_text(encoding="utf-8")))
    assert shown and shown <= versions, shown - versions


def test_every_run_summary_key_is_documented_in_order() -> None:
    from loop_core.pipeline import RunSummary

    text = CLI_MD.read_text(encoding="utf-8")
    section = text[text.index("### The JSON summary"):]
    table = section[:section.index("\n\n", section.index("| Key | Value |"))]
    assert re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE) == list(RunSummary().to_dict())
    example = section[section.index("$ loop-rules run pull-captures --format json\n"):]
    example = example[example.index("{"):example.index("\n```")]
    assert list(json.loads(example)) == list(RunSummary().to_dict())


def _shown_outputs(command: str, docs: tuple[Path, ...] = (CLI_MD, DOCS / "workflow.md")) -> list[tuple[str, str]]:
    """Every output the docs show for ``$ <command>``: (where, the lines up to the block's end)."""
    found = []
    for doc in docs:
        text = doc.read_text(encoding="utf-8")
        for m in re.finditer(rf"^\$ {re.escape(command)}\n(?P<out>.*?)^```", text, re.DOTALL | re.MULTILINE):
            found.append((f"{doc.name}:{text.count(chr(10), 0, m.start()) + 1}", m["out"]))
    return found


def test_the_browsing_outputs_shown_are_those_of_the_example_captures(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The review list shown in cli.md and workflow.md kept the log decorations its
    ERROR column has left out since: the docs show what the commands print after the
    first `run` over a copy of the example captures."""
    import shutil

    captures = tmp_path / "pull-captures"
    for source in (ROOT / "examples" / "pull-captures").iterdir():
        if not source.name.startswith("_"):
            shutil.copytree(source, captures / source.name)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    assert runner.invoke(cli, ["run", "pull-captures"]).exit_code == 0
    for command in ("review list pull-captures", "tracker list pull-captures"):
        shown = _shown_outputs(f"loop-rules {command}")
        assert shown, command
        printed = runner.invoke(cli, command.split()).output
        for where, output in shown:
            assert output == printed, where


def _console_steps(text: str) -> Iterator[tuple[str, str, list[str]]]:
    """The ``$ command`` lines of a page's console blocks, each with the lines shown under it,
    and the rule files it writes (a yaml block opening with ``# rules.d/NAME.yml``), in order."""
    blocks = re.finditer(r"^```(?P<kind>console|yaml)\n(?P<body>.*?)^```", text, re.DOTALL | re.MULTILINE)
    for block in blocks:
        if block["kind"] == "yaml":
            first = block["body"].split("\n", 1)[0]
            if first.startswith("# rules.d/"):
                yield "write", first[2:], [block["body"]]
            continue
        for step in re.split(r"^(?=\$ )", block["body"], flags=re.MULTILINE):
            if step.startswith("$ "):
                command, *shown = step[2:].splitlines()
                yield "run", command, shown


def _same_line(shown: str, printed: str, mask: str = r"\d{4}-\d{2}-\d{2}") -> bool:
    """A line the docs show is the printed one; ``...`` stands for what differs from
    machine to machine (where the package is installed), and what ``mask`` finds (the
    day a line was learned) for what differs from day to day."""
    shown, printed = (re.sub(mask, "~", line) for line in (shown, printed))
    return re.fullmatch(".*".join(map(re.escape, shown.split("..."))), printed) is not None


def test_the_workflow_walkthrough_prints_what_it_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """workflow.md showed a diff with `None` for "no rule" and the test count of a pack
    that has grown since: a maintainer following it step by step met other output and
    could not tell whether their copy of the pack was at fault."""
    import shlex
    import shutil

    from loop_core.engine import rule_packs

    scratch = tmp_path / "scratch"
    copy_examples(scratch / "pull-captures")
    shutil.copytree(ROOT / "rules.d", scratch / "rules.d")
    monkeypatch.chdir(scratch)
    installed = rule_packs(loop_core.make_plugin_manager(entry_points=False))["default"].path
    ran = []
    for kind, command, shown in _console_steps((DOCS / "workflow.md").read_text(encoding="utf-8")):
        if kind == "write":
            (scratch / command).write_text(shown[0], encoding="utf-8")
            continue
        command, *pipes = (part.strip() for part in command.split(" | "))
        argv = shlex.split(command)
        if argv[0] == "cat":
            printed = (scratch / argv[1]).read_text(encoding="utf-8").splitlines()
        else:
            printed = CliRunner().invoke(cli, argv[1:]).output.splitlines()
            # The page shows a plain install's `default`; an editable one's is the checkout's rules.d.
            printed = [line.replace(str(installed), "/site-packages/loop_rules/packs/default") for line in printed]
        for pipe in pipes:
            tool, *args = shlex.split(pipe)
            assert (tool, args[0]) in {("tail", "-1"), ("grep", "-E")}, pipe
            printed = printed[-1:] if tool == "tail" else [line for line in printed if re.search(args[1], line)]
        # The pack with a learned line is another pack each day: "yours will differ".
        mask = r"rules_version \w+|\d{4}-\d{2}-\d{2}" if "--rules rules.d" in command else r"\d{4}-\d{2}-\d{2}"
        assert len(printed) == len(shown), (command, printed)
        for want, got in zip(shown, printed):
            assert _same_line(want, got, mask), (command, want, got)
        ran.append(argv[1] if argv[0] == "loop-rules" else argv[0])
    assert ran == ["run", "review", "explain", "learn", "cat", "check", "test", "diff", "run", "report"]


def test_the_check_and_test_outputs_shown_are_those_of_the_sample_packs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken packs the docs show `check` and `test` on are tests/fixtures/packs:
    each problem's line, which the outputs name, is the line of that pack's file."""
    monkeypatch.chdir(ROOT / "tests" / "fixtures" / "packs")
    runner = CliRunner()
    for command in ("check --rules badpack", "check --rules slowpack"):
        shown = _shown_outputs(f"loop-rules {command}", (CLI_MD, DOCS / "rules.md"))
        assert shown, command
        printed = runner.invoke(cli, command.split()).output
        for where, output in shown:
            assert output == printed, where
    shown = _shown_outputs("loop-rules test --rules slowpack")
    assert shown
    printed = runner.invoke(cli, ["test", "--rules", "slowpack"]).output.splitlines()
    for where, output in shown:  # "..." stands for the lines left out
        assert all(line in printed for line in output.splitlines() if line != "..."), where


def test_the_eval_outputs_shown_are_those_of_the_shipped_holdout(monkeypatch: pytest.MonkeyPatch) -> None:
    """cli.md's eval examples measure the holdout, which no later sample changes: shown
    lines are printed lines, in order, with "..." for those left out."""
    monkeypatch.chdir(ROOT)
    runner = CliRunner()
    for command in ("eval --corpus tests/corpus/holdout --compare reference",
                    "eval --corpus tests/corpus --split holdout --format json"):
        shown = _shown_outputs(f"loop-rules {command}", (CLI_MD,))
        assert len(shown) == 1, command
        where, output = shown[0]
        printed = iter(runner.invoke(cli, command.split()).output.splitlines())
        for line in output.splitlines():
            if line.strip() != "...":  # each shown line comes later in what eval printed
                assert line in printed, f"{where}: {line!r}"


def test_every_rule_place_shown_names_its_line() -> None:
    """A message about a rule names its file, index, id and the line it is about; four
    shown in the docs had no line, so a reader took the format for one without it (and
    a script for the messages, written from the docs, did not parse the real ones)."""
    places = []
    for doc in sorted(DOCS.glob("*.md")):
        text = doc.read_text(encoding="utf-8")
        for m in re.finditer(r"\.ya?ml\[\d+\] [\w.-]+(?P<line> \(line \d+\))?:", text):
            places.append((f"{doc.name}:{text.count(chr(10), 0, m.start()) + 1}", m["line"]))
    assert len(places) > 10
    assert [where for where, line in places if not line] == []


def test_the_plugins_sample_is_the_output_with_the_builtins(monkeypatch: pytest.MonkeyPatch) -> None:
    """It left out two of the seven built-in plugins."""
    monkeypatch.setenv("LOOP_RULES_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = CliRunner().invoke(cli, ["plugins"])
    assert result.exit_code == 0
    printed = json.loads(result.output)
    text = PLUGINS_MD.read_text(encoding="utf-8")
    shown = json.loads(text.split("$ loop-rules plugins\n", 1)[1].split("```", 1)[0])
    for pack in printed["rule_packs"] + shown["rule_packs"]:
        del pack["path"]  # shortened in the docs, and the installed copy's elsewhere
    assert shown == printed


# -- hooks: documented and tested -------------------------------------------


def test_hookspecs_found() -> None:
    assert {"loop_register_conditions", "loop_register_matchers", "loop_register_rule_packs"} <= {
        name for name, _ in HOOKSPECS}


@pytest.mark.parametrize("name,spec", HOOKSPECS, ids=[n for n, _ in HOOKSPECS])
def test_every_hook_is_documented(name: str, spec: Any) -> None:
    params = ", ".join(inspect.signature(spec).parameters)
    heading = f"## {name}({params})"
    lines = PLUGINS_MD.read_text(encoding="utf-8").splitlines()
    assert heading in lines, f"docs/plugins.md needs a section headed {heading!r}"


def _test_functions() -> set[str]:
    names = set()
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
    return names


@pytest.mark.parametrize("name", [n for n, _ in HOOKSPECS])
def test_every_hook_has_a_test(name: str) -> None:
    assert f"test_hook_{name}" in _test_functions()


# -- layout rules ------------------------------------------------------------


def _imports(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_only_cli_imports_click() -> None:
    offenders = []
    for package in ("loop_core", "loop_rules"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            modules = _imports(ast.parse(path.read_text(encoding="utf-8")))
            uses = any(m == "click" or m.startswith("click.") for m in modules)
            if uses and rel != "loop_core/cli.py":
                offenders.append(rel)
    assert offenders == []


def test_public_api_is_sorted_and_resolves() -> None:
    names = loop_core.__all__
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(loop_core, name, None) is not None, name


def test_the_plugin_guide_imports_only_public_names() -> None:
    """plugins.md tells authors to import only public names: its own examples must."""
    import importlib

    text = (DOCS / "plugins.md").read_text(encoding="utf-8")
    imports = re.findall(r"^\s*from (loop_core(?:\.\w+)?) import (\([^)]*\)|.*)$", text, re.MULTILINE)
    assert imports
    for module, names in imports:
        public = importlib.import_module(module).__all__
        for name in re.findall(r"\w+", names):
            assert name in public, f"plugins.md imports {name} from {module}, which does not list it in __all__"


# -- CLI: every command has help and a section -------------------------------


def test_group_help_and_version() -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0 and "Example:" in result.output
    result = runner.invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith(f"loop-rules, version {loop_core.__version__}\nliteral scanner: ")


def test_every_command_with_a_status_1_says_so_in_its_help() -> None:
    """The table in cli.md lists what status 1 means per command; `spool replay` and
    `labels bootstrap` kept it to the docs, so a script's author reading --help took
    a spool left to replay (or a label not made) for a crash, or did not check at all."""
    text = CLI_MD.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| 1 |"))
    commands = sorted(set(re.findall(r"`([a-z]+(?: [a-z]+)?)(?: --[a-z-]+)?`", row)))
    assert {"classify", "trust", "spool replay", "labels bootstrap", "diff"} <= set(commands), commands
    for command in commands:
        shown = " ".join(CliRunner().invoke(cli, [*command.split(), "--help"]).output.split())
        assert re.search(r"Exit (status )?1 ", shown), command


@pytest.mark.parametrize("command", ["report", "diff", "eval", "plugins", "run", "explain", "learn"])
def test_the_help_says_what_the_exit_statuses_are(command: str) -> None:
    """report and diff kept their exit statuses to the docs: a CI script's author reading
    --help could not tell whether an unreadable capture or a changed bundle fails the step."""
    shown = " ".join(CliRunner().invoke(cli, [command, "--help"]).output.split())
    assert re.search(r"[Ee]xit status 0", shown) or command == "plugins", shown
    assert re.search(r"2 when [^.]*(pack|plugin)", shown), shown


def _commands(group: click.Group = cli, prefix: tuple[str, ...] = ()) -> Iterator[Any]:
    for name, command in sorted(group.commands.items()):
        path = (*prefix, name)
        yield pytest.param(path, command, id=" ".join(path))
        if isinstance(command, click.Group):
            yield from _commands(command, path)


@pytest.mark.parametrize("path,command", list(_commands()))
def test_every_command_has_help_and_docs(path: tuple[str, ...], command: click.Command) -> None:
    for flag in ("--help", "-h"):
        result = CliRunner().invoke(cli, [*path, flag])
        assert result.exit_code == 0, result.output
        if not isinstance(command, click.Group):
            assert "Example:" in result.output
    # A command gets a `## loop-rules NAME` section; a subcommand of a group
    # gets a `### loop-rules GROUP NAME` section under it.
    heading = "#" * (len(path) + 1) + " loop-rules " + " ".join(path)
    lines = CLI_MD.read_text(encoding="utf-8").splitlines()
    assert heading in lines, f"docs/cli.md needs a section headed {heading!r}"
