"""The command line: exit statuses, one-line errors, output contracts."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from loop_core.cli import cli

OOM = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB"
CONTRACT = {"bundle", "schema", "reader_error", "failure_class", "tier", "matched_rule", "fingerprint",
            "error_substring", "should_file", "review_queue", "route_as_kv_calc_bug", "delta_mib",
            "consensus_key", "dedup_tuple", "dedup_hash", "labels"}
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "pull-captures"


def invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args))


def test_version_names_the_literal_scanner(monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import __version__, litscan

    try:
        result = invoke("--version")
        lines = result.output.splitlines()
        assert result.exit_code == 0 and lines[0] == f"loop-rules, version {__version__}"
        if litscan.available():
            both = importlib.util.find_spec("hyperscan") is not None
            assert lines[1] == "literal scanner: ahocorasick_rs" + (", hyperscan for long runs" if both else "")
            monkeypatch.setenv("LOOP_RULES_SCANNER", "ahocorasick")
            litscan.use_scanner(None)
            assert invoke("--version").output.splitlines()[1] == "literal scanner: ahocorasick_rs"
            for off in ("off", "OFF", "0"):  # any spelling of off reads as the one the docs give
                monkeypatch.setenv("LOOP_RULES_SCANNER", off)
                litscan.use_scanner(None)
                assert invoke("--version").output.splitlines()[1] == "literal scanner: off (LOOP_RULES_SCANNER=off)"
        monkeypatch.delenv("LOOP_RULES_SCANNER", raising=False)
        monkeypatch.setattr(litscan, "_backend", lambda: None)  # as without the fast extra
        litscan.use_scanner(None)
        assert invoke("--version").output.splitlines()[1] == (
            'literal scanner: off (ahocorasick_rs is not installed: pip install "loop-rules[fast]")')
    finally:
        monkeypatch.undo()
        litscan.use_scanner(None)


def test_version_names_the_json_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    import loop_core.bundle

    if loop_core.bundle.FAST_LOADS is not None:
        assert invoke("--version").output.splitlines()[2] == "JSON parser: orjson, json for what it does not take"
    monkeypatch.setattr(loop_core.bundle, "FAST_LOADS", None)  # as without the fast extra
    assert invoke("--version").output.splitlines()[2] == (
        'JSON parser: json (orjson is not installed: pip install "loop-rules[fast]")')
    monkeypatch.setenv("LOOP_RULES_ORJSON", "off")
    assert invoke("--version").output.splitlines()[2] == "JSON parser: json (LOOP_RULES_ORJSON=off)"


def test_classify_jsonl_carries_the_output_contract(bundle_dir) -> None:  # type: ignore[no-untyped-def]
    path = bundle_dir(OOM)
    result = invoke("classify", "--format", "jsonl", str(path))
    assert result.exit_code == 0
    row = json.loads(result.output)
    assert CONTRACT <= set(row)
    assert (row["failure_class"], row["tier"], row["matched_rule"]) == ("genuine-oom", "tier1", "tier1-oom-fastpath")
    assert row["labels"][0] == f"loop:dedup-{row['dedup_hash']}"


def test_classify_jsonl_keys_the_row_by_the_manifest(bundle_dir) -> None:  # type: ignore[no-untyped-def]
    row = json.loads(invoke("classify", "--format", "jsonl", str(bundle_dir(OOM))).output)
    assert row["consensus_key"] == ["example/Example-7B", "bf16", "LlamaForCausalLM", "1x24576MiB",
                                    "vllm/vllm-openai:v0.21.0", "kvcalc-v0.8.0+1a2b3c4d5e6f", 32768, "fp8_e5m2", []]
    assert row["labels"] == [f"loop:dedup-{row['dedup_hash']}", "class:genuine-oom", "arch:llamaforcausallm"]


def test_classify_rows_give_each_bundle_its_own_schema() -> None:
    rows = [json.loads(line) for line in invoke("classify", "--format", "jsonl", str(EXAMPLES)).output.splitlines()]
    schemas = {Path(r["bundle"]).parent.name: r["schema"] for r in rows}
    gate_only = ("meta-llama-llama-3.3-70b-instruct", "qwen-qwen3-235b-a22b-instruct-2507")
    assert [schemas[name] for name in gate_only] == [2, 2]
    assert schemas["qwen-qwen3-14b"] == 1 and schemas["broken-upload"] is None


def test_classify_finds_bundles_recursively_and_skips_spools(tmp_path: Path) -> None:
    from loop_core.testing import make_bundle, write_bundle

    write_bundle(tmp_path / "a-model" / "20260801T000000Z", make_bundle(OOM))
    write_bundle(tmp_path / "b-model" / "20260802T000000Z", make_bundle("boom"))
    write_bundle(tmp_path / "_dedup-queue" / "x", make_bundle("spooled, not a capture"))
    result = invoke("classify", "--format", "json", str(tmp_path))
    rows = json.loads(result.output)
    assert [Path(r["bundle"]).parent.name for r in rows] == ["a-model", "b-model"]


def test_classify_table_and_unreadable_bundle(tmp_path: Path, bundle_dir) -> None:  # type: ignore[no-untyped-def]
    good = bundle_dir(OOM, name="good")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text("{not json")
    result = invoke("classify", str(good), str(bad))
    assert result.exit_code == 1
    assert "genuine-oom" in result.output
    assert "bad/manifest.json: invalid JSON" in result.output
    assert "2 bundle(s): genuine-oom 1; 1 unreadable" in result.output


def test_classify_of_a_folder_holding_no_bundle_fails_and_says_so(tmp_path: Path) -> None:
    """A folder of empty folders (a mistyped path, a tree not yet synced) read
    "0 bundle(s): none classified" and exited 0, as a clean empty corpus does."""
    top = tmp_path / "captures"
    (top / "acme-7b" / "20260801T000000Z").mkdir(parents=True)
    result = invoke("classify", str(top))
    assert result.exit_code == 1
    assert f"{top}: not a capture bundle: no manifest.json or other bundle file in it" in result.output
    assert "1 bundle(s): 1 unreadable" in result.output


def test_the_table_shows_a_dash_where_no_rule_decided(bundle_dir) -> None:  # type: ignore[no-untyped-def]
    """An unknown failure that no matcher decided showed Python's "None" as its rule."""
    path = bundle_dir("RuntimeError: something nobody has seen before", name="odd")
    row = invoke("classify", str(path)).output.splitlines()[1].split()
    assert row[1:4] == ["unknown", "none-unknown", "-"], row


