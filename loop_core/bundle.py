"""Read one capture bundle from disk, strictly (CONTRACTS §1-§2).

``read_bundle`` returns a frozen :class:`Bundle` or raises :class:`BundleError`
naming the file and the problem. It never returns a partial object and never
lets another exception escape for anything found on disk.

Compatibility: the checks of the reference reader (§2.2, §2.6) are applied in
the same order, so every bundle the reference accepts is accepted here and
every bundle it rejects is rejected. On top of that the reader refuses what the
reference never considered: symlinks, FIFOs, devices and sockets inside a
bundle, files over a size cap, JSON nested deeper than a bound, bytes that are
not UTF-8 and strings holding lone surrogates (which cannot be hashed).

Files are parsed with orjson where the ``fast`` extra installed it, and with
``json`` otherwise and wherever the two could differ (:func:`_fast_decode`):
the same documents and the same errors either way.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .envflags import switched_off
from .errors import BundleError
from .pickling import pickled_by_fields

__all__ = [
    "BUNDLE_FILES",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_FILE_BYTES",
    "Bundle",
    "ReadLimits",
    "path_text",
    "read_bundle",
]

MANIFEST = "manifest.json"
PT1, PT2, PT3, PT4, PT5 = (
    "pt1-gate.json",
    "pt2-download.json",
    "pt3-boot.json",
    "pt4-smoke.json",
    "pt5-override-capture.json",
)
BUNDLE_FILES = (MANIFEST, PT1, PT2, PT3, PT4, PT5)

DEFAULT_MAX_FILE_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_DEPTH = 64

# §1.8.1: the 20 manifest keys a schema-1 reader requires (values unchecked).
MANIFEST_KEYS_V1 = frozenset(
    {
        "schema", "slug", "utc_ts", "submission_fingerprint", "model", "quant_label",
        "arch_family", "topology_class", "engine_pin", "engine_version", "kv_calc_version",
        "selected_ctx", "kv_format", "smoke_capability_set", "topology_summary_canonical",
        "model_id", "failure_class", "club3090_commit", "outcome", "capture_points",
    }
)
# §2.6: the only keys a schema-2 (gate-only) manifest must carry.
MANIFEST_KEYS_V2 = frozenset(
    {"schema", "slug", "utc_ts", "club3090_commit", "outcome", "abort_reason", "failure_class"}
)

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
# An unterminated string matches to the end of the text rather than failing:
# a failed match would be retried at every later quote, which is quadratic.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")
# A text longer than this is checked through its parsed value rather than its
# characters: such a file is mostly log text inside a string or two, and a walk over
# its few containers and strings costs less than passing over every character twice
# more (2,000 benchmark bundles: 3 ms against 28 ms for their 1,296 longer files).
VALUE_CHECK_CHARS = 2048
# The most containers that walk visits; a value with more is checked through its text.
VALUE_CHECK_CONTAINERS = 512


ORJSON_ENV = "LOOP_RULES_ORJSON"  # off: parse with json alone (same results, slower)


def _orjson() -> Callable[[str], Any] | None:
    if switched_off(ORJSON_ENV):
        return None
    try:  # the `fast` extra: the same documents, parsed in about half the time (see _fast_decode)
        from orjson import loads
    except ImportError:  # pragma: no cover - depends on the install
        return None
    return loads


# The parser tried first (orjson, when installed and not switched off; None: json
# alone). Whatever it reads, json would read the same (see _fast_decode); anything
# else is json's.
FAST_LOADS = _orjson()
# orjson reads an integer literal beyond 64 bits as a float; no smaller one.
_WIDE_FLOAT = float(2**63)


@dataclass(frozen=True, slots=True)
class ReadLimits:
    """Bounds the reader enforces on every file of a bundle."""

    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_depth: int = DEFAULT_MAX_DEPTH


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Bundle:
    """One validated capture bundle.

    The ``manifest`` and ``ptN`` mappings are the decoded JSON objects exactly
    as stored (additive keys kept); treat them as read-only. ``pt2``-``pt4``
    are None for gate-only (schema 2) bundles, ``pt5`` is None unless the
    override capture is present.
    """

    path: Path
    schema: int
    manifest: Mapping[str, Any]
    pt1: Mapping[str, Any]
    pt2: Mapping[str, Any] | None = None
    pt3: Mapping[str, Any] | None = None
    pt4: Mapping[str, Any] | None = None
    pt5: Mapping[str, Any] | None = None

    @property
    def is_gate_only(self) -> bool:
        return self.schema == 2

    @property
    def model(self) -> Any:
        return self.manifest.get("model")

    @property
    def model_id(self) -> Any:
        """§2.3: ``manifest.model``; gate bundles prefer a truthy ``model_id``."""
        if self.is_gate_only:
            return self.manifest.get("model_id") or self.manifest.get("model")
        return self.manifest.get("model")

    @property
    def engine_version(self) -> Any:
        """§2.3: the engine identity is ``manifest.engine_pin``."""
        return self.manifest.get("engine_pin")

    @property
    def arch_family(self) -> Any:
        return self.manifest.get("arch_family")

    @property
    def quant_label(self) -> str:
        """§2.3: lower-cased for keys; null becomes the literal ``none``."""
        value = self.manifest.get("quant_label")
        return "none" if value is None else str(value).lower()

    @property
    def outcome(self) -> Any:
        """The producer's interim 3-state, deliberately not a failure class."""
        return self.manifest.get("outcome")

    @property
    def abort_reason(self) -> Any:
        """The gate's abort token (gate-only bundles; None otherwise)."""
        return self.pt1.get("abort_reason") if self.is_gate_only else None

    @property
    def name(self) -> str:
        return self.path.name

    def to_document(self) -> dict[str, Any]:
        """The raw files as one JSON-ready mapping (``manifest``, ``pt1``..``pt5``)."""
        return {
            "manifest": self.manifest,
            "pt1": self.pt1,
            "pt2": self.pt2,
            "pt3": self.pt3,
            "pt4": self.pt4,
            "pt5": self.pt5,
        }


