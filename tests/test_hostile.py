"""Hostile input: the reader either returns a whole Bundle or raises BundleError.

Nothing found on disk may make ``read_bundle`` raise anything else, block, or
take long; and whatever it accepts, the engine must classify and
``verdict_row`` must render without raising (CONTRACTS §8.1.8, §8.2.8).
The explicit tests assert a one-second bound: a correctness bound that
catches hangs and quadratic blow-ups, not a benchmark.
"""

from __future__ import annotations

import copy
import errno
import json
import math
import os
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import loop_core.bundle
from loop_core import (
    Bundle,
    BundleError,
    Engine,
    FailureClass,
    ReadLimits,
    make_plugin_manager,
    read_bundle,
)
from loop_core.batch import Outcome, verdict_row
from loop_core.bundle import DEFAULT_MAX_FILE_BYTES, MANIFEST_KEYS_V1, MANIFEST_KEYS_V2
from loop_core.testing import FILE_NAMES, make_bundle, write_bundle

SIX = frozenset(c.value for c in FailureClass)
FILES = FILE_NAMES
POINTS = {"pt1": "gate", "pt2": "download", "pt3": "boot", "pt4": "smoke", "pt5": "override_capture"}
BOUND = 1.0  # seconds

OOM = ("vllm-1 | INFO [gpu_worker.py:184] GPU memory peak: 23817.00 MiB\n"
       "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB")
PRED = {"weights_gb": 9.0, "kv_gb": 12.0, "overhead_gb": 1.5}


@pytest.fixture(scope="module")
def engine() -> Engine:
    """The reference pack with built-in plugins only; built once, it is stateless per bundle."""
    return Engine.build("reference", make_plugin_manager(entry_points=False))


@pytest.fixture(scope="module")
def default_engine() -> Engine:
    return Engine.build("default", make_plugin_manager(entry_points=False))


def assert_classifies(bundle: Bundle, *engines: Engine) -> dict[str, Any]:
    """Classify with every engine and render the output row; return the last row."""
    row: dict[str, Any] = {}
    for eng in engines:
        verdict = eng.classify(bundle)
        row = verdict_row(Outcome(bundle.path, bundle, None, verdict))
        assert row["failure_class"] in SIX
        assert row["reader_error"] is None
        json.dumps(row)  # the JSON/JSONL output must render too
    return row


def assert_whole(bundle: Bundle) -> None:
    """An accepted bundle satisfies every §2.2/§2.6 check: never a partial object."""
    assert isinstance(bundle, Bundle)
    assert isinstance(bundle.manifest, dict) and isinstance(bundle.pt1, dict)
    assert bundle.manifest["failure_class"] is None
    assert bundle.pt1.get("point") == "gate"
    if bundle.schema == 2:
        assert bundle.manifest["schema"] == 2 and MANIFEST_KEYS_V2 <= bundle.manifest.keys()
        assert bundle.manifest["outcome"] == "hard-block"
        assert bundle.pt1.get("schema", 2) == 2
        assert (bundle.pt2, bundle.pt3, bundle.pt4, bundle.pt5) == (None, None, None, None)
        return
    assert bundle.schema == 1 and bundle.manifest["schema"] == 1
    assert MANIFEST_KEYS_V1 <= bundle.manifest.keys()
    for key in ("pt1", "pt2", "pt3", "pt4"):
        doc = getattr(bundle, key)
        assert isinstance(doc, dict) and doc.get("point") == POINTS[key]
        assert doc.get("schema", 1) == 1
    assert bundle.pt5 is None or (isinstance(bundle.pt5, dict)
                                  and bundle.pt5.get("point") == "override_capture")


@pytest.fixture
def valid(tmp_path: Path) -> Callable[..., Path]:
    """``valid(overrides)`` -> a directory holding a valid (make_bundle) bundle."""
    counter = iter(range(10_000))

    def write(overrides: Any = None) -> Path:
        return write_bundle(tmp_path / f"b{next(counter)}", make_bundle(overrides))

    return write


_Timer = TypeVar("_Timer", bound="Timer")


class Timer:
    def __enter__(self: _Timer) -> _Timer:
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.monotonic() - self.start


def read_refused(path: Path, match: str, **kwargs: Any) -> BundleError:
    """Assert ``read_bundle(path)`` raises BundleError matching ``match`` within the bound."""
    with Timer() as t, pytest.raises(BundleError, match=match) as info:
        read_bundle(path, **kwargs)
    assert t.elapsed < BOUND, f"took {t.elapsed:.2f}s"
    return info.value


# -- property: 1,000+ malformed bundles ------------------------------------------

_BASES: tuple[Any, ...] = (
    None,
    OOM,
    {"pt1": {"predicted_b_breakdown": PRED},
     "pt3": {"failure_log_excerpt": OOM,
             "actual": {"attempted_alloc_mib": 1280, "gpu_worker_reported_mib": 23817}}},
    {"pt5": {"point": "override_capture", "predicted_b_breakdown": PRED,
             "actual": {"boot_peak_mib": 23900, "gpu_worker_reported_mib": 23900},
             "predicted_vs_actual_delta_mib": 860, "exit_error_summary": "CUDA out of memory",
             "calibration_signal_not_validated": True}},
    {"pt3": {"ok": True, "failure": None, "failure_log_excerpt": None},
     "pt4": {"results": {"plain-chat": "green", "streaming": "red", "tool-call": "red"},
             "results_detail": {"streaming": {"status": 404, "error": "model not found"},
                                "tool-call": {"status": None, "error": "AttributeError: weight_loader"}},
             "smoke_capability_set": ["plain-chat", "streaming", "tool-call"]}},
    {"manifest": {"schema": 2}},
    {"manifest": {"schema": 2}, "pt1": {"abort_reason": "unsupported-format", "detail": "fp4 weights"}},
)

