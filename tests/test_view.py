"""The ``final_error`` signal: which line of the error text is the final error."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loop_core import litscan
from loop_core.testing import make_bundle
from loop_core.view import SIGNALS, View, names_exception, reversed_lines


def final_error(text: str) -> str:
    return View(make_bundle(text)).signal("final_error")


@pytest.mark.parametrize("header", [
    "Traceback (most recent call last):",
    "(APIServer pid=1008) Traceback (most recent call last):",
    "[rank0]: Traceback (most recent call last):",
    "ERROR 05-26 07:50:26 [core.py:396] Traceback (most recent call last):",
    "2024-08-01T21:29:17.880582981Z Traceback (most recent call last):",
    "vllm-1  | Traceback (most recent call last):",
    "ERROR 10-16 05:20:48 registry.py:264] Traceback (most recent call last):",
])
def test_a_bare_traceback_header_is_never_the_final_error(header: str) -> None:
    text = ("(EngineCore pid=11) RuntimeError: Worker failed with error 'boom'\n"
            f"{header}\n"
            '  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main')
    assert final_error(text) == "(EngineCore pid=11) RuntimeError: Worker failed with error 'boom'"


def test_an_exception_after_the_traceback_header_is_the_final_error() -> None:
    text = ("Traceback (most recent call last):\n"
            '  File "x.py", line 1, in <module>\n'
            "ImportError: cannot import name 'A' from 'b'")
    assert final_error(text) == "ImportError: cannot import name 'A' from 'b'"


def test_a_message_before_the_traceback_header_is_not_bare() -> None:
    line = ("(Worker pid=1) ERROR 08-05 23:29:38 utils.py:226] Exception in worker while processing "
            "method load_model: weight is not divisible by 128., Traceback (most recent call last):")
    assert final_error(f"INFO x\n{line}\n  File \"a.py\", line 1") == line


def test_an_ipython_header_names_its_exception() -> None:
    text = "KeyError                                  Traceback (most recent call last)\n  1 x = y['z']"
    assert final_error(text).startswith("KeyError")


def test_an_ipython_header_whose_message_was_cut_gives_way_to_the_cause_before_it() -> None:
    # A notebook's chained traceback, cut after the second header (tests/corpus/real,
    # transformers-drift-003): the KeyError is what failed, the header says nothing.
    text = ("KeyError                                  Traceback (most recent call last)\n"
            "-> 1265                 config_class = CONFIG_MAPPING[config_dict[\"model_type\"]]\n"
            "KeyError: 'hunyuan_v1_dense'\n\n"
            "During handling of the above exception, another exception occurred:\n\n"
            "ValueError                                Traceback (most recent call last)")
    assert final_error(text) == "KeyError: 'hunyuan_v1_dense'"
    # Its message after the frames is the final error, as before.
    assert final_error(text + "\n  1 x\nValueError: bad model type") == "ValueError: bad model type"


def test_a_bare_exception_is_an_exception_line() -> None:
    # sglang raises Exception itself and prints its advice after it (tests/corpus/real,
    # sglang-unknown-003): the advice's last line is not the error.
    line = "Exception: Capture cuda graph failed: Triton Error [CUDA]: an illegal memory access was encountered"
    text = ('  File "cuda_graph_runner.py", line 148, in __init__\n    raise Exception(\n'
            f"{line}\nPossible solutions:\n1. disable cuda graph by --disable-cuda-graph\n"
            "2. disable torch compile by not using --enable-torch-compile")
    assert final_error(text) == line
    assert final_error(f"(EngineCore pid=7) {line}\nINFO cleanup") == f"(EngineCore pid=7) {line}"


@pytest.mark.parametrize("line", ["Exception in thread Thread-21:", "Exception:", "the Exception: class"])
def test_other_lines_naming_bare_exception_are_not_exception_lines(line: str) -> None:
    assert final_error(f"[BUG] real problem here\n{line}") == "[BUG] real problem here"


@pytest.mark.parametrize("line", [
    "[BUG] type object 'BACKEND' has no attribute 'V9'",
    "[Bug]: rank 0 could finish the model loading, but other ranks did not",
    "[ERROR] Worker (pid:25134) was sent SIGKILL!",
    "[CRITICAL] the scheduler stopped",
    "Error: invalid file magic",
    "ollama  | Error: llama runner process has terminated: exit status 2",
    "ERROR: FP8 models require a GPU with a newer compute capability",
    "2023-09-26T21:48:00.969072Z ERROR text_generation_launcher: Shard 0 failed to start",
    "error loading model: unrecognized tensor type 14",
    "!!! ERROR loading full: `rope_scaling` must be a dictionary with two fields",
])
def test_error_tag_lines_are_error_lines(line: str) -> None:
    text = f"INFO starting\n{line}\nINFO 12:00:01 shutting down\n[GIN] 2024/11/06 | 500 | POST \"/api/chat\""
    assert final_error(text) == line


def test_an_error_tag_line_beats_a_later_line_that_only_says_something_failed() -> None:
    line = "2023-09-26T21:48:00.969072Z ERROR text_generation_launcher: Shard 0 failed to start"
    assert final_error(f"INFO starting\n{line}\nINFO removing the shard failed, ignored") == line


def test_a_named_exception_beats_a_later_error_tag_line() -> None:
    text = ("RuntimeError: Not enough memory to handle 4096 prefill tokens.\n"
            "2023-09-26T21:48:00Z ERROR text_generation_launcher: Method Warmup encountered an error.")
    assert final_error(text) == "RuntimeError: Not enough memory to handle 4096 prefill tokens."


@pytest.mark.parametrize("line", [
    # A timestamp's colon is not an error tag's colon.
    "ERROR 03-20 17:39:14 [core.py:1100]     output_i = apply_sdpa(q, k, v)",
    "INFO the error handler is ready",
    "Error:",
])
def test_lines_that_only_look_like_error_tags_are_not(line: str) -> None:
    assert final_error(f"[BUG] real problem here\n{line}") == "[BUG] real problem here"


@pytest.mark.parametrize(("text", "expected"), [
    # tests/corpus/real, llama.cpp-unknown-902: the goodbye after the failure.
    (("main: binding port with default address family\n"
      "main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080\n"
      "srv   operator (): operator (): cleaning up before exit..."),
     "main: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080"),
    # ollama-drift-901: the version asked for in the issue template.
    ("I am getting the error `exit status 0xc0000409`. What's wrong?\nOllama version\n0.1.42",
     "I am getting the error `exit status 0xc0000409`. What's wrong?"),
    # llama.cpp-drift-003: the loader's own lines name no exception and carry no tag.
    (("llama_model_load: error loading model architecture: unknown model architecture: 'gemma4'\n"
      "llama_model_load_from_file_impl: using device CUDA0 - 15074 MiB free"),
     "llama_model_load: error loading model architecture: unknown model architecture: 'gemma4'"),
    ("a Failed step\r\nINFO done\r\n", "a Failed step"),
    # A letter whose lower case is longer does not shift the line found.
    ("\u0130\u0130\u0130 unsupported dtype\n\u0130\u0130 INFO done", "\u0130\u0130\u0130 unsupported dtype"),
])
def test_without_an_error_line_the_last_line_saying_something_failed(text: str, expected: str) -> None:
    assert final_error(text) == expected


@pytest.mark.parametrize("brk", ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"])
def test_the_line_saying_something_failed_ends_where_splitlines_ends_it(brk: str) -> None:
    # The walk that finds error lines, and the last line when there is none, read the
    # lines str.splitlines cuts; so does the one for a failure word.
    assert final_error(f"INFO starting\nconnection refused{brk}INFO done") == "connection refused"
    assert final_error(f"INFO starting{brk}unable to bind\nINFO done") == "unable to bind"


@pytest.mark.parametrize("text", ["INFO flash attention supported\nINFO done", "INFO errorless\nINFO done",
                                  "INFO no failures\nINFO done"])
def test_a_failure_word_inside_another_word_is_not_one(text: str) -> None:
    assert final_error(text) == "INFO done"


def test_without_any_error_line_the_last_line_is_used() -> None:
    assert final_error("INFO loading\nINFO still loading\n\n") == "INFO still loading"
    assert final_error("Traceback (most recent call last):") == "Traceback (most recent call last):"


def test_killed_is_still_an_error_line() -> None:
    assert final_error("INFO building engine\nKilled\nINFO cleanup") == "Killed"


def test_views_of_one_bundle_compute_a_signal_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import view as view_module

    calls: list[object] = []
    compute, doc = view_module.SIGNALS["final_error"]
    monkeypatch.setitem(view_module.SIGNALS, "final_error",
                        (lambda b: calls.append(b) or compute(b), doc))
    bundle, other = make_bundle("RuntimeError: boom"), make_bundle("ValueError: bad")
    first = View.of(bundle)
    assert first.signal("final_error") == "RuntimeError: boom"
    second = View.of(bundle)
    assert second.signal("final_error") == "RuntimeError: boom"
    assert calls == [bundle]  # computed by the first view only
    second.warnings.append("only mine")
    assert first.warnings == [] and second is not first
    assert View.of(other).signal("final_error") == "ValueError: bad"
    assert View.of(bundle).signal("final_error") == "RuntimeError: boom"  # the latest was `other`
    assert calls == [bundle, other, bundle]


def test_views_of_one_bundle_read_its_error_source_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_core import keys
    from loop_core import view as view_module

    calls: list[object] = []
    monkeypatch.setattr(view_module, "error_source", lambda b: calls.append(b) or keys.error_source(b))
    bundle = make_bundle("INFO starting\nValueError: bad")
    assert View.of(bundle).error_source() == ("excerpt", "INFO starting\nValueError: bad")
    view = View.of(bundle)
    assert not view.lacks("final_error", frozenset(["valueerror"]))  # all_text not read: not known
    assert not view.lacks("final_error", frozenset(["importerror"]))
    assert view.error_source() == ("excerpt", "INFO starting\nValueError: bad")
    assert calls == [bundle]


# Every line boundary str.splitlines knows, and text around them.
_PIECES = st.sampled_from(["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028",
                           "\u2029", "", " ", "x", "RuntimeError: boom", "\u00e9\u00e9"])


@given(st.lists(_PIECES, max_size=60).map("".join), st.integers(min_value=1, max_value=40))
def test_reversed_lines_are_the_text_lines_backwards(text: str, chunk: int) -> None:
    assert list(reversed_lines(text, chunk)) == list(reversed(text.splitlines()))


def _plain_lines_holding(text: str, words: tuple[str, ...], end: int, breaks: str) -> list[tuple[int, int]]:
    """Every line of ``text[:end]`` holding one of ``words``, read one by one, the last first."""
    lines, start = [], 0
    for at in range(end + 1):
        if at == end or text[at] in breaks:
            if any(word in text[start:at] for word in words):
                lines.append((start, at))
            start = at + 1
    return lines[::-1]


_WALK_PIECES = st.sampled_from(["\n", "\r", "\r\n", "Error", "Killed", "rr", "x", " "])


@given(st.lists(_WALK_PIECES, max_size=40).map("".join), st.integers(min_value=0, max_value=200))
def test_the_lines_holding_a_word_are_those_a_plain_walk_finds(text: str, end: int) -> None:
    from loop_core.view import _lines_holding

    end, words = min(end, len(text)), ("Error", "Killed", "rr")
    assert list(_lines_holding(text, words, end)) == _plain_lines_holding(text, words, end, "\n")


# Failure words, letters whose lower case is longer ("\u0130") or ASCII ("\u212a"), and
# every kind of line break.
_FAILURE_WORD_PIECES = st.sampled_from(["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85",
                                        "\u2028", "\u2029", " ", "x", "INFO done", "failed", "Unable to",
                                        "couldn't", "\u0130", "\u212a", "\u00e9"])


@given(st.lists(_FAILURE_WORD_PIECES, max_size=40).map("".join))
def test_the_line_saying_something_failed_is_the_last_a_plain_walk_finds(text: str) -> None:
    from loop_core.view import _FAILURE_WORDS, _failure_line

    plain = next((line.strip() for line in reversed(text.splitlines()) if _FAILURE_WORDS.search(line)), None)
    assert _failure_line(text) == plain


def test_the_final_error_is_found_far_from_the_end() -> None:
    # The error is followed by more lines than one tail chunk holds.
    text = "start\nValueError: early\n" + "INFO shutting down worker\n" * 400
    assert final_error(text) == "ValueError: early"


# The plain pattern names_exception() answers for, in one pass.
SLOW_EXCEPTION_LINE = re.compile(r"\b(?:[A-Za-z_][\w.]*(?:Error|Exception)|AssertionError|Killed|Traceback)\b")


def _kind_without_shortcuts(line: str) -> int:
    """What ``_error_kind`` means, every regex run on every line."""
    from loop_core.view import (
        _BARE_EXCEPTION,
        _BARE_TRACEBACK,
        _ERROR_TAG,
        _IPYTHON_HEADER,
        _POINTS_ELSEWHERE,
        _SOURCE_LINES,
        undecorated,
    )

    message = undecorated(line)
    if _BARE_TRACEBACK.match(message) or message.lstrip().startswith(_SOURCE_LINES):
        return 0
    if SLOW_EXCEPTION_LINE.search(line) or _BARE_EXCEPTION.match(message):
        return 3 if _IPYTHON_HEADER.match(message) or _POINTS_ELSEWHERE.search(line) else 2
    return 1 if _ERROR_TAG.match(message) else 0


# No long s (U+017F) before "ee": the case-blind pattern reads it as an "s", the "see " substring test does not.
_LINE_PIECES = st.sampled_from([
    "ValueError", "Errors", "KeyError.attr", "error", "ERROR", "Error", "Exception", "MyException2", "_Exception",
    "Killed", "killed", "Traceback (most recent call last):", "Traceback", "ERROR 05-26 07:50:26", "[BUG]",
    "[error]", "fatal", "FATAL:", "critical", "panic", "bug", "(EngineCore pid=12)", "[rank0]:", "vllm-1  |",
    "core.py:396]", "level=ERROR", ": ", ":", " ", ".", "x", "\u00e9", "AssertionError", "torch.cuda.OutOfMemoryError",
    "    raise ", "except ", "See root cause above.", "see stack trace", "Exception: ", "raise(", "except:",
    "KeyError      Traceback (most recent call last)", "SEE the logs above", "\u0130",
])


@given(st.lists(_LINE_PIECES, max_size=12).map("".join))
def test_the_shortcuts_of_error_kind_change_no_answer(line: str) -> None:
    # The hint and exception-name substring tests only spare regexes that could not match.
    from loop_core.view import _error_kind

    assert _error_kind(line) == _kind_without_shortcuts(line)


VLLM_V1_TAIL = """\
(EngineCore_0 pid=211) ERROR 11-26 10:11:12 [core.py:708] EngineCore failed to start.
(EngineCore_0 pid=211) ERROR 11-26 10:11:12 [core.py:708] Traceback (most recent call last):
(EngineCore_0 pid=211) ERROR 11-26 10:11:12 [core.py:708]     raise ValueError(f"Unknown quantization method: {name}")
(EngineCore_0 pid=211) ERROR 11-26 10:11:12 [core.py:708] ValueError: Unknown quantization method: awq_v9
(APIServer pid=1) Traceback (most recent call last):
(APIServer pid=1)   File "/usr/local/bin/vllm", line 10, in <module>
(APIServer pid=1)     except Exception as e:
(APIServer pid=1)     raise RuntimeError("Engine core initialization failed. "
(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def test_an_exception_that_points_at_the_root_cause_gives_way_to_it() -> None:
    """vLLM V1 ends every failed start with this wrapper: as the final error it hid the
    real one from rules anchored on final_error and from the review queue."""
    assert final_error(VLLM_V1_TAIL) == (
        "(EngineCore_0 pid=211) ERROR 11-26 10:11:12 [core.py:708] ValueError: Unknown quantization method: awq_v9")
    wrapper_only = "INFO starting\nException: WorkerProc initialization failed. See stack trace for root cause.\n"
    assert final_error(wrapper_only) == "Exception: WorkerProc initialization failed. See stack trace for root cause."


@pytest.mark.parametrize("pointer", ["See root cause above.", "See stack trace for root cause.",
                                     "see the traceback above", "See logs above.", "see errors above",
                                     "See above for details."])
def test_every_wording_of_a_pointer_gives_way_to_the_exception_before_it(pointer: str) -> None:
    text = f"ValueError: Unknown quantization method: awq_v9\n  File \"x.py\", line 3\nRuntimeError: failed. {pointer}"
    assert final_error(text) == "ValueError: Unknown quantization method: awq_v9"



@pytest.mark.parametrize("source", ["raise KeyError(name)", "raise(KeyError(name))", "except Exception:",
                                    "except: raise KeyError(name)", "except(KeyError, ValueError):"])
def test_a_tracebacks_source_lines_are_not_the_final_error(source: str) -> None:
    """`raise KeyError(name)` and `except Exception:` name exceptions without reporting one."""
    text = f'  File "x.py", line 3, in f\n    raise KeyError(name)\nKeyError: \'x\'\n    {source}\n'
    assert final_error(text) == "KeyError: 'x'"


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(["a", "B", "_", "1", ".", " ", "Error", "Exception", "Killed", "Traceback",
                                 "\u00e9", "-", "(", "E", "rror", "Exceptio"]), max_size=14))