def test_explain_shows_every_matcher_and_the_span(bundle_dir) -> None:  # type: ignore[no-untyped-def]
    path = bundle_dir("ValueError: Model QuantConfig: the AWQ weight is not supported for this dtype")
    result = invoke("explain", "--rules", "reference", str(path))
    assert result.exit_code == 0
    out = result.output
    assert "[tier1] tier1-oom-fastpath: no match" in out
    assert "[tier2] tier2-exact: no match" in out
    assert "[tier2] tier2-rules: MATCH" in out
    assert "+ quant-weightload-dtype -> quant-unsupported" in out
    assert "found 'weight is not supported', 'awq'" in out
    assert "verdict: quant-unsupported (tier2, rule quant-weightload-dtype)" in out


def test_explain_shows_the_regex_span(bundle_dir) -> None:  # type: ignore[no-untyped-def]
    path = bundle_dir("RuntimeError: CUDA error: no kernel image is available for execution on the device")
    out = invoke("explain", str(path)).output
    assert "unless (veto)" not in out  # the pack's veto is shown only when the OOM signature was found
    assert "\n  - unless (veto)\n" in invoke("explain", str(bundle_dir("CUDA out of memory"))).output
    assert "+ kernel-no-kernel-image -> kernel-unsupported" in out
    assert "span (69, 125) 'no kernel image is available for execution on the device'" in out


def test_test_command_passes_for_both_packs() -> None:
    for pack in ("default", "reference"):
        result = invoke("test", "--rules", pack)
        assert result.exit_code == 0, result.output
        assert result.output.strip().endswith("0 failed")


def test_test_command_fails_on_a_broken_example(tmp_path: Path) -> None:
    (tmp_path / "10.yml").write_text(
        "- id: wrong-example\n  class: unknown\n  description: d\n"
        "  when: {select: $.signal.error_text, contains: boom}\n  examples: {match: [bang]}\n")
    result = invoke("test", "--rules", str(tmp_path))
    assert result.exit_code == 1
    assert "FAIL" in result.output and "wrong-example (line 5) examples.match[0]: expected match, got no match" in result.output


def test_a_failing_example_names_the_part_of_when_that_decided(tmp_path: Path) -> None:
    """An author with a three-part `when` used to read only "expected match, got no
    match" and had to guess which part failed."""
    (tmp_path / "10.yml").write_text(
        "- id: three-parts\n  class: unknown\n  description: d\n  when:\n    all:\n"
        "      - {select: $.signal.all_text, contains: frobnicator}\n"
        "      - {select: $.signal.final_error, regex: '^RuntimeError'}\n"
        '  examples: {match: ["INFO x\\nvllm | RuntimeError: the frobnicator broke"]}\n')
    result = invoke("test", "--rules", str(tmp_path), "--examples-only")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        (f"FAIL {tmp_path}/10.yml[0] three-parts (line 8) examples.match[0]: expected match, got no match "
         "($.signal.final_error regex '^RuntimeError' did not hold: value 'vllm | RuntimeError: the frobnicator "
         "broke')"),
        "0 passed, 1 failed"]
    check = invoke("check", "--rules", str(tmp_path))
    assert "did not hold: value 'vllm | RuntimeError: the frobnicator broke'" in check.output


def test_the_part_of_when_that_decided_is_cut_to_one_screen_line(tmp_path: Path) -> None:
    path = "$.pt4.results_detail." + ".".join(["a_rather_long_field_name"] * 8)
    (tmp_path / "10.yml").write_text(
        f"- id: long-path\n  class: unknown\n  description: d\n  when: {{select: '{path}', contains: boom}}\n"
        "  examples: {match: [boom]}\n")
    [case] = json.loads(invoke("test", "--rules", str(tmp_path), "--examples-only", "--format", "json").stdout)["cases"]
    assert len(case["detail"]) == 240 and case["detail"].startswith(path) and case["detail"].endswith("…")


def test_plugins_is_json() -> None:
    report = json.loads(invoke("plugins").output)
    names = {p["name"] for p in report["plugins"]}
    assert {"loop_rules.tier1", "loop_rules.tier2", "loop_rules.packs"} <= names
    assert [m["name"] for m in report["matchers"]][:3] == ["tier1-oom-fastpath", "tier2-exact", "tier2-rules"]


def test_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "loop_core", "classify", "--rules", "nope", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "Error: --rules 'nope': neither a registered pack (default, reference) nor a directory"]


def test_test_on_a_pack_of_ones_own_points_at_examples_only(tmp_path: Path) -> None:
    """A pack that does not cover the design's rows failed every seed case, and the
    output never said that --examples-only is the way to test such a pack."""
    (tmp_path / "10-mine.yml").write_text(
        "rules:\n  - id: mine\n    class: genuine-oom\n    description: a made-up fault\n"
        "    when: {select: $.signal.all_text, contains: frobnicator}\n"
        "    examples: {match: [frobnicator], no_match: [x]}\n")
    result = invoke("test", "--rules", str(tmp_path))
    assert result.exit_code == 1
    seeds = sum(line.startswith("FAIL seed ") for line in result.stdout.splitlines())
    assert "FAIL seed appx-3-streaming-dead-145: expected quant-unsupported (tier2), got unknown (none-unknown) (" \
        in result.stdout  # no rule decided: no "None" for its id
    assert seeds > 0 and result.stderr == (
        f"loop-rules: note: {seeds} of the failures are seed cases (the design's Appendix-A and gate rows); "
        "--examples-only replays only the pack's own examples\n")
    alone = invoke("test", "--rules", str(tmp_path), "--examples-only")
    assert alone.exit_code == 0 and alone.stderr == ""
    assert invoke("test").stderr == ""


