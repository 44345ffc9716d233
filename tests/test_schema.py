"""The JSON Schemas of rule files and pack.yml agree with the loader."""

from __future__ import annotations

import json
import re
import textwrap
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from loop_core import RuleError, load_rules, make_plugin_manager
from loop_core.conditions import OPERATORS
from loop_core.engine import condition_kinds
from loop_core.rules import (
    EXAMPLE_FILES,
    MODES,
    OPTIONAL_RULE_KEYS,
    PACK_FILE,
    RULE_KEYS,
    load_yaml_text,
)
from loop_core.verdict import FailureClass
from loop_rules.conditions import PREDICATES

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parent.parent
PACK_DIRS = {
    "reference": ROOT / "loop_rules" / "packs" / "reference",
    "rules.d": ROOT / "rules.d",
}


def _schema(name: str) -> dict[str, Any]:
    text = resources.files("loop_core").joinpath(f"schema/{name}").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


RULES_SCHEMA = _schema("rules.schema.json")
PACK_SCHEMA = _schema("pack.schema.json")


def _errors(schema: dict[str, Any], doc: Any) -> list[str]:
    validator = jsonschema.Draft7Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in validator.iter_errors(doc)]


def _pack_files(pack_file: bool) -> list[Any]:
    out = []
    for label, directory in PACK_DIRS.items():
        for path in sorted(directory.glob("*.y*ml")):
            if (path.name == PACK_FILE) == pack_file:
                out.append(pytest.param(path, id=f"{label}/{path.name}"))
    return out


@pytest.mark.parametrize("schema", [RULES_SCHEMA, PACK_SCHEMA], ids=["rules", "pack"])
def test_schemas_are_valid_draft7(schema: dict[str, Any]) -> None:
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema)


@pytest.mark.parametrize("path", _pack_files(pack_file=False))
def test_shipped_rule_files_match_schema(path: Path) -> None:
    doc = load_yaml_text(path.read_text(encoding="utf-8"), path.name)
    assert _errors(RULES_SCHEMA, doc) == []


@pytest.mark.parametrize("path", _pack_files(pack_file=True))
def test_shipped_pack_settings_match_schema(path: Path) -> None:
    doc = load_yaml_text(path.read_text(encoding="utf-8"), path.name) or {}
    assert _errors(PACK_SCHEMA, doc) == []


def test_schema_lists_what_the_loader_knows() -> None:
    defs = RULES_SCHEMA["definitions"]
    assert defs["failureClass"]["enum"] == [c.value for c in FailureClass]
    assert sorted(defs["singleKey"]["properties"]["structural"]["enum"]) == sorted(PREDICATES)
    select_ops = {next(iter(alt["required"])) for alt in defs["select"]["oneOf"]}
    assert select_ops == set(OPERATORS)
    example_files = defs["example"]["oneOf"][1]["properties"]
    assert set(example_files) == EXAMPLE_FILES
    assert set(defs["rule"]["properties"]) == RULE_KEYS | OPTIONAL_RULE_KEYS
    assert set(defs["rule"]["required"]) == RULE_KEYS
    assert defs["rule"]["properties"]["mode"]["enum"] == list(MODES)


_GOOD = """\
- id: good
  class: kernel-unsupported
  description: A rule the loader and the schema both accept.
  when: {select: $.signal.error_text, contains: needs sm90}
  examples:
    match: ["RuntimeError: this kernel needs sm90"]
"""

_WHEN = "{select: $.signal.error_text, contains: needs sm90}"
_MATCH = 'match: ["RuntimeError: this kernel needs sm90"]'


def _when(condition: str) -> str:
    return _GOOD.replace(_WHEN, condition)


def _op(operator: str) -> str:
    return _GOOD.replace("contains: needs sm90", operator)


def _match(examples: str) -> str:
    return _GOOD.replace(_MATCH, examples)


_HTTP_404 = "{structural: results_detail_http_404}"

