"""The view document that rule selectors read.

A view is ``{"manifest", "pt1".."pt5", "signal"}``: the raw files of a bundle
plus derived ``signal`` fields. Signals are computed lazily and at most once
per bundle, so a pack that never asks for ``all_text`` never builds it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

from .bundle import Bundle
from .fastregex import TextIndex
from .keys import error_source, first_red_capability, normalize_text

T = TypeVar("T")

__all__ = ["SIGNALS", "View", "is_failure"]

# A line names an exception when this would find a match in it:
#     \b(?:[A-Za-z_][\w.]*(?:Error|Exception)|AssertionError|Killed|Traceback)\b
# but run as written, that pattern tries every "."-separated start of a dotted name
# against the whole rest of it: quadratic on one long line ("a.a.a...Errorx" of 40 KB
# took five seconds). names_exception() answers the same in one pass over each name.
#
# Only a dotted name that holds an ending can be one, and each is searched for from
# the blank before its first ending (str.find's place), not from the line's start: a
# regex search pays at every place it tries, and names_exception cost 33,000
# instructions on a vLLM import error (200 characters), 14,000 now. A dotted name
# holds no blank.
_DOTTED_WITH_ENDING = re.compile(r"(?<![\w.])[\w.]*?(?:Error|Exception)[\w.]*")
_NAME_ENDING = re.compile(r"(?:Error|Exception)(?=\.|$)")
_NAME_START = re.compile(r"(?:^|\.)[A-Za-z_]")
_NAME_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")  # _NAME_START's [A-Za-z_]
_KILLED = re.compile(r"\b(?:Killed|Traceback)\b")


def names_exception(line: str) -> bool:
    """Whether ``line`` names an exception (a dotted name ending in ``Error`` or
    ``Exception``, ``Killed``, ``Traceback``), linear in the line's length."""
    if ("Killed" in line or "Traceback" in line) and _KILLED.search(line):
        return True
    end = 0  # where the last dotted name looked at ends
    # Each ending's first place from ``end`` on, found again only once passed: a line
    # holding many ending names is still read once.
    error, exception = line.find("Error"), line.find("Exception")
    while True:
        if 0 <= error < end:
            error = line.find("Error", end)
        if 0 <= exception < end:
            exception = line.find("Exception", end)
        at = error if exception < 0 or 0 <= error < exception else exception
        if at < 0:
            return False
        run = _DOTTED_WITH_ENDING.search(line, max(end, line.rfind(" ", end, at) + 1))
        assert run is not None  # the dotted name ``at`` is in
        name = run.group()
        if name[0] in _NAME_FIRST and (name.endswith("Error") and len(name) > 5
                                       or name.endswith("Exception") and len(name) > 9):
            return True  # the common shape, "ImportError": what the loop below finds, without its regexes
        start = _NAME_START.search(name)  # the first place a name may start: the run's start, or after a "."
        if start is not None:
            first = start.end() - 1
            # A name from ``first`` on ends in Error/Exception right before a "." or the run's end.
            if any(m.start() > first for m in _NAME_ENDING.finditer(name, first + 1)):
                return True
        end = run.end()