def test_a_seed_case_decided_by_the_right_class_at_the_wrong_tier_fails(tmp_path: Path) -> None:
    """A seed row pins the tier too: a rule that takes over the Tier-1 OOM fast path's cases fails it."""
    (tmp_path / "pack.yml").write_text("tier1_oom: {signature: ['never in any log']}\n")
    (tmp_path / "10-oom.yml").write_text(
        "- id: my-oom\n  class: genuine-oom\n  description: d\n"
        "  when: {select: $.signal.all_text, contains: out of memory}\n  examples: {match: [out of memory]}\n")
    result = invoke("test", "--rules", str(tmp_path), "--format", "json")
    assert result.exit_code == 1
    case = next(c for c in json.loads(result.stdout)["cases"] if c["name"] == "seed appx-1-cliff2-oom-bare")
    assert case == {"name": "seed appx-1-cliff2-oom-bare", "ok": False, "expected": "genuine-oom (tier1)",
                    "got": "genuine-oom (tier2, my-oom)",
                    "detail": "Appendix A row 1, a bare CUDA OOM at the context cliff"}


def test_a_rule_file_given_as_the_pack_names_its_directory(tmp_path: Path) -> None:
    """`--rules rules.d/10-benign.yml` was "neither a registered pack nor a directory",
    which said nothing of what to give instead."""
    pack = tmp_path / "my rules"
    pack.mkdir()
    (pack / "10-mine.yml").write_text("rules: []\n")
    result = invoke("classify", "--rules", str(pack / "10-mine.yml"), str(tmp_path))
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        f"Error: --rules {str(pack / '10-mine.yml')!r}: a file of a pack, not a pack: give the directory "
        f"that holds it (--rules {str(pack)!r})"]


def test_check_lists_every_problem_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "10.yml").write_text("- id: a\n  class: nope\n- {id: b}\n")
    result = invoke("check", "--rules", str(tmp_path))
    assert result.exit_code == 1
    assert "error: " in result.output and "check: 3 problem(s)" in result.output
    assert "a (line 2): unknown class 'nope'" in result.output  # reported beside a's missing keys


def test_classify_jobs_2_prints_what_jobs_1_prints(tmp_path: Path) -> None:
    from loop_core.testing import make_bundle, write_bundle

    for i in range(9):
        text = OOM if i % 3 == 0 else f"RuntimeError: something else broke ({i})"
        write_bundle(tmp_path / f"model-{i}" / f"2026080{i}T000000Z", make_bundle(text))
    broken = tmp_path / "model-x" / "20260809T000000Z"
    broken.mkdir(parents=True)
    (broken / "manifest.json").write_text("{not json")
    for fmt in ("jsonl", "json", "table"):
        one = invoke("classify", "--format", fmt, "--jobs", "1", str(tmp_path))
        two = invoke("classify", "--format", fmt, "-j", "2", str(tmp_path))
        assert one.exit_code == two.exit_code == 1
        assert one.output == two.output
    assert len(one.output.splitlines()) > 10


@pytest.mark.parametrize("fmt, made_by", [("jsonl", "_jsonl"), ("json", "_json_element"), ("table", "_row")])
def test_a_worker_killed_mid_run_is_one_clear_error(tmp_path: Path, monkeypatch,  # type: ignore[no-untyped-def]
                                                    fmt: str, made_by: str) -> None:
    """Each format classifies in the workers --jobs asks for: the table's rows were all
    made in the command's own process."""
    import os
    import signal

    from loop_core import batch
    from loop_core.testing import make_bundle, write_bundle

    for i in range(12):
        write_bundle(tmp_path / f"model-{i:02d}" / "20260801T000000Z", make_bundle(OOM))
    real = getattr(batch, made_by)
    command = os.getpid()

    def killed_at_the_seventh(path: str, engine):  # type: ignore[no-untyped-def]
        if "model-07" in path and os.getpid() != command:  # as the kernel's OOM killer would end a worker
            os.kill(os.getpid(), signal.SIGKILL)
        return real(path, engine)

    monkeypatch.setattr(batch, made_by, killed_at_the_seventh)
    result = invoke("classify", "--format", fmt, "--jobs", "2", str(tmp_path))
    assert result.exit_code == 2, result.output
    assert "worker process" in result.output and "was killed by signal 9 (out of memory?) before answering" \
        in result.output
    assert "internal error" not in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_is_one_line_and_status_130(tmp_path: Path, monkeypatch, jobs: str) -> None:  # type: ignore[no-untyped-def]
    from loop_core import batch
    from loop_core.testing import make_bundle, write_bundle

    for i in range(12):
        write_bundle(tmp_path / f"model-{i:02d}" / "20260801T000000Z", make_bundle(OOM))
    real = batch.classify_text

    def interrupted_after_three(*args, **kwargs):  # type: ignore[no-untyped-def]
        for done, item in enumerate(real(*args, **kwargs)):
            if done == 3:  # the user presses Ctrl-C
                raise KeyboardInterrupt
            yield item

    monkeypatch.setattr(batch, "classify_text", interrupted_after_three)
    result = invoke("classify", "--format", "jsonl", "--jobs", jobs, str(tmp_path))
    assert result.exit_code == 130, result.output
    assert result.stderr == "loop-rules: interrupted\n"
    assert len(result.stdout.splitlines()) == 3  # the rows printed before it