def test_names_exception_answers_as_the_plain_pattern(parts: list[str]) -> None:
    """The one-pass check stands in for a pattern that took seconds on one long dotted line."""
    line = "".join(parts)
    assert names_exception(line) == bool(SLOW_EXCEPTION_LINE.search(line))


# Pieces of failure texts: exception lines, vLLM's wrapper, letters whose lower case
# depends on their neighbours (a final sigma), is longer (a dotted capital I) or is
# ASCII (the Kelvin sign), and every kind of line break.
_FAILURE_PIECES = st.sampled_from([
    "ValueError: bad", "ImportError: cannot import name 'x'", "KeyError: 'w'", "INFO starting", " ", "x",
    "RuntimeError: Engine core initialization failed. See root cause above.", "  raise ValueError(",
    "Traceback (most recent call last):", "\n", "\r\n", "\r", "\x1c", "\x85", "\u2028", "\u03a3", "A\u03a3",
    "\u0130", "\u212a", "\u00e9",
])
_FAILURES = st.one_of(st.none(), st.lists(_FAILURE_PIECES, max_size=12).map("".join))
_LOOKED_FOR = ("valueerror", "importerror", "keyerror", "cannot import name ", "error", "root cause", "x", "k",
               "\u03c3", "\u03c2", "i\u0307", "\u00e9", "a\u03c2")


