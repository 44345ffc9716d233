"""What a capture's folder names and numbers can do to the output: non-UTF-8 names,
escape sequences, NaN. Every output stays valid (UTF-8, strict JSON, one row a line)
and every bundle is still classified and filed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loop_core.bundle import path_text
from loop_core.testing import make_bundle, write_bundle

OOM = {"pt3": {"failure_log_excerpt": "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB"}}


def cli(*args: Any, code: int = 0) -> subprocess.CompletedProcess[bytes]:
    """The real process, with a strict UTF-8 stdout, as on a desktop with a UTF-8 locale."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    result = subprocess.run([sys.executable, "-m", "loop_core", *map(str, args)], capture_output=True, env=env,
                            check=False)
    assert result.returncode == code, result.stderr.decode("utf-8", "replace")
    result.stdout.decode("utf-8")  # valid UTF-8, or this raises
    return result


def strict_json(text: bytes) -> Any:
    def refuse(constant: str) -> Any:
        raise AssertionError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def odd(tmp_path: Path) -> Path:
    """Captures with a folder name that is not UTF-8 beside a plain one, both the same OOM of two models."""
    captures = tmp_path / "c"
    write_bundle(captures / os.fsdecode(b"bad\xffname") / "20260801T093000Z", make_bundle(OOM))
    write_bundle(captures / "zz" / "20260801T093000Z", make_bundle({"manifest": {"model": "other/M"}, **OOM}))
    return captures


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems refuse names that are not UTF-8")
def test_a_folder_name_that_is_not_utf8_is_classified_filed_and_shown(odd: Path) -> None:
    rows = [strict_json(line) for line in cli("classify", "--format", "jsonl", odd).stdout.splitlines()]
    assert [row["bundle"] for row in rows] == [f"{odd}/bad\\xffname/20260801T093000Z", f"{odd}/zz/20260801T093000Z"]
    assert all(row["failure_class"] == "genuine-oom" for row in rows)
    assert b"bad\\xffname" in cli("classify", odd).stdout
    summary = strict_json(cli("run", odd, "--format", "json").stdout)
    assert summary["filed_new"] == 2
    listed = strict_json(cli("tracker", "list", odd, "--format", "json").stdout)
    assert len(listed) == 2
    shown = strict_json(cli("tracker", "show", odd, "1", "--format", "json").stdout)
    assert shown["occurrence_list"][0]["bundle"].endswith("bad\\xffname/20260801T093000Z")
    cli("report", odd, "--out", odd / "report.html")
    # The spool path: written, then replayed into a fresh SQLite tracker.
    spool = odd.parent / "s"
    os.rename(odd, spool)
    (spool / "_loop" / "tracker.sqlite").unlink()
    cli("run", spool, "--tracker", "spool")
    assert b"opened 2; 2 drained" in cli("spool", "replay", spool).stdout


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems refuse names that are not UTF-8")
def test_an_unreadable_bundle_in_a_folder_not_named_in_utf8_is_named_in_its_row(tmp_path: Path) -> None:
    broken = tmp_path / os.fsdecode(b"bad\xffname")
    broken.mkdir()
    (broken / "manifest.json").write_text("{")
    (row,) = [strict_json(line) for line in cli("classify", "--format", "jsonl", broken, code=1).stdout.splitlines()]
    assert row["reader_error"]["message"].startswith(f"{tmp_path}/bad\\xffname/manifest.json: invalid JSON")
    (error,) = strict_json(cli("run", broken, "--dry-run", "--format", "json").stdout)["errors"]
    assert error["bundle"] == f"{tmp_path}/bad\\xffname"
    assert error["message"].startswith(f"{tmp_path}/bad\\xffname/manifest.json: invalid JSON")