# Log decorations that may precede a line's message: whitespace, quotes and
# bullets, timestamps, "(EngineCore pid=12)", "[rank0]:", "[file.py:12]",
# "file.py:12]", "container  | ", "level=INFO", a level word before a date
# ("ERROR 05-26 07:50:26"). A bracketed level tag ([BUG], [ERROR], ...)
# is not a decoration: it is what makes the line an error line.
_DECORATION = re.compile(
    r"""^(?:
        [\s`'"!#>*|:-]+
      | \([^()\n]{0,40}\bpid=\d+\)
      | \[(?!(?i:bug|error|fatal|critical)\])[^\[\]\n]{0,60}\]:?
      | \d{1,4}(?:[-/.]\d{1,4}){1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?
      | \d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?
      | (?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\s+(?=\d)
      | [\w.-]{1,60}\.py:\d+\]
      | [\w.-]{1,40}\s+\|
      | (?:level|lvl)=\w+
    )+""",
    re.VERBOSE,
)
# A bare traceback header (nothing but decorations before it) carries no
# error of its own; the exception it introduces comes later, or was cut from
# the excerpt. "Exception in worker ...: msg, Traceback (...)" is not bare.
_BARE_TRACEBACK = re.compile(r"Traceback \(most recent call last\):?\s*$")
# IPython's header ("KeyError      Traceback (most recent call last)") names the exception
# whose message comes after the frames below it. When that message was cut from the
# excerpt, an exception reported before the header (the cause of a chained exception:
# "During handling of the above exception, another exception occurred:") says more.
_IPYTHON_HEADER = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception)\s+Traceback \(most recent call last\)\s*$")
# Python's own base class, raised as is: "Exception: Capture cuda graph failed: ...".
# Only at the start of a message: "Exception in thread ..." and prose name none.
_BARE_EXCEPTION = re.compile(r"Exception:\s+\S")
# Error lines that name no exception: "[BUG] ...", "Error: ...", "error loading
# model: ...", "FATAL: ...", a tracing-style "ERROR target: message" (TGI, Rust
# engines). A blank follows the colon ("ERROR 03-20 17:39:14" is a timestamp)
# and the message after it must not be empty.
_ERROR_TAG = re.compile(
    r"\[(?:bug|error|fatal|critical)\]:?\s*\S"
    r"|(?:error|fatal|critical|panic)\b[^:\n]{0,40}:\s+\S",
    re.IGNORECASE,
)


# Every error line contains one of these (lower-cased): a cheap pre-filter.
_HINTS = ("error", "exception", "killed", "traceback", "fatal", "critical", "panic", "bug")
# A line that names an exception holds one of these (as written): most lines that hold
# a hint ("ERROR 05-26 ...") hold none, and a few substring tests spare the regexes.
_EXCEPTION_ENDS = ("Error", "Exception", "Killed", "Traceback")


def _pt(bundle: Bundle, name: str) -> dict[str, Any]:
    value = getattr(bundle, name)
    return value if isinstance(value, dict) else {}


def _caps_with(bundle: Bundle, verdict: str) -> list[str]:
    results = _pt(bundle, "pt4").get("results")
    if not isinstance(results, dict):
        return []
    return sorted(str(cap) for cap, v in results.items() if v == verdict)


def _http_statuses(bundle: Bundle) -> list[Any]:
    details = _pt(bundle, "pt4").get("results_detail")
    if not isinstance(details, dict):
        return []
    return [
        d["status"]
        for d in details.values()
        if isinstance(d, dict) and isinstance(d.get("status"), (int, float))
        and not isinstance(d.get("status"), bool)
    ]


def _all_text(bundle: Bundle) -> str:
    """Every failure text the bundle carries, newest evidence last."""
    pieces: list[str] = []
    pt2, pt3, pt5 = _pt(bundle, "pt2"), _pt(bundle, "pt3"), _pt(bundle, "pt5")
    for value in (pt2.get("failure"), pt3.get("failure"), pt3.get("failure_log_excerpt")):
        if value:
            pieces.append(value if isinstance(value, str) else str(value))
    pt4 = _pt(bundle, "pt4")
    results = pt4.get("results")
    if isinstance(results, dict) and "red" in results.values():  # most failures have no red capability
        details = pt4.get("results_detail")
        for cap in sorted(results, key=str):
            if results[cap] != "red":
                continue
            entry = details.get(cap) if isinstance(details, dict) else None
            error = entry.get("error") if isinstance(entry, dict) else entry
            pieces.append(str(error) if error else f"smoke red:{cap}")
    summary = pt5.get("exit_error_summary")
    if summary:
        pieces.append(summary if isinstance(summary, str) else str(summary))
    detail = _pt(bundle, "pt1").get("detail")
    if bundle.is_gate_only and detail:
        pieces.append(str(detail))
    return "\n".join(pieces)


def undecorated(line: str) -> str:
    """``line`` without its log decorations (timestamps, pid tags, container prefixes)."""
    m = _DECORATION.match(line)
    return line[m.end():] if m else line


# An exception that says the cause is elsewhere: vLLM V1's "Engine core initialization
# failed. See root cause above.", "... See stack trace for root cause."
_POINTS_ELSEWHERE = re.compile(r"(?i)\bsee (?:the )?(?:root cause|(?:full )?stack ?trace|traceback|"
                               r"(?:(?:logs?|errors?|output) )?above)\b")


