"""The bundle reader parses with orjson when it is installed: the same documents
and the same refusals as with ``json`` alone, for any text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import loop_core.bundle
from loop_core import BundleError, ReadLimits, read_bundle
from loop_core.batch import discover_bundles

orjson = pytest.importorskip("orjson")  # the `fast` and `test` extras install it

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def outcome(data: bytes, *, fast: bool, max_depth: int = 64) -> tuple[str, str]:
    """What the reader makes of one file's bytes, as comparable text: the document's
    ``repr`` (which tells 1 from 1.0 and True, -0.0 from 0.0, and shows key order)
    or the refusal's message."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop_core.bundle, "FAST_LOADS", orjson.loads if fast else None)
        try:
            doc = loop_core.bundle._decode_object(Path("b"), "pt3-boot.json", data, ReadLimits(max_depth=max_depth))
        except BundleError as e:
            return "refused", str(e)
    return "read", repr(doc)


def same_either_way(data: bytes, max_depth: int = 64) -> tuple[str, str]:
    with_orjson, json_alone = outcome(data, fast=True, max_depth=max_depth), outcome(data, fast=False,
                                                                                     max_depth=max_depth)
    assert with_orjson == json_alone
    return with_orjson


# Everything on which the two parsers could part: integers past 64 bits (orjson reads
# them as floats), huge and tiny floats, NaN and infinities, lone and paired surrogate
# escapes, control characters, a byte-order mark, nesting about the bound.
_NUMBERS = (st.integers() | st.integers(min_value=2**62, max_value=2**66)
            | st.integers(min_value=-(2**66), max_value=-(2**62)) | st.floats())
_TEXT = st.text(alphabet=st.sampled_from('ab"\\/\x00\x1f\x7f\u00e9\u2028\ud800\udbff\udc00\udfff\ud83d\ude00'),
                max_size=8)
_VALUES = st.recursive(
    st.none() | st.booleans() | _NUMBERS | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=25)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(_TEXT, _VALUES, max_size=5), st.booleans(), st.integers(min_value=1, max_value=6))
def test_any_json_document_reads_the_same_with_orjson(doc: dict[str, Any], ascii_only: bool, bound: int) -> None:
    text = json.dumps(doc, ensure_ascii=ascii_only)
    result = same_either_way(text.encode("utf-8", "surrogatepass"), max_depth=bound)
    event(result[1].split(":")[-1].strip()[:40] if result[0] == "refused" else "read")


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(_TEXT, _VALUES, min_size=1, max_size=5),
       st.lists(st.tuples(st.integers(min_value=0), st.sampled_from('{}[],:"\\ 0-.eE+un\x00\u00e9'),
                          st.booleans()), min_size=1, max_size=3))
def test_any_damaged_text_is_refused_or_read_the_same_with_orjson(
        doc: dict[str, Any], edits: list[tuple[int, str, bool]]) -> None:
    text = json.dumps(doc)
    for at, char, insert in edits:
        at %= len(text) + 1
        text = text[:at] + char + text[at + (0 if insert else 1):]
    result = same_either_way(text.encode("utf-8", "surrogatepass"))
    event(result[0])


@pytest.mark.parametrize("text", [
    '{"n": 18446744073709551615}',  # the largest integer orjson holds as one
    '{"n": 18446744073709551616}',  # one more: a float to orjson, an int to json
    '{"n": -9223372036854775808}',
    '{"n": -9223372036854775809}',
    '{"n": [1, {"m": 123456789012345678901234567890}]}',
    '{"x": 9.3e18}',  # a float literal that large: read by json too
    '{"x": 1e400}', '{"x": -1e400}', '{"x": NaN}', '{"x": -Infinity}', '{"x": 1e-400}', '{"x": -0.0}',
    '{"x": 0.30000000000000004441}', '{"x": 2.2250738585072011e-308}',
    '{"s": "\\ud800"}', '{"s": "\\udc00\\ud800"}', '{"\\udfff": 1}', '{"s": "\\ud83d\\ude00"}',
    '{"s": "\x01"}', '\ufeff{"a": 1}', '{"a": 1, "a": 2, "b": 3}', '[1]', '"text"', '{"a": 1,}', '',
    '{"d": ' + "[" * 64 + "]" * 64 + "}", '{"d": ' + "[" * 63 + "]" * 63 + "}",
    '{"d": ' + "[" * 2000 + "]" * 2000 + "}",
])
def test_where_the_parsers_differ_the_reader_answers_as_json_alone(text: str) -> None:
    same_either_way(text.encode("utf-8", "surrogatepass"))


def test_a_wide_integer_stays_an_integer() -> None:
    assert outcome(b'{"n": 18446744073709551616}', fast=True) == ("read", "{'n': 18446744073709551616}")


def test_a_lone_surrogate_is_refused_with_the_readers_own_message() -> None:
    kind, message = outcome(b'{"failure": "\\ud800"}', fast=True)
    assert kind == "refused" and message.endswith("holds a lone surrogate escape, which is not valid Unicode")


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The texts orjson was handed."""
    seen: list[str] = []

    def spy(text: str) -> Any:
        seen.append(text)
        return orjson.loads(text)

    monkeypatch.setattr(loop_core.bundle, "FAST_LOADS", spy)
    yield seen


def test_the_example_captures_are_parsed_by_orjson_and_read_as_with_json(
        parses: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    paths = list(discover_bundles([EXAMPLES]))
    assert len(paths) >= 10

    def read_all() -> list[str]:
        out = []
        for path in paths:
            try:
                out.append(repr(read_bundle(path)))
            except BundleError as e:  # the examples hold a broken upload too
                out.append(str(e))
        return out

    fast = read_all()
    assert len(parses) >= 2 * len(paths)  # every file of every bundle went through it
    monkeypatch.setattr(loop_core.bundle, "FAST_LOADS", None)
    assert read_all() == fast


@pytest.mark.parametrize(("value", "parser"), [("off", None), ("FALSE", None), ("", orjson.loads), ("on", orjson.loads)])
def test_loop_rules_orjson_off_leaves_json_alone(monkeypatch: pytest.MonkeyPatch, value: str, parser: Any) -> None:
    monkeypatch.setenv("LOOP_RULES_ORJSON", value)
    assert loop_core.bundle._orjson() is parser  # what FAST_LOADS is set to at import
