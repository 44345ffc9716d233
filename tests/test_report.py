"""The HTML triage report: self-contained, escaped, and not blank when a browser renders it."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pluggy
import pytest
from click.testing import CliRunner

from loop_core import (
    Engine,
    Match,
    MatchContext,
    Matcher,
    Tier,
    hookimpl,
    make_plugin_manager,
)
from loop_core.cli import cli
from loop_core.report import collect_triage, render_html
from loop_core.testing import make_bundle, write_bundle
from loop_core.verdict import FailureClass

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def captures(tmp_path: Path) -> Path:
    target = tmp_path / "pull-captures"
    shutil.copytree(ROOT / "examples" / "pull-captures", target,
                    ignore=shutil.ignore_patterns("_*"))
    return target


def make_report(captures: Path, out: Path) -> str:
    result = CliRunner().invoke(cli, ["report", str(captures), "--out", str(out),
                                      "--catalog", str(ROOT / "examples" / "catalog.yml")])
    assert result.exit_code == 0, result.output
    return out.read_text()


def test_report_has_every_section_and_no_network_assets(captures: Path, tmp_path: Path) -> None:
    page = make_report(captures, tmp_path / "r.html")
    for heading in ("Failures by class", "Trust funnel", "Top dedup groups", "OOM: measured vs predicted",
                    "Review queue", "Unreadable bundles"):
        assert f"<h2>{heading}</h2>" in page
    assert "<script" not in page and "<link" not in page and " src=" not in page
    urls = set(re.findall(r"https?://[^\"' )]+", page))
    assert urls <= {"http://www.w3.org/2000/svg"}  # the SVG namespace, never fetched
    assert page.count("<svg") == 3
    # the two identical OOM captures form one dedup group of two bundles
    assert re.search(r'<td class="num">2</td><td><span class="pill"[^>]*>genuine-oom</span>', page)
    # the funnel reaches tier1 for the curated anchors with consensus
    assert ">tier1</text>" in page


def test_a_report_that_cannot_be_written_is_one_line(captures: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", str(captures), "--out", str(tmp_path / "missing" / "r.html")])
    assert result.exit_code == 2
    assert "could not write the report: No such file or directory" in result.output
    assert "internal error" not in result.output and not (tmp_path / "missing").exists()


def test_the_line_report_prints_counts_the_unreadable_bundles(captures: Path, tmp_path: Path) -> None:
    """It left them out: an empty or mistyped folder (one unreadable bundle) read
    "wrote r.html (1 bundles, 0 failures, 0 dedup groups)", a report of nothing wrong."""
    result = CliRunner().invoke(cli, ["report", str(captures), "--out", str(tmp_path / "r.html")])
    assert result.output == "wrote " + str(tmp_path / "r.html") + (
        " (24 bundle(s), 20 failure(s), 12 dedup group(s), 1 unreadable)\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(cli, ["report", str(empty), "--out", str(tmp_path / "e.html")])
    assert result.output.endswith(" 0 failure(s), 0 dedup group(s), 1 unreadable)\n")


def test_report_escapes_bundle_text(tmp_path: Path) -> None:
    captures = tmp_path / "c"
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    write_bundle(captures / "m" / "1", make_bundle({"manifest": {"model": hostile},
                                                     "pt3": {"failure_log_excerpt": "ImportError: cannot import name 'x'"}}))
    page = make_report(captures, tmp_path / "r.html")
    assert "<script>" not in page and "<img" not in page
    assert "&lt;script&gt;" in page


def test_report_scrubs_what_captures_wrote_as_the_issues_do(tmp_path: Path) -> None:
    # A report is passed around: a token, a home directory or a bidi override a capture
    # wrote must not reach it where the issue text of the same capture has them scrubbed.
    captures = tmp_path / "c"
    token = "hf_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef0123"
    home_model = "/home/alice/ckpt/llama-7b"
    write_bundle(captures / "llama" / "20260801T000000Z", make_bundle({
        "manifest": {"model": home_model, "model_id": home_model},
        "pt1": {"predicted_b_breakdown": {"weights": 14.2, "kv_pool_requested": 6.0}},
        "pt3": {"failure_log_excerpt": "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB\n",
                "actual": {"attempted_alloc_mib": 512, "gpu_worker_reported_mib": 23100}}}))
    odd_model = f"acme/7b-\u202eevil {token}"
    write_bundle(captures / "odd" / "20260801T000000Z", make_bundle({
        "manifest": {"model": odd_model, "model_id": odd_model},
        "pt3": {"failure_log_excerpt": f"launcher: login with HF_TOKEN={token} then ask alice@example.com\n"
                                       "\x00\x00\x00\x00\n"}}))
    assert CliRunner().invoke(cli, ["run", str(captures)]).exit_code == 0
    page = make_report(captures, tmp_path / "r.html")
    assert "/home/alice" not in page and "~/ckpt/llama-7b @ 20260801T000000Z" in page  # the OOM chart's label
    assert token.lower() not in page.lower()  # the review queue's model and error columns
    assert "\u202e" not in page and "\x00" not in page
    assert "alice@example.com" not in page  # a mention is broken, as in an issue


def test_report_writes_controls_and_bidi_marks_of_folder_names_as_escapes(tmp_path: Path) -> None:
    """A folder name reached the page as it was: a right-to-left override reordered the
    path shown in the unreadable list (and an ESC hid in it), where the terminal output
    writes each as its escape."""
    captures = tmp_path / "c"
    write_bundle(captures / "llama" / "2026\u202e0801", make_bundle({
        "pt1": {"predicted_b_breakdown": {"weights": 14.2, "kv_pool_requested": 6.0}},
        "pt3": {"failure_log_excerpt": "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB\n",
                "actual": {"attempted_alloc_mib": 512, "gpu_worker_reported_mib": 23100}}}))
    for name in ("evil\u202e<i>lmth.exe", "red\x1b[31m"):
        broken = captures / name / "1"
        broken.mkdir(parents=True)
        (broken / "manifest.json").write_text("{")
    page = make_report(captures, tmp_path / "r.html")
    assert "\u202e" not in page and "\x1b" not in page
    assert "evil\\u202e&lt;i&gt;lmth.exe/1/manifest.json: invalid JSON" in page
    assert "red\\x1b[31m/1/manifest.json: invalid JSON" in page
    assert "@ 2026\\u202e0801</text>" in page  # the OOM chart's label


def test_the_review_table_cuts_a_long_model_name(tmp_path: Path) -> None:
    """The model column took the whole model name, where the error beside it is cut to
    160 characters: a capture naming its model in 50,000 characters filled the page."""
    captures = tmp_path / "c"
    model = "acme/" + "m" * 50_000
    write_bundle(captures / "m" / "1", make_bundle({"manifest": {"model": model, "model_id": model},
                                                     "pt3": {"failure_log_excerpt": "something odd\n"}}))
    assert CliRunner().invoke(cli, ["run", str(captures)]).exit_code == 0
    page = make_report(captures, tmp_path / "r.html")
    assert f"<td>acme/{'m' * 115}</td>" in page
    assert len(page) < 10_000


def test_report_names_the_pack_as_it_was_given(captures: Path, tmp_path: Path) -> None:
    """A working copy of rules.d, whose pack.yml still calls it default, was reported as
    pack default: a page passed around said the captures were classified by the pack
    they were not."""
    copy = Path(shutil.copytree(ROOT / "rules.d", tmp_path / "my-copy"))
    result = CliRunner().invoke(cli, ["report", str(captures), "--out", str(tmp_path / "r.html"),
                                      "--rules", str(copy)])
    assert result.exit_code == 0, result.output
    assert f"pack <code>{copy}</code>" in (tmp_path / "r.html").read_text()
    page = make_report(captures, tmp_path / "d.html")
    version = Engine.build("default", make_plugin_manager(entry_points=False)).pack.version
    assert f"pack <code>default</code> (rules_version\n<code>{version}</code>)" in page


def test_report_shows_a_lone_surrogate_in_a_review_entry_instead_of_crashing(tmp_path: Path) -> None:
    captures = tmp_path / "c"
    write_bundle(captures / "m" / "1", make_bundle({"pt3": {"failure_log_excerpt": "something odd\n"}}))
    assert CliRunner().invoke(cli, ["run", str(captures)]).exit_code == 0
    (entry,) = (captures / "_review-queue").glob("*.json")
    entry.write_text(entry.read_text().replace('"model_slug": "', '"model_slug": "Qwen\\ud800'))
    page = make_report(captures, tmp_path / "r.html")
    assert "Qwen" in page


def test_report_shows_what_each_shadow_rule_would_match(captures: Path, tmp_path: Path) -> None:
    pack = Path(shutil.copytree(ROOT / "rules.d", tmp_path / "rules.d"))
    (pack / "05-trial.yml").write_text(
        "- id: trial-nccl\n  class: kernel-unsupported\n  mode: shadow\n  description: trial\n"
        "  when: {select: $.signal.all_text, contains: NCCL}\n  examples: {match: [NCCL error], no_match: [x]}\n"
        "- id: trial-never\n  class: unknown\n  mode: shadow\n  description: trial\n"
        "  when: {select: $.signal.all_text, contains: frobnicator}\n  examples: {match: [frobnicator]}\n")
    result = CliRunner().invoke(cli, ["report", str(captures), "--rules", str(pack), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "r.html").read_text()
    assert "<h2>Shadow rules</h2>" in page
    assert re.search(r'<td class="num">1</td><td><code>trial-nccl</code></td>', page)
    assert re.search(r'<td class="num">0</td><td><code>trial-never</code></td>', page)
    assert "<h2>Shadow rules</h2>" not in make_report(captures, tmp_path / "plain.html")  # a pack without any


def _png_pixels(path: Path) -> tuple[int, int, bytes]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, zlib.decompress(idat)


@pytest.mark.slow
def test_report_renders_in_headless_chromium(captures: Path, tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Debian's chromium is not installed")
    page = tmp_path / "r.html"
    make_report(captures, page)
    shot = tmp_path / "r.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars", "--window-size=1200,1400",
                    f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120, check=False)
    assert shot.exists(), "chromium wrote no screenshot"
    width, height, raw = _png_pixels(shot)
    assert (width, height) == (1200, 1400)
    # Not blank: many distinct byte values and a good share of non-background pixels.
    assert len(set(raw)) > 50
    background = raw.count(raw[1])
    assert background < 0.97 * len(raw)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_report_on_a_full_disk_is_a_system_error(tmp_path: Path) -> None:
    """A full disk is the machine's refusal (status 74, as for any command), not a
    path the user got wrong (2): it used to be 2."""
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run([sys.executable, "-m", "loop_core", "report", "examples/pull-captures",
                             "--out", "/dev/full"], cwd=root, capture_output=True, text=True, check=False)
    assert result.returncode == 74
    assert result.stderr.splitlines()[-1] == "loop-rules: system error: No space left on device: /dev/full"


def test_report_out_dash_writes_the_page_to_stdout(captures: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`--out -` wrote a file named `-`: piped into a mailer or a CI artifact, the page
    goes to stdout alone, and the line that counts the bundles to stderr."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["report", str(captures), "--out", "-"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("<!doctype html>") and result.stdout.endswith("</html>\n")
    assert result.stderr == "wrote the report to stdout (24 bundle(s), 20 failure(s), 12 dedup group(s), 1 unreadable)\n"
    assert not (tmp_path / "-").exists()
    # A file named `-` is still one path away.
    result = CliRunner().invoke(cli, ["report", str(captures), "--out", "./-"])
    assert result.exit_code == 0 and (tmp_path / "-").read_text().startswith("<!doctype html>")


def test_the_review_table_shows_each_error_as_review_list_does(captures: Path, tmp_path: Path) -> None:
    """The table kept the log decorations `review list` leaves out: "(VllmWorker rank=1
    pid=212) ERROR 11-26 10:11:12 [multiproc_executor.py:596] " filled the cell before
    the error it decorates."""
    assert CliRunner().invoke(cli, ["run", str(captures)]).exit_code == 0
    page = make_report(captures, tmp_path / "r.html")
    row = re.search(r"<tr><td class=\"num\">1</td><td><code>6dd0a4e4a02e</code></td>.*?</tr>", page)
    assert row is not None
    assert "<td><code>torch.distributed.DistBackendError: NCCL error in: /pytorch/" in row[0]
    assert "pid=212" not in row[0] and "11-26 10:11:12" not in row[0]
    listed = CliRunner().invoke(cli, ["review", "list", str(captures)]).stdout
    assert "6dd0a4e4a02e      1  Qwen/Qwen3-14B                            torch.distributed.DistBackendError" in listed


def test_a_large_corpus_gives_a_page_of_bounded_length(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every review entry, unreadable bundle and OOM bar had a row: over a large corpus the
    page grew with it (an SVG thousands of bars high). The cards still count everything."""
    from loop_core import report

    monkeypatch.setattr(report, "SHOWN_ROWS", 3)
    monkeypatch.setattr(report, "SHOWN_DELTAS", 2)
    captures = tmp_path / "c"
    predicted = {"weights_gb": 9.0, "kv_gb": 12.0, "overhead_gb": 1.5}  # 23,040 MiB
    for i in range(5):
        model = {"model": f"acme/odd-{i}", "model_id": f"acme/odd-{i}"}
        write_bundle(captures / f"odd-{i}" / "1", make_bundle({
            "manifest": model, "pt3": {"failure_log_excerpt": f"odd failure {i}\n"}}))
        (captures / f"broken-{i}" / "1").mkdir(parents=True)
        (captures / f"broken-{i}" / "1" / "manifest.json").write_text("{")
    for i, actual in enumerate((23_000, 23_100, 30_000)):  # 30,000 MiB is the furthest from its prediction
        model = {"model": f"acme/oom-{i}", "model_id": f"acme/oom-{i}"}
        write_bundle(captures / f"oom-{i}" / "1", make_bundle({
            "manifest": model, "pt1": {"predicted_b_breakdown": predicted},
            "pt3": {"failure_log_excerpt": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB\n",
                    "actual": {"attempted_alloc_mib": 2560, "gpu_worker_reported_mib": actual}}}))
    assert CliRunner().invoke(cli, ["run", str(captures)]).exit_code == 0
    page = make_report(captures, tmp_path / "r.html")
    assert '<div class="card"><b>5</b>awaiting review</div>' in page
    assert '<div class="card"><b>5</b>unreadable</div>' in page
    assert page.count("odd failure") == 3 and f"… and 2 more entries: <code>loop-rules review list {captures}" in page
    assert page.count("manifest.json: invalid JSON") == 3 and "… and 2 more: <code>loop-rules classify" in page
    assert "the 2 furthest from their prediction, of 3 OOM bundles with a delta" in page
    assert "acme/oom-2 @ 1" in page and "acme/oom-0 @ 1" not in page  # the bar nearest its prediction is left out