def _error_kind(line: str) -> int:
    """2 when ``line`` names an exception (or ``Killed``, or a message that starts with
    Python's bare ``Exception:``), 3 when that exception only
    points at another ("See root cause above.") or is named by IPython's traceback
    header, whose message comes later (``KeyError    Traceback (most recent call
    last)``), 1 when its message starts with an
    error tag (``[BUG] ...``, ``Error: ...``, ``ERROR target: ...``), else 0. A bare
    ``Traceback (most recent call last):`` header and a traceback's source lines
    (``raise ...``, ``except ...``), decorated or not, are 0.
    """
    low = line.lower()
    for hint in _HINTS:
        if hint in low:
            break
    else:
        return 0
    # The decorations are cut off (a regex of many branches, 16,000 instructions on a
    # vLLM line) only for a test that reads the message, and the tests before the last
    # run only on a line holding a literal their match needs: most exception lines
    # hold none ("Traceback (", "raise", "except", "Exception:").
    message = None
    if "Traceback (" in line or "raise" in line or "except" in line:
        message = undecorated(line)
        if _BARE_TRACEBACK.match(message) or message.lstrip().startswith(_SOURCE_LINES):
            return 0
    if ("Error" in line or "Exception" in line or "Killed" in line or "Traceback" in line) and (
            names_exception(line)
            or "Exception:" in line and _BARE_EXCEPTION.match(undecorated(line) if message is None else message)):
        if message is not None and _IPYTHON_HEADER.match(message):  # a header holds "Traceback (": message made
            return 3
        # A match starts at a "see ": in an ASCII line, at or after the lower-cased line's first.
        see = low.find("see ")
        return 3 if see >= 0 and _POINTS_ELSEWHERE.search(line, see if line.isascii() else 0) else 2
    return 1 if _ERROR_TAG.match(undecorated(line) if message is None else message) else 0


# A traceback's source line names an exception without reporting one.
_SOURCE_LINES = ("raise ", "raise(", "except ", "except:", "except(")


TAIL_CHUNK = 1024  # characters split at a time by reversed_lines


def final_names_exception(line: str) -> bool:
    """Whether a ``final_error`` line names an exception with a message of its own (not
    one that only points elsewhere, nor an error tag): the line says what failed."""
    return _error_kind(line) == 2


def reversed_lines(text: str, chunk: int = TAIL_CHUNK) -> Iterator[str]:
    """``reversed(text.splitlines())``, splitting only as much of the end as is read.

    The final error is nearly always in a log's last lines, so the text is
    split a ``chunk`` at a time from the end, each piece cut just after a
    newline: every line boundary ``splitlines`` knows (``\\r\\n`` included)
    then falls inside one piece, and the pieces' lines are the text's. The
    first piece is the last line alone, the one most often read: splitting a
    whole chunk for it was 12,000 of the 43,000 instructions that a final error
    found there cost.
    """
    end = len(text)
    cut = text.rfind("\n", 0, end - 1) + 1
    while end > 0:
        yield from reversed(text[cut:end].splitlines())
        end = cut
        cut = text.rfind("\n", 0, end - chunk) + 1 if end > chunk else 0


# Words that say something failed, in a line that names no exception and has no error
# tag: "main: couldn't bind HTTP server socket", "error loading model architecture: ...".
_FAILURE_WORDS = re.compile(r"(?i)\b(?:errors?|failed|failure|fatal|cannot|can't|couldn't|could not|unable|"
                            r"unsupported|not supported|invalid|abort(?:ed)?|refused|denied|insufficient|"
                            r"out of memory|terminated|segmentation fault)\b")
# A match of _FAILURE_WORDS holds one of these (lower-cased).
_FAILURE_HINTS = ("error", "fail", "fatal", "cannot", "can't", "couldn't", "could not", "unable", "support",
                  "invalid", "abort", "refused", "denied", "insufficient", "out of memory", "terminated",
                  "segmentation fault")