@pytest.mark.skipif(not litscan.available(), reason="ahocorasick_rs is not installed")
@settings(max_examples=300, deadline=None)
@given(excerpt=_FAILURES, failure=_FAILURES, download=_FAILURES, smoke=st.one_of(_FAILURES, st.integers()))
def test_a_signal_said_to_lack_a_literal_never_holds_it(excerpt: str | None, failure: str | None,
                                                         download: str | None, smoke: str | int | None) -> None:
    """The rule walk skips a final error's rules on View.lacks' word, without making it."""
    overrides: dict = {"pt2": {"failure": download}, "pt3": {"failure": failure, "failure_log_excerpt": excerpt}}
    if smoke is not None:
        overrides["pt4"] = {"results": {"chat": "red"}, "results_detail": {"chat": smoke}}
    bundle = make_bundle(overrides)
    litscan.use_scanner(True)
    try:
        scanner = litscan.scanner()
        assert scanner is not None
        scanner.seed(_LOOKED_FOR)
        view = View(bundle)
        view.index(view.signal("all_text")).scanned()  # read by the scanner, as the Tier-1 signature's search does
        for name in ("final_error", "error_text"):
            text = SIGNALS[name][0](bundle).lower()
            for literal in _LOOKED_FOR:
                assert not (literal in text and view.lacks(name, frozenset([literal]))), (name, literal)
    finally:
        litscan.use_scanner(None)