# Values that are legal JSON but unusual: huge and tiny numbers, NaN, infinities.
_ODD_NUMBERS = st.sampled_from([
    0, -1, 1, 2, 1.0, 2.0, True, False, 2**63, -(2**64), 10**100, -(10**4000), 1e308, -1e308,
    5e-324, math.nan, math.inf, -math.inf,
])
_ODD_STRINGS = st.sampled_from([
    "", " ", "gate", "boot", "smoke", "download", "override_capture", "hard-block", "red",
    "green", "unsmoked", "total", "None", "null", "\x00", "\x1f", "\u2028", "İ", "\ud800",
    "a\udfffb", "\ud83d\ude00", "CUDA out of memory", "torch.cuda.OutOfMemoryError", "[" * 200,
    "x" * 5000,
])
_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
    _ODD_NUMBERS, _ODD_STRINGS,
)
JSON_VALUES = st.recursive(
    _LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=8), _ODD_STRINGS), children, max_size=4),
    ),
    max_leaves=12,
)

# Places worth hitting on purpose: what the reader checks and what later stages read.
_HOT_PATHS = (
    ("manifest", "schema"), ("manifest", "failure_class"), ("manifest", "outcome"),
    ("manifest", "quant_label"), ("manifest", "smoke_capability_set"), ("manifest", "model"),
    ("manifest", "model_id"), ("manifest", "arch_family"), ("manifest", "engine_pin"),
    ("manifest", "selected_ctx"), ("manifest", "topology_class"), ("manifest", "abort_reason"),
    ("pt1", "schema"), ("pt1", "point"), ("pt1", "predicted_b_breakdown"), ("pt1", "abort_reason"),
    ("pt1", "detail"), ("pt2", "point"), ("pt2", "ok"), ("pt2", "failure"), ("pt3", "point"),
    ("pt3", "schema"), ("pt3", "ok"), ("pt3", "failure"), ("pt3", "failure_log_excerpt"),
    ("pt3", "actual"), ("pt4", "point"), ("pt4", "results"), ("pt4", "results_detail"),
    ("pt4", "smoke_capability_set"), ("pt5", "point"), ("pt5", "actual"),
    ("pt5", "predicted_b_breakdown"), ("pt5", "exit_error_summary"),
)

# Raw JSON texts json.dumps cannot produce, spliced in place of a value.
_RAW_SNIPPETS = st.sampled_from([
    "1" * 5000, "-" + "9" * 4301, "1e999999", "-1e999999", "NaN", "Infinity", "-Infinity",
    '"\\ud800"', '"\\udc00\\ud800"', '"\\ud83d\\ude00"', '"\\u0000"', "[" * 100 + "]" * 100,
    '{"a":' * 80 + "1" + "}" * 80, "[" * 100_000, '"unterminated', "01", "+1", ".5", "tru",
    "'single'", '"\\x41"', '"\t"', "[1,]", "{,}",
])
_RAW = "@@raw-{}@@"


def _pick_container(draw: st.DrawFn, docs: dict[str, Any]) -> tuple[Any, Any] | None:
    """A (container, key) inside the documents: a hot path, or a random walk."""
    if draw(st.booleans()):
        doc, key = draw(st.sampled_from(_HOT_PATHS))
        if isinstance(docs.get(doc), dict):
            return docs[doc], key
        return None
    present = sorted(k for k, v in docs.items() if isinstance(v, (dict, list)))
    if not present:
        return None
    container: Any = docs[draw(st.sampled_from(present))]
    while True:
        keys = sorted(container) if isinstance(container, dict) else list(range(len(container)))
        if not keys:
            return None
        key = draw(st.sampled_from(keys))
        child = container[key]
        if isinstance(child, (dict, list)) and child and draw(st.booleans()):
            container = child
            continue
        return container, key