def test_report_cards_charts_and_groups_show_the_corpus_numbers(captures: Path, tmp_path: Path) -> None:
    """The numbers a reader takes from the page: the failures card counts bundles (not
    classes), the biggest dedup group comes first, the funnel counts each anchor at every
    stage it passed (its longest bar full width), and an OOM that used less than predicted
    draws its bar left of the line."""
    page = make_report(captures, tmp_path / "r.html")
    assert '<div class="card"><b>24</b>bundles</div>' in page
    assert '<div class="card"><b>20</b>failures</div>' in page
    assert '<div class="card"><b>12</b>distinct issues</div>' in page  # groups, not the bundles in them
    assert '<div class="card"><b>3</b>successes</div>' in page
    classes = page[page.index("<h2>Failures by class</h2>"):page.index("<h2>Trust funnel</h2>")]
    bars = re.findall(r'>([\w-]+)</text><rect x="170" y="\d+" width="(\d+)"[^>]*/><text[^>]*>(\d+)</text>', classes)
    assert [stage for stage, _w, _n in bars] == [c.value for c in FailureClass]  # all six, in class order
    assert sum(int(n) for _s, _w, n in bars) == 20
    groups = page[page.index("<h2>Top dedup groups</h2>"):page.index("<h2>OOM: measured vs predicted</h2>")]
    counts = [int(n) for n in re.findall(r'<tr><td class="num">(\d+)</td>', groups)]
    assert len(counts) == 12 and counts == sorted(counts, reverse=True) and counts[0] == 2
    funnel = page[page.index("<h2>Trust funnel</h2>"):page.index("<h2>Top dedup groups</h2>")]
    bars = re.findall(r'>(\w+)</text><rect x="170" y="\d+" width="(\d+)"[^>]*/><text[^>]*>(\d+)</text>', funnel)
    assert [(stage, int(n)) for stage, _w, n in bars] == [("raw", 5), ("candidate", 5), ("validated", 2), ("tier1", 2)]
    assert bars[0][1] == "300"  # the largest count spans the chart
    oom = page[page.index("<h2>OOM: measured vs predicted</h2>"):page.index("<h2>Review queue</h2>")]
    mid = int(re.search(r'<line x1="(\d+)"', oom)[1])
    rects = [(int(x), int(w)) for x, w in re.findall(r'<rect x="(\d+)" y="\d+" width="(\d+)"', oom)]
    assert "-16578</text>" in oom and len(rects) == 3
    assert all(x + w == mid for x, w in rects)  # every delta here is negative: each bar ends at the line


