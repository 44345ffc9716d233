"""Plugin: the built-in issue rendering (CONTRACTS §5.2-§5.4, sanitized).

Rendering (and its secret-scrubbing patterns) is imported on the first
draft, so commands that file nothing start without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loop_core import Bundle, Classification, hookimpl

if TYPE_CHECKING:
    from loop_core.dedup import IssueDraft


@hookimpl(trylast=True)
def loop_draft_issue(bundle: Bundle, verdict: Classification) -> IssueDraft:
    from loop_core.dedup import draft_issue
    from loop_core.view import View

    final = View.of(bundle).signal("final_error")
    evidence = final if final and final.lower() not in verdict.error_substring else None
    return draft_issue(bundle, verdict, evidence=evidence)
