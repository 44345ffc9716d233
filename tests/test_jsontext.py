"""dumps_indented is json.dumps(indent=2) byte for byte, errors included."""

from __future__ import annotations

import enum
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loop_core.jsontext import dumps_indented, item_texts, splice_list, strict_dumps

SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
           | st.text(alphabet=st.characters(blacklist_categories=()), max_size=12))
VALUES = st.recursive(
    SCALARS,
    lambda inner: (st.lists(inner, max_size=4) | st.lists(inner, max_size=3).map(tuple)
                   | st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(VALUES, st.booleans(), st.booleans())
def test_same_text_as_json_dumps(value: Any, sort_keys: bool, ensure_ascii: bool) -> None:
    assert dumps_indented(value, sort_keys=sort_keys, ensure_ascii=ensure_ascii) == \
        json.dumps(value, indent=2, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


class Level(enum.IntEnum):
    HIGH = 3


class Ratio(float):
    def __repr__(self) -> str:
        return "ratio"


@pytest.mark.parametrize("value", [
    {1: "int key", "b": [2, 3]},                 # json turns the key into "1"
    {"a": 1, None: 2, True: 3},                  # unsortable once converted? json decides
    {"level": Level.HIGH, "ratio": Ratio(0.5)},  # subclasses as json renders them
    {"empty": {}, "none": [], "nested": [[], {}, [[{}]]]},
    [math.nan, math.inf, -math.inf, -0.0, 1e300, 10**30],
    "\u2028 \ud800 \x00 \"quoted\" \\ \U0001f600",
])
def test_awkward_values_match_json_dumps(value: Any) -> None:
    for sort_keys in (False, True):
        try:
            expected = json.dumps(value, indent=2, sort_keys=sort_keys)
        except TypeError as e:
            with pytest.raises(TypeError, match=str(e).split(":")[0]):
                dumps_indented(value, sort_keys=sort_keys)
        else:
            assert dumps_indented(value, sort_keys=sort_keys) == expected


def test_errors_are_json_dumps_errors() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        dumps_indented(cycle)
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_indented({"when": object()})


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6), VALUES, max_size=4), st.lists(VALUES, min_size=1, max_size=6),
       st.booleans())
def test_a_list_spliced_from_its_items_texts_is_the_whole_text(doc: dict[str, Any], items: list[Any],
                                                               ensure_ascii: bool) -> None:
    whole = {**doc, "occurrences": items}
    texts = item_texts(items, level=2, sort_keys=True, ensure_ascii=ensure_ascii)
    if texts is None:  # not plain data: json.dumps has the last word, nothing is spliced
        return
    spliced = splice_list(whole, "occurrences", texts, sort_keys=True, ensure_ascii=ensure_ascii)
    assert spliced is not None
    assert spliced == json.dumps(whole, indent=2, sort_keys=True, ensure_ascii=ensure_ascii)


def test_no_splice_when_the_mark_could_be_mistaken_or_there_is_nothing_to_splice() -> None:
    from loop_core.jsontext import _SPLICE_MARK

    texts = item_texts([1, 2], level=2)
    assert texts == ["1", "2"]
    assert splice_list({"note": _SPLICE_MARK, "occurrences": [1, 2]}, "occurrences", texts) is None
    assert splice_list({"occurrences": []}, "occurrences", []) is None
    assert item_texts([{1: "a non-string key"}], level=2) is None


def test_a_value_nested_past_the_recursion_limit_is_left_to_json_dumps() -> None:
    """No item texts to splice, and json.dumps's own error for the whole."""
    import sys

    deep: list[Any] = []
    for _ in range(sys.getrecursionlimit() + 10):
        deep = [deep]
    assert item_texts([1, deep], level=2) is None
    with pytest.raises(RecursionError):
        dumps_indented(deep)


def test_strict_dumps_writes_the_numbers_json_has_none_for_as_their_names() -> None:
    value = {"peak": math.inf, "floor": -math.inf, "parts": (1.5, -math.inf), "note": "x"}
    assert json.loads(strict_dumps(json.dumps, value)) == {
        "peak": "Infinity", "floor": "-Infinity", "parts": [1.5, "-Infinity"], "note": "x"}
    assert json.loads(strict_dumps(json.dumps, [math.nan])) == ["NaN"]
    plain = {"peak": 1e300, "note": "no NaN here"}
    assert strict_dumps(json.dumps, plain) == json.dumps(plain)