@st.composite
def hostile_bundles(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(valid documents, mutated documents, file overrides)``.

    A file override is ``bytes`` (written as is), ``"drop"`` or ``"dir"``.
    """
    base = make_bundle(draw(st.sampled_from(_BASES))).to_document()
    valid = {k: v for k, v in base.items() if v is not None}
    docs = copy.deepcopy(valid)
    files: dict[str, Any] = {}
    raws: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(
            ["replace", "replace", "replace", "delete", "whole", "raw", "drop", "dir", "bytes", "text"]
        ))
        name = draw(st.sampled_from(sorted(FILES)))
        if op in ("replace", "delete", "raw"):
            where = _pick_container(draw, docs)
            if where is None:
                continue
            container, key = where
            if op == "delete":
                if isinstance(container, dict):
                    container.pop(key, None)
                elif key < len(container):
                    del container[key]
            elif op == "raw":
                raws.append(draw(_RAW_SNIPPETS))
                _set(container, key, _RAW.format(len(raws) - 1))
            else:
                _set(container, key, draw(JSON_VALUES))
        elif op == "whole":
            docs[name] = draw(JSON_VALUES)
        elif op in ("drop", "dir"):
            files[name] = op
        elif op == "bytes":
            files[name] = draw(st.binary(max_size=64))
        else:  # a byte-level edit of the file as serialized
            data = _serialize(draw, docs.get(name, {}), raws)
            files[name] = _edit(draw, data)
    out = {name: _serialize(draw, doc, raws) for name, doc in docs.items()}
    return valid, out, files


def _set(container: Any, key: Any, value: Any) -> None:
    if isinstance(container, dict) or key < len(container):
        container[key] = value


def _serialize(draw: st.DrawFn, doc: Any, raws: list[str]) -> bytes:
    text = json.dumps(doc, indent=draw(st.sampled_from([2, None])), sort_keys=True,
                      ensure_ascii=draw(st.booleans()))
    for i, raw in enumerate(raws):
        text = text.replace(json.dumps(_RAW.format(i)), raw)
    # surrogatepass: a raw lone surrogate becomes bytes that are not UTF-8.
    return (text + "\n").encode("utf-8", "surrogatepass")


def _edit(draw: st.DrawFn, data: bytes) -> bytes:
    at = draw(st.integers(0, len(data)))
    kind = draw(st.sampled_from(["truncate", "insert", "replace", "bom", "nest", "utf16", "latin1"]))
    if kind == "truncate":
        return data[:at]
    if kind == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=4)) + data[at:]
    if kind == "replace":
        return data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1:]
    if kind == "bom":
        return b"\xef\xbb\xbf" + data
    if kind == "nest":
        depth = draw(st.sampled_from([63, 64, 65, 1000, 100_000]))
        return b"[" * depth + data + b"]" * depth
    if kind == "utf16":
        return data.decode("utf-8", "surrogatepass").encode("utf-16", "surrogatepass")
    return data.decode("utf-8", "replace").encode("latin-1", "replace") + b"\xe9"


@settings(max_examples=1000, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=hostile_bundles())
def test_malformed_bundles_only_raise_bundle_error(
    engine: Engine, default_engine: Engine, case: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]
) -> None:
    valid, docs, files = case
    with tempfile.TemporaryDirectory() as tmp:
        path = write_bundle(Path(tmp) / "bundle", valid)
        for name, data in docs.items():
            target = path / FILES[name]
            if data is None:
                target.unlink()
            else:
                target.write_bytes(data)
        for name, override in files.items():
            target = path / FILES[name]
            if target.exists():
                target.unlink()
            if override == "dir":
                target.mkdir()
            elif isinstance(override, bytes):
                target.write_bytes(override)
        try:
            bundle = read_bundle(path)
        except BundleError as e:
            assert str(e).startswith(str(path)), str(e)  # the message names the place first
            event("refused")
            return
        event(f"accepted, schema {bundle.schema}")
        assert_whole(bundle)
        assert_classifies(bundle, engine, default_engine)


# -- special files -----------------------------------------------------------------


def test_symlink_to_a_file_elsewhere_is_refused(valid: Callable[..., Path], tmp_path: Path) -> None:
    path = valid()
    outside = tmp_path / "outside.json"
    outside.write_bytes((path / "pt3-boot.json").read_bytes())
    (path / "pt3-boot.json").unlink()
    (path / "pt3-boot.json").symlink_to(outside)
    read_refused(path, r"pt3-boot\.json: is a symlink")


@pytest.mark.parametrize("target", ["/etc/passwd", "/dev/zero", "/nonexistent", "."])
def test_symlinks_of_every_kind_are_refused(valid: Callable[..., Path], target: str) -> None:
    """Dangling, to a device, to a directory, to a file outside: never followed."""
    path = valid()
    (path / "manifest.json").unlink()
    (path / "manifest.json").symlink_to(target)
    read_refused(path, r"manifest\.json: is a symlink")


def test_symlink_with_any_name_is_refused(valid: Callable[..., Path]) -> None:
    """The whole top level is checked, not only the six names the reader opens."""
    path = valid()
    (path / "notes.json").symlink_to(path / "manifest.json")
    read_refused(path, r"notes\.json: is a symlink")


def test_symlinked_bundle_directory_is_read(valid: Callable[..., Path], tmp_path: Path) -> None:
    """Only what is *inside* a bundle must be regular; the path given may be a link."""
    link = tmp_path / "link"
    link.symlink_to(valid(), target_is_directory=True)
    assert read_bundle(link).schema == 1


def test_symlink_refused_even_if_it_appears_after_the_scan(
    valid: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Second line of defence (a race with the directory scan): open never follows links."""
    path = valid()
    scanned = loop_core.bundle._refuse_special_entries(path)  # the listing, taken before the swap
    monkeypatch.setattr(loop_core.bundle, "_refuse_special_entries", lambda root: scanned)
    outside = tmp_path / "outside.json"
    outside.write_bytes((path / "pt1-gate.json").read_bytes())
    (path / "pt1-gate.json").unlink()
    (path / "pt1-gate.json").symlink_to(outside)
    read_refused(path, r"pt1-gate\.json: is a symlink")


@pytest.mark.parametrize("name", ["pt3-boot.json", "pt5-override-capture.json"])
def test_a_file_removed_after_the_scan_is_missing(
    valid: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A race with the directory scan: a file gone by the time it is opened is absent, as
    if the scan had not seen it (pt3 missing, pt5 simply not there), not unreadable."""
    path = valid({"pt5": {"point": "override_capture", "actual": None}})
    scanned = loop_core.bundle._refuse_special_entries(path)  # the listing, taken before the removal
    monkeypatch.setattr(loop_core.bundle, "_refuse_special_entries", lambda root: scanned)
    (path / name).unlink()
    if name == "pt3-boot.json":
        read_refused(path, r"pt3-boot\.json: missing$")
    else:
        assert read_bundle(path).pt5 is None


def _read_fifo_bundle(path: Path, fifo: Path, match: str) -> None:
    """Read with a watchdog: a reader that blocks on the FIFO is released, then fails."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        start = time.monotonic()
        try:
            read_bundle(path)
            outcome["result"] = "accepted"
        except BaseException as e:  # noqa: BLE001 - reported below
            outcome["result"] = e
        outcome["elapsed"] = time.monotonic() - start

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=5)
    if worker.is_alive():
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # unblock the reader's open()
        os.close(fd)
        worker.join(timeout=5)
        pytest.fail(f"read_bundle blocked on the FIFO {fifo.name}")
    result = outcome["result"]
    assert isinstance(result, BundleError), result
    assert match in str(result)
    assert outcome["elapsed"] < BOUND


@pytest.mark.parametrize("name", ["pt2-download.json", "manifest.json", "pt5-override-capture.json", "boot.log"])
def test_fifo_is_refused_without_blocking(valid: Callable[..., Path], name: str) -> None:
    """Whatever its name: a FIFO no reader opens is refused too (docs/compatibility.md)."""
    path = valid()
    fifo = path / name
    if fifo.exists():
        fifo.unlink()
    os.mkfifo(fifo)
    _read_fifo_bundle(path, fifo, f"{name}: is not a regular file")


def test_fifo_refused_without_blocking_even_if_it_appears_after_the_scan(
    valid: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Second line of defence: the file is opened non-blocking and checked with fstat."""
    path = valid()
    scanned = loop_core.bundle._refuse_special_entries(path)  # the listing, taken before the swap
    monkeypatch.setattr(loop_core.bundle, "_refuse_special_entries", lambda root: scanned)
    fifo = path / "pt2-download.json"
    fifo.unlink()
    os.mkfifo(fifo)
    _read_fifo_bundle(path, fifo, "pt2-download.json: is not a regular file")


def test_socket_is_refused(valid: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    path = valid()
    (path / "pt4-smoke.json").unlink()
    monkeypatch.chdir(path)  # bind a relative name: AF_UNIX paths are short
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind("pt4-smoke.json")
        read_refused(path, r"pt4-smoke\.json: is not a regular file")


def _can_make_devices() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and os.path.exists("/dev/null")


@pytest.mark.skipif(not _can_make_devices(), reason="creating a device node needs root")
@pytest.mark.parametrize("kind", [stat.S_IFCHR, stat.S_IFBLK], ids=["char", "block"])
def test_device_file_is_refused(valid: Callable[..., Path], kind: int) -> None:
    path = valid()
    device = path / "pt3-boot.json"
    device.unlink()
    null = os.stat("/dev/null")
    try:
        os.mknod(device, kind | 0o600, null.st_rdev)  # same numbers as /dev/null
    except OSError as e:  # e.g. a container without CAP_MKNOD
        pytest.skip(f"cannot create a device node: {e}")
    read_refused(path, r"pt3-boot\.json: is not a regular file")


def test_unreadable_file_is_refused(valid: Callable[..., Path]) -> None:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    path = valid()
    (path / "pt3-boot.json").chmod(0)
    read_refused(path, r"pt3-boot\.json: cannot open")


def test_nul_byte_in_path_gives_bundle_error() -> None:
    """os.stat raises ValueError, not OSError, for an embedded NUL."""
    read_refused(Path("has\x00nul"), r"no such bundle directory")


def test_path_to_a_fifo_is_not_a_directory(tmp_path: Path) -> None:
    fifo = tmp_path / "bundle"
    os.mkfifo(fifo)
    read_refused(fifo, r"bundle: not a directory")


# -- size, depth, encoding ----------------------------------------------------------


def _big_excerpt_bundle(valid: Callable[..., Path], size: int) -> Path:
    path = valid()
    pt3 = json.loads((path / "pt3-boot.json").read_text())
    pt3["failure_log_excerpt"] = ""
    skeleton = len(json.dumps(pt3).encode())
    pt3["failure_log_excerpt"] = "x" * (size - skeleton)
    (path / "pt3-boot.json").write_text(json.dumps(pt3))
    assert (path / "pt3-boot.json").stat().st_size == size
    return path


def test_file_over_default_limit_is_refused(valid: Callable[..., Path]) -> None:
    """The default cap is 8 MiB (docs/compatibility.md): one byte more is refused."""
    size = 8 * 1024 * 1024 + 1
    path = _big_excerpt_bundle(valid, size)
    read_refused(path, rf"pt3-boot\.json: {size} bytes is over the {DEFAULT_MAX_FILE_BYTES}-byte limit")


def test_a_file_of_8_mib_reads_by_default(valid: Callable[..., Path]) -> None:
    """The default cap is 8 MiB (docs/compatibility.md): a file of exactly that size reads."""
    path = _big_excerpt_bundle(valid, 8 * 1024 * 1024)
    assert read_bundle(path).pt3 is not None


def test_read_limits_raise_the_size_limit(valid: Callable[..., Path], engine: Engine) -> None:
    path = _big_excerpt_bundle(valid, 9 * 1024 * 1024)
    with Timer() as t:
        bundle = read_bundle(path, limits=ReadLimits(max_file_bytes=16 * 1024 * 1024))
    assert t.elapsed < BOUND
    assert bundle.pt3 is not None and len(bundle.pt3["failure_log_excerpt"]) > 9_000_000


def test_read_limits_size_boundary(valid: Callable[..., Path]) -> None:
    """Exactly at the limit reads; one byte over is refused."""
    path = _big_excerpt_bundle(valid, 4096)
    assert read_bundle(path, limits=ReadLimits(max_file_bytes=4096)).pt3 is not None
    read_refused(path, r"pt3-boot\.json: 4096 bytes is over the 4095-byte limit",
                 limits=ReadLimits(max_file_bytes=4095))


def test_limit_applies_to_every_file(valid: Callable[..., Path]) -> None:
    """The manifest is the first file read, so a tiny limit names it."""
    read_refused(valid(), r"manifest\.json: \d+ bytes is over the 64-byte limit",
                 limits=ReadLimits(max_file_bytes=64))


def test_the_batch_readers_hold_every_bundle_and_prior_to_the_limits_given(valid: Callable[..., Path],
                                                                          engine: Engine) -> None:
    from loop_core.batch import classify_paths, trust_rows

    path, tiny = valid(), ReadLimits(max_file_bytes=64)
    (outcome,) = classify_paths([path], engine, limits=tiny)
    assert "over the 64-byte limit" in str(outcome.error)
    (row,) = trust_rows([path], pm=engine.pm, limits=tiny)
    assert "over the 64-byte limit" in row["reader_error"]["message"]
    warned: list[str] = []
    (row,) = trust_rows([valid()], pm=engine.pm, priors=[path], limits=ReadLimits(max_file_bytes=4096),
                        warn=warned.append)
    assert row["reader_error"] is None
    list(trust_rows([valid()], pm=engine.pm, priors=[path], limits=tiny, warn=warned.append))
    assert warned == [f"--priors {path}: no readable bundle there; it counts for nothing"]


@pytest.mark.parametrize("name", ["manifest.json", "pt3-boot.json"])
@pytest.mark.parametrize(("opening", "closing"), [("[", "]"), ('{"a":', "}")])
def test_deep_nesting_is_refused_without_recursion_error(
    valid: Callable[..., Path], name: str, opening: str, closing: str
) -> None:
    path = valid()
    depth = 100_000
    inner = '{"point": "boot"}'
    (path / name).write_text(opening * depth + inner + closing * depth)
    read_refused(path, rf"{name.replace('.', '[.]')}: JSON nested deeper than 64 levels")


@pytest.mark.parametrize(("depth", "problem"), [(64, "invalid JSON"), (65, "JSON nested deeper than 64 levels")])
def test_broken_json_is_called_too_deep_only_past_the_bound(valid: Callable[..., Path], depth: int,
                                                            problem: str) -> None:
    """A syntax error in a file nested as deep as allowed is the syntax error it is."""
    path = valid()
    inner = "[" * (depth - 1) + "]" * (depth - 1)
    (path / "pt3-boot.json").write_text('{"point": "boot", "ok": [], "extra": ' + inner + ",}")
    read_refused(path, rf"pt3-boot\.json: {problem}")


def test_deep_unclosed_nesting_is_refused(valid: Callable[..., Path]) -> None:
    path = valid()
    (path / "pt3-boot.json").write_text("[" * 1_000_000)
    read_refused(path, r"pt3-boot\.json: JSON nested deeper")


def test_unterminated_string_does_not_make_the_depth_scan_quadratic(valid: Callable[..., Path]) -> None:
    """Regression: a string pattern that failed to match was retried at every later quote.

    Sized so that the quadratic scan takes many seconds (and fails the bound)
    without hanging the suite.
    """
    path = valid()
    (path / "pt3-boot.json").write_text("[" * 70 + '"' + '\\"' * 20_000)
    read_refused(path, r"pt3-boot\.json: JSON nested deeper")


def test_quotes_everywhere_stay_linear(valid: Callable[..., Path]) -> None:
    path = valid()
    (path / "pt3-boot.json").write_text("{" * 65 + '"\\' * 20_000)
    read_refused(path, r"pt3-boot\.json: ")


def test_brackets_inside_strings_are_not_nesting(valid: Callable[..., Path], engine: Engine) -> None:
    """A log excerpt full of brackets is text, not structure."""
    text = "[" * 100_000 + "{" * 100_000 + '\\"]}' * 1000
    path = valid()
    pt3 = json.loads((path / "pt3-boot.json").read_text())
    pt3["failure_log_excerpt"] = text
    (path / "pt3-boot.json").write_text(json.dumps(pt3))
    with Timer() as t:
        bundle = read_bundle(path)
        assert_classifies(bundle, engine)
    assert t.elapsed < BOUND
    assert bundle.pt3 is not None and bundle.pt3["failure_log_excerpt"] == text


def test_brackets_in_a_broken_string_are_not_nesting(valid: Callable[..., Path]) -> None:
    """A file that fails to parse is called too deep only for brackets outside its strings,
    even past an escaped line end inside one: here it is the syntax error it is."""
    path = valid()
    (path / "pt3-boot.json").write_text('{"point": "boot", "failure": "line one \\\n' + "[" * 70 + '"}')
    read_refused(path, r"pt3-boot\.json: invalid JSON: Invalid \\escape")


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\x:,'),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(alphabet="[]{}a", max_size=3), inner,
                                                                max_size=4),
    max_leaves=30)


@given(_JSON_VALUES, st.integers(min_value=0, max_value=12))
def test_a_parsed_value_is_as_deep_as_its_text_says(value: Any, bound: int) -> None:
    # The reader measures the parsed value; its text's bracket nesting is the definition.
    from loop_core.bundle import _nesting_depth, _value_depth

    text = json.dumps(value)
    parsed_depth = _value_depth(json.loads(text), bound)
    if text.count("[") + text.count("{") <= bound:
        assert parsed_depth <= bound  # too few brackets to nest deeper
    else:  # both count up to just past the bound
        assert min(parsed_depth, bound + 1) == min(_nesting_depth(text, bound), bound + 1)


# Strings with brackets, quotes, a backslash, a non-ASCII letter, a lone surrogate and
# the halves of a pair: json.dumps writes the surrogates as \\udxxx escapes.
_TRICKY_TEXT = st.text(alphabet='[]{}"\\x:,\u00e9\ud800\udc00\ud83d\ude00', max_size=6)
_TRICKY_VALUES = st.recursive(
    st.none() | st.integers() | _TRICKY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TRICKY_TEXT, inner, max_size=4),
    max_leaves=40)


@settings(max_examples=400, deadline=None)
@given(_TRICKY_VALUES, st.integers(min_value=0, max_value=10), st.sampled_from([1, 3, 512]))
def test_a_long_file_is_checked_through_its_value_as_a_short_one_through_its_text(
        value: Any, bound: int, containers: int) -> None:
    # Past VALUE_CHECK_CHARS the reader judges depth and lone surrogates from the parsed
    # value (falling back to the text past a number of containers): the same document,
    # or the same refusal, as judging them from the text.
    doc = {"point": "boot", "failure_log_excerpt": "x" * (loop_core.bundle.VALUE_CHECK_CHARS + 1), "v": value}
    data = json.dumps(doc).encode("ascii")
    limits = loop_core.bundle.ReadLimits(max_depth=bound)

    def outcome() -> tuple[str, Any]:
        try:
            return "read", loop_core.bundle._decode_object(Path("b"), "pt3-boot.json", data, limits)
        except BundleError as e:
            return "refused", str(e)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop_core.bundle, "VALUE_CHECK_CONTAINERS", containers)
        by_value = outcome()
        mp.setattr(loop_core.bundle, "VALUE_CHECK_CHARS", len(data) + 1)
        by_text = outcome()
    event(by_text[1] if by_text[0] == "refused" else "read")
    assert by_value == by_text


@pytest.mark.parametrize("deep", [True, False])
def test_the_depth_bound_holds_for_valid_json_full_of_brackets(valid: Callable[..., Path], deep: bool) -> None:
    # Bracket-laden strings push the count over the bound; only real nesting is refused.
    path = valid()
    pt3 = json.loads((path / "pt3-boot.json").read_text())
    nested: Any = "[{[{" * 40
    for _ in range(70 if deep else 60):
        nested = [nested]
    pt3["extra"] = nested
    (path / "pt3-boot.json").write_text(json.dumps(pt3))
    if deep:
        read_refused(path, r"pt3-boot\.json: JSON nested deeper than 64 levels")
    else:
        assert read_bundle(path).pt3["extra"] == nested  # type: ignore[index]


def test_a_long_file_of_many_arrays_is_held_to_the_depth_bound(valid: Callable[..., Path]) -> None:
    """Too long to check by its text and with too many arrays to walk cheaply, a file is
    still refused when arrays alone nest past the bound."""
    path = valid()
    pt3 = json.loads((path / "pt3-boot.json").read_text())
    deep: Any = []
    for _ in range(70):
        deep = [deep]
    pt3["extra"] = [deep] + [[] for _ in range(600)]
    (path / "pt3-boot.json").write_text(json.dumps(pt3))
    assert "{" not in json.dumps(pt3["extra"])
    read_refused(path, r"pt3-boot\.json: JSON nested deeper than 64 levels")


def test_max_depth_is_configurable(valid: Callable[..., Path]) -> None:
    path = valid({"pt3": {"extra": [[[[[[[[["deep"]]]]]]]]]}})
    assert read_bundle(path).pt3 is not None
    read_refused(path, r"pt3-boot\.json: JSON nested deeper than 5 levels", limits=ReadLimits(max_depth=5))


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        (b'{"point": "boot", "failure": "caf\xe9"}', "byte 0xe9 at offset 33"),
        (b'{"point": "boot", "failure": "\xed\xa0\x80"}', "byte 0xed at offset 30"),  # CESU surrogate
        (b"\xff\xfe{\x00}\x00", "byte 0xff at offset 0"),  # UTF-16 with a BOM
        (b'{"point": "boot", "failure": "\xc3"}', "byte 0xc3 at offset 30"),  # truncated sequence
    ],
)
def test_non_utf8_bytes_give_a_clear_message(valid: Callable[..., Path], data: bytes, detail: str) -> None:
    path = valid()
    (path / "pt3-boot.json").write_bytes(data)
    read_refused(path, rf"pt3-boot\.json: not UTF-8 \({detail}\)")


def test_utf8_bom_is_refused(valid: Callable[..., Path]) -> None:
    """The producer never writes a BOM; Python's json (the reference's) refuses one."""
    path = valid()
    (path / "pt1-gate.json").write_bytes(b"\xef\xbb\xbf" + (path / "pt1-gate.json").read_bytes())
    read_refused(path, r"pt1-gate\.json: invalid JSON: Unexpected UTF-8 BOM")


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "x\\udc00y", "\\ude00\\ud83d", "\\uDC00"])
def test_lone_surrogate_in_failure_is_refused(valid: Callable[..., Path], escape: str) -> None:
    """§8.2.8: the reference crashes hashing it; we refuse it at the door."""
    path = valid()
    text = (path / "pt3-boot.json").read_text()
    text = text.replace('"failure": "server did not become ready before timeout"',
                        f'"failure": "{escape}"')
    assert escape in text
    (path / "pt3-boot.json").write_text(text)
    read_refused(path, r"pt3-boot\.json: holds a lone surrogate escape")


def test_lone_surrogate_in_a_key_is_refused(valid: Callable[..., Path]) -> None:
    path = valid()
    (path / "pt4-smoke.json").write_text('{"point": "smoke", "results": {"\\ud800": "red"}}')
    read_refused(path, r"pt4-smoke\.json: holds a lone surrogate escape")


def test_surrogate_pair_is_fine(valid: Callable[..., Path], engine: Engine) -> None:
    path = valid()
    text = (path / "pt3-boot.json").read_text().replace(
        '"failure": "server did not become ready before timeout"', '"failure": "boom \\ud83d\\ude00"')
    (path / "pt3-boot.json").write_text(text)
    bundle = read_bundle(path)
    assert bundle.pt3 is not None and bundle.pt3["failure"] == "boom \U0001f600"
    assert_classifies(bundle, engine)


def test_escaped_backslash_u_is_not_a_surrogate(valid: Callable[..., Path]) -> None:
    """``\\\\ud800`` is a backslash followed by text, which is fine."""
    path = valid({"pt3": {"failure": "path C:\\ud800\\x"}})
    assert read_bundle(path).pt3["failure"] == "path C:\\ud800\\x"  # type: ignore[index]


def test_integer_too_long_to_convert_is_refused(valid: Callable[..., Path]) -> None:
    path = valid()
    (path / "manifest.json").write_text('{"schema": ' + "1" * 5000 + "}")
    read_refused(path, r"manifest\.json: invalid JSON")


@pytest.mark.parametrize("text", ["", "\n", "   ", "\x00", "{}\x00"])
def test_empty_and_binary_files_are_refused(valid: Callable[..., Path], text: str) -> None:
    path = valid()
    (path / "pt2-download.json").write_text(text)
    read_refused(path, r"pt2-download\.json: ")


# -- odd but readable: the reference crashes later, we read and classify ----------

ODD = {
    "pt4-results-list": {"pt3": {"ok": True}, "pt4": {"results": ["plain-chat", "red"]}},
    "pt4-results-detail-strings": {
        "pt3": {"ok": True, "failure": None, "failure_log_excerpt": None},
        "pt4": {"results": {"plain-chat": "green", "streaming": "red"},
                "results_detail": {"streaming": "HTTP 404 model not found", "plain-chat": 7}},
    },
    "pt4-results-detail-list": {
        "pt3": {"failure": None, "failure_log_excerpt": None},
        "pt4": {"results": {"streaming": "red"}, "results_detail": ["streaming"]},
    },
    "pt4-results-values-odd": {
        "pt3": {"failure": None, "failure_log_excerpt": None},
        "pt4": {"results": {"streaming": ["red"], "tool-call": None, "vision": "red"},
                "results_detail": {"vision": {"status": "404", "error": 12}}},
    },
    "pt3-actual-list": {"pt3": {"failure_log_excerpt": OOM, "actual": [1280, 23817]},
                        "pt1": {"predicted_b_breakdown": PRED}},
    "pt3-actual-strings": {"pt3": {"failure_log_excerpt": OOM,
                                   "actual": {"attempted_alloc_mib": "1280", "gpu_worker_reported_mib": "x"}},
                           "pt1": {"predicted_b_breakdown": PRED}},
    "pt5-actual-list": {"pt5": {"point": "override_capture", "actual": [23900, 23900],
                                "predicted_b_breakdown": PRED, "exit_error_summary": "CUDA out of memory"}},
    "pt5-actual-odd-numbers": {"pt5": {"point": "override_capture",
                                       "actual": {"boot_peak_mib": 1e308, "gpu_worker_reported_mib": math.nan},
                                       "predicted_b_breakdown": {"total": 20.5, "weights": math.inf},
                                       "exit_error_summary": "CUDA out of memory"}},
    "pt1-breakdown-list": {"pt1": {"predicted_b_breakdown": [9.0, 12.0]}, "pt3": {"failure_log_excerpt": OOM}},
    "pt1-breakdown-huge-ints": {"pt1": {"predicted_b_breakdown": {"weights": 10**300, "kv": -(10**300)}},
                                "pt3": {"failure_log_excerpt": OOM,
                                        "actual": {"attempted_alloc_mib": 10**300,
                                                   "gpu_worker_reported_mib": 10**300}}},
    "pt1-breakdown-bools": {"pt1": {"predicted_b_breakdown": {"weights": True, "kv": "12"}},
                            "pt3": {"failure_log_excerpt": OOM, "actual": {"attempted_alloc_mib": 1,
                                                                           "gpu_worker_reported_mib": 2}}},
    "failure-number": {"pt3": {"failure": 137, "failure_log_excerpt": None}},
    "failure-list": {"pt3": {"failure": ["CUDA out of memory", 1], "failure_log_excerpt": None}},
    "failure-dict": {"pt3": {"failure": {"msg": "torch.cuda.OutOfMemoryError"}, "failure_log_excerpt": None}},
    "excerpt-true": {"pt3": {"failure_log_excerpt": True}},
    "excerpt-float": {"pt3": {"failure_log_excerpt": math.nan}},
    "pt5-summary-number": {"pt5": {"point": "override_capture", "actual": None, "exit_error_summary": 3.5}},
    "pt2-failure-list": {"pt2": {"ok": "no", "failure": ["disk", "full"]}},
    "smoke-capability-set-number": {"manifest": {"smoke_capability_set": 3}},
    "smoke-capability-set-string": {"manifest": {"smoke_capability_set": "plain-chat"}},
    "smoke-capability-set-dict": {"manifest": {"smoke_capability_set": {"plain-chat": True}}},
    "manifest-values-odd": {"manifest": {"quant_label": ["AWQ"], "arch_family": {"a": 1}, "model": 7,
                                         "engine_pin": math.nan, "selected_ctx": "32k",
                                         "topology_class": None, "kv_calc_version": 10**100}},
    "manifest-unicode": {"manifest": {"arch_family": "Llama\u2028For\x1fCausalLM", "quant_label": "İ",
                                      "model": "org/\u202emodel"}},
    "pt3-ok-string": {"pt3": {"ok": "false", "seconds": "fast"}},
    "gate-odd": {"manifest": {"schema": 2, "model_id": ["x"], "model": None, "quant_label": 8},
                 "pt1": {"abort_reason": None, "detail": {"free": 1}}},
    # Both crashed our own classifier until fixed: finite parts whose sum overflows.
    "breakdown-sum-overflows": {"pt1": {"predicted_b_breakdown": {"weights": 1e308, "kv": 1e308}},
                                "pt3": {"failure_log_excerpt": OOM}},
    "breakdown-total-overflows": {"pt5": {"point": "override_capture", "actual": {"boot_peak_mib": 1},
                                          "predicted_b_breakdown": {"total": 1e308},
                                          "exit_error_summary": "CUDA out of memory"}},
    "gate-abort-reason-list": {"manifest": {"schema": 2}, "pt1": {"abort_reason": ["disk-short"]}},
    "gate-abort-reason-dict": {"manifest": {"schema": 2}, "pt1": {"abort_reason": {"a": 1}}},
    "gate-abort-number": {"manifest": {"schema": 2}, "pt1": {"abort_reason": 404, "detail": 5}},
}


@pytest.mark.parametrize("case", sorted(ODD))
def test_odd_but_readable_is_read_and_classified(
    valid: Callable[..., Path], engine: Engine, default_engine: Engine, case: str
) -> None:
    path = valid(ODD[case])
    with Timer() as t:
        bundle = read_bundle(path)
        assert_whole(bundle)
        assert_classifies(bundle, engine, default_engine)
    assert t.elapsed < BOUND


def test_odd_values_survive_the_round_trip(valid: Callable[..., Path]) -> None:
    """The reader hands the odd values over as stored, not cleaned up."""
    bundle = read_bundle(valid(ODD["pt4-results-list"]))
    assert bundle.pt4 is not None and bundle.pt4["results"] == ["plain-chat", "red"]
    nan = read_bundle(valid(ODD["excerpt-float"]))
    assert nan.pt3 is not None and math.isnan(nan.pt3["failure_log_excerpt"])


def test_duplicate_keys_keep_the_last(valid: Callable[..., Path]) -> None:
    """§0.2: Python's decoder keeps the last of duplicate keys; so does the reader."""
    path = valid()
    (path / "pt3-boot.json").write_text('{"point": "bogus", "point": "boot", "ok": false}')
    bundle = read_bundle(path)
    assert bundle.pt3 == {"point": "boot", "ok": False}
    (path / "pt3-boot.json").write_text('{"point": "boot", "point": "bogus"}')
    read_refused(path, r"pt3-boot\.json: point must be 'boot', got 'bogus'")


def test_many_entries_in_the_directory(valid: Callable[..., Path]) -> None:
    """Unrelated files do not slow the reader down noticeably."""
    path = valid()
    for i in range(2000):
        (path / f"extra-{i}.log").touch()
    with Timer() as t:
        read_bundle(path)
    assert t.elapsed < BOUND


def test_a_file_that_grew_past_the_limit_after_its_size_was_checked_is_refused_not_cut(
    valid: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size fstat gave is only where reading starts: what is read is held to the limit
    too, so a file still being written is refused whole, not parsed up to the limit."""
    path = valid()
    pt3 = path / "pt3-boot.json"
    pt3.write_text(json.dumps(json.loads(pt3.read_text())) + " " * 4096)  # valid JSON up to the limit
    real_fstat = os.fstat

    def fstat_before_growth(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_size > 4096:
            fields = list(st)
            fields[stat.ST_SIZE] = 100
            return os.stat_result(fields)
        return st

    monkeypatch.setattr(loop_core.bundle.os, "fstat", fstat_before_growth)
    read_refused(path, r"pt3-boot\.json: over the 4096-byte limit", limits=ReadLimits(max_file_bytes=4096))


@pytest.mark.parametrize(("call", "code", "problem"), [("open", errno.EACCES, "cannot open"),
                                                      ("read", errno.EIO, "cannot read")])
def test_a_file_that_cannot_be_opened_or_read_is_refused_naming_it_and_why(
    valid: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, call: str, code: int, problem: str
) -> None:
    """A permission refused, or an I/O error while reading (a failing disk, a share gone
    away), is a refusal naming the file and the system's reason: not a crash, and not
    called a symlink. Faked, as root opens any file whatever its mode."""
    path = valid()

    def failing(*args: Any) -> Any:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, call, failing)
    read_refused(path, rf"manifest\.json: {problem}: {os.strerror(code)}$")


def test_a_bundle_folder_that_cannot_be_listed_is_refused_naming_it(
    valid: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = valid()

    def refused(where: Any) -> Any:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(where))

    monkeypatch.setattr(os, "scandir", refused)
    read_refused(path, rf"{path.name}: cannot list directory: {os.strerror(errno.EACCES)}$")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_reading_leaves_no_file_open_whether_the_bundle_is_read_or_refused(valid: Callable[..., Path]) -> None:
    """A run over thousands of bundles would otherwise stop at the open-file limit."""
    good = valid()
    broken = valid()
    (broken / "pt3-boot.json").write_text("{")
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        read_bundle(good)
        read_refused(broken, r"pt3-boot\.json: invalid JSON")
        read_refused(good, r"manifest\.json: \d+ bytes is over", limits=ReadLimits(max_file_bytes=64))
    assert len(os.listdir("/proc/self/fd")) == before