@pytest.mark.parametrize("name, status, line", [
    ("KeyboardInterrupt", 130, "loop-rules: interrupted"),
    ("Terminated", 143, "loop-rules: terminated"),
])
def test_a_signal_python_wraps_in_another_error_is_still_a_stop(  # type: ignore[no-untyped-def]
        monkeypatch, capsys, name: str, status: int, line: str) -> None:
    """Ctrl-C landing in a dataclass being made (a module imported late) comes out as
    "RuntimeError: Error calling __set_name__": it read as an internal error, status 70."""
    import gc

    import loop_core.cli as cli_module

    stop = cli_module.Terminated() if name == "Terminated" else KeyboardInterrupt()

    def parse_args(*args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            raise stop
        except KeyboardInterrupt as e:
            raise RuntimeError("Error calling __set_name__ on '_FieldDescriptor' instance") from e

    monkeypatch.setattr(cli_module.cli, "parse_args", parse_args)
    monkeypatch.setattr(gc, "freeze", lambda: None)  # main() ends processes; this one goes on
    with pytest.raises(SystemExit) as stopped:
        cli_module.main(["classify", "examples/pull-captures"])
    assert stopped.value.code == status
    assert capsys.readouterr().err.strip() == line


@pytest.mark.parametrize("signal_error, status, line", [
    (KeyboardInterrupt, 130, "loop-rules: interrupted"),
    ("Terminated", 143, "loop-rules: terminated"),
])
def test_a_signal_while_the_command_line_is_parsed_is_one_line_too(  # type: ignore[no-untyped-def]
        monkeypatch, capsys, signal_error, status: int, line: str) -> None:
    """Before a command's own guard is in place, click used to print "Aborted!" and
    exit 1, the status of a run that found something."""
    import gc

    import loop_core.cli as cli_module

    error = cli_module.Terminated if signal_error == "Terminated" else signal_error

    def parse_args(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise error

    monkeypatch.setattr(cli_module.cli, "parse_args", parse_args)
    monkeypatch.setattr(gc, "freeze", lambda: None)  # main() ends processes; this one goes on
    with pytest.raises(SystemExit) as stopped:
        cli_module.main(["classify", "examples/pull-captures"])
    assert stopped.value.code == status
    err = capsys.readouterr().err
    assert err.strip() == line and "Aborted" not in err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_a_full_output_is_one_line_and_status_74(fmt: str) -> None:
    """It used to end as an internal error (status 70, the one for bugs)."""
    root = Path(__file__).resolve().parent.parent
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "loop_core", "classify", "--format", fmt,
                                 "examples/pull-captures"], cwd=root, stdout=full, stderr=subprocess.PIPE,
                                text=True, check=False)
    assert result.returncode == 74
    assert result.stderr == "loop-rules: system error: No space left on device\n"


def test_ctrl_c_while_the_command_line_loads_is_one_line(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """Loading click and the command line takes some tens of milliseconds; Ctrl-C then
    printed a traceback."""
    import builtins

    from loop_core import console

    real_import = builtins.__import__

    def interrupted(name, globals=None, locals=None, fromlist=(), level=0):  # type: ignore[no-untyped-def]
        if level == 1 and name == "cli":
            raise KeyboardInterrupt
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", interrupted)
    with pytest.raises(SystemExit) as stopped:
        console.main()
    assert stopped.value.code == 130 and capsys.readouterr().err == "loop-rules: interrupted\n"


def test_the_console_script_is_the_guarded_entry_point() -> None:
    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text(encoding="utf-8")
    scripts = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]  # tomllib is Python 3.11's
    assert re.findall(r"(?m)^loop-rules = \"([^\"]+)\"$", scripts) == ["loop_core.console:main"]