@pytest.mark.skipif(not litscan.available(), reason="ahocorasick_rs is not installed")
def test_a_final_error_its_log_rules_out_is_not_made() -> None:
    litscan.use_scanner(True)
    try:
        scanner = litscan.scanner()
        assert scanner is not None
        scanner.seed(["importerror", "valueerror"])
        view = View(make_bundle("INFO starting\nValueError: bad\nINFO shutting down"))
        assert not view.lacks("final_error", frozenset(["importerror"]))  # all_text not read yet: not known
        view.index(view.signal("all_text")).scanned()
        assert view.lacks("final_error", frozenset(["importerror"]))
        assert not view.lacks("final_error", frozenset(["importerror", "valueerror"]))
        assert "final_error" not in view._signals  # nothing asked for it: it was never made
        assert View(make_bundle({"pt3": {"failure": None}})).lacks("final_error", frozenset(["x"]))  # no error text
    finally:
        litscan.use_scanner(None)


def test_the_last_error_tag_line_wins_among_several() -> None:
    text = "Error: first attempt\nINFO retrying\nError: second attempt\nINFO giving up"
    assert final_error(text) == "Error: second attempt"


def test_the_final_error_line_is_stripped_at_both_ends() -> None:
    assert final_error("INFO loading\n    RuntimeError: CUDA error: no kernel image  \nINFO done") == (
        "RuntimeError: CUDA error: no kernel image")
    assert final_error("INFO loading\n\t[BUG] bad shape \n") == "[BUG] bad shape"


