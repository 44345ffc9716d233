"""The example captures the tests copy, without the state a run keeps in them.

The README's main command runs ``loop-rules run examples/pull-captures`` in the
checkout itself, which leaves ``_loop/`` (the tracker) and ``_review-queue/``
there; a test that copied them along would start from that run's counts.
"""

from __future__ import annotations

import shutil
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "pull-captures"


def copy_examples(target: Path) -> Path:
    """Copy the example captures to ``target`` (which must not exist), state left out."""
    return Path(shutil.copytree(EXAMPLES, target, ignore=shutil.ignore_patterns("_*")))