def test_an_oom_that_used_exactly_its_prediction_has_a_bar(tmp_path: Path) -> None:
    captures = tmp_path / "c"
    predicted = {"weights_gb": 9.0, "kv_gb": 12.0, "overhead_gb": 1.5}  # 23,040 MiB
    write_bundle(captures / "oom" / "1", make_bundle({
        "manifest": {"model": "acme/exact", "model_id": "acme/exact"}, "pt1": {"predicted_b_breakdown": predicted},
        "pt3": {"failure_log_excerpt": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB\n",
                "actual": {"attempted_alloc_mib": 2560, "gpu_worker_reported_mib": 23_040}}}))
    page = make_report(captures, tmp_path / "r.html")
    assert "acme/exact @ 1</text>" in page and ">+0</text>" in page
    assert re.search(r'@ 1</text><rect x="\d+" y="\d+" width="1"', page)  # a bar one unit wide, not none
    assert "without a usable delta" not in page


def _two_unknowns(captures: Path) -> Path:
    """Captures of two distinct failures no rule decides: two review-queue entries after a run."""
    for i in range(2):
        write_bundle(captures / f"odd-{i}" / "1", make_bundle({
            "manifest": {"model": f"acme/odd-{i}", "model_id": f"acme/odd-{i}"},
            "pt3": {"failure_log_excerpt": f"odd failure {i}\n"}}))
    return captures