def read_bundle(path: str | os.PathLike[str], *, limits: ReadLimits | None = None) -> Bundle:
    """Read and validate the capture bundle in directory ``path``.

    Dispatches on ``manifest.schema`` like the reference: ``2`` reads a
    gate-only bundle, anything else a schema-1 bundle (which then insists on
    schema ``1``).

    :raises BundleError: for anything missing, unreadable or malformed; the
        message starts with the offending file.
    """
    limits = limits or ReadLimits()
    root = path if isinstance(path, Path) else Path(path)
    try:
        st = os.stat(root)
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise BundleError(f"{root}: no such bundle directory", path=root) from e
    if not stat.S_ISDIR(st.st_mode):
        raise BundleError(f"{root}: not a directory", path=root)
    # The scan's listing spares an open() of each absent file (pt5, usually) and a stat() of pt5.
    files = _Files(root, _refuse_special_entries(root), limits)

    manifest = files.read(MANIFEST)
    if manifest is None:
        if not files.listing:  # not a broken bundle: no bundle at all
            raise BundleError(f"{root}: not a capture bundle: no {MANIFEST} or other bundle file in it", path=root)
        raise BundleError(f"{root / MANIFEST}: missing", path=root)
    if manifest.get("schema") == 2:
        return _read_gate(files, manifest)
    return _read_capture(files, manifest)


class _Files:
    """The bundle files of one directory, read by name (plain ``str`` paths: no ``Path`` per file)."""

    __slots__ = ("root", "prefix", "listing", "limits")

    def __init__(self, root: Path, listing: dict[str, bool], limits: ReadLimits) -> None:
        self.root = root
        base = os.fspath(root)
        self.prefix = base if base.endswith(os.sep) else base + os.sep
        self.listing = listing  # bundle file name -> is a directory
        self.limits = limits

    def read(self, name: str) -> dict[str, Any] | None:
        """The decoded object in ``name``; None when the file does not exist."""
        if name not in self.listing:
            return None
        return _read_object(self.root, name, self.limits, self.prefix + name)

    def is_dir(self, name: str) -> bool:
        return self.listing.get(name, False)