def test_a_folder_named_in_utf8_is_written_as_it_is_not_escaped(tmp_path: Path) -> None:
    write_bundle(tmp_path / "modèle" / "20260801T093000Z", make_bundle(OOM))
    for fmt in ("jsonl", "json"):
        assert "modèle/20260801T093000Z".encode() in cli("classify", "--format", fmt, tmp_path).stdout


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems refuse names that are not UTF-8")
def test_a_captures_folder_or_pack_named_in_bytes_that_are_not_utf8_is_printed_not_a_crash(tmp_path: Path) -> None:
    """The folder given on the command line reached a UTF-8 stdout as it was: the run's
    first line, report's "wrote" line and the pack's name in diff, eval, check and
    explain ended the command with an internal error (status 70) after its work."""
    captures = tmp_path / os.fsdecode(b"caf\xe9")
    target = write_bundle(captures / "a" / "1", make_bundle(OOM))
    pack = tmp_path / os.fsdecode(b"pack\xff")
    pack.mkdir()
    (pack / "10-oom.yml").write_text(
        "- id: oom\n  class: genuine-oom\n  description: CUDA out of memory.\n"
        "  when: [{select: $.signal.all_text, contains: out of memory}]\n"
        "  examples: {match: ['out of memory'], no_match: ['ok']}\n", encoding="utf-8")
    run = cli("run", captures, "--dry-run").stdout
    assert f"1 bundle(s) under {tmp_path}/caf\\xe9,".encode() in run
    assert b"wrote " + os.fsencode(tmp_path) + b"/r\\xfe.html" in cli(
        "report", captures, "--out", tmp_path / os.fsdecode(b"r\xfe.html")).stdout
    assert b"between default and " in cli("diff", "--rules", pack, captures).stdout
    cli("diff", "--rules", pack, "--format", "markdown", captures)
    cli("check", "--rules", pack)
    cli("explain", "--rules", pack, target)
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "a.yml").write_text("id: a\nengine: vllm\nsource: x\nlabel: genuine-oom\nhard: false\n"
                                 "split: tune\nrationale: x\nexcerpt: CUDA out of memory\n", encoding="utf-8")
    assert b"pack\\xff" in cli("eval", "--corpus", cases, "--rules", pack).stdout


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS file systems refuse names that are not UTF-8")
def test_a_damaged_state_file_named_in_bytes_that_are_not_utf8_is_named_with_xff(tmp_path: Path) -> None:
    """The warnings of spool replay, review list and report showed such a byte as
    \\udcff, the surrogate Python holds it as, where every other output writes \\xff."""
    captures = tmp_path / "c"
    write_bundle(captures / "a" / "1", make_bundle())
    name = os.fsdecode(b"d\xff.json")
    for state in ("_dedup-queue", "_review-queue"):
        (captures / state).mkdir()
        (captures / state / name).write_text("{", encoding="utf-8")
    replayed = cli("spool", "replay", captures, code=1).stderr.decode("utf-8")
    listed = cli("review", "list", captures).stderr.decode("utf-8")
    reported = cli("report", captures, "--out", tmp_path / "r.html").stderr.decode("utf-8")
    for err in (replayed, listed, reported):
        assert "queue/d\\xff.json: unreadable file" in err, err
        assert "udcff" not in err


def test_path_text_escapes_only_what_is_not_utf8() -> None:
    assert path_text("plain/ascii") == "plain/ascii"
    assert path_text("caf\u00e9/\U0001F600") == "caf\u00e9/\U0001F600"
    assert path_text(os.fsdecode(b"a\xff\xfeb")) == "a\\xff\\xfeb"


def test_escape_sequences_and_newlines_in_folder_names_stay_text(tmp_path: Path) -> None:
    captures = tmp_path / "c"
    write_bundle(captures / "esc\x1b]0;OWNED\x07" / "1", make_bundle())
    write_bundle(captures / "nl\nname" / "1", make_bundle())
    out = cli("classify", captures).stdout.decode("utf-8")
    assert "\x1b" not in out and "\x07" not in out
    rows = out.splitlines()[1:3]
    assert len(out.splitlines()) == 5  # header, two rows, blank, summary: no row split by a newline
    assert rows[0].startswith("esc\\x1b]0;OWNED\\x07/1") and rows[1].startswith("nl\\nname/1")
    explained = cli("explain", captures / "nl\nname" / "1").stdout.decode("utf-8")
    assert "bundle: " + str(captures / "nl\\nname" / "1") in explained