def test_jobs_auto_is_one_per_usable_cpu_and_a_bad_count_is_named(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import loop_core.cli as cli_module
    from loop_core.testing import make_bundle, write_bundle

    monkeypatch.setattr(cli_module, "usable_cpus", lambda: 3)
    assert [cli_module.jobs_count(v) for v in ("auto", " AUTO ", "2", 4)] == [3, 3, 2, 4]
    monkeypatch.setattr(cli_module, "usable_cpus", lambda: 3 * cli_module.MAX_JOBS)  # help: "at most 64"
    assert cli_module.jobs_count("auto") == cli_module.MAX_JOBS
    monkeypatch.setattr(cli_module, "usable_cpus", lambda: 3)
    for i in range(4):
        write_bundle(tmp_path / f"model-{i}" / "20260801T000000Z", make_bundle(OOM))
    auto = invoke("classify", "--format", "jsonl", "-j", "auto", str(tmp_path))
    assert auto.exit_code == 0 and auto.output == invoke("classify", "--format", "jsonl", str(tmp_path)).output
    for bad, message in (("0", "0 is less than 1"), ("-2", "-2 is less than 1"),
                         ("lots", "'lots' is not a number of processes or 'auto'")):
        for command in (("classify", str(tmp_path)), ("run", "--dry-run", str(tmp_path))):
            result = invoke(*command, "--jobs", bad)
            assert result.exit_code == 2 and "Invalid value for '--jobs'" in result.output, result.output
            assert message in result.output

def test_the_json_array_is_streamed_byte_for_byte(capsys) -> None:  # type: ignore[no-untyped-def]
    from loop_core.cli import _classify_table, _emit_rows

    rows = [{"bundle": "a", "reader_error": None, "labels": ["x", "ü"], "nested": {"k": [1, {"z": None}], "e": []},
             "text": "line one\nline two \u2028 \"quoted\""},
            {"bundle": "b", "reader_error": {"type": "BundleError", "message": "bad"}, "empty": {}}]
    for given in (rows, rows[:1], []):
        assert _emit_rows(iter(given), "json", _classify_table) == sum(r["reader_error"] is not None for r in given)
        assert capsys.readouterr().out == json.dumps(given, indent=2, ensure_ascii=False) + "\n"


def test_run_batch_default_is_the_trackers_batch() -> None:
    from loop_core.cli import run
    from loop_core.trackers import BATCH

    (option,) = [p for p in run.params if p.name == "batch"]
    assert option.default == BATCH


@pytest.mark.parametrize("value, warned", [("of", True), ("bogus", True), ("OFF", False), ("ahocorasick", False),
                                           ("1", False), ("", False)])
def test_a_switch_set_to_a_value_it_does_not_know_is_warned_about(value: str, warned: bool) -> None:
    env = {**os.environ, "LOOP_RULES_SCANNER": value}
    result = subprocess.run([sys.executable, "-m", "loop_core", "--version"], capture_output=True, text=True,
                            env=env, check=True)
    assert ("LOOP_RULES_SCANNER=" in result.stderr) is warned, result.stderr
    if warned:
        assert f"warning: LOOP_RULES_SCANNER={value!r} is not one of off" in result.stderr
        assert "taken as on" in result.stderr


def test_a_reader_that_goes_away_is_the_sigpipe_status_not_a_finding(tmp_path: Path) -> None:
    """`classify | head` exited 1, which means an unreadable bundle."""
    from loop_core.testing import make_bundle, write_bundle

    for i in range(300):  # about 400 KB of rows: far more than a pipe's buffer holds
        write_bundle(tmp_path / f"m{i:03}" / "1", make_bundle(OOM))
    for args in (["classify", "--format", "jsonl", str(tmp_path)], ["classify", "--format", "json", str(tmp_path)]):
        proc = subprocess.Popen([sys.executable, "-m", "loop_core", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()  # as head does after its lines
        assert proc.wait(timeout=60) == 141, args
        assert proc.stderr.read() == b""


def test_classify_tells_successes_from_unknown_failures() -> None:
    """A success came out as "unknown none-unknown None" in the table, counted with the
    unknown failures (8 where run counts 5)."""
    examples = Path(__file__).resolve().parent.parent / "examples" / "pull-captures"
    rows = [json.loads(line) for line in invoke("classify", "--format", "jsonl", str(examples)).output.splitlines()]
    readable = [r for r in rows if r["reader_error"] is None]
    successes = [r for r in readable if r["failure"] is False]
    assert len(successes) == 3 and {r["failure_class"] for r in successes} == {"unknown"}  # as the reference has it
    assert all(r["failure"] is True for r in readable if r["should_file"])
    assert "failure" not in next(r for r in rows if r["reader_error"] is not None)
    table = invoke("classify", str(examples)).output.splitlines()
    for success in successes:
        parts = success["bundle"].split("/")
        shown = "/".join(parts[-2:])
        (line,) = [t for t in table if t.startswith((shown, "..." + shown[-37:]))]
        assert line.split()[1] == "success", line
    assert table[-1].endswith("unknown 5; 3 successes; 1 unreadable"), table[-1]
    run = json.loads(invoke("run", "--dry-run", "--format", "json", str(examples)).output)
    assert (run["by_class"]["unknown"], run["successes"]) == (5, 3)


def test_eval_table_columns_line_up() -> None:
    corpus = Path(__file__).resolve().parent / "corpus"
    result = invoke("eval", "--corpus", str(corpus), "--split", "tune", "--compare", "reference")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = lines[1]
    bars = [i for i, c in enumerate(header) if c == "|"]
    rows = [line for line in lines[2:] if line.count("|") == 3]
    assert len(rows) == 6  # one per class
    for line in rows:
        assert [i for i, c in enumerate(line) if c == "|"] == bars, line
    for heading in ("P", "R", "F1"):  # the first pack's numbers end where their headings end
        end = header.index(f" {heading} ") + 1 + len(heading)
        assert rows[0][end - 1].isdigit() and rows[0][end] == " ", (heading, rows[0])


def test_eval_names_each_pack_as_given_so_a_working_copy_is_told_from_the_default(tmp_path: Path) -> None:
    """A copy of rules.d is still called `default` by its pack.yml: `eval --rules rules.d
    --compare default`, the check of a rule change, showed two columns headed "default"
    and two lists of "misses of default". diff names the packs as they were given."""
    import shutil

    copy = tmp_path / "my-working-copy-of-rules.d"
    shutil.copytree(Path(__file__).resolve().parent.parent / "rules.d", copy)
    (tmp_path / "a.yml").write_text(CASE.format(id="c1", hard="false", excerpt="CUDA out of memory"))
    result = invoke("eval", "--corpus", str(tmp_path), "--rules", str(copy), "--compare", "default")
    assert result.exit_code == 0, result.output
    header = result.output.splitlines()[1]
    assert f"| {copy} " in header and "| default " in header, header
    assert f"misses of {copy} (0):" in result.output and "misses of default (0):" in result.output
    lines = result.output.splitlines()
    bars = [i for i, c in enumerate(header) if c == "|"]
    for line in lines[2:11]:  # the six classes, then macro-F1, accuracy and hard accuracy (no support)
        found = [i for i, c in enumerate(line) if c == "|"]
        assert found == bars[:len(found)] and len(found) >= 2, line
    report = json.loads(invoke("eval", "--corpus", str(tmp_path), "--rules", str(copy), "--compare", "default",
                               "--format", "json").output)
    assert [r["pack"] for r in report] == [str(copy), "default"]


CASE = "id: {id}\nengine: vllm\nsource: s\nlabel: genuine-oom\nhard: {hard}\nsplit: tune\nrationale: r\n" \
       "excerpt: '{excerpt}'\n"


@pytest.mark.parametrize(("content", "message"), [
    (b"id: c1\nlabel: unknown\nexcerpt: \"caf\xe9\"\n", "a.yml: unreadable case: 'utf-8' codec can't decode"),
    (b"id: c1\nlabel: [unknown\n", "a.yml: invalid YAML: "),
    (CASE.format(id="c1", hard="false", excerpt="x").replace("excerpt: 'x'", "excerpt: null").encode(),
     "a.yml: excerpt must be non-empty text, got None"),
    (CASE.format(id="c1", hard="false", excerpt="x").replace("id: c1", "id: [1, 2]").encode(),
     "a.yml: id must be non-empty text, got [1, 2]"),
    (CASE.format(id="c1", hard="false", excerpt="x").replace("source: s", "source: [s]").encode(),
     "a.yml: source must be text, got ['s']"),
    (CASE.format(id="c1", hard="false", excerpt="x").replace("source: s", "source: s\nactual: 1997").encode(),
     "a.yml: actual must be a mapping of the numbers the producer parsed, got 1997"),
    # It said "not one of the six classes" and no more, where a bad split lists the three.
    (CASE.format(id="c1", hard="false", excerpt="x").replace("label: genuine-oom", "label: oom").encode(),
     ("a.yml: label 'oom' is not one of the six classes (genuine-oom, overlay-arch-drift, kernel-unsupported, "
      "quant-unsupported, benign-cold-start, unknown)")),
])
def test_eval_refuses_a_bad_case_file_in_one_line_naming_it(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "a.yml").write_bytes(content)
    result = invoke("eval", "--corpus", str(tmp_path))
    assert result.exit_code == 2 and "internal error" not in result.output
    error = result.output.strip()
    assert "\n" not in error and message in error, error


def test_eval_follows_linked_folders_and_says_no_hard_case_was_measured(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.yml").write_text(CASE.format(id="c1", hard="false",
                                            excerpt="torch.OutOfMemoryError: CUDA out of memory."))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "linked").symlink_to(real, target_is_directory=True)
    (corpus / "loop").symlink_to(corpus, target_is_directory=True)  # a cycle is walked once
    result = invoke("eval", "--corpus", str(corpus))
    assert result.exit_code == 0, result.output
    assert result.output.startswith("1 case(s), split all")
    hard = next(line for line in result.output.splitlines() if line.startswith("hard accuracy"))
    assert hard.split("|")[1].strip() == "n/a"
    report = json.loads(invoke("eval", "--corpus", str(corpus), "--format", "json").output)
    assert report[0]["hard_cases"] == 0 and report[0]["hard_accuracy"] is None and report[0]["accuracy"] == 1.0


def test_eval_tells_a_folder_without_cases_from_a_split_without_any(tmp_path: Path) -> None:
    """Both were "no cases in split 'all'" (or the split given): a rule pack or a folder of
    bundles given as --corpus read as an empty split, and a split that selects nothing did
    not say which splits the corpus has."""
    rules = Path(__file__).resolve().parent.parent / "rules.d"
    result = invoke("eval", "--corpus", str(rules))
    assert (result.exit_code, result.output) == (
        2, f"Error: {rules}: no case files here (YAML files with a label and an excerpt)\n")
    (tmp_path / "a.yml").write_text(CASE.format(id="c1", hard="false", excerpt="CUDA out of memory"))
    (tmp_path / "b.yml").write_text(CASE.format(id="c2", hard="true", excerpt="x").replace("tune", "frozen"))
    (tmp_path / "c.yml").write_text(CASE.format(id="c3", hard="true", excerpt="x").replace("tune", "frozen"))
    result = invoke("eval", "--corpus", str(tmp_path), "--split", "holdout")
    assert (result.exit_code, result.output) == (
        2, f"Error: {tmp_path}: no cases in split 'holdout' (it holds 2 in frozen, 1 in tune)\n")
    assert invoke("eval", "--corpus", str(tmp_path), "--split", "frozen").output.startswith("2 case(s), split frozen")


def test_eval_writes_the_controls_of_a_case_id_as_escapes(tmp_path: Path) -> None:
    """A miss printed the case id as the file wrote it: an escape sequence reached the
    terminal, and a right-to-left override reordered the line."""
    (tmp_path / "a.yml").write_text(CASE.format(id="x", hard="false", excerpt="nothing").replace(
        "id: x", 'id: "evil\\e[2J\\u202eid"'))
    result = subprocess.run([sys.executable, "-m", "loop_core", "eval", "--corpus", str(tmp_path)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        "  evil\\x1b[2J\\u202eid: expected genuine-oom, got unknown (no rule matched)")


def test_eval_names_the_rule_behind_a_wrong_class_and_says_when_none_matched(tmp_path: Path) -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB"
    (tmp_path / "a.yml").write_text(CASE.format(id="a", hard="true", excerpt=oom).replace(
        "label: genuine-oom", "label: unknown"))
    (tmp_path / "b.yml").write_text(CASE.format(id="b", hard="false", excerpt="nothing"))
    result = subprocess.run([sys.executable, "-m", "loop_core", "eval", "--corpus", str(tmp_path),
                             "--rules", "reference"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-2:] == [
        "  a: expected unknown, got genuine-oom by tier1-oom-fastpath (hard)",
        "  b: expected genuine-oom, got unknown (no rule matched)"]


def test_eval_hard_accuracy_counts_only_the_hard_cases_classified_right(tmp_path: Path) -> None:
    (tmp_path / "a.yml").write_text(CASE.format(id="c1", hard="true", excerpt="torch.OutOfMemoryError: CUDA out of memory."))
    (tmp_path / "b.yml").write_text(CASE.format(id="c2", hard="true", excerpt="something odd"))
    (tmp_path / "c.yml").write_text(CASE.format(id="c3", hard="false", excerpt="CUDA out of memory"))
    [report] = json.loads(invoke("eval", "--corpus", str(tmp_path), "--format", "json").output)
    assert (report["hard_cases"], report["hard_accuracy"], report["accuracy"]) == (2, 0.5, pytest.approx(2 / 3))
    result = invoke("eval", "--corpus", str(tmp_path))
    hard = next(line for line in result.output.splitlines() if line.startswith("hard accuracy"))
    assert hard.split("|")[1].strip() == "0.500"
    assert result.output.endswith("misses of default (1):\n  c2: expected genuine-oom, got unknown (no rule matched) (hard)\n")


def test_eval_says_n_a_for_a_class_the_corpus_has_no_case_of(tmp_path: Path) -> None:
    """A class without a case showed precision, recall and F1 of 0.00, as if the pack failed
    it, where macro-F1 leaves it out and hard accuracy says n/a for the same nothing."""
    (tmp_path / "a.yml").write_text(CASE.format(id="c1", hard="false",
                                                excerpt="torch.OutOfMemoryError: CUDA out of memory."))
    (tmp_path / "b.yml").write_text(CASE.format(id="c2", hard="false", excerpt="something odd"))
    result = invoke("eval", "--corpus", str(tmp_path))
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split("|")[1].split() for line in result.output.splitlines()[2:8]}
    assert rows["genuine-oom"] == ["1.00", "0.50", "0.67"]
    assert rows["kernel-unsupported"] == ["n/a", "n/a", "n/a"]
    assert rows["unknown"] == ["0.00", "n/a", "n/a"]  # c2 was classified unknown: a wrong guess, measured
    [report] = json.loads(invoke("eval", "--corpus", str(tmp_path), "--format", "json").output)
    assert report["per_class"]["kernel-unsupported"] == {"precision": None, "recall": None, "f1": None, "support": 0}
    assert report["per_class"]["unknown"] == {"precision": 0.0, "recall": None, "f1": None, "support": 0}
    assert report["macro_f1"] == pytest.approx(2 / 3)


def test_trust_summary_counts_gate_only_bundles_by_name() -> None:
    lines = invoke("trust", str(EXAMPLES)).output.splitlines()
    last = lines[-1]
    assert "no stage 3" in last and ", - " not in last and not last.split(": ", 1)[1].startswith("- ")
    gate_only = [line for line in lines if "gate-only" in line]
    assert len(gate_only) == 3 and all(line.split()[1:] == ["-", "gate-only", "bundle"] for line in gate_only)


@pytest.mark.parametrize("jobs", ["65", "99999999999999999999"])
def test_jobs_beyond_the_cap_is_a_usage_error(jobs: str, tmp_path: Path) -> None:
    result = invoke("classify", "--jobs", jobs, str(tmp_path))
    assert result.exit_code == 2 and "is more than 64" in result.output


def test_jobs_at_the_cap_is_taken(bundle_dir) -> None:  # type: ignore[no-untyped-def]
    result = invoke("classify", "--jobs", "64", str(bundle_dir(OOM)))
    assert result.exit_code == 0 and "genuine-oom" in result.output


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux")
def test_running_out_of_descriptors_for_workers_is_a_clear_error(tmp_path: Path) -> None:
    import resource

    from loop_core.testing import make_bundle, write_bundle

    bundle = make_bundle()
    for i in range(80):  # enough for every worker to be started
        write_bundle(tmp_path / "c" / f"m{i:02d}" / "1", bundle)

    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))

    result = subprocess.run([sys.executable, "-m", "loop_core", "classify", "--jobs", "40", "--format", "jsonl",
                             str(tmp_path / "c")], capture_output=True, text=True, preexec_fn=few_descriptors,
                            check=False)
    assert result.returncode == 2, result.stderr
    assert "could not start a worker process" in result.stderr and "internal error" not in result.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="workers are forked on Linux; /proc lists them")
