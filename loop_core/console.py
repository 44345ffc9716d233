"""The ``loop-rules`` console script: the command line, and Ctrl-C while it loads.

Importing the command line (click and the modules it needs) takes some tens of
milliseconds; a Ctrl-C or SIGTERM in that time used to print a traceback. It is
one line and the shell's status, as it is once a command runs
(:func:`loop_core.cli.main`).
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    """Load the command line and run it."""
    try:
        from .cli import main as run
    except KeyboardInterrupt:
        sys.stderr.write("loop-rules: interrupted\n")
        sys.exit(130)
    run()