def test_review_and_unreadable_lists_of_exactly_the_shown_rows_have_no_more_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import report

    monkeypatch.setattr(report, "SHOWN_ROWS", 2)
    captures = _two_unknowns(tmp_path / "c")
    for i in range(2):
        (captures / f"broken-{i}" / "1").mkdir(parents=True)
        (captures / f"broken-{i}" / "1" / "manifest.json").write_text("{")
    assert CliRunner().invoke(cli, ["run", str(captures)]).exit_code == 0
    page = make_report(captures, tmp_path / "r.html")
    assert page.count("odd failure") == 2 and page.count("manifest.json: invalid JSON") == 2
    assert "more entries" not in page and "… and" not in page


def test_the_more_line_quotes_a_captures_folder_with_a_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The line names a command to copy: a folder with a space is quoted as a shell needs it."""
    from loop_core import report

    monkeypatch.setattr(report, "SHOWN_ROWS", 1)
    captures = _two_unknowns(tmp_path / "my captures")
    assert CliRunner().invoke(cli, ["run", str(captures)]).exit_code == 0
    page = make_report(captures, tmp_path / "r.html")
    assert f"… and 1 more entries: <code>loop-rules review list &#x27;{captures}&#x27;</code>" in page


def test_the_more_line_names_a_folder_with_a_control_character_so_it_pastes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A browser shows no escape character, so a command copied from the page lost it
    and named another folder; the page writes the bash word the terminal hints write."""
    import html

    from loop_core import report

    monkeypatch.setattr(report, "SHOWN_ROWS", 1)
    captures = _two_unknowns(tmp_path / "caps\x1b[1mbold")
    assert CliRunner().invoke(cli, ["run", str(captures)]).exit_code == 0
    page = make_report(captures, tmp_path / "r.html")
    assert "\x1b" not in page
    shown = re.search(r"<code>loop-rules review list (.*?)</code> lists them all", page)
    assert shown is not None
    word = html.unescape(shown.group(1))
    assert word.startswith("$'")
    pasted = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True, check=True).stdout
    assert pasted == os.fsencode(captures)