# (name, file text) pairs the loader rejects; the schema must reject them too.
BROKEN = [
    ("missing-id", _GOOD.replace("- id: good\n  class", "- class")),
    ("bad-id", _GOOD.replace("id: good", "id: -starts-with-dash")),
    ("unknown-class", _GOOD.replace("class: kernel-unsupported", "class: oom")),
    ("empty-description", re.sub(r"description: .*", "description: '  '", _GOOD)),
    ("unknown-rule-key", _GOOD + "  severity: high\n"),
    ("unknown-mode", _GOOD + "  mode: dry-run\n"),
    ("two-operators", _op("contains: needs sm90, regex: sm90")),
    ("no-operator", _when("{select: $.signal.error_text}")),
    ("operator-without-select", _when("{contains: needs sm90}")),
    ("selector-without-dollar", _GOOD.replace("$.signal.error_text", "signal.error_text")),
    ("ignore-case-not-bool", _op("contains: needs sm90, ignore_case: 1")),
    ("contains-bad-mode", _op("contains: {some: [needs sm90]}")),
    ("contains-empty-list", _op("contains: []")),
    ("in-not-a-list", _op("in: needs sm90")),
    ("equals-a-list", _op("equals: [a, b]")),
    ("exists-not-bool", _op("exists: maybe")),
    ("empty-all", _when("{all: []}")),
    ("empty-when-list", _when("[]")),
    ("two-combinators", _when(f"{{any: [{_HTTP_404}], not: {_HTTP_404}}}")),
    ("unknown-predicate", _when("{structural: pt3_is_sad}")),
    ("no-match-examples", _match("match: []")),
    ("example-unknown-file", _match("match: [{pt6: {failure: x}}]")),
    ("examples-unknown-key", _match('match: ["needs sm90"]\n    maybe: []')),
    ("unknown-top-level-key", "rulez:\n" + _GOOD),
    ("exact-bad-fingerprint", 'exact:\n  "0123456789AB": unknown\n'),
    ("exact-short-fingerprint", 'exact:\n  "0123abc": unknown\n'),
    ("exact-bad-class", 'exact:\n  "0123456789ab": oom\n'),
]


@pytest.mark.parametrize("text", [
    _GOOD,
    "rules:\n" + textwrap.indent(_GOOD, "  ") + 'exact:\n  "0123456789ab": unknown\n',
], ids=["list", "mapping"])
def test_good_file_passes_schema_and_loader(text: str, tmp_path: Path) -> None:
    assert _errors(RULES_SCHEMA, load_yaml_text(text)) == []
    (tmp_path / "10-good.yml").write_text(text, encoding="utf-8")
    pack = load_rules(tmp_path, condition_kinds(make_plugin_manager(entry_points=False)))
    assert [r.id for r in pack.rules] == ["good"]


@pytest.mark.parametrize("name,text", BROKEN, ids=[name for name, _ in BROKEN])
def test_broken_file_rejected_by_schema_and_loader(name: str, text: str, tmp_path: Path) -> None:
    assert _errors(RULES_SCHEMA, load_yaml_text(text)), f"schema accepted {name}"
    (tmp_path / "10-broken.yml").write_text(text, encoding="utf-8")
    with pytest.raises(RuleError, match=r"10-broken\.yml"):
        load_rules(tmp_path, condition_kinds(make_plugin_manager(entry_points=False)))


def test_schema_accepts_plugin_condition_kinds() -> None:
    doc = load_yaml_text(_when("{any: [{nvlink_degraded: {min_links: 2}},"
                               " {not: {gate_abort_reason: disk-short}}]}"))
    assert _errors(RULES_SCHEMA, doc) == []


@pytest.mark.parametrize("doc", [
    {"regex_timeout": 0},
    {"regex_timeout": 11},
    {"tier1_oom": {"surface": "everything"}},
    {"tier1_oom": {"signature": "cuda out of memory"}},
    {"tier1_oom": {"veto": ["oom-killer"]}},
    {"priority": 1},
], ids=["timeout-zero", "timeout-too-long", "bad-surface", "signature-not-list",
        "unknown-tier1-key", "unknown-key"])
def test_broken_pack_settings_rejected(doc: dict[str, Any]) -> None:
    assert _errors(PACK_SCHEMA, doc)
