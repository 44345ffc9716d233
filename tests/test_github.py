"""The GitHub tracker against a fake ``gh`` on PATH: wire format, dedup, pacing, degrade, replay."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loop_core import Engine, PluginError, hookimpl, make_plugin_manager
from loop_core.dedup import (
    BODY_LIMIT,
    IssueDraft,
    Occurrence,
    draft_issue,
    occurrence_of,
    plus_one_comment,
    plus_one_submission,
)
from loop_core.github import GhResult, GitHubTracker, run_gh
from loop_core.plugins import collect
from loop_core.testing import make_bundle
from loop_core.trackers import FileAction, SpoolTracker, TrackerOptions, TrackerSpec, replay_spool

from .captures import copy_examples

FAKE_GH = Path(__file__).resolve().parent / "fixtures" / "fake_gh" / "gh"
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
REPO = "acme/loop-issues"


@dataclass
class FakeGh:
    """The fake ``gh`` of one test: its state file, its call log, its mode."""

    state_path: Path
    log_path: Path
    monkeypatch: pytest.MonkeyPatch

    def mode(self, mode: str) -> None:
        self.monkeypatch.setenv("FAKE_GH_MODE", mode)

    def calls(self) -> list[list[str]]:
        if not self.log_path.exists():
            return []
        return [json.loads(line) for line in self.log_path.read_text(encoding="utf-8").splitlines()]

    def forget_calls(self) -> None:
        self.log_path.unlink(missing_ok=True)

    def repo(self, name: str = REPO) -> dict[str, Any]:
        state = json.loads(self.state_path.read_text(encoding="utf-8")) if self.state_path.exists() else {}
        return state.get("repos", {}).get(name, {"labels": {}, "issues": []})

    def issues(self, name: str = REPO) -> list[dict[str, Any]]:
        return list(self.repo(name)["issues"])

    def seed(self, *, labels: dict[str, dict[str, str]] | None = None,
             issues: list[dict[str, Any]] | None = None, name: str = REPO) -> None:
        state = {"repos": {name: {"labels": labels or {}, "issues": issues or [],
                                  "next_number": 1 + max((i["number"] for i in issues or []), default=0)}}}
        self.state_path.write_text(json.dumps(state), encoding="utf-8")


@pytest.fixture
def gh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeGh:
    """The fake gh copied into tmp_path/bin, first on PATH; nothing is written into the repo."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    target = bindir / "gh"
    script = FAKE_GH.read_text(encoding="utf-8")
    if " " not in sys.executable:
        # This interpreter, without site-packages: the same Python as the tests, and quicker to start.
        script = f"#!{sys.executable} -S\n" + script.split("\n", 1)[1]
    target.write_text(script, encoding="utf-8")
    target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    fake = FakeGh(tmp_path / "gh-state.json", tmp_path / "gh-log.jsonl", monkeypatch)
    monkeypatch.setenv("FAKE_GH_STATE", str(fake.state_path))
    monkeypatch.setenv("FAKE_GH_LOG", str(fake.log_path))
    for name in ("FAKE_GH_MODE", "FAKE_GH_USER", "FAKE_GH_ASSOCIATION"):
        monkeypatch.delenv(name, raising=False)
    return fake


class FakeClock:
    """``clock``/``sleep`` for the tracker: sleeping advances time, nothing waits."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def captures(tmp_path: Path) -> Path:
    path = tmp_path / "captures"
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def module_engine() -> Engine:
    return Engine.build("default", make_plugin_manager(entry_points=False))


@pytest.fixture
def failure(module_engine: Engine) -> Any:
    """``failure(model=..., ts=...) -> (draft, occurrence)``: one OOM capture."""

    def make(model: str = "acme/Tiny-7B", ts: str = "20260801T093000Z") -> tuple[IssueDraft, Occurrence]:
        bundle = make_bundle({"manifest": {"model": model, "model_id": model, "utc_ts": ts},
                              "pt3": {"failure_log_excerpt": OOM}}, path=f"captures/{model}/{ts}")
        verdict = module_engine.classify(bundle)
        assert verdict.failure_class.value == "genuine-oom"
        return draft_issue(bundle, verdict), occurrence_of(bundle)

    return make


def tracker(captures: Path, clock: FakeClock, **kwargs: Any) -> GitHubTracker:
    kwargs.setdefault("repo", REPO)
    return GitHubTracker(captures, sleep=clock.sleep, clock=clock.clock, **kwargs)


def spooled(captures: Path, draft: IssueDraft) -> list[str]:
    path = captures / "_dedup-queue" / f"{draft.dedup_hash}.json"
    return [o["submission"] for o in json.loads(path.read_text(encoding="utf-8"))["occurrences"]]


def answering(result: GhResult, *command: str) -> Any:
    """A runner: the real ``gh`` (the fake on PATH), except that ``command`` calls answer ``result``."""

    def run(argv: list[str], timeout: float) -> GhResult:
        if argv[: len(command)] == list(command):
            return result
        return run_gh(argv, timeout=timeout)

    return run


def failing(*command: str) -> Any:
    """A runner: the real ``gh`` (the fake on PATH), except that ``command`` calls fail."""
    return answering(GhResult(False, 1, "", "HTTP 502: simulated"), *command)


def first_body(draft: IssueDraft, occurrence: Occurrence) -> str:
    return draft.body + f"\n\n<!-- loop-rules first-submission: {occurrence.submission} -->"


# -- the runner ------------------------------------------------------------


def test_run_gh_reports_exit_status_output_missing_binary_and_timeout(gh: FakeGh, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    ok = run_gh(["label", "list", "--json", "name"])
    assert ok == GhResult(True, 0, "[]\n", "")
    gh.mode("fail")
    failed = run_gh(["label", "list", "--json", "name"])
    assert (failed.ok, failed.returncode) == (False, 1) and "simulated" in failed.stderr
    gh.mode("hang")
    hung = run_gh(["label", "list", "--json", "name"], timeout=0.5)
    assert hung == GhResult(False, 124, "", "gh: timed out after 0.5s")  # what the user is told
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    missing = run_gh(["label", "list"])
    assert (missing.ok, missing.returncode) == (False, 127)


def test_a_gh_that_cannot_be_started_is_a_failed_call(gh: FakeGh, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A gh that may not be run, or an argument no command line can hold, is a failed
    call like any other, said as gh's trouble: run_gh never raises."""
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no other gh to fall back on
    (tmp_path / "bin" / "gh").chmod(0o644)
    denied = run_gh(["label", "list"])
    assert (denied.ok, denied.returncode, denied.stdout) == (False, 1, "")
    assert denied.stderr.startswith("gh: ") and "Permission denied" in denied.stderr
    (tmp_path / "bin" / "gh").chmod(0o755)
    nul = run_gh(["issue", "create", "--title", "a\0b"])
    assert (nul.ok, nul.returncode, nul.stderr) == (False, 1, "gh: embedded null byte")
    assert gh.calls() == []


def test_ctrl_c_while_gh_runs_stops_gh_too(gh: FakeGh, tmp_path: Path) -> None:
    """gh runs in a session of its own: interrupted, loop-rules used to leave it running,
    to open an issue after the run had ended, behind the rerun's lookup (a duplicate)."""
    import signal
    import time

    gh.mode("hang")
    script = "from loop_core.github import run_gh\nprint('go', flush=True)\nrun_gh(['issue', 'list'], timeout=60)\n"
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "go\n"
    deadline = time.monotonic() + 10
    while not gh.calls() and time.monotonic() < deadline:  # the fake has started
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert fakes_gone(tmp_path)