def _read_capture(files: _Files, manifest: dict[str, Any]) -> Bundle:
    root = files.root
    schema = manifest.get("schema", "<absent>")
    if schema != 1:
        raise BundleError(f"{root / MANIFEST}: unsupported schema {_got(schema)}, expected 1 or 2", path=root)
    missing = sorted(MANIFEST_KEYS_V1 - manifest.keys())
    if missing:
        raise BundleError(f"{root / MANIFEST}: missing keys {', '.join(missing)}", path=root)
    if manifest["failure_class"] is not None:
        raise BundleError(
            f"{root / MANIFEST}: failure_class must be null (the producer never classifies), "
            f"got {_got(manifest['failure_class'])}",
            path=root,
        )
    parts = []
    for name, point in ((PT1, "gate"), (PT2, "download"), (PT3, "boot"), (PT4, "smoke")):
        doc = files.read(name)
        if doc is None:
            raise BundleError(f"{root / name}: missing", path=root)
        if "schema" in doc and doc["schema"] != 1:
            raise BundleError(f"{root / name}: schema must be 1, got {_got(doc['schema'])}", path=root)
        _expect_point(root, name, doc, point)
        parts.append(doc)
    # §2.2.7: pt5 is read only if it "exists as a file"; a directory is ignored.
    pt5 = None if files.is_dir(PT5) else files.read(PT5)
    if pt5 is not None:
        _expect_point(root, PT5, pt5, "override_capture")
    return Bundle(root, 1, manifest, parts[0], parts[1], parts[2], parts[3], pt5)


def _read_gate(files: _Files, manifest: dict[str, Any]) -> Bundle:
    root = files.root
    where = root / MANIFEST
    missing = sorted(MANIFEST_KEYS_V2 - manifest.keys())
    if missing:
        raise BundleError(f"{where}: missing keys {', '.join(missing)}", path=root)
    if manifest["outcome"] != "hard-block":
        raise BundleError(
            f"{where}: a gate-only bundle must have outcome 'hard-block', "
            f"got {_got(manifest['outcome'])}",
            path=root,
        )
    if manifest["failure_class"] is not None:
        raise BundleError(
            f"{where}: failure_class must be null, got {_got(manifest['failure_class'])}", path=root
        )
    pt1 = files.read(PT1)
    if pt1 is None:
        raise BundleError(f"{root / PT1}: missing", path=root)
    if "schema" in pt1 and pt1["schema"] != 2:
        raise BundleError(f"{root / PT1}: schema must be 2, got {_got(pt1['schema'])}", path=root)
    _expect_point(root, PT1, pt1, "gate")
    return Bundle(root, 2, manifest, pt1)


SHOWN_VALUE = 80  # characters of a wrong value an error message shows


def _got(value: Any) -> str:
    """``repr(value)`` for an error message, cut to :data:`SHOWN_VALUE` characters: the
    value of an 8 MB string made an 8 MB message in every table and summary."""
    text = repr(value)
    if len(text) <= SHOWN_VALUE:
        return text
    return f"{text[:SHOWN_VALUE]}\u2026 ({len(text):,} characters)"


def _expect_point(root: Path, name: str, doc: Mapping[str, Any], point: str) -> None:
    value = doc.get("point", "<absent>")
    if value != point:
        raise BundleError(f"{root / name}: point must be {point!r}, got {_got(value)}", path=root)


