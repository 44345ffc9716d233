"""Environment switches read in more than one place."""

from __future__ import annotations

import os

__all__ = ["switched_off"]

OFF_VALUES = ("off", "0", "no", "false")


def switched_off(variable: str) -> bool:
    """Whether the environment variable ``variable`` turns something off: ``off``,
    ``0``, ``no`` or ``false``, in any case (unset or anything else: on)."""
    return os.environ.get(variable, "").lower() in OFF_VALUES