def _final_error(bundle: Bundle) -> str:
    """The final error line of the error text.

    The last line naming an exception wins; a launcher's wrap-up after it
    ("ERROR launcher: Method Warmup encountered an error") says less, and so
    does an exception that only points at the real one ("RuntimeError: Engine
    core initialization failed. See root cause above."), which counts only
    when no exception line comes before it. Without one, the last error-tag
    line; without that, the last line with a word saying something failed
    ("failed", "couldn't", "unsupported", ...), not the version number or the
    "cleaning up before exit..." a log may end with; without that, the last
    non-blank line.
    """
    text = error_source(bundle)[1]
    tagged = last = None
    for raw in reversed_lines(text):
        line = raw.strip()
        if not line:
            continue
        if last is None:
            last = line
        kind = _error_kind(line)
        if kind == 2:
            return line
        if kind == 3:
            # The real exception is further up, past a traceback of many lines: look
            # only at the lines that can name one (every such line holds an ending).
            return _exception_before(text, text.rfind(raw)) or line
        if kind == 1 and tagged is None:
            tagged = line
    if tagged or last is None:
        return tagged or ""
    return _failure_line(text) or last


def _failure_line(text: str) -> str | None:
    """The last line of ``text`` with a word saying something failed, or None; lines
    are those ``str.splitlines`` cuts, as everywhere in :func:`_final_error`.

    Only logs without any error line get here. Only the lines holding one of the
    words (lower-cased) are matched: a regex over the whole log cost several times
    the rest of final_error.
    """
    low = text.lower()
    if len(low) != len(text):  # a letter whose lower case is longer ("İ"): the places would not match
        return next((raw.strip() for raw in reversed_lines(text) if _FAILURE_WORDS.search(raw)), None)
    for start, stop in _lines_holding(low, _FAILURE_HINTS, len(low)):
        for raw in reversed(text[start:stop].splitlines()):  # a "\n" line may hold other line breaks
            if _FAILURE_WORDS.search(raw):
                return raw.strip()
    return None


def _exception_before(text: str, end: int) -> str | None:
    """The last line before offset ``end`` of ``text`` that names an exception and
    points nowhere else, as the line-by-line walk of :func:`_final_error` would find
    it; None when there is none."""
    for start, stop in _lines_holding(text, _EXCEPTION_ENDS, end):
        for raw in reversed(text[start:stop].splitlines()):  # a "\n" line may hold other line breaks
            line = raw.strip()
            if line and _error_kind(line) == 2:
                return line
    return None