def _refuse_special_entries(root: Path) -> dict[str, bool]:
    """Refuse symlinks, FIFOs, devices and sockets anywhere at the bundle's top level.

    Returns the bundle files present (:data:`BUNDLE_FILES`), each mapped to
    whether it is a directory. A directory holding none is no bundle, whatever
    else it holds: nothing is refused there, and the caller says what it is.
    """
    try:
        entries = list(os.scandir(root))
    except OSError as e:
        raise BundleError(f"{root}: cannot list directory: {e.strerror}", path=root) from e
    present = {}
    refused = None
    for entry in entries:
        is_dir = False
        if entry.is_symlink():
            refused = refused or f"{entry.path}: is a symlink; bundles hold regular files only"
        else:
            is_dir = entry.is_dir(follow_symlinks=False)
            if not (is_dir or entry.is_file(follow_symlinks=False)):
                refused = refused or f"{entry.path}: is not a regular file (FIFO, device or socket)"
        if entry.name in _BUNDLE_FILE_SET:
            present[entry.name] = is_dir
    if refused and present:
        raise BundleError(refused, path=root)
    return present


_BUNDLE_FILE_SET = frozenset(BUNDLE_FILES)
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0))


def _read_object(root: Path, name: str, limits: ReadLimits, path: str) -> dict[str, Any] | None:
    """Decode one JSON object file; None when the file does not exist (it may have gone
    since the listing). ``path`` is ``root / name`` as a string; error messages name
    ``root / name``.
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise BundleError(f"{root / name}: is a symlink; bundles hold regular files only", path=root) from e
        raise BundleError(f"{root / name}: cannot open: {e.strerror}", path=root) from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise BundleError(f"{root / name}: is {kind}", path=root)
        if st.st_size > limits.max_file_bytes:
            raise BundleError(
                f"{root / name}: {st.st_size} bytes is over the {limits.max_file_bytes}-byte limit",
                path=root,
            )
        # One read of the size fstat gave (plus one byte) usually meets the end of the
        # file at once; a file that grew meanwhile is read on, up to the limit.
        remaining = limits.max_file_bytes + 1
        want = min(remaining, st.st_size + 1)
        data = os.read(fd, want)
        if len(data) == want:
            chunks = [data]
            remaining -= len(data)
            while remaining > 0:
                chunk = os.read(fd, min(remaining, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
            data = b"".join(chunks)
    except OSError as e:
        raise BundleError(f"{root / name}: cannot read: {e.strerror}", path=root) from e
    finally:
        os.close(fd)
    if len(data) > limits.max_file_bytes:
        raise BundleError(f"{root / name}: over the {limits.max_file_bytes}-byte limit", path=root)
    return _decode_object(root, name, data, limits)


def _decode_object(root: Path, name: str, data: bytes, limits: ReadLimits) -> dict[str, Any]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BundleError(
            f"{root / name}: not UTF-8 (byte {data[e.start]:#04x} at offset {e.start})", path=root
        ) from e
    bound = limits.max_depth
    if FAST_LOADS is not None:
        fast = _fast_decode(FAST_LOADS, text, bound)
        if fast is not None:
            return fast
    # Fewer brackets than the bound cannot nest deeper. More are mostly text (a log
    # excerpt's "[rank0]:" tags): the parsed value's depth is then what counts, and the
    # text's is worked out only when parsing fails, to say which way it is wrong. A long
    # text is not counted: its value is walked instead (see _value_shape).
    long = len(text) > VALUE_CHECK_CHARS
    many_brackets = None if long else text.count("[") + text.count("{") > bound
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        if (long or many_brackets) and _nesting_depth(text, bound) > bound:
            raise BundleError(f"{root / name}: JSON nested deeper than {bound} levels", path=root) from e
        if isinstance(e, RecursionError):  # pragma: no cover - deeper than the bound, caught above
            raise BundleError(f"{root / name}: JSON nested too deeply", path=root) from e
        raise BundleError(f"{root / name}: invalid JSON: {e}", path=root) from e
    shape = _value_shape(doc, bound) if long else None
    if shape is None:  # a short text, or a value with too many containers to walk cheaply
        if many_brackets is None:
            many_brackets = text.count("[") + text.count("{") > bound
        deep = many_brackets and _value_depth(doc, bound) > bound
        escapes = "\\u" in text
    else:
        deep, escapes = shape[0] > bound, not shape[1]  # a lone surrogate is never ASCII
    if deep:
        raise BundleError(f"{root / name}: JSON nested deeper than {bound} levels", path=root)
    if not isinstance(doc, dict):
        raise BundleError(f"{root / name}: expected a JSON object, got {type(doc).__name__}", path=root)
    if escapes and _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as e:
            raise BundleError(
                f"{root / name}: holds a lone surrogate escape, which is not valid Unicode", path=root
            ) from e
    return doc


def path_text(value: object) -> str:
    """``str(value)`` (a path, or a message naming one) as text every encoder takes.

    A file name that is not UTF-8 reaches Python with each bad byte as a lone
    surrogate (``surrogateescape``), which a UTF-8 stdout, SQLite or a JSON
    reader refuses; here such a byte is written ``\\xff``.
    """
    text = str(value)
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a lone surrogate no file name gives, from a JSON "\ud800"
            return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def describe_json_parser() -> str:
    """How bundle files are parsed, for ``loop-rules --version``."""
    if FAST_LOADS is not None:
        return "orjson, json for what it does not take"
    if switched_off(ORJSON_ENV):
        return f"json ({ORJSON_ENV}=off)"
    return 'json (orjson is not installed: pip install "loop-rules[fast]")'


def _fast_decode(loads: Callable[[str], Any], text: str, bound: int) -> dict[str, Any] | None:
    """The object ``json.loads(text)`` gives, parsed by ``loads`` (orjson), when it
    passes every check of :func:`_decode_object`; None when it may not, and the
    text is left to ``json`` and those checks (which then say what is wrong).

    orjson refuses, rather than reads otherwise, nearly all that it and ``json``
    disagree on: ``NaN`` and infinities, numbers beyond a double, lone surrogate
    escapes (so a document it reads holds none) and nesting past its own limit.
    The exception, an integer literal beyond 64 bits, comes back as a float of
    at least 2**63: a document holding a float that large goes to ``json``.
    """
    try:
        doc = loads(text)
    except ValueError:  # orjson.JSONDecodeError is a ValueError
        return None
    if type(doc) is not dict:
        return None
    # _value_shape's walk, without its look at every string and key: orjson refused
    # every lone surrogate already, and those looks cost 9 of the 20 us a bundle
    # orjson saves. It looks at floats instead.
    seen = 0
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > VALUE_CHECK_CONTAINERS or depth > bound:
            return None
        for child in item.values() if type(item) is dict else item:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1))
            elif kind is float and not -_WIDE_FLOAT < child < _WIDE_FLOAT:
                return None
    return doc


def _value_shape(value: Any, bound: int, limit: int = VALUE_CHECK_CONTAINERS) -> tuple[int, bool] | None:
    """``(depth, plain)`` of a parsed JSON value: its :func:`_value_depth`, and whether
    every string in it, keys included, is ASCII (then its text held no lone surrogate
    escape). None when it has more than ``limit`` containers."""
    if not isinstance(value, (dict, list)):
        return 0, not isinstance(value, str) or value.isascii()
    deepest, plain, seen = 0, True, 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > limit:
            return None
        if depth > deepest:
            deepest = depth
            if deepest > bound:
                break
        children: Iterable[Any]
        if isinstance(item, dict):
            if plain and not all(key.isascii() for key in item):
                plain = False
            children = item.values()
        else:
            children = item
        for child in children:
            if type(child) is str:
                if plain and not child.isascii():
                    plain = False
            elif isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return deepest, plain


def _value_depth(value: Any, bound: int) -> int:
    """How deep the arrays and objects of a parsed JSON value nest (1 for a flat object),
    counted up to just past ``bound``: what :func:`_nesting_depth` says of its text."""
    shape = _value_shape(value, bound, limit=sys.maxsize)
    assert shape is not None  # no limit to run past
    return shape[0]


def _nesting_depth(text: str, bound: int) -> int:
    """Maximum bracket nesting of a JSON text; cheap when the text is small."""
    if text.count("[") + text.count("{") <= bound:
        return 0
    depth = deepest = 0
    for m in _BRACKET.finditer(_JSON_STRING.sub("", text)):
        if m.group() in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > bound:
                    break
        else:
            depth -= 1
    return deepest
