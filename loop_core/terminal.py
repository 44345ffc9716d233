"""Text that leaves the program for a person: safe to print, and safe to paste.

Capture text and folder names come from uploads. Printed raw, an escape sequence
in either would drive the reader's terminal; pasted raw from a suggested command,
a name with a control character would name another folder. The command line and
the HTML report both write such text through these two functions.
"""

from __future__ import annotations

import shlex
from typing import Any

__all__ = ["shell_word", "shown"]


def shown(value: Any, keep: str = "") -> str:
    """``value`` as text safe to print to a terminal: a character that is not
    printable (an escape sequence's ESC, a bell), other than those in ``keep``,
    is written as its escape (``\\x1b``), so capture text cannot drive the terminal, and a
    byte of a file name that is not UTF-8 as ``\\xff``, as ``path_text`` writes it."""
    text = str(value)
    if text.isprintable():
        return text
    # Imported here, not at the top: `loop-rules --version` needs none of bundle.py.
    from .bundle import path_text

    text = path_text(text)
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in text)


def shell_word(value: Any) -> str:
    """``value`` (a path, a name) as one word to paste into a POSIX shell, and safe to print.

    A name a terminal would act on (an escape sequence in a folder's name), or one
    that is not UTF-8, is written in the ``$'...'`` form bash and zsh read, each such
    character as its escape: pasted, the command names the same folder.
    """
    text = str(value)
    if text.isprintable():
        return shlex.quote(text)
    # Backslashes and quotes first, then what shown() writes as escapes bash reads the same way.
    return "$'" + shown(text.replace("\\", "\\\\").replace("'", "\\'")) + "'"