def all_text(overrides: dict) -> str:
    return View(make_bundle(overrides)).signal("all_text")


def test_all_text_lists_every_failure_text_newest_evidence_last() -> None:
    text = all_text({
        "pt2": {"failure": "download stalled"},
        "pt3": {"failure": "server did not become ready", "failure_log_excerpt": "RuntimeError: boom"},
        "pt4": {"results": {"streaming": "red", "plain-chat": "red", "tool-call": "green"},
                "results_detail": {"streaming": {"status": 500, "error": "HTTP 500"}}},
        "pt5": {"point": "override_capture", "exit_error_summary": "OOM at exit"},
    })
    assert text.split("\n") == ["download stalled", "server did not become ready", "RuntimeError: boom",
                                "smoke red:plain-chat", "HTTP 500", "OOM at exit"]


def test_all_text_takes_the_gate_detail_of_gate_only_bundles_alone() -> None:
    assert all_text({"pt1": {"detail": "a capture's own gate note"}, "pt3": {"failure": "boot failed"}}) == (
        "boot failed")
    gate = {"manifest": {"schema": 2}, "pt1": {"detail": "no row for arch"}}
    assert all_text(gate) == "no row for arch"


def test_http_statuses_are_the_numbers_only() -> None:
    view = View(make_bundle({"pt4": {"results_detail": {
        "a": {"status": 500}, "b": {"status": 429.0}, "c": {"status": True}, "d": {"status": "503"},
        "e": {"error": "no status"}, "f": "HTTP 502"}}}))
    assert view.signal("http_statuses") == [500, 429.0]