def test_ctrl_c_while_gh_is_starting_stops_gh_too(gh: FakeGh, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C that lands inside Popen, after the fork, is held back until run_gh can
    stop the gh it started, instead of leaving gh to file on its own."""
    import signal
    import threading

    gh.mode("hang")
    start = subprocess.Popen

    def started(proc: subprocess.Popen[str]) -> subprocess.Popen[str]:
        return proc

    def start_then_ctrl_c(*args: Any, **kwargs: Any) -> subprocess.Popen[str]:
        proc = start(*args, **kwargs)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        return started(proc)  # a pending Ctrl-C is raised on entering a Python function

    monkeypatch.setattr(subprocess, "Popen", start_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        run_gh(["issue", "list"], timeout=60)
    assert fakes_gone(tmp_path)


def fakes_gone(tmp_path: Path) -> bool:
    """Whether every fake gh started from ``tmp_path/bin`` has ended (within 5 s).
    Any still running is then killed, so that a failing test leaves none behind."""
    import signal
    import time

    fake = os.fsencode(tmp_path / "bin" / "gh")

    def alive() -> list[str]:
        out = []
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                # Bytes: another process's command line may be no UTF-8 (a test's odd file name).
                if entry.name.isdigit() and fake in (entry / "cmdline").read_bytes():
                    out.append(entry.name)
        return out

    deadline = time.monotonic() + 5
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    left = alive()
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(int(pid), signal.SIGKILL)
    return left == []


# -- filing ------------------------------------------------------------------


def test_first_filing_exact_command_lines(gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    draft, occ = failure()
    t = tracker(captures, fake_clock)
    result = t.file(draft, occ)
    assert (result.action, result.issue, result.reason) == (FileAction.OPENED, 1, "opened-new")
    dedup, cls, arch = draft.labels
    assert dedup == f"loop:dedup-{draft.dedup_hash}" and cls == "class:genuine-oom" and arch == "arch:llamaforcausallm"
    r = ["-R", REPO]
    assert gh.calls() == [
        ["label", "list", "--limit", "1000", "--json", "name", *r],
        ["label", "create", dedup, "--force", "--color", "ededed", "--description",
         f"loop-rules dedup key {draft.dedup_hash}", *r],
        ["label", "create", cls, "--force", "--color", "b60205", "--description",
         "loop-rules failure class: genuine-oom", *r],
        ["label", "create", arch, "--force", "--color", "c5def5", "--description",
         "loop-rules architecture family: llamaforcausallm", *r],
        ["issue", "create", "--title", draft.title, "--body", first_body(draft, occ),
         "--label", dedup, "--label", cls, "--label", arch, *r],
        # Did another run open this failure's issue meanwhile? (see the settle tests below)
        ["issue", "list", "--label", dedup, "--state", "all", "--limit", "100", "--json", "number,body,comments", *r],
    ]
    [issue] = gh.issues()
    assert issue["title"] == draft.title and issue["labels"] == list(draft.labels)
    assert not (captures / "_dedup-queue").exists() or not any((captures / "_dedup-queue").iterdir())


def test_without_repo_no_dash_r_and_existing_labels_are_not_recreated(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    draft, occ = failure()
    gh.seed(labels={"class:genuine-oom": {}, "arch:llamaforcausallm": {}}, name="local/repo")
    result = tracker(captures, fake_clock, repo=None).file(draft, occ)
    assert result.action is FileAction.OPENED
    calls = gh.calls()
    assert all("-R" not in c for c in calls)
    assert [c[:3] for c in calls] == [["label", "list", "--limit"], ["label", "create", draft.labels[0]],
                                      ["issue", "create", "--title"], ["issue", "list", "--label"]]
    assert len(gh.issues("local/repo")) == 1


def test_second_occurrence_is_a_plus_one_and_a_repeat_is_already_counted(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    draft, first = failure(ts="20260801T093000Z")
    _, second = failure(ts="20260802T093000Z")
    assert first.submission != second.submission
    t = tracker(captures, fake_clock)
    assert t.file(draft, first).action is FileAction.OPENED
    gh.forget_calls()
    plus = t.file(draft, second)
    assert (plus.action, plus.issue, plus.reason) == (FileAction.PLUS_ONE, 1, "plusone-body-verified")
    [call] = gh.calls()
    assert call[:3] == ["issue", "comment", "1"] and call[-2:] == ["-R", REPO]
    [comment] = gh.issues()[0]["comments"]
    assert comment["body"].startswith("<!-- club3090-loop-dedup +1 -->")
    assert plus_one_submission(comment["body"]) == second.submission

    gh.forget_calls()
    for occ in (first, second):
        again = t.file(draft, occ)
        assert (again.action, again.issue) == (FileAction.ALREADY_COUNTED, 1)
    assert gh.calls() == []  # the run's cache answers: no gh call at all

    # A new run (no cache) reads the issue once and still counts nothing twice.
    fresh = tracker(captures, FakeClock())
    for occ in (first, second):
        assert fresh.file(draft, occ).action is FileAction.ALREADY_COUNTED
    assert [c[:2] for c in gh.calls()] == [["label", "list"], ["issue", "list"]]
    assert gh.calls()[1] == ["issue", "list", "--label", draft.labels[0], "--state", "all", "--limit", "100",
                             "--json", "number,body,comments", "-R", REPO]
    assert len(gh.issues()) == 1 and len(gh.issues()[0]["comments"]) == 1


def test_hash_label_alone_never_gives_a_plus_one(gh: FakeGh, captures: Path, fake_clock: FakeClock,
                                                  failure: Any) -> None:
    draft, occ = failure()
    other, _ = failure(model="acme/Other-13B")
    # An issue carrying this draft's dedup label whose body tuple is another key's (a collision).
    impostor = {"number": 7, "title": "collision", "body": other.body, "labels": [draft.labels[0]],
                "state": "closed", "comments": []}
    gh.seed(labels={name: {} for name in draft.labels}, issues=[impostor])
    result = tracker(captures, fake_clock).file(draft, occ)
    assert (result.action, result.issue) == (FileAction.OPENED, 8)
    assert [c[:2] for c in gh.calls()] == [["label", "list"], ["issue", "list"], ["issue", "create"],
                                           ["issue", "list"]]
    issues = gh.issues()
    assert issues[0]["comments"] == [] and len(issues) == 2
    # The next occurrence finds the verified issue among both and comments there.
    _, later = failure(ts="20260901T000000Z")
    assert tracker(captures, FakeClock()).file(draft, later).issue == 8


def test_a_full_page_of_labels_is_not_taken_for_every_label(gh: FakeGh, captures: Path, fake_clock: FakeClock,
                                                              failure: Any) -> None:
    """`gh label list` shows 1000 labels at most: a dedup label past them must be looked
    up all the same, or each new occurrence of a filed failure opens an issue of its own."""
    draft, first = failure()
    _, second = failure(ts="20260802T093000Z")
    labels = {f"area:{i:04d}": {} for i in range(1000)}  # sorted before the dedup label
    labels.update({name: {} for name in draft.labels})
    issue = {"number": 1, "title": draft.title, "body": first_body(draft, first), "labels": list(draft.labels),
             "state": "open", "comments": []}
    gh.seed(labels=labels, issues=[issue])
    result = tracker(captures, fake_clock).file(draft, second)
    assert (result.action, result.issue, result.reason) == (FileAction.PLUS_ONE, 1, "plusone-body-verified")
    assert [c[:2] for c in gh.calls()] == [["label", "list"], ["issue", "list"], ["issue", "comment"]]
    assert len(gh.issues()) == 1


def test_issue_with_more_than_100_comments_is_read_in_full(gh: FakeGh, captures: Path, fake_clock: FakeClock,
                                                           failure: Any) -> None:
    draft, first = failure()
    others = [failure(ts=f"20260901T{i:04d}Z")[1] for i in range(120)]
    issue = {"number": 1, "title": draft.title, "body": first_body(draft, first), "labels": list(draft.labels),
             "state": "open", "comments": [{"body": plus_one_comment(draft, o)} for o in others]}
    gh.seed(labels={name: {} for name in draft.labels}, issues=[issue])
    # The last +1 is beyond the first 100 comments gh issue list returns: gh issue view reads them all.
    assert tracker(captures, fake_clock).file(draft, others[-1]).action is FileAction.ALREADY_COUNTED
    assert [c[:2] for c in gh.calls()] == [["label", "list"], ["issue", "list"], ["issue", "view"]]
    assert len(gh.issues()[0]["comments"]) == 120



@pytest.mark.parametrize("writer", ["OWNER", "MEMBER", "COLLABORATOR"])
@pytest.mark.parametrize("filler", [0, 100], ids=["in-list", "beyond-100-comments"])
def test_a_plus_one_counts_only_from_this_account_or_a_maintainer(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any, filler: int, writer: str) -> None:
    # Anyone can comment on a public issue: a forged +1 must not mark a submission as counted.
    draft, first = failure()
    forged, vouched = (failure(ts=ts)[1] for ts in ("20260901T000000Z", "20260902T000000Z"))
    chatter = [{"body": "same here", "author": "passer-by", "authorAssociation": "NONE"}] * filler
    comments = chatter + [
        {"body": plus_one_comment(draft, forged), "author": "mallory", "authorAssociation": "CONTRIBUTOR"},
        {"body": plus_one_comment(draft, vouched), "author": "co-maintainer", "authorAssociation": writer},
    ]
    issue = {"number": 1, "title": draft.title, "body": first_body(draft, first), "labels": list(draft.labels),
             "state": "open", "comments": comments}
    gh.seed(labels={name: {} for name in draft.labels}, issues=[issue])
    t = tracker(captures, fake_clock)
    assert t.file(draft, vouched).action is FileAction.ALREADY_COUNTED
    result = t.file(draft, forged)
    assert (result.action, result.issue) == (FileAction.PLUS_ONE, 1)
    after = gh.issues()[0]["comments"][filler:]
    assert [c["author"] for c in after] == ["mallory", "co-maintainer", "loop-bot"]
    assert plus_one_submission(after[-1]["body"]) == forged.submission


def test_own_plus_ones_count_without_write_access(gh: FakeGh, captures: Path, fake_clock: FakeClock,
                                                   failure: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_GH_ASSOCIATION", "NONE")  # this account cannot write to the repository
    draft, first = failure()
    _, second = failure(ts="20260802T093000Z")
    t = tracker(captures, fake_clock)
    assert t.file(draft, first).action is FileAction.OPENED
    assert t.file(draft, second).action is FileAction.PLUS_ONE
    # A later run recognises its own +1 (gh: viewerDidAuthor) and counts nothing twice ...
    assert tracker(captures, FakeClock()).file(draft, second).action is FileAction.ALREADY_COUNTED
    # ... while to another account without write access it is an outsider's comment.
    monkeypatch.setenv("FAKE_GH_USER", "someone-else")
    assert tracker(captures, FakeClock()).file(draft, second).action is FileAction.PLUS_ONE
    assert tracker(captures, FakeClock()).file(draft, first).action is FileAction.ALREADY_COUNTED  # the body


def test_an_issue_opened_meanwhile_by_another_run_is_the_one_counted_on(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Run B lists the labels first (it files another failure), then run A opens an issue for
    # failure K. B's label list does not show K's label, so B opens an issue of its own.
    # (Runs on two machines: on one, they share a lock, and B would look again.)
    draft, first = failure()
    _, second = failure(ts="20260802T093000Z")
    monkeypatch.setenv("LOOP_RULES_CACHE_DIR", str(tmp_path / "machine-b"))
    b = tracker(captures, fake_clock)
    assert b.file(*failure(model="acme/Unrelated-3B")).issue == 1
    monkeypatch.setenv("LOOP_RULES_CACHE_DIR", str(tmp_path / "machine-a"))
    a = tracker(captures, FakeClock())
    assert (a.file(draft, first).action, a.file(draft, first).issue) == (FileAction.OPENED, 2)
    gh.forget_calls()
    result = b.file(draft, second)
    assert (result.action, result.issue) == (FileAction.PLUS_ONE, 2)
    assert result.reason.endswith("opened #3 at the same time as another run opened #2: closed #3 as its duplicate")
    assert [c[:2] for c in gh.calls()] == [["label", "create"], ["issue", "create"], ["issue", "list"],
                                           ["issue", "comment"], ["issue", "close"]]
    issues = {i["number"]: i for i in gh.issues()}
    assert (issues[3]["state"], issues[3]["state_reason"]) == ("closed", "not planned")
    assert issues[3]["comments"][0]["body"].startswith("Duplicate of #2")
    assert fake_clock.slept == [3.0, 3.0, 3.0]  # the create, the +1 and the closing comment, each paced
    assert [plus_one_submission(c["body"]) for c in issues[2]["comments"]] == [second.submission]
    # Both runs, and any later one, now count on #2 and never twice.
    for t in (b, tracker(captures, FakeClock())):
        for occ in (first, second):
            assert (t.file(draft, occ).action, t.file(draft, occ).issue) == (FileAction.ALREADY_COUNTED, 2)
    _, third = failure(ts="20260803T093000Z")
    assert (a.file(draft, third).action, a.file(draft, third).issue) == (FileAction.PLUS_ONE, 2)


def test_two_runs_on_one_machine_never_count_a_submission_twice(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    """Each run kept the submissions it had seen counted on an issue: a +1 another run
    posted meanwhile was not among them, and the same submission got a second +1."""
    draft, first = failure()
    _, second = failure(ts="20260802T093000Z")
    a = tracker(captures, fake_clock)
    assert a.file(draft, first).action is FileAction.OPENED
    b = tracker(captures, FakeClock())
    assert b.file(draft, second).action is FileAction.PLUS_ONE
    assert a.file(draft, second).action is FileAction.ALREADY_COUNTED  # b wrote: a looked again
    assert [plus_one_submission(c["body"]) for c in gh.issues()[0]["comments"]] == [second.submission]
    gh.forget_calls()
    _, third = failure(ts="20260803T093000Z")
    assert a.file(draft, third).action is FileAction.PLUS_ONE
    assert a.file(draft, third).action is FileAction.ALREADY_COUNTED
    # Nobody else wrote between a's own calls: what it knew still held, no lookup.
    assert [c[:2] for c in gh.calls()] == [["issue", "comment"]]


def test_filings_that_only_read_leave_what_the_other_runs_know_standing(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    """Only a write tells the other runs on the machine to look again: a filing that found
    its occurrence counted makes none of them list the labels and the issues again."""
    draft, first = failure()
    _, second = failure(ts="20260802T093000Z")
    a = tracker(captures, fake_clock)
    b = tracker(captures, FakeClock())
    assert a.file(draft, first).action is FileAction.OPENED
    assert b.file(draft, first).action is FileAction.ALREADY_COUNTED  # b looked the issue up
    gh.forget_calls()
    assert a.file(draft, first).action is FileAction.ALREADY_COUNTED
    assert b.file(draft, second).action is FileAction.PLUS_ONE
    assert [c[:2] for c in gh.calls()] == [["issue", "comment"]]


def test_a_run_on_the_same_machine_finds_the_issue_another_opened_meanwhile(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Run B listed the labels before run A opened failure K's issue: sharing the lock, B
    forgets that listing too and finds K's issue, instead of opening a second one."""
    monkeypatch.setenv("LOOP_RULES_CACHE_DIR", str(tmp_path / "machine"))
    draft, first = failure()
    _, second = failure(ts="20260802T093000Z")
    b = tracker(captures, fake_clock)
    assert b.file(*failure(model="acme/Unrelated-3B")).issue == 1
    assert tracker(captures, fake_clock).file(draft, first).issue == 2
    gh.forget_calls()
    result = b.file(draft, second)
    assert (result.action, result.issue, result.reason) == (FileAction.PLUS_ONE, 2, "plusone-body-verified")
    assert [c[:2] for c in gh.calls()] == [["label", "list"], ["issue", "list"], ["issue", "comment"]]
    assert len(gh.issues()) == 2


def test_a_run_interrupted_while_its_plus_one_went_out_still_tells_the_others(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    """Ctrl-C reached b after gh had posted its +1: b left without marking the lock as
    written, and a, trusting what it knew of the issue, posted a second +1."""
    draft, first = failure()
    _, second = failure(ts="20260802T093000Z")
    a = tracker(captures, fake_clock)
    assert a.file(draft, first).action is FileAction.OPENED

    def interrupted_after_commenting(argv: list[str], timeout: float) -> GhResult:
        r = run_gh(argv, timeout=timeout)
        if argv[:2] == ["issue", "comment"]:
            raise KeyboardInterrupt
        return r

    b = tracker(captures, FakeClock(), runner=interrupted_after_commenting)
    with pytest.raises(KeyboardInterrupt):
        b.file(draft, second)
    assert a.file(draft, second).action is FileAction.ALREADY_COUNTED
    assert [plus_one_submission(c["body"]) for c in gh.issues()[0]["comments"]] == [second.submission]


def test_the_next_occurrence_goes_to_the_new_issue_though_the_listing_does_not_show_it_yet(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    """GitHub may list an issue only some time after it was opened: the run keeps the
    issue it opened, and the failure's next occurrence is a +1 there, not a second issue."""
    draft, first = failure()
    _, second = failure(ts="20260802T093000Z")
    t = tracker(captures, fake_clock, runner=answering(GhResult(True, 0, "[]\n", ""), "issue", "list"))
    assert t.file(draft, first).action is FileAction.OPENED
    result = t.file(draft, second)
    assert (result.action, result.issue) == (FileAction.PLUS_ONE, 1)
    assert t.file(draft, first).action is FileAction.ALREADY_COUNTED
    [issue] = gh.issues()
    assert [plus_one_submission(c["body"]) for c in issue["comments"]] == [second.submission]


def test_a_failed_settle_listing_keeps_the_new_issue(captures: Path, fake_clock: FakeClock, failure: Any,
                                                     gh: FakeGh) -> None:
    draft, first = failure()
    _, second = failure(ts="20260802T093000Z")
    t = tracker(captures, fake_clock, runner=failing("issue", "list"))
    result = t.file(draft, first)
    assert (result.action, result.issue, result.reason) == (FileAction.OPENED, 1, "opened-new")
    assert t.file(draft, second).action is FileAction.PLUS_ONE  # counted on the issue it opened
    assert t.file(draft, first).action is FileAction.ALREADY_COUNTED
    assert [len(i["comments"]) for i in gh.issues()] == [1]


def run_behind_another_machine(
        captures: Path, clock: FakeClock, failure: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        **kwargs: Any) -> tuple[GitHubTracker, IssueDraft, Occurrence]:
    """``(b, draft, second)``: run b listed the labels (filing another failure, #1) before a
    run on another machine opened #2 for the draft's failure, so b, filing its second
    occurrence, opens #3. (On one machine the runs share a lock, and b would look again.)"""
    draft, first = failure()
    _, second = failure(ts="20260802T093000Z")
    monkeypatch.setenv("LOOP_RULES_CACHE_DIR", str(tmp_path / "machine-b"))
    b = tracker(captures, clock, **kwargs)
    b.file(*failure(model="acme/Unrelated-3B"))
    monkeypatch.setenv("LOOP_RULES_CACHE_DIR", str(tmp_path / "machine-a"))
    assert tracker(captures, FakeClock()).file(draft, first).issue == 2
    return b, draft, second


def test_a_duplicate_that_cannot_be_closed_is_said_so_and_stays_open(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    b, draft, second = run_behind_another_machine(captures, fake_clock, failure, tmp_path, monkeypatch,
                                                  runner=failing("issue", "close"))
    result = b.file(draft, second)
    assert (result.action, result.issue) == (FileAction.PLUS_ONE, 2)
    assert result.reason.endswith("opened #3 at the same time as another run opened #2: could not close #3")
    assert [i["state"] for i in gh.issues()] == ["open", "open", "open"]


def test_a_failed_plus_one_while_settling_spools_and_the_replay_counts_it_once(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    b, draft, second = run_behind_another_machine(captures, fake_clock, failure, tmp_path, monkeypatch,
                                                  runner=failing("issue", "comment"))
    assert b.file(draft, second).action is FileAction.SPOOLED  # opened #3, could not count on #2
    assert spooled(captures, draft) == [second.submission]
    # #3 is closed all the same: left open, it stayed a second issue of the failure for good
    # (the replay counts on #2, the lowest, and never looks at #3 again).
    assert [i["state"] for i in gh.issues()] == ["open", "open", "closed"]
    assert gh.issues()[2]["comments"][0]["body"].startswith("Duplicate of #2:")
    replay = replay_spool(SpoolTracker(captures), tracker(captures, FakeClock()))
    assert [r.action for one in replay for r in one.results] == [FileAction.PLUS_ONE]
    assert [plus_one_submission(c["body"]) for c in gh.issues()[1]["comments"]] == [second.submission]
    assert replay_spool(SpoolTracker(captures), tracker(captures, FakeClock())) == []


def test_a_plus_one_refused_by_a_rate_limit_while_settling_calls_gh_no_more(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    def rate_limited(argv: list[str], timeout: float) -> GhResult:
        if argv[:2] == ["issue", "comment"]:
            return GhResult(False, 1, "", "GraphQL: API rate limit exceeded for user ID 1.")
        return run_gh(argv, timeout=timeout)

    b, draft, second = run_behind_another_machine(captures, fake_clock, failure, tmp_path, monkeypatch,
                                                  runner=rate_limited)
    gh.forget_calls()
    assert b.file(draft, second).action is FileAction.SPOOLED
    # The failed +1 is no gh call of the fake's; after the rate limit, no close either.
    assert [c[:2] for c in gh.calls()] == [["label", "create"], ["issue", "create"], ["issue", "list"]]
    assert [i["state"] for i in gh.issues()] == ["open", "open", "open"]

# -- degrade to the spool ----------------------------------------------------


@pytest.mark.parametrize("how", ["missing", "fail", "hang", "fail-create"])
def test_gh_trouble_spools_and_loses_nothing(how: str, gh: FakeGh, captures: Path, fake_clock: FakeClock,
                                            failure: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if how == "missing":
        monkeypatch.setenv("PATH", str(tmp_path / "no-gh-here"))
    else:
        gh.mode(how)
    drafts = [failure(model=m, ts=ts) for m in ("acme/A-7B", "acme/B-7B") for ts in ("20260801T0", "20260802T0")]
    t = tracker(captures, fake_clock, timeout=1.0)
    results = [t.file(d, o) for d, o in drafts]
    assert all(r.action is FileAction.SPOOLED for r in results)
    expected_rc = {"missing": 127, "fail": 1, "hang": 124, "fail-create": 1}[how]
    step = "issue-create" if how == "fail-create" else "label-list"
    assert results[0].reason == f"gh-degraded:{step} rc={expected_rc}"
    for draft, occ in drafts:
        assert occ.submission in spooled(captures, draft)
        assert results[0].spool_path is not None
    assert gh.issues() == []
    if how == "hang":  # an outage is noticed once, not once per bundle
        assert len(gh.calls()) == 1


def test_a_failed_label_listing_sends_the_rest_of_the_run_to_the_spool(gh: FakeGh, captures: Path,
                                                                         fake_clock: FakeClock, failure: Any) -> None:
    # Nothing is filed without the label list: asking gh again for each later bundle only repeats the failure.
    gh.mode("fail")
    t = tracker(captures, fake_clock)
    results = [t.file(*failure(model=f"acme/M{i}-7B")) for i in range(4)]
    assert [r.reason for r in results] == ["gh-degraded:label-list rc=1"] * 4
    assert gh.calls() == [["label", "list", "--limit", "1000", "--json", "name", "-R", REPO]]


def test_replay_files_each_failure_once_and_then_nothing(gh: FakeGh, captures: Path, fake_clock: FakeClock,
                                                         failure: Any) -> None:
    drafts = [failure(model=m, ts=ts) for m in ("acme/A-7B", "acme/B-7B") for ts in ("20260801T0", "20260802T0")]
    gh.mode("fail")
    offline = tracker(captures, fake_clock)
    for draft, occ in drafts:
        assert offline.file(draft, occ).action is FileAction.SPOOLED
    spool = SpoolTracker(captures)
    assert len(spool.pending()) == 2

    # Still failing: a replay keeps every file (already-spooled is not already-counted).
    replay = replay_spool(spool, tracker(captures, FakeClock()))
    assert [r.drained for r in replay] == [False, False] and len(spool.pending()) == 2

    gh.mode("ok")
    replay = replay_spool(spool, tracker(captures, FakeClock()))
    assert all(r.drained for r in replay) and spool.pending() == []
    actions = sorted(str(res.action) for r in replay for res in r.results)
    assert actions == ["opened", "opened", "plusone", "plusone"]
    issues = gh.issues()
    assert len(issues) == 2 and all(len(i["comments"]) == 1 for i in issues)

    gh.forget_calls()
    assert replay_spool(spool, tracker(captures, FakeClock())) == []
    assert gh.calls() == []
    # Filing the same captures again counts nothing twice.
    again = tracker(captures, FakeClock())
    assert {again.file(d, o).action for d, o in drafts} == {FileAction.ALREADY_COUNTED}
    assert len(gh.issues()) == 2 and all(len(i["comments"]) == 1 for i in gh.issues())


def test_timed_out_create_that_landed_is_not_duplicated(gh: FakeGh, captures: Path, fake_clock: FakeClock,
                                                       failure: Any) -> None:
    draft, occ = failure()
    gh.mode("hang-create-after-success")
    result = tracker(captures, fake_clock, timeout=1.0).file(draft, occ)
    assert (result.action, result.issue, result.reason) == (FileAction.OPENED, 1, "opened-new (create timed out)")
    assert len(gh.issues()) == 1 and gh.issues()[0]["comments"] == []
    assert [c[:2] for c in gh.calls()][-2:] == [["issue", "create"], ["issue", "list"]]
    assert not (captures / "_dedup-queue").exists() or not any((captures / "_dedup-queue").glob("*.json"))


def test_a_create_that_timed_out_counts_on_the_issue_another_run_opened_meanwhile(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    """The create timed out without landing, and the lookup after it finds the issue
    another run opened for the failure meanwhile: a +1 there, not a create again."""
    draft, occ = failure()
    _, other = failure(ts="20260802T093000Z")

    def another_run_first(argv: list[str], timeout: float) -> GhResult:
        if argv[:2] == ["issue", "create"] and not gh.issues():
            theirs = list(argv)
            theirs[theirs.index("--body") + 1] = first_body(draft, other)
            run_gh(theirs, timeout=timeout)
            return GhResult(False, 124, "", "gh: timed out after 30s")
        return run_gh(argv, timeout=timeout)

    result = tracker(captures, fake_clock, runner=another_run_first).file(draft, occ)
    assert (result.action, result.issue, result.reason) == (FileAction.PLUS_ONE, 1, "plusone-body-verified")
    [issue] = gh.issues()
    assert [plus_one_submission(c["body"]) for c in issue["comments"]] == [occ.submission]


@pytest.mark.parametrize("answer, tries", [
    (GhResult(False, 124, "", "timed out"), [["issue", "create"], ["issue", "list"], ["issue", "create"]]),
    # Only a create that timed out may have landed unseen. One gh refused is spooled at once:
    # looking it up and creating again would double the writes against GitHub's limits.
    (GhResult(False, 1, "", "HTTP 422: Validation Failed"), [["issue", "create"]]),
])
def test_a_failed_create_is_tried_again_only_when_it_timed_out(captures: Path, fake_clock: FakeClock, failure: Any,
                                                                answer: GhResult, tries: list[list[str]]) -> None:
    draft, occ = failure()
    calls: list[list[str]] = []

    def runner(argv: list[str], *, timeout: float) -> GhResult:
        calls.append(argv)
        if argv[:2] == ["issue", "create"]:
            return answer
        return GhResult(True, 0, "[]", "")

    result = GitHubTracker(captures, runner=runner, sleep=fake_clock.sleep, clock=fake_clock.clock).file(draft, occ)
    assert (result.action, result.reason) == (FileAction.SPOOLED, f"gh-degraded:issue-create rc={answer.returncode}")
    assert [c[:2] for c in calls if c[0] == "issue"] == tries
    assert spooled(captures, draft) == [occ.submission]


def test_a_create_whose_answer_names_no_issue_still_counts_as_opened(captures: Path, fake_clock: FakeClock,
                                                                     failure: Any) -> None:
    """gh created the issue but printed no URL: the occurrence is on it (its marker), and
    spooling it would open a second issue for the failure on replay."""
    draft, occ = failure()

    def runner(argv: list[str], *, timeout: float) -> GhResult:
        return GhResult(True, 0, "", "") if argv[:2] == ["issue", "create"] else GhResult(True, 0, "[]", "")

    result = GitHubTracker(captures, runner=runner, sleep=fake_clock.sleep, clock=fake_clock.clock).file(draft, occ)
    assert (result.action, result.issue, result.reason) == (FileAction.OPENED, None, "opened-new")
    assert SpoolTracker(captures).pending() == []


def test_a_call_that_printed_nothing_is_said_so(captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    draft, occ = failure()

    def silent(argv: list[str], *, timeout: float) -> GhResult:
        if argv[:2] == ["label", "list"]:
            return GhResult(True, 0, json.dumps([{"name": draft.labels[0]}]), "")
        return GhResult(True, 0, "", "")

    t = GitHubTracker(captures, runner=silent, sleep=fake_clock.sleep, clock=fake_clock.clock)
    assert t.file(draft, occ).reason == "gh-degraded:issue-list rc=0"
    assert list(t.problems) == ["`gh issue list` answered unreadably: it printed nothing"]


def test_raising_runner_and_bad_json_degrade(captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    draft, occ = failure()

    def broken(argv: list[str], *, timeout: float) -> GhResult:
        raise RuntimeError("boom")

    assert GitHubTracker(captures, runner=broken).file(draft, occ).action is FileAction.SPOOLED

    def garbage(argv: list[str], *, timeout: float) -> GhResult:
        if argv[:2] == ["label", "list"]:
            return GhResult(True, 0, json.dumps([{"name": draft.labels[0]}]), "")
        return GhResult(True, 0, "<html>rate limited</html>", "")

    # An unreadable issue list is not "no candidates" (reference §8.4.6): no duplicate is opened.
    tracker = GitHubTracker(captures, runner=garbage)
    result = tracker.file(draft, occ)
    assert (result.action, result.reason) == (FileAction.SPOOLED, "gh-degraded:issue-list rc=0")
    assert list(tracker.problems) == [
        "`gh issue list` answered unreadably: its output is not the JSON asked for: '<html>rate limited</html>'"]


@pytest.mark.parametrize("answer", [
    "",  # nothing at all: gh prints [] when no issue has the label
    '[{"number": "1", "body": "", "comments": []}]',  # a number that is not one
    '[{"number": 1, "comments": []}]',  # no body
    '[{"number": 1, "body": "", "comments": {}}]',  # comments that are not a list
])
def test_an_issue_listing_that_shows_no_issues_as_asked_opens_no_duplicate(
        answer: str, gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    draft, first = failure()
    assert tracker(captures, fake_clock).file(draft, first).action is FileAction.OPENED
    _, second = failure(ts="20260802T093000Z")

    def odd(argv: list[str], *, timeout: float) -> GhResult:
        if argv[:2] == ["issue", "list"]:
            return GhResult(True, 0, answer, "")
        return run_gh(argv, timeout=timeout)

    result = tracker(captures, FakeClock(), runner=odd).file(draft, second)
    assert (result.action, result.reason) == (FileAction.SPOOLED, "gh-degraded:issue-list rc=0")
    assert len(gh.issues()) == 1 and spooled(captures, draft) == [second.submission]


# -- pacing and caps -----------------------------------------------------------


def _create_times(runner_log: list[tuple[float, list[str]]]) -> list[float]:
    return [t for t, argv in runner_log if argv[:2] in (["issue", "create"], ["issue", "comment"])]


def _recording_runner(clock: FakeClock, log: list[tuple[float, list[str]]]) -> Any:
    issues = iter(range(1, 10_000))

    def runner(argv: list[str], *, timeout: float) -> GhResult:
        log.append((clock.now, argv))
        if argv[:2] == ["label", "list"]:
            return GhResult(True, 0, "[]", "")
        if argv[:2] == ["issue", "create"]:
            return GhResult(True, 0, f"https://github.com/{REPO}/issues/{next(issues)}\n", "")
        if argv[:2] == ["issue", "list"]:
            return GhResult(True, 0, "[]", "")
        return GhResult(True, 0, "", "")

    return runner


@pytest.mark.parametrize(("interval", "per_minute"), [(3.0, 20), (0.5, 20), (3.0, 5)])
def test_creates_are_paced(interval: float, per_minute: int, captures: Path, failure: Any) -> None:
    clock = FakeClock()
    log: list[tuple[float, list[str]]] = []
    t = GitHubTracker(captures, runner=_recording_runner(clock, log), sleep=clock.sleep, clock=clock.clock,
                      create_interval=interval, max_creates_per_minute=per_minute, max_creates_per_run=1000)
    for i in range(30):  # 6 new issues, 24 +1s
        draft, occ = failure(model=f"acme/M{i % 6}-7B", ts=f"2026080{1 + i // 6}T0")
        assert t.file(draft, occ).action in (FileAction.OPENED, FileAction.PLUS_ONE)
    times = _create_times(log)
    assert len(times) == 30 and clock.slept
    assert all(b - a >= interval for a, b in itertools.pairwise(times))
    assert all(times[i + per_minute] - times[i] >= 60.0 for i in range(len(times) - per_minute))


def test_two_runs_on_one_machine_pace_their_creates_together(captures: Path, failure: Any, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Each run paced its own creates only: taking turns at the lock, two runs at once
    created twice as fast as either may."""
    monkeypatch.setenv("LOOP_RULES_CACHE_DIR", str(tmp_path / "cache"))
    clock = FakeClock()  # the machine's monotonic clock, which both runs read
    log: list[tuple[float, list[str]]] = []
    runner = _recording_runner(clock, log)
    runs = [GitHubTracker(captures, runner=runner, sleep=clock.sleep, clock=clock.clock, max_creates_per_minute=5)
            for _ in range(2)]
    for i in range(12):
        assert runs[i % 2].file(*failure(model=f"acme/M{i}-7B")).action is FileAction.OPENED
    times = _create_times(log)
    assert len(times) == 12
    assert all(b - a >= 3.0 for a, b in itertools.pairwise(times))
    assert all(times[i + 5] - times[i] >= 60.0 for i in range(len(times) - 5))


def test_a_full_minute_of_creates_waits_only_until_its_oldest_is_a_minute_old(
        captures: Path, failure: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOP_RULES_CACHE_DIR", str(tmp_path / "cache"))  # no other run's creates
    clock = FakeClock()
    log: list[tuple[float, list[str]]] = []
    t = GitHubTracker(captures, runner=_recording_runner(clock, log), sleep=clock.sleep, clock=clock.clock,
                      max_creates_per_minute=5)
    for i in range(7):
        assert t.file(*failure(model=f"acme/M{i}-7B")).action is FileAction.OPENED
    assert [when - 1000.0 for when in _create_times(log)] == [0.0, 3.0, 6.0, 9.0, 12.0, 60.0, 63.0]


def test_creates_of_an_earlier_boot_do_not_hold_a_run_up(captures: Path, failure: Any, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # The monotonic clock starts again at each boot: a time the lock file holds from before
    # is later than now, and waiting for it would wait for hours.
    monkeypatch.setenv("LOOP_RULES_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "github.lock").write_text("0123\n999999.5 1000000.0", encoding="utf-8")
    clock = FakeClock()
    t = GitHubTracker(captures, runner=_recording_runner(clock, []), sleep=clock.sleep, clock=clock.clock)
    assert t.file(*failure()).action is FileAction.OPENED
    assert clock.slept == []


def test_the_documented_limits_are_the_defaults(captures: Path, failure: Any, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Each gh call may take 30 s; creates go 3 s apart, at most 20 in any 60 s, 50 a run."""
    monkeypatch.setenv("LOOP_RULES_CACHE_DIR", str(tmp_path / "cache"))
    clock = FakeClock()
    log: list[tuple[float, list[str]]] = []
    record = _recording_runner(clock, log)
    timeouts = set()

    def runner(argv: list[str], *, timeout: float) -> GhResult:
        timeouts.add(timeout)
        return record(argv, timeout=timeout)

    t = GitHubTracker(captures, runner=runner, sleep=clock.sleep, clock=clock.clock)
    results = [t.file(*failure(model=f"acme/M{i}-7B")) for i in range(52)]
    assert [r.action for r in results] == [FileAction.OPENED] * 50 + [FileAction.SPOOLED] * 2
    assert timeouts == {30.0}
    times = [when - 1000.0 for when in _create_times(log)]
    assert times[:3] == [0.0, 3.0, 6.0] and times[20] == 60.0 and len(times) == 50


def test_run_cap_spools_the_rest(captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    log: list[tuple[float, list[str]]] = []
    t = GitHubTracker(captures, runner=_recording_runner(fake_clock, log), sleep=fake_clock.sleep,
                      clock=fake_clock.clock, max_creates_per_run=3)
    results = [t.file(*failure(model=f"acme/M{i}-7B")) for i in range(5)]
    assert [r.action for r in results] == [FileAction.OPENED] * 3 + [FileAction.SPOOLED] * 2
    assert [r.reason for r in results[3:]] == ["run-cap", "run-cap"]
    assert len(_create_times(log)) == 3 and len(SpoolTracker(captures).pending()) == 2


def test_gh_calls_scale_with_distinct_failures_not_bundles(gh: FakeGh, captures: Path, fake_clock: FakeClock,
                                                           failure: Any) -> None:
    keys = ("acme/A-7B", "acme/B-7B", "acme/C-7B")
    # 30 bundles, 3 dedup keys: each capture seen ten times (e.g. rerunning over the same captures).
    t = tracker(captures, fake_clock)
    for _ in range(10):
        for model in keys:
            t.file(*failure(model=model))
    calls = gh.calls()
    assert [c[:2] for c in calls].count(["label", "list"]) == 1
    assert len(calls) <= 1 + 5 * len(keys)  # label list once; per key at most 3 labels, 1 create, 1 settle
    assert len(gh.issues()) == 3

    # 30 distinct submissions: one write each is unavoidable, reads stay per key.
    gh.forget_calls()
    t2 = tracker(captures, FakeClock())
    for i in range(30):
        t2.file(*failure(model=keys[i % 3], ts=f"2026090{1 + i // 3}T0"))
    kinds = [tuple(c[:2]) for c in gh.calls()]
    assert kinds.count(("label", "list")) == 1 and kinds.count(("issue", "list")) == 3
    assert kinds.count(("issue", "comment")) == 30 and len(kinds) == 1 + 3 + 30
    assert all(len(i["comments"]) == 10 for i in gh.issues())


# -- labels and registration ---------------------------------------------------------


def test_bootstrap_labels(gh: FakeGh, captures: Path, fake_clock: FakeClock) -> None:
    t = tracker(captures, fake_clock)
    classes = ["genuine-oom", "overlay-arch-drift", "kernel-unsupported", "quant-unsupported",
               "benign-cold-start", "unknown"]
    assert t.bootstrap_labels() == {c: True for c in classes}
    assert [c[:3] for c in gh.calls()] == [["label", "create", f"class:{c}"] for c in classes]
    assert all(c[-2:] == ["-R", REPO] for c in gh.calls())
    assert gh.repo()["labels"]["class:unknown"]["description"] == "loop-rules failure class: unknown"
    gh.mode("hang")
    gh.forget_calls()
    assert tracker(captures, FakeClock(), timeout=0.5).bootstrap_labels() == {c: False for c in classes}
    assert len(gh.calls()) == 1  # after the first call timed out, no other waits its turn to time out


def test_bootstrap_without_gh_asks_for_it_once(captures: Path, fake_clock: FakeClock) -> None:
    asked = []

    def missing(argv: list[str], *, timeout: float) -> GhResult:
        asked.append(argv)
        return GhResult(False, 127, "", "gh: command not found")

    t = GitHubTracker(captures, runner=missing, sleep=fake_clock.sleep, clock=fake_clock.clock)
    assert set(t.bootstrap_labels().values()) == {False}
    assert len(asked) == 1
    assert list(t.problems) == ["`gh label create` failed (exit 127): gh: command not found"]


def test_labels_of_a_plugin_s_own_are_made_in_a_neutral_colour(gh: FakeGh, captures: Path, fake_clock: FakeClock,
                                                                failure: Any) -> None:
    """A draft may carry labels loop-rules has no colour for: another kind of label, or
    a failure class of a plugin's."""
    draft, occ = failure()
    labelled = dataclasses.replace(draft, labels=(*draft.labels, "class:driver-mismatch", "team:serving"))
    assert tracker(captures, fake_clock).file(labelled, occ).action is FileAction.OPENED
    made = gh.repo()["labels"]
    assert made["class:driver-mismatch"] == {"color": "cccccc",
                                             "description": "loop-rules failure class: driver-mismatch"}
    assert made["team:serving"] == {"color": "ededed", "description": "loop-rules"}
    assert gh.issues()[0]["labels"] == list(labelled.labels)


def test_labels_bootstrap_prints_each_class_and_fails_when_one_label_failed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from loop_core.cli import cli

    monkeypatch.setattr(GitHubTracker, "bootstrap_labels", lambda self: {"genuine-oom": True, "unknown": False})
    result = CliRunner().invoke(cli, ["labels", "bootstrap", "--repo", REPO])
    assert (result.exit_code, result.stdout) == (1, "ok     genuine-oom\nFAILED unknown\n")


class MemoryTrackerPlugin:
    """A third-party backend: what a plugin implementing ``loop_register_trackers`` provides."""

    @hookimpl
    def loop_register_trackers(self, register: Any) -> None:
        register(TrackerSpec("memory", lambda options: SpoolTracker(options.captures), "test backend"))


def test_hook_loop_register_trackers(captures: Path) -> None:
    pm = make_plugin_manager(entry_points=False)
    pm.register(MemoryTrackerPlugin(), name="memory-tracker")
    specs = collect(pm, "loop_register_trackers", lambda s: s.name, "tracker")
    assert {"sqlite", "spool", "github", "memory"} <= set(specs)
    made = specs["github"][0].factory(TrackerOptions(captures, repo=REPO))
    assert isinstance(made, GitHubTracker) and made.name == "github" and made.repo == REPO
    made.close()
    assert specs["memory"][1] == "memory-tracker"
    pm.register(type("Again", (MemoryTrackerPlugin,), {})(), name="memory-again")
    with pytest.raises(PluginError, match="memory"):
        collect(pm, "loop_register_trackers", lambda s: s.name, "tracker")


def test_a_body_too_long_for_one_argument_goes_through_a_file(gh: FakeGh, captures: Path, fake_clock: FakeClock,
                                                              module_engine: Engine) -> None:
    """The kernel takes at most 128 KiB in one argument: a body of CJK log text (three
    bytes a character) failed with 'Argument list too long', and stayed spooled for good."""
    text = "INFO start\ntorch.OutOfMemoryError: CUDA out of memory. 显存不足 " + "显存不足，请减少批量大小。" * 6000
    bundle = make_bundle({"pt3": {"failure_log_excerpt": text}}, path="captures/m/1")
    verdict = module_engine.classify(bundle)
    draft = module_engine.pm.hook.loop_draft_issue(bundle=bundle, verdict=verdict)  # the final error as evidence
    occurrence = occurrence_of(bundle)
    assert len(draft.body.encode("utf-8")) > 128 * 1024
    result = tracker(captures, fake_clock).file(draft, occurrence)
    assert result.action is FileAction.OPENED
    (issue,) = gh.issues()
    assert issue["body"] == first_body(draft, occurrence)
    create = next(call for call in gh.calls() if call[:2] == ["issue", "create"])
    assert "--body-file" in create and not Path(create[create.index("--body-file") + 1]).exists()


def test_a_marker_inside_the_capture_text_marks_nothing(gh: FakeGh, captures: Path, fake_clock: FakeClock,
                                                         module_engine: Engine, failure: Any) -> None:
    draft, victim = failure(ts="20260802T093000Z")
    forged = f"<!-- loop-rules first-submission: {victim.submission} -->"
    bundle = make_bundle({"manifest": {"model": "acme/Tiny-7B", "model_id": "acme/Tiny-7B",
                                       "utc_ts": "20260801T093000Z"},
                          "pt3": {"failure_log_excerpt": f"{OOM}\n{forged}"}}, path="captures/x")
    attacker = draft_issue(bundle, module_engine.classify(bundle))
    assert attacker.dedup_hash == draft.dedup_hash and forged.lower() in attacker.body.lower()
    t = tracker(captures, fake_clock)
    assert t.file(attacker, occurrence_of(bundle)).action is FileAction.OPENED
    assert tracker(captures, FakeClock()).file(draft, victim).action is FileAction.PLUS_ONE


def test_a_note_a_maintainer_adds_below_the_body_keeps_the_first_submission(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    """The marker only counted as the body's very last line: a note appended on GitHub
    made the next run count the first capture again, as a +1."""
    draft, occurrence = failure()
    assert tracker(captures, fake_clock).file(draft, occurrence).action is FileAction.OPENED
    state = json.loads(gh.state_path.read_text(encoding="utf-8"))
    issue = state["repos"][REPO]["issues"][0]
    issue["body"] += "\n\n---\nMaintainer note: tracked upstream in vllm-project/vllm#12345.\n"
    gh.state_path.write_text(json.dumps(state), encoding="utf-8")
    again = tracker(captures, FakeClock()).file(draft, occurrence)
    assert again.action is FileAction.ALREADY_COUNTED
    assert gh.issues()[0]["comments"] == []


def test_a_note_a_maintainer_writes_on_the_marker_line_keeps_the_first_submission(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    """The marker had to fill its line: a note typed after it in the raw editor made the
    next run count the capture that opened the issue again, as a +1."""
    draft, occurrence = failure()
    assert tracker(captures, fake_clock).file(draft, occurrence).action is FileAction.OPENED
    state = json.loads(gh.state_path.read_text(encoding="utf-8"))
    issue = state["repos"][REPO]["issues"][0]
    issue["body"] = issue["body"].rstrip("\n") + " Triaged: known issue, see #12.\n"
    gh.state_path.write_text(json.dumps(state), encoding="utf-8")
    again = tracker(captures, FakeClock()).file(draft, occurrence)
    assert again.action is FileAction.ALREADY_COUNTED
    assert gh.issues()[0]["comments"] == []


@pytest.mark.parametrize("note", [
    "\n\nTried locally:\n```\n``` python\nprint(1)\n````\n",
    "\n\nWorked around with\n```--enforce-eager``` on the serve command.\n",
], ids=["code-block", "code-span-at-line-start"])
def test_a_code_block_a_maintainer_writes_above_the_marker_keeps_the_first_submission(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any, note: str) -> None:
    """The marker counts outside code blocks, read as GitHub reads them: a line with text
    after its run of backticks closes no fence, and a longer run closes a shorter one. A
    line that starts with three backticks and has another backtick after them opens no
    fence (it starts a code span): taken for one, it hid the marker, and the next run
    counted the capture that opened the issue again, as a +1."""
    draft, occurrence = failure()
    issue = {"number": 1, "title": draft.title, "body": draft.body + note
             + f"\n<!-- loop-rules first-submission: {occurrence.submission} -->",
             "labels": list(draft.labels), "state": "open", "comments": []}
    gh.seed(labels={name: {} for name in draft.labels}, issues=[issue])
    assert tracker(captures, fake_clock).file(draft, occurrence).action is FileAction.ALREADY_COUNTED
    assert gh.issues()[0]["comments"] == []


@pytest.mark.parametrize("log", [
    "\n\n**Log:**\n\n```\nINFO loading\n~~~\n{marker}\n```",
    "\n\n**Log:**\n\n````\nINFO loading\n```\n{marker}\n````",
    "\n\n**Log:**\n\n```\nINFO loading\n    ```\n{marker}\n```",
    "\n\n**Model:** `{marker}`",
], ids=["tilde-line", "shorter-backtick-run", "indented-backtick-run", "code-span"])
def test_a_marker_in_capture_text_that_only_looks_unfenced_marks_nothing(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any, log: str) -> None:
    """An issue the reference opened carries no marker of ours: a `~~~` line in its fenced
    log must not end a backtick fence, nor a run of backticks shorter than the fence's or
    indented four spaces (code, not a fence), or a marker line after it, written by whoever
    wrote the log, would mark another capture as counted; nor does a marker inside the
    model's code span start its line."""
    draft, _ = failure()
    _, victim = failure(ts="20260802T093000Z")
    log = log.format(marker=f"<!-- loop-rules first-submission: {victim.submission} -->")
    issue = {"number": 1, "title": draft.title, "body": draft.body + log, "labels": list(draft.labels),
             "state": "open", "comments": []}
    gh.seed(labels={name: {} for name in draft.labels}, issues=[issue])
    result = tracker(captures, fake_clock).file(draft, victim)
    assert (result.action, result.issue) == (FileAction.PLUS_ONE, 1)
    assert [plus_one_submission(c["body"]) for c in gh.issues()[0]["comments"]] == [victim.submission]


def test_a_marker_line_in_the_draft_itself_gives_way_to_the_one_appended(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    """A plugin's draft may end with a marker line of its own: the one appended after it
    names the capture that opened the issue, and a rerun counts that capture once."""
    draft, occ = failure()
    _, other = failure(ts="20260802T093000Z")
    own = f"<!-- loop-rules first-submission: {other.submission} -->"
    marked = dataclasses.replace(draft, body=f"{draft.body}\n\n{own}")
    assert tracker(captures, fake_clock).file(marked, occ).action is FileAction.OPENED
    assert tracker(captures, FakeClock()).file(marked, occ).action is FileAction.ALREADY_COUNTED
    assert gh.issues()[0]["comments"] == []


def test_a_submission_that_could_end_the_marker_is_left_out_of_the_body(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    """A spooled occurrence's submission is whatever its file says: one that is not a plain
    token would end the marker's HTML comment and show its text (a mention, say) in the issue."""
    draft, _ = failure()
    odd = Occurrence("x --> @acme/maintainers look here <!--", "20260801T093000Z", None, "captures/x")
    assert tracker(captures, fake_clock).file(draft, odd).action is FileAction.OPENED
    assert gh.issues()[0]["body"] == draft.body


def test_the_first_submission_marker_never_cuts_a_full_body(gh: FakeGh, captures: Path, fake_clock: FakeClock,
                                                             module_engine: Engine) -> None:
    # The final error, shown beside the substring, is one 100 KB line: cut to fit.
    bundle = make_bundle({"pt3": {"failure_log_excerpt": f"{OOM}\nValueError: " + "x" * 100_000}},
                         path="captures/big")
    draft = module_engine.pm.hook.loop_draft_issue(bundle=bundle, verdict=module_engine.classify(bundle))
    occ = occurrence_of(bundle)
    assert draft.body.endswith("_(evidence cut to fit the issue size limit)_")
    assert tracker(captures, fake_clock).file(draft, occ).action is FileAction.OPENED
    [issue] = gh.issues()
    assert len(issue["body"]) <= 65_536 and issue["body"] == first_body(draft, occ)


def test_run_says_why_nothing_reached_github(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from loop_core.cli import cli

    captures = tmp_path / "captures"
    copy_examples(captures)
    empty = tmp_path / "no-gh"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no gh anywhere
    result = CliRunner().invoke(cli, ["run", str(captures), "--tracker", "github", "--repo", REPO])
    assert result.exit_code == 0, result.output
    assert "13 spooled" in result.stdout
    assert "loop-rules: github: `gh label list` failed (exit 127): gh: command not found" in result.stderr
    assert f"`loop-rules spool replay {captures} --tracker github --repo {REPO}` files it" in result.stderr
    as_json = CliRunner().invoke(cli, ["run", str(captures), "--tracker", "github", "--repo", REPO,
                                       "--format", "json"])
    assert json.loads(as_json.stdout)["tracker_problems"] == [
        "`gh label list` failed (exit 127): gh: command not found"]

    bootstrap = CliRunner().invoke(cli, ["labels", "bootstrap", "--repo", REPO])
    assert bootstrap.exit_code == 1
    assert "gh: command not found" in bootstrap.stderr


def test_a_run_stopped_by_the_spool_still_says_why_it_spooled(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The spool error alone left the user guessing why anything went to the spool."""
    from click.testing import CliRunner

    from loop_core.cli import cli

    captures = tmp_path / "captures"
    copy_examples(captures)
    empty = tmp_path / "no-gh"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no gh anywhere
    assert CliRunner().invoke(cli, ["run", str(captures), "--tracker", "github", "--repo", REPO]).exit_code == 0
    for path in (captures / "_dedup-queue").glob("*.json"):  # edited by hand: no longer a list
        doc = json.loads(path.read_text(encoding="utf-8"))
        doc["occurrences"] = {}
        path.write_text(json.dumps(doc), encoding="utf-8")
    result = CliRunner().invoke(cli, ["run", str(captures), "--tracker", "github", "--repo", REPO])
    assert result.exit_code == 2
    assert "'occurrences' is a dict, not a list" in result.stderr
    assert "loop-rules: github: `gh label list` failed (exit 127): gh: command not found" in result.stderr
    assert "files it" not in result.stderr  # nothing waits in a spool that could not be written


@pytest.mark.parametrize("command", [["run", "CAPTURES", "--tracker", "github"],
                                     ["spool", "replay", "CAPTURES", "--tracker", "github"],
                                     ["labels", "bootstrap"]])
def test_an_empty_repo_is_refused_not_taken_for_gh_s_default(
        command: list[str], gh: FakeGh, tmp_path: Path) -> None:
    """`--repo "$REPO"` with REPO unset filed into the repository of the current directory."""
    from click.testing import CliRunner

    from loop_core.cli import cli

    captures = tmp_path / "examples"
    copy_examples(captures)
    argv = [str(captures) if arg == "CAPTURES" else arg for arg in command]
    for repo in ("", "  "):
        result = CliRunner().invoke(cli, [*argv, "--repo", repo])
        assert result.exit_code == 2, result.output
        assert "no repository named" in result.stderr
    # Nor is a name gh would refuse at every call, leaving every capture in the spool.
    for repo in ("acme", "acme/my repo", "not a repo"):
        result = CliRunner().invoke(cli, [*argv, "--repo", repo])
        assert result.exit_code == 2, result.output
        assert f"--repo {repo!r}: not a repository name; give OWNER/NAME" in result.stderr
    assert gh.calls() == [] and gh.issues("local/repo") == []
    assert not (captures / "_dedup-queue").exists()


def test_problems_name_each_failing_call_once(gh: FakeGh, captures: Path, fake_clock: FakeClock,
                                              failure: Any) -> None:
    t = tracker(captures, fake_clock, runner=failing("issue", "create"))
    for ts in ("20260801T093000Z", "20260802T093000Z"):
        assert t.file(failure(model=f"acme/M-{ts}", ts=ts)[0], failure(ts=ts)[1]).action is FileAction.SPOOLED
    assert list(t.problems) == ["`gh issue create` failed (exit 1): HTTP 502: simulated"]


def test_a_problem_quotes_the_first_line_gh_printed(gh: FakeGh, captures: Path, fake_clock: FakeClock,
                                                    failure: Any) -> None:
    def chatty(argv: list[str], timeout: float) -> GhResult:
        if argv[:2] == ["issue", "create"]:
            return GhResult(False, 1, "", "\n  HTTP 502: Bad Gateway  \n(https://api.github.com/graphql)\nretry later\n")
        return run_gh(argv, timeout=timeout)

    assert tracker(captures, fake_clock, runner=chatty).file(*failure()).action is FileAction.SPOOLED
    t = tracker(captures, fake_clock, runner=chatty)
    t.file(*failure(model="acme/Other-7B"))
    assert list(t.problems) == ["`gh issue create` failed (exit 1): HTTP 502: Bad Gateway"]


def test_an_unreadable_answer_is_quoted_by_its_first_eighty_characters(captures: Path, fake_clock: FakeClock,
                                                                         failure: Any) -> None:
    page = "<!DOCTYPE html><html><head><title>Unicorn! · GitHub</title>" + "<style>x{}</style>" * 50

    def html(argv: list[str], *, timeout: float) -> GhResult:
        return GhResult(True, 0, page + "\n", "")

    t = GitHubTracker(captures, runner=html, sleep=fake_clock.sleep, clock=fake_clock.clock)
    assert t.file(*failure()).reason == "gh-degraded:label-list rc=0"
    said = f"`gh label list` answered unreadably: its output is not the JSON asked for: {page[:80]!r}"
    assert list(t.problems) == [said]


def test_an_issue_view_without_its_comments_is_said_to_be_unreadable(captures: Path, fake_clock: FakeClock,
                                                                       failure: Any) -> None:
    draft, occ = failure()
    issue = {"number": 1, "body": first_body(draft, failure(ts="20260901T0000Z")[1]),
             "comments": [{"body": "thanks"}] * 100}

    def no_comments(argv: list[str], *, timeout: float) -> GhResult:
        answers = {"label": [{"name": draft.labels[0]}], "issue list": [issue], "issue view": {"comments": None}}
        return GhResult(True, 0, json.dumps(answers.get(" ".join(argv[:2]), answers["label"])), "")

    t = GitHubTracker(captures, runner=no_comments, sleep=fake_clock.sleep, clock=fake_clock.clock)
    result = t.file(draft, occ)
    assert (result.action, result.reason) == (FileAction.SPOOLED, "gh-degraded:issue-view rc=0")
    assert list(t.problems) == [
        "`gh issue view` answered unreadably: its output is not the JSON asked for: '{\"comments\": null}'"]
    assert spooled(captures, draft) == [occ.submission]


def test_a_bug_while_filing_spools_the_occurrence_and_is_named(gh: FakeGh, captures: Path, failure: Any) -> None:
    def broken_clock() -> float:
        raise RuntimeError("clock went away")

    draft, occ = failure()
    t = GitHubTracker(captures, repo=REPO, clock=broken_clock)
    result = t.file(draft, occ)
    assert (result.action, result.reason) == (FileAction.SPOOLED, "gh-degraded:internal RuntimeError")
    assert list(t.problems) == ["internal error while filing: RuntimeError: clock went away"]
    assert spooled(captures, draft) == [occ.submission]


def test_a_draft_that_fills_the_body_limit_still_carries_its_first_submission(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    """A plugin's draft may fill GitHub's 65,536 characters: the marker takes the end of it,
    where a body over the limit would be refused on every run."""
    draft, occ = failure()
    full = dataclasses.replace(draft, body=draft.body + "\n" + "x" * (BODY_LIMIT - len(draft.body) - 1))
    assert tracker(captures, fake_clock).file(full, occ).action is FileAction.OPENED
    [issue] = gh.issues()
    assert len(issue["body"]) == BODY_LIMIT and issue["body"].endswith(f"first-submission: {occ.submission} -->")
    # 64 KiB of plain text fits one argument: no temporary file is needed.
    create = next(call for call in gh.calls() if call[:2] == ["issue", "create"])
    assert create[create.index("--body") + 1] == issue["body"]
    assert tracker(captures, FakeClock()).file(full, occ).action is FileAction.ALREADY_COUNTED


def test_gh_runs_without_prompts_update_notices_or_colours(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What gh prints is quoted to the user and read as JSON: no prompt waiting for an
    answer, no update notice as its first line, no colour codes."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "gh").write_text(f"#!{sys.executable}\nimport json, os\n"
                               "print(json.dumps({k: os.environ.get(k) for k in "
                               "('GH_PROMPT_DISABLED', 'GH_NO_UPDATE_NOTIFIER', 'NO_COLOR')}))\n")
    (bindir / "gh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    for name in ("GH_PROMPT_DISABLED", "GH_NO_UPDATE_NOTIFIER", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    r = run_gh(["label", "list"])
    assert r.ok and json.loads(r.stdout) == {"GH_PROMPT_DISABLED": "1", "GH_NO_UPDATE_NOTIFIER": "1", "NO_COLOR": "1"}


def test_creates_that_keep_failing_stop_the_run_though_labels_are_made(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    """A label made for each new failure counted as a write that went through: with every
    issue create refused (issues disabled, a rate limit), the run never stopped calling gh,
    and made a dedup label in the repository for every failure it could not file."""
    t = tracker(captures, fake_clock, runner=failing("issue", "create"))
    results = [t.file(*failure(model=f"acme/M{i}-7B")) for i in range(6)]
    assert all(r.action is FileAction.SPOOLED for r in results)
    assert [r.reason for r in results] == ["gh-degraded:issue-create rc=1"] * 6
    made = [c[2] for c in gh.calls() if c[:2] == ["label", "create"]]
    assert len([name for name in made if name.startswith("loop:dedup-")]) == 3  # then the run stopped
    assert len(SpoolTracker(captures).pending()) == 6


def test_failures_with_filings_that_go_through_between_them_do_not_stop_the_run(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    """Three failures without a create getting through are an outage; one that gets through
    in between starts the count again, so a flaky gh does not spool the rest of the run."""
    creates = itertools.count()

    def every_other_create_fails(argv: list[str], timeout: float) -> GhResult:
        if argv[:2] == ["issue", "create"] and next(creates) % 2 == 0:
            return GhResult(False, 1, "", "HTTP 502: simulated")
        return run_gh(argv, timeout=timeout)

    t = tracker(captures, fake_clock, runner=every_other_create_fails)
    results = [t.file(*failure(model=f"acme/M{i}-7B")) for i in range(6)]
    assert [r.action for r in results] == [FileAction.SPOOLED, FileAction.OPENED] * 3
    assert len(gh.issues()) == 3 and len(SpoolTracker(captures).pending()) == 3


def test_plus_ones_that_go_through_between_failed_creates_do_not_stop_the_run(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    """A +1 comment that gets through shows GitHub takes writes, as a new issue does."""
    known, first = failure(model="acme/Known-7B")
    assert tracker(captures, fake_clock).file(known, first).action is FileAction.OPENED
    t = tracker(captures, fake_clock, runner=failing("issue", "create"))
    actions = []
    for i in range(4):
        actions.append(t.file(*failure(model=f"acme/New{i}-7B")).action)
        actions.append(t.file(known, failure(model="acme/Known-7B", ts=f"2026090{i + 1}T0")[1]).action)
    assert actions == [FileAction.SPOOLED, FileAction.PLUS_ONE] * 4
    assert len(gh.issues()[0]["comments"]) == 4


def test_a_failure_past_the_run_cap_makes_no_labels(gh: FakeGh, captures: Path, fake_clock: FakeClock,
                                                    failure: Any) -> None:
    """Spooled for the next run, it would leave a dedup label without an issue in the repository."""
    t = tracker(captures, fake_clock, max_creates_per_run=1)
    assert t.file(*failure()).action is FileAction.OPENED
    gh.forget_calls()
    result = t.file(*failure(model="acme/Other-7B"))
    assert (result.action, result.reason) == (FileAction.SPOOLED, "run-cap")
    assert gh.calls() == []
    assert list(t.problems) == ["1 issues and comments created, this run's cap; the rest was spooled"]


def test_a_label_listing_that_prints_nothing_is_a_repository_without_labels(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    def quiet_labels(argv: list[str], timeout: float) -> GhResult:
        if argv[:2] == ["label", "list"]:
            return GhResult(True, 0, "", "")
        return run_gh(argv, timeout=timeout)

    t = tracker(captures, fake_clock, runner=quiet_labels)
    assert t.file(*failure()).action is FileAction.OPENED and t.problems == {}
    assert len(gh.issues()) == 1


@pytest.mark.parametrize("said", [
    "HTTP 403: API rate limit exceeded for user ID 1234567.",
    "GraphQL: was submitted too quickly (createIssue)",
    "HTTP 403: You have exceeded a secondary rate limit and have been temporarily blocked.",
    "HTTP 429: Too Many Requests (https://api.github.com/graphql)",
    "HTTP 403: You have triggered an abuse detection mechanism. Please wait a few minutes.",
])
def test_a_rate_limit_spools_the_rest_of_the_run_at_once(gh: FakeGh, captures: Path, fake_clock: FakeClock,
                                                         failure: Any, said: str) -> None:
    """A rate limit answers every call alike until it lifts: the run went on to fail two
    more creates (and make their labels) before it stopped calling gh."""
    def limited(argv: list[str], timeout: float) -> GhResult:
        if argv[:2] == ["issue", "create"]:
            return GhResult(False, 1, "", said)
        return run_gh(argv, timeout=timeout)

    t = tracker(captures, fake_clock, runner=limited)
    results = [t.file(*failure(model=f"acme/M{i}-7B")) for i in range(4)]
    assert [r.action for r in results] == [FileAction.SPOOLED] * 4
    creates = [c for c in gh.calls() if c[:2] == ["issue", "create"]]
    assert creates == []  # the runner answered the one create there was; gh itself saw none
    made = [c[2] for c in gh.calls() if c[:2] == ["label", "create"] and c[2].startswith("loop:dedup-")]
    assert len(made) == 1
    assert list(t.problems) == [f"`gh issue create` failed (exit 1): {said}"]
    assert len(SpoolTracker(captures).pending()) == 4


def test_a_run_naming_the_repository_and_one_using_gh_s_default_share_the_lock(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any) -> None:
    """Each name had a lock of its own: a run with --repo and one on gh's default
    repository (the same one) +1ed the same submission twice."""
    draft, first = failure()
    _, second = failure(ts="20260802T093000Z")
    a = tracker(captures, fake_clock, repo=None)  # gh's default: the fake's is local/repo
    assert a.file(draft, first).action is FileAction.OPENED
    b = tracker(captures, FakeClock(), repo="local/repo")
    assert b.file(draft, second).action is FileAction.PLUS_ONE
    assert a.file(draft, second).action is FileAction.ALREADY_COUNTED
    comments = gh.issues("local/repo")[0]["comments"]
    assert [plus_one_submission(c["body"]) for c in comments] == [second.submission]


def test_a_lock_that_cannot_be_made_does_not_stop_the_filing(
        gh: FakeGh, captures: Path, fake_clock: FakeClock, failure: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock only guards against another run at once: a cache folder that cannot be
    written sends it to the captures folder, and with neither, filing goes on and says so."""
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("", encoding="utf-8")
    monkeypatch.setenv("LOOP_RULES_CACHE_DIR", str(blocked))
    draft, first = failure()
    t = tracker(captures, fake_clock)
    assert t.file(draft, first).action is FileAction.OPENED
    assert (captures / "_loop" / "github.lock").exists() and not t.problems
    (captures / "_loop").rename(captures / "_loop-moved")
    (captures / "_loop").write_text("", encoding="utf-8")  # not a folder either
    _, second = failure(ts="20260802T093000Z")
    u = tracker(captures, FakeClock())
    assert u.file(draft, second).action is FileAction.PLUS_ONE
    (problem,) = u.problems
    assert problem.startswith("could not make the lock file ") and "filed without it" in problem