def test_sigterm_ends_a_parallel_run_with_a_message_and_no_workers_left(tmp_path: Path) -> None:
    import signal
    import time

    from loop_core.testing import make_bundle, write_bundle

    bundle = make_bundle("RuntimeError: " + "some frame\n" * 400)
    for i in range(1500):  # a run of a second or more: the signal comes well before its end
        write_bundle(tmp_path / "c" / f"m{i:04d}" / "1", bundle)
    proc = subprocess.Popen([sys.executable, "-m", "loop_core", "classify", "--jobs", "2", "--format", "jsonl",
                             str(tmp_path / "c")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline()  # classifying: the workers are up
    workers = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == proc.pid]
    assert len(workers) == 2
    proc.send_signal(signal.SIGTERM)
    proc.stdout.read()
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err.decode().strip().endswith("loop-rules: terminated")
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in workers)


def _parent(proc_dir: Path) -> int | None:
    try:
        return int((proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_explain_on_a_folder_of_bundles_names_them() -> None:
    result = invoke("explain", "examples/pull-captures/qwen-qwen3-14b")
    assert result.exit_code == 2
    assert ("examples/pull-captures/qwen-qwen3-14b: a folder of 1 bundle(s), not a bundle; give one of them: "
            "examples/pull-captures/qwen-qwen3-14b/20261126T101112Z") in result.output


def test_review_list_help_says_how_an_entry_leaves_the_queue() -> None:
    """It listed the entries and stopped there: what a maintainer does with one (learn
    --review, or a rule the next run applies) was only in the docs."""
    shown = " ".join(invoke("review", "list", "--help").output.split())
    assert "loop-rules learn --review HASH --captures CAPTURES --as CLASS" in shown
    assert "the next run takes out" in shown


def _doc_section(heading: str) -> str:
    text = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text(encoding="utf-8")
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return " ".join(text[start:end].split())


@pytest.mark.parametrize(("command", "heading"), [
    (["review", "list"], "### loop-rules review list"),
    (["report"], "## loop-rules report"),
])
def test_a_review_queue_that_is_not_a_folder_is_status_2_as_documented(
        tmp_path: Path, command: list[str], heading: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """cli.md said `review list` always exits 0; both it and `report` stop with 2 when
    the queue is a file, and their sections now say so."""
    (tmp_path / "captures").mkdir()
    (tmp_path / "captures" / "_review-queue").write_text("")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, [*command, "captures"])
    assert result.exit_code == 2
    assert result.stderr == "Error: captures/_review-queue: not a folder; move it aside\n"
    assert "`CAPTURES/_review-queue` is not a folder" in _doc_section(heading)


def test_a_typed_pack_name_that_a_folder_here_shares_is_said_to_be_the_pack(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`diff --rules default` beside an edited ./default compared the built-in pack with
    itself and reported nothing changed: the registered name wins, without a word."""
    import shutil

    from loop_core.testing import make_bundle, write_bundle

    from .conftest import RULES_D

    shutil.copytree(RULES_D, tmp_path / "default")
    write_bundle(tmp_path / "captures" / "m" / "20260801T000000Z", make_bundle(OOM))
    monkeypatch.chdir(tmp_path)
    warning = ("loop-rules: warning: --rules default is the registered pack 'default', not the folder default "
               "here: give --rules ./default for the folder\n")
    assert invoke("classify", "--rules", "default", "captures").stderr == warning
    assert invoke("diff", "--rules", "default", "captures").stderr == warning
    # Not where the user typed no pack name (--against's default is 'default' too) or the folder itself.
    for args in (["classify", "captures"], ["classify", "--rules", "./default", "captures"],
                 ["diff", "--rules", "./default", "captures"]):
        assert invoke(*args).stderr == "", args
    assert "--against default is the registered pack" in invoke(
        "diff", "--rules", "./default", "--against", "default", "captures").stderr


def test_classify_counts_a_lone_success_in_the_singular() -> None:
    last = invoke("classify", str(EXAMPLES / "qwen-qwen2.5-7b-instruct")).output.splitlines()[-1]
    assert last == "1 bundle(s): 1 success"


def test_explain_names_the_pack_and_its_rules_version() -> None:
    from loop_core import Engine

    out = invoke("explain", str(EXAMPLES / "qwen-qwen3-14b" / "20261126T101112Z")).output
    assert f"pack: default (rules_version {Engine.build('default').pack.version})" in out.splitlines()


def test_explain_json_marks_only_the_matcher_that_decided(bundle_dir) -> None:  # type: ignore[no-untyped-def]
    path = bundle_dir("RuntimeError: CUDA error: no kernel image is available for execution on the device")
    matchers = json.loads(invoke("explain", "--format", "json", str(path)).output)["matchers"]
    assert [(m["matcher"], m["matched"]) for m in matchers] == [
        ("tier1-oom-fastpath", False), ("tier2-exact", False), ("tier2-rules", True)]


def test_explain_on_a_folder_of_many_bundles_names_three_of_them(tmp_path: Path) -> None:
    from loop_core.testing import make_bundle, write_bundle

    for day in range(1, 5):
        write_bundle(tmp_path / "m" / f"2026080{day}T000000Z", make_bundle(OOM))
    result = invoke("explain", str(tmp_path / "m"))
    assert result.exit_code == 2
    shown = ", ".join(str(tmp_path / "m" / f"2026080{day}T000000Z") for day in (1, 2, 3))
    assert f"a folder of 4 bundle(s), not a bundle; give one of them: {shown}, ...\n" in result.output


def _oom_pack(tmp_path: Path, matches: str = "out of memory") -> Path:
    """A pack of one rule that any text saying "out of memory" matches, with ``matches`` as its match examples."""
    (tmp_path / "pack").mkdir()
    (tmp_path / "pack" / "10.yml").write_text(
        "- id: any-oom\n  class: genuine-oom\n  description: d\n"
        "  when: {select: $.signal.error_text, contains: out of memory}\n"
        f"  examples: {{match: [{matches}], no_match: [bang]}}\n")
    return tmp_path / "pack"


def test_explain_says_a_later_matcher_that_also_matches_was_not_used(tmp_path: Path, bundle_dir) -> None:  # type: ignore[no-untyped-def]
    out = invoke("explain", "--rules", str(_oom_pack(tmp_path)), str(bundle_dir(OOM))).output.splitlines()
    assert "[tier1] tier1-oom-fastpath: MATCH" in out
    assert "[tier2] tier2-rules: match (not used: an earlier matcher decided)" in out


def test_test_verbose_lists_the_passing_cases_and_json_counts_them(tmp_path: Path) -> None:
    pack = _oom_pack(tmp_path, matches="out of memory, bang")
    out = invoke("test", "--rules", str(pack), "--examples-only", "-v").output.splitlines()
    assert out[0] == f"PASS {pack}/10.yml[0] any-oom examples.match[0]"
    assert out[1].startswith(f"FAIL {pack}/10.yml[0] any-oom (line 5) examples.match[1]: expected match, got no match")
    assert out[2:] == [f"PASS {pack}/10.yml[0] any-oom examples.no_match[0]", "2 passed, 1 failed"]
    doc = json.loads(invoke("test", "--rules", str(pack), "--examples-only", "--format", "json").output)
    assert (doc["passed"], doc["failed"]) == (2, 1)


def test_eval_marks_a_missed_hard_case(tmp_path: Path) -> None:
    (tmp_path / "a.yml").write_text(CASE.format(id="c1", hard="true", excerpt="nothing"))
    (tmp_path / "b.yml").write_text(CASE.format(id="c2", hard="false", excerpt="nothing"))
    assert invoke("eval", "--corpus", str(tmp_path)).output.splitlines()[-2:] == [
        "  c1: expected genuine-oom, got unknown (no rule matched) (hard)", "  c2: expected genuine-oom, got unknown (no rule matched)"]


def test_explain_text_shows_the_key_and_verdict_that_json_gives(bundle_dir) -> None:  # type: ignore[no-untyped-def]
    path = str(bundle_dir(OOM))
    doc = json.loads(invoke("explain", "--format", "json", path).output)
    verdict = doc["verdict"]
    lines = invoke("explain", path).output.splitlines()
    assert lines[2:4] == [f"error_substring: {verdict['error_substring']!r}", f"fingerprint: {verdict['fingerprint']}"]
    assert lines[-1] == ("verdict: genuine-oom (tier1, rule tier1-oom-fastpath); should_file=True review_queue=False "
                         f"dedup {doc['dedup_hash']}")
