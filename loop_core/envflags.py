"""Environment switches read in more than one place."""

from __future__ import annotations

import os

__all__ = ["switched_off", "unknown_settings"]

OFF_VALUES = ("off", "0", "no", "false")
ON_VALUES = ("on", "1", "yes", "true")
# The switches and the values each knows besides OFF_VALUES and ON_VALUES.
SWITCHES = {"LOOP_RULES_SCANNER": ("ahocorasick",), "LOOP_RULES_CACHE": (), "LOOP_RULES_ORJSON": ()}


def switched_off(variable: str) -> bool:
    """Whether the environment variable ``variable`` turns something off: ``off``,
    ``0``, ``no`` or ``false``, in any case (unset or anything else: on)."""
    return os.environ.get(variable, "").lower() in OFF_VALUES


def unknown_settings() -> list[str]:
    """A warning for each switch set to a value it does not know (a typo such as
    ``of``): such a value leaves the switch on, which the user may not expect."""
    out = []
    for name, extra in SWITCHES.items():
        value = os.environ.get(name)
        if value and value.lower() not in (*OFF_VALUES, *ON_VALUES, *extra):
            known = ", ".join((*OFF_VALUES, *ON_VALUES, *extra))
            out.append(f"{name}={value!r} is not one of {known}; taken as on")
    return out
