"""Plugin: the rule packs shipped with loop-rules (``default`` and ``reference``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from loop_core import PackInfo, hookimpl

HERE = Path(__file__).resolve().parent


def _default_pack_dir() -> Path:
    # Installed: the wheel carries rules.d/ as loop_rules/packs/default/.
    # Source checkout (editable installs included): the top-level rules.d/.
    installed = HERE / "default"
    if installed.is_dir():
        return installed
    return HERE.parent.parent / "rules.d"


@hookimpl
def loop_register_rule_packs(register: Callable[[PackInfo], None]) -> None:
    register(PackInfo("default", _default_pack_dir(),
                      "the maintained pack: Appendix-A and gate rows, anchored on final exceptions"))
    register(PackInfo("reference", HERE / "reference",
                      "the reference implementation's 12 Tier-2 rows, ids and order unchanged"))
