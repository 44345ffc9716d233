"""The error tree: every error loop_core raises on purpose is a ``LoopError``.

Messages name the place first, then the problem, then the bad value, e.g.
``rules.d/40-quant.yml[0] quant-weight-dtype: invalid regex '(': ...``.
"""

from __future__ import annotations

__all__ = ["BundleError", "CatalogError", "LoopError", "PluginError", "RuleError", "TrackerError", "WorkerError"]


class LoopError(Exception):
    """Base for every error loop_core raises on purpose."""


class BundleError(LoopError):
    """A capture bundle is missing, unreadable or malformed.

    ``path`` is the bundle directory (or the file inside it) that failed.
    """

    def __init__(self, message: str, *, path: object = None) -> None:
        super().__init__(message)
        self.path = path


class RuleError(LoopError):
    """A rule pack is invalid.

    ``problems`` lists every problem found when the pack was loaded with
    ``collect_errors=True``; otherwise it holds the single problem raised.
    """

    def __init__(self, message: str, *, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems or (message,)


class PluginError(LoopError):
    """A plugin broke a hook contract (duplicate name, bad return value)."""


class CatalogError(LoopError):
    """A curated-model catalog file is unreadable or malformed."""


class TrackerError(LoopError):
    """A tracker backend could not store or read an issue."""


class WorkerError(LoopError):
    """A ``--jobs`` worker process could not start, or ended before answering (killed, out of
    memory, crashed)."""


# What the host catches from a plugin's code and reports as that plugin's failure: any
# Exception, and SystemExit, for a plugin's sys.exit() must not end the command quietly
# with the plugin's status (often 0) and nothing filed. Never KeyboardInterrupt: Ctrl-C
# and SIGTERM stop the command as they always do.
PLUGIN_FAILURES: tuple[type[BaseException], ...] = (Exception, SystemExit)


def failure_text(error: BaseException) -> str:
    """How a failure of a plugin's code reads in a message, ``ValueError: boom``; for
    ``sys.exit`` (whose text alone is only the exit status) ``SystemExit: sys.exit(0) was called``."""
    return f"{type(error).__name__}: {failure_detail(error)}"


def show_traceback(message: str, error: BaseException) -> None:
    """With ``LOOP_RULES_DEBUG`` set, write the traceback of a plugin's exception that
    the run reports and goes past (a verdict's warning, a failed close) to stderr, after
    ``message``, the warning itself. A failure is shown once per process, however many
    bundles meet it: what differs from bundle to bundle is the text, not the place.
    """
    import os

    if not os.environ.get("LOOP_RULES_DEBUG"):
        return
    import sys
    import traceback

    root = error
    while root.__cause__ is not None:  # a condition kind's own exception, behind the rule's
        root = root.__cause__
    frames = traceback.extract_tb(root.__traceback__)
    place = (type(root), *((frames[-1].filename, frames[-1].lineno) if frames else ()))
    if place in _SHOWN:
        return
    _SHOWN.add(place)
    print(f"loop-rules: debug: {message}", file=sys.stderr)
    traceback.print_exception(root, file=sys.stderr)  # the plugin's, not loop-rules' wrapper


_SHOWN: set[tuple[object, ...]] = set()


def pattern_text(pattern: str) -> str:
    """A regex as a message shows it: as a YAML single-quoted scalar, the way rule files
    write patterns (``'\\bkilled\\b'``, where Python's quoting doubles each backslash),
    so it can be found in the file or pasted back; in Python's quoting when it holds a
    character such a scalar cannot show (a newline, a control)."""
    if pattern.isprintable():
        return "'" + pattern.replace("'", "''") + "'"
    return repr(pattern)


def failure_detail(error: BaseException) -> str:
    """:func:`failure_text` without the exception's type."""
    if isinstance(error, SystemExit):
        return f"sys.exit({error.code!r}) was called"
    return str(error)