def test_non_finite_numbers_of_a_bundle_come_out_as_strings(tmp_path: Path) -> None:
    target = write_bundle(tmp_path / "c" / "a" / "1", make_bundle())
    text = (target / "manifest.json").read_text(encoding="utf-8")
    assert '"selected_ctx": 32768' in text
    (target / "manifest.json").write_text(text.replace('"selected_ctx": 32768', '"selected_ctx": NaN'),
                                          encoding="utf-8")
    row = strict_json(cli("classify", "--format", "jsonl", tmp_path / "c").stdout)
    assert row["consensus_key"][6] == "NaN"
    assert strict_json(cli("classify", "--format", "json", tmp_path / "c").stdout)[0]["consensus_key"][6] == "NaN"
    strict_json(cli("explain", "--format", "json", target).stdout)
    strict_json(cli("trust", "--format", "json", tmp_path / "c").stdout)


def test_non_finite_numbers_in_the_trackers_come_out_as_strings_too(tmp_path: Path) -> None:
    """review list, tracker list/show and run printed a bare NaN, which no strict parser reads."""
    captures = tmp_path / "c"
    for name, text in (("unknown", "RuntimeError: the frobnicator refused"),
                       ("oom", OOM["pt3"]["failure_log_excerpt"])):
        target = write_bundle(captures / name / "1", make_bundle({"pt3": {"failure": text}}))
        manifest = target / "manifest.json"
        manifest.write_text(manifest.read_text(encoding="utf-8").replace('"arch_family": "LlamaForCausalLM"',
                                                                        '"arch_family": NaN'), encoding="utf-8")
        assert "NaN" in manifest.read_text(encoding="utf-8")
    summary = strict_json(cli("run", captures, "--format", "json").stdout)
    assert (summary["filed_new"], summary["review_queued"]) == (1, 1)
    (entry,) = strict_json(cli("review", "list", captures, "--format", "json").stdout)
    assert entry["canonical"]["tuple"]["arch_family"] == "NaN"
    (issue,) = strict_json(cli("tracker", "list", captures, "--format", "json").stdout)
    shown = strict_json(cli("tracker", "show", captures, str(issue["id"]), "--format", "json").stdout)
    assert shown["dedup_hash"] == issue["dedup_hash"]


def test_a_hand_edited_review_file_does_not_break_the_report(tmp_path: Path) -> None:
    captures = tmp_path / "c"
    write_bundle(captures / "a" / "1", make_bundle())
    (captures / "_review-queue").mkdir()
    (captures / "_review-queue" / "dddddddddddd.json").write_text('{"occurrences": 5, "model_slug": ["x"]}')
    cli("report", captures, "--out", tmp_path / "r.html")
    assert '<td class="num">?</td>' in (tmp_path / "r.html").read_text(encoding="utf-8")


def test_capability_names_in_the_trust_table_stay_text(tmp_path: Path) -> None:
    """The GRADUATES column printed a capture's capability names raw: an escape sequence
    there could clear the screen, and a newline broke the table."""
    from click.testing import CliRunner

    from loop_core.cli import cli

    hostile = "\x1b[2J\x1b[31mcap\nNEWLINE\rCR"
    write_bundle(tmp_path / "m" / "1", make_bundle({
        "pt3": {"ok": True, "failure": None},
        "pt4": {"results": {"plain-chat": "green", hostile: "green"}},
        "manifest": {"outcome": "ok", "smoke_capability_set": ["plain-chat", hostile]}}))
    out = CliRunner().invoke(cli, ["trust", "--promote", str(tmp_path)]).output
    assert "\x1b" not in out and "\r" not in out
    (row,) = [line for line in out.splitlines() if line.startswith("m/1")]
    assert "\\x1b[2J\\x1b[31mcap\\nNEWLINE\\rCR" in row