def test_the_capability_signals_sort_the_capabilities_by_verdict() -> None:
    view = View(make_bundle({"pt4": {"results": {"tool-call": "unsmoked", "streaming": "red", "vision": "unsmoked",
                                                 "plain-chat": "green", "json": "red", "embed": "green"}}}))
    assert view.signal("red_caps") == ["json", "streaming"]
    assert view.signal("green_caps") == ["embed", "plain-chat"]
    assert view.signal("unsmoked_caps") == ["tool-call", "vision"]
    assert view.signal("first_red_cap") == "json"


def test_the_manifest_signals_read_their_own_fields() -> None:
    view = View(make_bundle({"manifest": {"quant_label": "AWQ", "arch_family": "Qwen3ForCausalLM",
                                          "engine_pin": "vllm/vllm-openai:v0.9.1"}}))
    assert (view.signal("quant_label"), view.signal("arch_family"), view.signal("engine")) == (
        "awq", "Qwen3ForCausalLM", "vllm/vllm-openai:v0.9.1")
    assert View(make_bundle({"manifest": {"quant_label": None}})).signal("quant_label") == "none"


def test_error_text_lower_is_never_cut_where_error_substring_is() -> None:
    view = View(make_bundle("INFO  Starting " + "x" * 300 + "\nValueError: Bad"))
    assert view.signal("error_text_lower") == "info starting " + "x" * 300 + " valueerror: bad"
    assert len(view.signal("error_substring")) == 240


@pytest.mark.parametrize(("ok", "expected"), [(True, True), (None, False), (0, False), (1, True), ("", False)])
def test_boot_ok_and_download_ok_are_booleans(ok: object, expected: bool) -> None:
    view = View(make_bundle({"pt2": {"ok": ok}, "pt3": {"ok": ok}}))
    assert view.signal("boot_ok") is expected
    assert view.signal("download_ok") is expected


def test_boot_ok_and_download_ok_are_null_for_gate_only_bundles() -> None:
    view = View(make_bundle({"manifest": {"schema": 2}}))
    assert view.signal("boot_ok") is None and view.signal("download_ok") is None