def test_a_review_queue_file_that_cannot_be_read_is_named_as_skipped(tmp_path: Path) -> None:
    captures = tmp_path / "c"
    write_bundle(captures / "m" / "1", make_bundle({"pt3": {"failure_log_excerpt": "something odd\n"}}))
    assert CliRunner().invoke(cli, ["run", str(captures)]).exit_code == 0
    os.mkfifo(captures / "_review-queue" / "0123456789ab.json")
    page = make_report(captures, tmp_path / "r.html")
    assert re.search(r"<tr><td colspan=\"4\">skipped: <code>[^<]*0123456789ab\.json: not a regular file", page)
    assert "something odd" in page  # the readable entry is still listed
    stderr = CliRunner().invoke(cli, ["report", str(captures), "--out", str(tmp_path / "r.html")]).stderr
    assert re.fullmatch(r"loop-rules: warning: skipped \S*/0123456789ab\.json: not a regular file.*\n", stderr)


def _oom(captures: Path, name: str, actual: int | None, model: str | None = None) -> None:
    """An OOM capture predicted to need 23,040 MiB that used ``actual`` (no measure: None)."""
    model = model or f"acme/{name}"
    pt3: dict[str, object] = {"failure_log_excerpt": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB\n"}
    if actual is not None:
        pt3["actual"] = {"attempted_alloc_mib": 2560, "gpu_worker_reported_mib": actual}
    write_bundle(captures / name / "1", make_bundle({
        "manifest": {"model": model, "model_id": model},
        "pt1": {"predicted_b_breakdown": {"weights_gb": 9.0, "kv_gb": 12.0, "overhead_gb": 1.5}}, "pt3": pt3}))


def test_the_oom_chart_keeps_the_furthest_either_side_in_the_order_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept by how far they are from their prediction, under or over, and drawn in the order
    the bundles were read; a bar under the prediction in its own colour."""
    from loop_core import report

    monkeypatch.setattr(report, "SHOWN_DELTAS", 2)
    captures = tmp_path / "c"
    _oom(captures, "oom-0", 23_040 + 5_000)
    _oom(captures, "oom-1", 23_040 + 60)
    _oom(captures, "oom-2", 23_040 - 10_000)
    oom = make_report(captures, tmp_path / "r.html")
    oom = oom[oom.index("<h2>OOM: measured vs predicted</h2>"):oom.index("<h2>Review queue</h2>")]
    bars = re.findall(r'>(acme/oom-\d) @ 1</text><rect [^>]*fill="(#\w+)"', oom)
    assert bars == [("acme/oom-0", "#d1495b"), ("acme/oom-2", "#00798c")]
    assert ">+5000</text>" in oom and ">-10000</text>" in oom and ">+60</text>" not in oom


def test_an_oom_chart_label_is_cut_to_sixty_characters(tmp_path: Path) -> None:
    captures = tmp_path / "c"
    _oom(captures, "long", 23_100, model="acme/" + "x" * 100)
    page = make_report(captures, tmp_path / "r.html")
    assert f'font-size="13">acme/{"x" * 55}</text>' in page


def test_the_oom_chart_counts_the_ooms_it_cannot_draw(tmp_path: Path) -> None:
    captures = tmp_path / "c"
    _oom(captures, "unmeasured-0", None)
    _oom(captures, "unmeasured-1", None)
    page = make_report(captures, tmp_path / "r.html")
    assert "no OOM with both a predicted total and a measured peak (2 OOM bundle(s) without a usable delta)" in page


def test_an_oom_chart_of_exactly_the_shown_bars_says_nothing_was_left_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import report

    monkeypatch.setattr(report, "SHOWN_DELTAS", 2)
    captures = tmp_path / "c"
    _oom(captures, "oom-0", 23_100)
    _oom(captures, "oom-1", 23_200)
    page = make_report(captures, tmp_path / "r.html")
    assert "acme/oom-0 @ 1</text>" in page and "acme/oom-1 @ 1</text>" in page
    assert "furthest from their prediction" not in page


def test_the_page_shows_the_first_hundred_unreadable_bundles_and_fifty_oom_bars(tmp_path: Path) -> None:
    """The limits docs/cli.md gives, as shipped."""
    captures = tmp_path / "c"
    for i in range(101):
        (captures / f"broken-{i:03}" / "1").mkdir(parents=True)
        (captures / f"broken-{i:03}" / "1" / "manifest.json").write_text("{")
    for i in range(51):
        _oom(captures, f"oom-{i:02}", 23_040 + 100 * (i + 1))
    page = make_report(captures, tmp_path / "r.html")
    assert page.count("manifest.json: invalid JSON") == 100 and "… and 1 more: <code>loop-rules classify" in page
    assert "the 50 furthest from their prediction, of 51 OOM bundles with a delta" in page
    assert "acme/oom-00 @ 1</text>" not in page and "acme/oom-01 @ 1</text>" in page


def test_each_shadow_rule_counts_every_bundle_it_matches(tmp_path: Path) -> None:
    pack = Path(shutil.copytree(ROOT / "rules.d", tmp_path / "rules.d"))
    (pack / "05-trial.yml").write_text(
        "- id: trial-oom\n  class: genuine-oom\n  mode: shadow\n  description: trial\n"
        "  when: {select: $.signal.all_text, contains: Tried to allocate}\n"
        "  examples: {match: [Tried to allocate 2 GiB], no_match: [x]}\n")
    captures = tmp_path / "c"
    for i in range(3):
        _oom(captures, f"oom-{i}", 23_100)
    result = CliRunner().invoke(cli, ["report", str(captures), "--rules", str(pack), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    assert '<td class="num">3</td><td><code>trial-oom</code></td>' in (tmp_path / "r.html").read_text()


def test_a_review_entry_edited_into_another_shape_is_counted_as_unknown(tmp_path: Path) -> None:
    """Its count is "?" (as `review list` shows it), not a number it does not hold."""
    captures = tmp_path / "c"
    write_bundle(captures / "m" / "1", make_bundle({"pt3": {"failure_log_excerpt": "something odd\n"}}))
    assert CliRunner().invoke(cli, ["run", str(captures)]).exit_code == 0
    (entry,) = (captures / "_review-queue").glob("*.json")
    doc = json.loads(entry.read_text())
    doc["occurrences"] = {"edited": "by hand"}
    entry.write_text(json.dumps(doc))
    page = make_report(captures, tmp_path / "r.html")
    assert f'<tr><td class="num">?</td><td><code>{entry.stem}</code></td>' in page


def test_the_heading_escapes_the_captures_folder_name(tmp_path: Path) -> None:
    captures = tmp_path / "a<b>&c"
    _oom(captures, "oom", 23_100)
    page = make_report(captures, tmp_path / "r.html")
    assert f'<p class="sub">{tmp_path}/a&lt;b&gt;&amp;c · pack' in page and "<b>&c" not in page


def test_a_page_without_unreadable_bundles_has_no_section_for_them(tmp_path: Path) -> None:
    captures = tmp_path / "c"
    _oom(captures, "oom", 23_100)
    page = make_report(captures, tmp_path / "r.html")
    assert '<div class="card"><b>0</b>unreadable</div>' in page
    assert "Unreadable bundles" not in page


def test_the_page_is_stamped_in_utc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_gmtime = time.gmtime
    monkeypatch.setenv("TZ", "Pacific/Kiritimati")  # UTC+14: a local time is never the UTC one
    time.tzset()
    try:
        monkeypatch.setattr(time, "gmtime", lambda *when: real_gmtime(*(when or (86_400 * 365 + 3_600,))))
        captures = tmp_path / "c"
        _oom(captures, "oom", 23_100)
        page = make_report(captures, tmp_path / "r.html")
    finally:
        monkeypatch.undo()
        time.tzset()
    assert "· 1971-01-01 01:00 UTC</p>" in page


def test_a_class_without_failures_keeps_a_stub_of_a_bar(tmp_path: Path) -> None:
    captures = tmp_path / "c"
    _oom(captures, "oom", 23_100)
    page = make_report(captures, tmp_path / "r.html")
    assert re.search(r'>unknown</text><rect x="170" y="\d+" width="2"', page)
    assert re.search(r'>genuine-oom</text><rect x="170" y="\d+" width="300"', page)


class _SegfaultTier1:
    """A plugin's Tier-1 matcher that decides a segfault with inputs of its own."""

    @hookimpl
    def loop_register_matchers(self, register: Any) -> None:
        def match(ctx: MatchContext) -> Match | None:
            if "segfault" in ctx.view.signal("error_text_lower"):
                return Match("kernel-unsupported", "acme-segv", delta_mib=512, tier1_inputs={"core": "dumped"})
            return None

        register(Matcher("acme-segv", Tier.TIER1, 10, match))


def test_the_oom_chart_shows_only_ooms(pm: pluggy.PluginManager, register_plugin: Any, tmp_path: Path) -> None:
    """A plugin's Tier-1 matcher may decide another class with inputs and a delta of its own:
    the chart of measured against predicted memory is the OOMs'."""
    register_plugin(_SegfaultTier1(), "acme-segv")
    captures = tmp_path / "c"
    write_bundle(captures / "segv" / "1", make_bundle({
        "manifest": {"model": "acme/segv", "model_id": "acme/segv"},
        "pt3": {"failure_log_excerpt": "Segfault in the kernel launcher\n"}}))
    data = collect_triage(captures, Engine.build("default", pm))
    assert data.by_class["kernel-unsupported"] == 1
    page = render_html(data)
    oom = page[page.index("<h2>OOM: measured vs predicted</h2>"):page.index("<h2>Review queue</h2>")]
    assert "(0 OOM bundle(s) without a usable delta)" in oom and "acme/segv" not in oom


def test_a_page_of_nothing_fileable_says_so_in_each_table(tmp_path: Path) -> None:
    """An empty or mistyped folder (one unreadable bundle): every section is there and says
    it is empty, the funnel with its four stages at zero."""
    empty = tmp_path / "empty"
    empty.mkdir()
    page = make_report(empty, tmp_path / "r.html")
    assert "<title>loop-rules triage report</title>" in page
    assert '<tr><td colspan="4">no fileable failures</td></tr>' in page
    assert '<tr><td colspan="4">the review queue is empty</td></tr>' in page
    funnel = page[page.index("<h2>Trust funnel</h2>"):page.index("<h2>Top dedup groups</h2>")]
    assert re.findall(r'>(\w+)</text><rect [^>]*/><text[^>]*>(\d+)</text>', funnel) == [
        ("raw", "0"), ("candidate", "0"), ("validated", "0"), ("tier1", "0")]


def test_a_dedup_group_wears_its_class_colour(tmp_path: Path) -> None:
    captures = tmp_path / "c"
    _oom(captures, "oom", 23_100)
    page = make_report(captures, tmp_path / "r.html")
    assert '<span class="pill" style="background:#d1495b">genuine-oom</span>' in page
