"""``python -m loop_core`` runs the ``loop-rules`` command line."""

from __future__ import annotations

from .console import main

if __name__ == "__main__":
    main()
