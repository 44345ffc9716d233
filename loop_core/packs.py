"""Resolve ``--rules``: a registered pack name or a directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["PackInfo"]


@dataclass(frozen=True, slots=True)
class PackInfo:
    """A named rule pack a plugin ships."""

    name: str
    path: Path
    description: str = ""
