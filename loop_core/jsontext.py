"""Indented JSON text, byte for byte what ``json.dumps(obj, indent=2, ...)`` gives, faster.

The standard library encodes with its C accelerator only when no ``indent``
is asked for; with one it walks the value in Python generators. Issue
bodies, review-queue files and ``classify --format json`` all want the
indented form, so :func:`dumps_indented` writes it directly: one recursive
pass appending to a list, strings escaped by the same C functions ``json``
uses. Anything outside plain JSON data (a non-string key, an ``int`` or
``float`` subclass, a cycle, an unknown type) is handed to ``json.dumps``
itself, so the result, or the error, is always the standard one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any

__all__ = ["dumps_indented", "finite", "item_texts", "scalar_text", "splice_list", "strict_dumps"]

INDENT = "  "


class _Unsupported(Exception):
    """A value this encoder leaves to ``json.dumps``."""


def dumps_indented(value: Any, *, sort_keys: bool = False, ensure_ascii: bool = True) -> str:
    """``json.dumps(value, indent=2, sort_keys=sort_keys, ensure_ascii=ensure_ascii)``."""
    escape = encode_basestring_ascii if ensure_ascii else encode_basestring
    out: list[str] = []
    try:
        _emit(value, out, "\n", escape, sort_keys)
    except (_Unsupported, RecursionError):
        return json.dumps(value, indent=2, sort_keys=sort_keys, ensure_ascii=ensure_ascii)
    return "".join(out)


def item_texts(values: list[Any], *, level: int, sort_keys: bool = False, ensure_ascii: bool = True) -> list[str] | None:
    """The text of each of ``values`` as :func:`dumps_indented` writes it at nesting
    ``level`` (its inner lines indented that much deeper); None when one of them is
    not plain JSON data (``json.dumps`` would have the last word on it)."""
    escape = encode_basestring_ascii if ensure_ascii else encode_basestring
    newline = "\n" + INDENT * level
    texts = []
    try:
        for value in values:
            out: list[str] = []
            _emit(value, out, newline, escape, sort_keys)
            texts.append("".join(out))
    except (_Unsupported, RecursionError):
        return None
    return texts


_SPLICE_MARK = "\x00loop-rules: list items go here\x00"


def splice_list(doc: dict[str, Any], key: str, texts: list[str], *, sort_keys: bool = False,
                ensure_ascii: bool = True) -> str | None:
    """``dumps_indented(doc)``, with the items of the non-empty list ``doc[key]`` given
    already written (:func:`item_texts` at level 2): a long list that grows is not
    written again item by item. None when that cannot be done (write it whole)."""
    if not texts:
        return None
    marked = dumps_indented({**doc, key: [_SPLICE_MARK]}, sort_keys=sort_keys, ensure_ascii=ensure_ascii)
    mark = (encode_basestring_ascii if ensure_ascii else encode_basestring)(_SPLICE_MARK)
    parts = marked.split(mark)
    if len(parts) != 2:
        return None  # the mark occurs elsewhere too, or the document was not written by us
    return parts[0] + ("," + "\n" + INDENT * 2).join(texts) + parts[1]


def scalar_text(value: Any, escape: Callable[[str], str] = encode_basestring_ascii) -> str | None:
    """What ``json.dumps`` writes for a string, number, boolean or null (``escape``:
    ``json``'s string escaper, ASCII by default); None for anything else (a container,
    an ``int`` or ``float`` subclass, an unknown type)."""
    if isinstance(value, str):
        return escape(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return int.__repr__(value)
    if type(value) is float:
        return _float_text(value)
    return None


def _emit(value: Any, out: list[str], newline: str, escape: Callable[[str], str], sort_keys: bool) -> None:
    if isinstance(value, str):  # the most common value, written without a call
        out.append(escape(value))
        return
    text = scalar_text(value, escape)
    if text is not None:
        out.append(text)
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        if any(type(key) is not str for key in value):
            raise _Unsupported  # json converts such keys (and may refuse to sort them)
        inner = newline + INDENT
        items = sorted(value.items()) if sort_keys else value.items()
        sep = "{" + inner
        for key, item in items:
            out.append(sep)
            out.append(escape(key))
            out.append(": ")
            _emit(item, out, inner, escape, sort_keys)
            sep = "," + inner
        out.append(newline + "}")
    elif isinstance(value, (list, tuple)):
        if not value:
            out.append("[]")
            return
        inner = newline + INDENT
        sep = "[" + inner
        for item in value:
            out.append(sep)
            _emit(item, out, inner, escape, sort_keys)
            sep = "," + inner
        out.append(newline + "]")
    else:
        raise _Unsupported


def _float_text(value: float) -> str:
    if value != value:
        return "NaN"
    if value == float("inf"):
        return "Infinity"
    if value == float("-inf"):
        return "-Infinity"
    return float.__repr__(value)


def finite(value: Any) -> Any:
    """``value`` with each non-finite float (``NaN``, ``Infinity``, ``-Infinity``, which
    a bundle file may hold and JSON has no number for) replaced by its name as a string."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def strict_dumps(dumps: Callable[[Any], str], value: Any) -> str:
    """``dumps(value)`` as strict JSON: if the text holds a ``NaN`` or an ``Infinity``
    (rare; a string that says so also sends it here), ``value`` is dumped again
    with those numbers as strings (:func:`finite`)."""
    text = dumps(value)
    if "NaN" in text or "Infinity" in text:
        return dumps(finite(value))
    return text
