"""Built-in plugins of loop-rules: hook implementations only.

Each module is one plugin, registered by name in
``loop_core.plugins.BUILTIN_PLUGINS``:

- ``loop_rules.packs``: the ``default`` and ``reference`` rule packs;
- ``loop_rules.conditions``: the ``structural`` and ``gate_abort_reason``
  condition kinds;
- ``loop_rules.tier1``: the Tier-1 OOM fast path (CONTRACTS §3.5);
- ``loop_rules.tier2``: the exact-fingerprint table and the YAML rows.
"""