def _lines_holding(text: str, words: tuple[str, ...], end: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of each "\\n"-ended line of ``text[:end]`` that holds one of
    ``words``, the last first. Such a line may hold other breaks ``str.splitlines``
    cuts at: the callers split it again.

    Only the lines holding a word are read: each word's last place is found with
    ``rfind``, and looked for again only once the walk has passed it, so that each
    word is looked for once over the text in all.
    """
    last = {word: text.rfind(word, 0, end) for word in words}
    while end > 0:
        for word, at in last.items():
            if at >= end:
                last[word] = text.rfind(word, 0, end)
        at = max(last.values())
        if at < 0:
            return
        start = text.rfind("\n", 0, at) + 1
        stop = text.find("\n", at, end)
        yield start, end if stop < 0 else stop
        end = start


def _boot_ok(bundle: Bundle) -> bool | None:
    return None if bundle.is_gate_only else bool(_pt(bundle, "pt3").get("ok"))


def _download_ok(bundle: Bundle) -> bool | None:
    return None if bundle.is_gate_only else bool(_pt(bundle, "pt2").get("ok"))


# name -> (function of the bundle, one-line description for docs and `explain`)
SIGNALS: dict[str, tuple[Callable[[Bundle], Any], str]] = {
    "error_source": (lambda b: error_source(b)[0],
                     "where the error text came from: excerpt, failure, smoke or empty"),
    "error_text": (lambda b: error_source(b)[1],
                   "the full error text by source precedence (excerpt > failure > first red capability)"),
    "error_substring": (lambda b: normalize_text(error_source(b)[1]),
                        "the reference's 240-character, lower-cased, whitespace-collapsed substring"),
    "error_text_lower": (lambda b: normalize_text(error_source(b)[1], None),
                         "error_text whitespace-collapsed and lower-cased, never cut"),
    "all_text": (_all_text, "every failure text: download, boot failure, log excerpt, red smoke details, pt5 summary"),
    "final_error": (_final_error, "the last line of error_text naming an exception (bare Traceback "
                                  "headers skipped; 'see root cause above' wrappers and IPython "
                                  "traceback headers only when no exception comes before), else its last "
                                  "error-tag line ([BUG] ..., Error: ...), else its last line saying something "
                                  "failed (failed, couldn't, unsupported, ...), else its last non-blank line; "
                                  "whole, log decorations included"),
    "boot_ok": (_boot_ok, "pt3.ok as a boolean (null for gate-only bundles)"),
    "download_ok": (_download_ok, "pt2.ok as a boolean (null for gate-only bundles)"),
    "red_caps": (lambda b: _caps_with(b, "red"), "capabilities whose smoke verdict is red, sorted"),
    "green_caps": (lambda b: _caps_with(b, "green"), "capabilities whose smoke verdict is green, sorted"),
    "unsmoked_caps": (lambda b: _caps_with(b, "unsmoked"), "capabilities not smoked, sorted"),
    "first_red_cap": (lambda b: first_red_capability(b)[0], "the alphabetically first red capability, or null"),
    "http_statuses": (_http_statuses, "every numeric HTTP status recorded in pt4.results_detail"),
    "abort_reason": (lambda b: b.abort_reason, "the gate's abort token (gate-only bundles)"),
    "is_gate_only": (lambda b: b.is_gate_only, "true for schema-2 gate-only bundles"),
    "schema": (lambda b: b.schema, "the bundle schema, 1 or 2"),
    "outcome": (lambda b: b.outcome, "the producer's interim outcome: failed, partial, ok or hard-block"),
    "quant_label": (lambda b: b.quant_label, "the quant label lower-cased (none when null)"),
    "arch_family": (lambda b: b.arch_family, "the architecture, verbatim"),
    "engine": (lambda b: b.engine_version, "the engine image pin"),
    "model": (lambda b: b.model, "the model slug"),
}

_MISSING = object()


class UnknownSignal(KeyError):
    """``view.signal(name)`` for a name that is no signal: still a KeyError, but one whose
    text says so, with the signal meant when the name is a slip of one (``all_txt``)."""

    def __str__(self) -> str:
        import difflib

        name = self.args[0]
        close = difflib.get_close_matches(str(name), SIGNALS, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"signals: {', '.join(SIGNALS)}"
        return f"unknown signal {name!r} ({hint})"


class View:
    """Lazy view document over one bundle; see :data:`SIGNALS` for the derived fields."""

    __slots__ = ("bundle", "_signals", "_document", "_indexes", "selected", "warnings", "timeouts")

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self._signals: dict[Hashable, Any] = {}  # signal name (or memo key) -> value
        self.selected: dict[str, list[Any]] = {}  # selector path -> its values (Selector.values)
        self._document: dict[str, Any] | None = None
        self._indexes: dict[int, TextIndex] = {}
        # Problems met while evaluating (e.g. a regex that timed out).
        self.warnings: list[str] = []
        # Regex searches of rule conditions that ran out of time so far. A rule
        # during whose evaluation this rose does not match (Rule.matches).
        self.timeouts = 0

    @classmethod
    def of(cls, bundle: Bundle) -> View:
        """A fresh view of ``bundle`` sharing what the latest ``View.of`` view of the
        same bundle object computed (signals, text indexes, the document).

        Those depend only on the bundle, so the engine, the pipeline and the
        issue drafter each get their own ``warnings`` and ``timeouts`` but
        compute a signal such as ``final_error`` once per bundle, not once
        each. Only the latest bundle is remembered: a pass over many bundles
        keeps one bundle's computations alive, not all of them.
        """
        view = cls(bundle)
        latest = _LATEST[0]
        if latest is not None and latest.bundle is bundle:
            view._signals, view._indexes, view._document = latest._signals, latest._indexes, latest._document
            view.selected = latest.selected
        _LATEST[0] = view
        return view

    def index(self, text: str) -> TextIndex:
        """The :class:`~loop_core.fastregex.TextIndex` of ``text``, made once per text
        object and shared by every rule that searches it."""
        indexes = self._indexes
        hit = indexes.get(id(text))
        if hit is None or hit.text is not text:
            if len(indexes) >= MAX_INDEXES:  # texts made afresh for each search: keep the newest
                del indexes[next(iter(indexes))]
            hit = indexes[id(text)] = TextIndex(text)
        return hit

    def memo(self, key: Hashable, make: Callable[..., T], *args: Any) -> T:
        """``make(*args)``, computed once per bundle and shared by the views of it like
        a signal: for a text a matcher builds from the bundle (Tier-1's scan surface),
        so that the same text object, and its one index, serves every classification.
        ``key`` names the value; keep it apart from other plugins' (a tuple that
        starts with your matcher's name, say)."""
        value = self._signals.get(key, _MISSING)
        if value is _MISSING:
            value = self._signals[key] = make(*args)
        return value  # type: ignore[no-any-return]

    def error_source(self) -> tuple[str, str]:
        """``(source, full text)`` of the bundle's error, as
        :func:`~loop_core.keys.error_source` gives it, computed once per bundle and
        shared by the views of it like a signal."""
        value = self._signals.get(_ERROR_SOURCE)
        if value is None:
            value = self._signals[_ERROR_SOURCE] = error_source(self.bundle)
        return value

    def lacks(self, name: str, literals: frozenset[str]) -> bool:
        """Whether signal ``name``'s text provably holds none of ``literals`` (each
        lower-cased, as a :class:`~loop_core.fastregex.TextIndex` reads them), said
        without making the signal; False whenever that is not known.

        ``final_error`` is a line of ``error_text``, and ``error_text`` is a piece
        of ``all_text`` as written when it is the boot log excerpt or the boot
        failure (a red smoke detail may be rendered otherwise there); lower-casing
        a line gives what lower-casing the whole gives there. So when the literal
        scanner has read ``all_text`` and found none of ``literals``, neither holds
        one, and a rule walk skips the rules that need one without walking the log
        back to its final error (a third of vLLM's end in a wrapper that points
        further up). With no error text at all, both are empty.
        """
        if name not in _PIECES_OF_ALL_TEXT or name in self._signals:
            return False
        # Read from the signals first: the engine has put the error source there (for
        # its error substring) before any rule walk asks, and the method call this
        # spares was 480 of the 1,780 instructions a bundle that sharing it saved.
        source, text = self._signals.get(_ERROR_SOURCE) or self.error_source()
        if not text:
            return "" not in literals
        whole = self._signals.get("all_text")
        if not whole or source not in _PT3_SOURCES or not isinstance(self.bundle.pt3, dict):
            return False
        index = self._indexes.get(id(whole))
        return index is not None and index.text is whole and index.scanned_without(literals)

    def signal(self, name: str) -> Any:
        value = self._signals.get(name, _MISSING)
        if value is _MISSING:
            if name not in SIGNALS:  # a plugin's slip: name it, and the signal meant
                raise UnknownSignal(name)
            value = SIGNALS[name][0](self.bundle)
            self._signals[name] = value
        return value

    def top(self, name: str) -> Any:
        """A top-level member of the document; ``_MISSING`` when absent."""
        if name == "signal":
            return self.document()["signal"]
        value = getattr(self.bundle, name, None) if name in _FILES else None
        return _MISSING if value is None else value

    def document(self) -> dict[str, Any]:
        """The whole view as plain data, every signal computed (for general JSONPath)."""
        if self._document is None:
            doc: dict[str, Any] = {
                k: v for k, v in self.bundle.to_document().items() if v is not None
            }
            doc["signal"] = {name: self.signal(name) for name in SIGNALS}
            self._document = doc
        return self._document


_FILES = frozenset({"manifest", "pt1", "pt2", "pt3", "pt4", "pt5"})
_PIECES_OF_ALL_TEXT = frozenset({"final_error", "error_text"})  # see View.lacks
_PT3_SOURCES = ("excerpt", "failure")  # error sources that all_text holds as written
_ERROR_SOURCE = ("view", "error_source")  # View.error_source's key among the signals
_LATEST: list[View | None] = [None]  # see View.of
# Text indexes one view keeps: the texts of a bundle are a few dozen; more means
# texts built anew for each search, whose indexes would otherwise pile up.
MAX_INDEXES = 64
MISSING = _MISSING


def is_failure(bundle: Bundle) -> bool:
    """Gate-only, download or boot failed, or any capability red: what ``run`` files,
    queues or suppresses; any other bundle is a success (a trust anchor when a
    capability is green)."""
    if bundle.is_gate_only:
        return True
    view = View.of(bundle)
    return not view.signal("download_ok") or not view.signal("boot_ok") or bool(view.signal("red_caps"))
