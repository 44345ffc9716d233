"""The bundle reader contract: CONTRACTS §1, §2.2-§2.6 and the reader groups of §7.1.

Each test names the §7.1 group(s) it covers. The pinned §2.7 hashes live in
tests/test_keys.py; here the keys are only checked for shape and for being
read from the right manifest fields.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from loop_core import (
    Bundle,
    BundleError,
    ConsensusKey,
    DedupKey,
    consensus_key,
    dedup_key,
    read_bundle,
)
from loop_core.bundle import MANIFEST_KEYS_V1, MANIFEST_KEYS_V2
from loop_core.keys import US, sha256hex
from loop_core.testing import FILE_NAMES, base_documents, write_bundle

FILES = FILE_NAMES
POINTS = {"pt1": "gate", "pt2": "download", "pt3": "boot", "pt4": "smoke", "pt5": "override_capture"}

# The §7 fixture defaults of the reference reader suite (test-loop-input.sh).
REF_MANIFEST: dict[str, Any] = {
    "schema": 1,
    "slug": "Org/My-Model",
    "utc_ts": "20260517T000000Z",
    "submission_fingerprint": "225cb9f68fb1180e43d8c55ed4fd86a357cca5e61ea31559cf5a185a4721f23f",
    "model": "Org/My-Model",
    "quant_label": "BFloat16",
    "arch_family": "LlamaForCausalLM",
    "topology_class": "1x24576MiB",
    "engine_pin": "vllm/vllm-openai:nightly-abc123",
    "engine_version": "vllm/vllm-openai:nightly-abc123",
    "kv_calc_version": "kvcalc-v0.8.0",
    "selected_ctx": 32768,
    "kv_format": "fp8_e5m2",
    "smoke_capability_set": ["plain-chat", "streaming"],
    "topology_summary_canonical": "[(NVIDIA GeForce RTX 3090, 24576)]",
    "model_id": "Org/My-Model",
    "failure_class": None,
    "club3090_commit": "cafef00d",
    "outcome": "partial",
    "capture_points": ["gate", "download", "boot", "smoke"],
}
REF_DOCS: dict[str, Any] = {
    "manifest": REF_MANIFEST,
    "pt1": {"schema": 1, "point": "gate", "slug": "Org/My-Model", "confidence": "ESTIMATED_LOWER_BOUND",
            "raw_verdict": "fits-clean", "terminal": "proceed", "profile_like": "vllm/minimal",
            "hardware_sm": 8.6},
    "pt2": {"point": "download", "ok": True, "files": ["model.safetensors"], "bytes": 1024,
            "sha_verified": True, "failure": None},
    "pt3": {"point": "boot", "ok": True, "seconds": 81.9, "failure": None},
    "pt4": {"point": "smoke", "smoke_capability_set": ["plain-chat", "streaming"],
            "results": {"plain-chat": "green", "streaming": "green", "tool-call": "unsmoked"},
            "partial": True, "results_detail": {}},
}
GATE_MANIFEST: dict[str, Any] = {
    "schema": 2, "slug": "Org/Gate-Model", "utc_ts": "20260517T000000Z",
    "club3090_commit": "cafef00d", "outcome": "hard-block",
    "abort_reason": "engine-support-unknown/no-arch-row", "failure_class": None,
    "model": "Org/Gate-Model", "model_id": "Org/Gate-Model", "arch_family": None,
    "quant_label": None, "topology_class": None, "topology_summary_canonical": None,
    "selected_ctx": None, "kv_format": None, "smoke_capability_set": None, "engine_pin": None,
    "engine_version": None, "submission_fingerprint": None, "kv_calc_version": None,
    "is_gate_only": True, "capture_points": ["gate"],
}
GATE_DOCS: dict[str, Any] = {
    "manifest": GATE_MANIFEST,
    "pt1": {"schema": 2, "point": "gate", "slug": "Org/Gate-Model", "confidence": None,
            "raw_verdict": None, "profile_like": "vllm/minimal", "hardware_sm": 8.6,
            "predicted_b_breakdown": None, "abort_reason": "engine-support-unknown/no-arch-row",
            "detail": "no row for arch", "is_gate_only": True},
}


def docs(base: dict[str, Any] = REF_DOCS, **changes: dict[str, Any] | None) -> dict[str, Any]:
    """A deep copy of ``base`` with whole documents replaced (None drops the file)."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        out[key] = value
    return out


def patched(base: dict[str, Any] = REF_DOCS, **fields: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of ``base`` with keys set inside the named documents."""
    out = copy.deepcopy(base)
    for key, over in fields.items():
        out[key].update(over)
    return out


def without(base: dict[str, Any], doc: str, key: str) -> dict[str, Any]:
    out = copy.deepcopy(base)
    del out[doc][key]
    return out


def refused_in_turn(write: Any, broken: dict[str, Any], steps: Iterable[tuple[str, Any]]) -> None:
    """Read ``broken`` once a step: refused as the step's pattern says, then its manifest repaired."""
    for pattern, repair in steps:
        with pytest.raises(BundleError, match=pattern):
            read_bundle(write(broken))
        broken["manifest"].update(repair)


@pytest.fixture
def write(tmp_path: Path) -> Any:
    """``write(documents)`` -> a fresh bundle directory holding them."""
    counter = iter(range(10_000))

    def _write(documents: dict[str, Any]) -> Path:
        return write_bundle(tmp_path / f"b{next(counter)}", documents)

    return _write


# -- schema 1: complete bundles (§7.1 groups 1-7, 14-32) ----------------------


def test_complete_bundle_without_pt5_reads(write: Any) -> None:
    """Groups 1, 2, 32: a complete schema-1 bundle reads, pt5 is None, not gate-only."""
    path = write(REF_DOCS)
    bundle = read_bundle(path)
    assert isinstance(bundle, Bundle)
    assert bundle.schema == 1
    assert bundle.pt5 is None
    assert bundle.is_gate_only is False
    assert bundle.abort_reason is None


def test_a_schema_1_bundle_has_no_abort_reason_even_if_its_pt1_names_one(write: Any) -> None:
    """§2.1: the abort token belongs to gate-only bundles; rules and the review file read
    null for a schema-1 bundle, whatever an additive pt1 key says (docs/rules.md)."""
    bundle = read_bundle(write(patched(pt1={"abort_reason": "disk-short"})))
    assert bundle.pt1["abort_reason"] == "disk-short"
    assert bundle.abort_reason is None


def test_path_is_the_directory_read(write: Any) -> None:
    """Groups 3, 5: the bundle remembers where it came from, and nothing else."""
    path = write(REF_DOCS)
    assert read_bundle(path).path == path
    assert read_bundle(str(path)).path == path


def test_values_of_every_file_are_readable(write: Any) -> None:
    """Group 4."""
    bundle = read_bundle(write(REF_DOCS))
    assert bundle.manifest["submission_fingerprint"] == REF_MANIFEST["submission_fingerprint"]
    assert bundle.pt1 is not None and bundle.pt1["raw_verdict"] == "fits-clean"
    assert bundle.pt2 is not None and bundle.pt2["ok"] is True
    assert bundle.pt3 is not None and bundle.pt3["seconds"] == 81.9
    assert bundle.pt4 is not None and bundle.pt4["partial"] is True


def test_documents_are_exactly_the_files(write: Any) -> None:
    """The decoded objects are kept as stored, additive keys included."""
    bundle = read_bundle(write(REF_DOCS))
    assert bundle.to_document() == {**copy.deepcopy(REF_DOCS), "pt5": None}


def test_pt5_present_is_the_parsed_object(write: Any) -> None:
    """Group 6."""
    pt5 = {"point": "override_capture", "predicted_b_breakdown": {"weights_gb": 9.0, "kv_gb": 12.0},
           "actual": None, "predicted_vs_actual_delta_mib": None,
           "exit_error_summary": "torch.cuda.OutOfMemoryError: CUDA OOM",
           "calibration_signal_not_validated": True}
    bundle = read_bundle(write(docs(pt5=pt5)))
    assert bundle.pt5 == pt5


def test_pt5_wrong_point_is_refused(write: Any) -> None:
    path = write(docs(pt5={"point": "boot", "actual": None}))
    with pytest.raises(BundleError, match=r"pt5-override-capture\.json: point must be 'override_capture'"):
        read_bundle(path)


def test_pt5_directory_is_ignored(write: Any) -> None:
    """§2.2.7: pt5 is read only if it exists as a file, as the reference does."""
    path = write(REF_DOCS)
    (path / FILES["pt5"]).mkdir()
    assert read_bundle(path).pt5 is None


def test_additive_keys_are_accepted(write: Any) -> None:
    """Group 7, and §2.2.6: unknown keys of any file never reject a bundle."""
    documents = patched(
        pt1={"predicted_b_breakdown": {"weights_gb": 9.0, "kv_gb": 12.0, "overhead_gb": 1.5}},
        pt3={"ok": False, "failure": "server did not become ready before timeout",
             "failure_log_excerpt": "CUDA out of memory",
             "actual": {"attempted_alloc_mib": 2560, "gpu_worker_reported_mib": 22880}},
        manifest={"a_future_key": {"nested": [1, 2]}, "is_gate_only": False},
        pt2={"mirror": "hf"},
        pt4={"latency_ms": {"plain-chat": 12}},
    )
    bundle = read_bundle(write(documents))
    assert bundle.pt1["predicted_b_breakdown"] == {"weights_gb": 9.0, "kv_gb": 12.0, "overhead_gb": 1.5}
    assert bundle.pt3 is not None and bundle.pt3["actual"]["gpu_worker_reported_mib"] == 22880
    assert bundle.manifest["a_future_key"] == {"nested": [1, 2]}


def test_extra_files_and_subdirectories_are_ignored(write: Any) -> None:
    path = write(REF_DOCS)
    (path / "notes.json").write_text("not json at all")
    (path / "logs").mkdir()
    (path / "logs" / "boot.log").write_text("CUDA out of memory")
    assert read_bundle(path).manifest == REF_MANIFEST


def test_producer_shaped_bundle_reads(write: Any) -> None:
    """The builders' base documents, which follow §1.4-§1.8, read as they are."""
    bundle = read_bundle(write(base_documents()))
    assert bundle.schema == 1 and bundle.outcome == "failed"


def test_quant_label_is_lower_cased(write: Any) -> None:
    """Group 14."""
    assert read_bundle(write(REF_DOCS)).quant_label == "bfloat16"


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [("BFloat16", "bfloat16"), ("AWQ", "awq"), ("bf16", "bf16"), (None, "none"), ("None", "none"),
     ("", ""), (8, "8"), (True, "true"), ("\u0130", "i\u0307")],
)
def test_quant_label_normalization(write: Any, raw: Any, normalized: str) -> None:
    """§2.3: null becomes ``none``, anything else is ``str(value).lower()``."""
    bundle = read_bundle(write(patched(manifest={"quant_label": raw})))
    assert bundle.quant_label == normalized
    assert bundle.manifest["quant_label"] == raw


@pytest.mark.parametrize("arch", ["LlamaForCausalLM", " Qwen3NextForCausalLM ", "ΛlphaModel", None])
def test_arch_family_is_verbatim(write: Any, arch: Any) -> None:
    """Groups 15, 20: no case change, no trimming."""
    bundle = read_bundle(write(patched(manifest={"arch_family": arch})))
    assert bundle.arch_family == arch
    assert consensus_key(bundle)[2] == arch  # type: ignore[index]


def test_model_id_and_engine_version_are_the_primary_fields(write: Any) -> None:
    """Groups 16, 17, §2.3: ``model`` and ``engine_pin`` win over their aliases."""
    documents = patched(manifest={"model_id": "alias/Other", "engine_version": "other:tag"})
    bundle = read_bundle(write(documents))
    assert bundle.model_id == "Org/My-Model"
    assert bundle.engine_version == "vllm/vllm-openai:nightly-abc123"
    assert bundle.manifest["model_id"] == "alias/Other"


def test_aliases_are_not_cross_checked(write: Any) -> None:
    """§2.2: the reader does not insist model == model_id == slug or engine_pin == engine_version."""
    documents = patched(manifest={"slug": "a/b", "model": "c/d", "model_id": "e/f",
                                  "engine_pin": None, "engine_version": "x"})
    bundle = read_bundle(write(documents))
    assert bundle.model_id == "c/d"
    assert bundle.engine_version is None


def test_consensus_key(write: Any) -> None:
    """Groups 18-20."""
    key = consensus_key(read_bundle(write(REF_DOCS)))
    assert isinstance(key, ConsensusKey) and len(key) == 9
    assert key == ("Org/My-Model", "bfloat16", "LlamaForCausalLM", "1x24576MiB",
                   "vllm/vllm-openai:nightly-abc123", "kvcalc-v0.8.0", 32768, "fp8_e5m2",
                   ("plain-chat", "streaming"))


def test_consensus_key_keeps_stored_capability_order(write: Any) -> None:
    """§2.3: no re-sorting; null becomes the empty tuple."""
    unsorted = read_bundle(write(patched(manifest={"smoke_capability_set": ["streaming", "plain-chat"]})))
    assert consensus_key(unsorted)[8] == ("streaming", "plain-chat")  # type: ignore[index]
    null = read_bundle(write(patched(manifest={"smoke_capability_set": None})))
    assert consensus_key(null)[8] == ()  # type: ignore[index]


@pytest.mark.parametrize(("stored", "expected"), [
    (False, ()), (0, ()), ("", ()), ({}, ()), ("ab", ("a", "b")), ({"plain-chat": "green"}, ("plain-chat",)),
    (7, (7,)), (True, (True,)),
])
def test_consensus_key_of_an_odd_capability_set(write: Any, stored: Any, expected: tuple[Any, ...]) -> None:
    """§2.3's ``tuple()`` of the stored value: nothing for any empty value, the items of a
    text or an object as ``tuple()`` gives them, a lone scalar as itself."""
    key = consensus_key(read_bundle(write(patched(manifest={"smoke_capability_set": stored}))))
    assert key is not None and key.smoke_capability_set == expected


def test_selected_ctx_keeps_int_or_float(write: Any) -> None:
    """§0.2: 32768 and 32768.0 are different key values."""
    as_int = consensus_key(read_bundle(write(REF_DOCS)))
    as_float = consensus_key(read_bundle(write(patched(manifest={"selected_ctx": 32768.0}))))
    assert as_int is not None and as_float is not None
    assert type(as_int[6]) is int and type(as_float[6]) is float


def test_dedup_tuple(write: Any) -> None:
    """Groups 21-24."""
    key = dedup_key(read_bundle(write(REF_DOCS)))
    assert isinstance(key, DedupKey) and len(key) == 7
    assert key == ("Org/My-Model", "bfloat16", "LlamaForCausalLM", "kvcalc-v0.8.0",
                   "vllm/vllm-openai:nightly-abc123", None, "1x24576MiB")
    assert key.failure_class is None
    assert re.fullmatch(r"[0-9a-f]{12}", key.digest())
    assert key.digest() == sha256hex(US.join(str(p) for p in key))[:12]


def test_producer_fields_are_raw(write: Any) -> None:
    """Groups 25-27: ``failure_class`` stays null and ``outcome`` is the producer's raw 3-state."""
    bundle = read_bundle(write(REF_DOCS))
    assert bundle.manifest["failure_class"] is None
    assert bundle.outcome == "partial"


def test_outcome_is_not_validated(write: Any) -> None:
    """§1: pre-fix bundles may say ``partial-or-failed``; the reader does not check."""
    bundle = read_bundle(write(patched(manifest={"outcome": "partial-or-failed"})))
    assert bundle.outcome == "partial-or-failed"


def test_no_accessor_classifies() -> None:
    """Group 28: no attribute interprets the producer's outcome as a class."""
    names = [n for n in dir(Bundle) if not n.startswith("__")]
    assert not [n for n in names if re.search(r"class_enum|six_one_class|classify", n)]


def test_two_reads_agree(write: Any) -> None:
    """Group 29."""
    path = write(REF_DOCS)
    first, second = read_bundle(path), read_bundle(path)
    assert first.manifest == second.manifest
    assert consensus_key(first) == consensus_key(second)
    assert dedup_key(first) == dedup_key(second)
    assert dedup_key(first).digest() == dedup_key(second).digest()


def test_bundle_is_frozen(write: Any) -> None:
    bundle = read_bundle(write(REF_DOCS))
    with pytest.raises(AttributeError):
        bundle.schema = 2  # type: ignore[misc]


# -- schema 1: what is refused (§2.2, §7.1 groups 8-13) ------------------------


def test_nonexistent_directory(tmp_path: Path) -> None:
    """Group 13."""
    with pytest.raises(BundleError, match=r"no-such-bundle: no such bundle directory"):
        read_bundle(tmp_path / "no-such-bundle")


def test_file_instead_of_directory(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(REF_MANIFEST))
    with pytest.raises(BundleError, match=r"manifest\.json: not a directory"):
        read_bundle(path)


def test_a_folder_with_no_bundle_file_is_named_no_bundle(tmp_path: Path) -> None:
    """Not "manifest.json: missing", which sent the user looking for a lost file, nor a
    refusal of what else the folder holds (a link, a socket), which is no bundle's."""
    folder = tmp_path / "downloads"
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.json").write_text("{}")
    (folder / "latest").symlink_to(folder / "sub")
    with pytest.raises(BundleError, match=r"downloads: not a capture bundle: no manifest\.json or other "
                                          r"bundle file in it$") as info:
        read_bundle(folder)
    assert info.value.path == folder
    # One bundle file makes it a broken bundle, and the link in it is refused as before.
    (folder / "pt1-gate.json").write_text("{}")
    with pytest.raises(BundleError, match=r"latest: is a symlink"):
        read_bundle(folder)
    (folder / "latest").unlink()
    with pytest.raises(BundleError, match=r"downloads/manifest\.json: missing$"):
        read_bundle(folder)


@pytest.mark.parametrize("doc", ["manifest", "pt1", "pt2", "pt3", "pt4"])
def test_missing_file(write: Any, doc: str) -> None:
    """Groups 9, 10."""
    path = write(docs(**{doc: None}))
    with pytest.raises(BundleError, match=rf"{re.escape(FILES[doc])}: missing"):
        read_bundle(path)


def test_missing_files_are_reported_in_order(write: Any) -> None:
    """§2.2.6: pt1..pt4 are checked in order; the first problem is the one reported."""
    path = write(docs(pt2=None, pt4=None))
    with pytest.raises(BundleError, match=r"pt2-download\.json: missing"):
        read_bundle(path)


@pytest.mark.parametrize("doc", ["manifest", "pt1", "pt2", "pt3", "pt4"])
def test_directory_in_place_of_a_file(write: Any, doc: str) -> None:
    path = write(docs(**{doc: None}))
    (path / FILES[doc]).mkdir()
    with pytest.raises(BundleError, match=rf"{re.escape(FILES[doc])}: is a directory"):
        read_bundle(path)


@pytest.mark.parametrize("doc", ["pt1", "pt2", "pt3", "pt4"])
@pytest.mark.parametrize("point", ["BOGUS", "", None, POINTS["pt5"], "Gate"])
def test_wrong_point(write: Any, doc: str, point: Any) -> None:
    """Group 11, for every file."""
    path = write(patched(**{doc: {"point": point}}))
    with pytest.raises(BundleError, match=rf"{re.escape(FILES[doc])}: point must be '{POINTS[doc]}'"):
        read_bundle(path)


HUGE_PLACES = {
    "point": (REF_DOCS, "pt4", "point"), "schema": (REF_DOCS, "pt2", "schema"),
    "failure_class": (REF_DOCS, "manifest", "failure_class"), "manifest schema": (REF_DOCS, "manifest", "schema"),
    "gate outcome": (GATE_DOCS, "manifest", "outcome"), "gate failure_class": (GATE_DOCS, "manifest", "failure_class"),
    "gate pt1 schema": (GATE_DOCS, "pt1", "schema"),
}


@pytest.mark.parametrize("where", sorted(HUGE_PLACES))
def test_a_huge_wrong_value_is_named_in_a_short_message(write: Any, where: str) -> None:
    """The whole value went into the message: an 8 MB string made an 8 MB line in every
    table, JSON row and run summary."""
    base, doc, key = HUGE_PLACES[where]
    path = write(patched(base, **{doc: {key: "A" * 1_000_000}}))
    with pytest.raises(BundleError) as refused:
        read_bundle(path)
    message = str(refused.value)
    assert len(message) < 400 and "'AAAA" in message and "(1,000,002 characters)" in message


@pytest.mark.parametrize("size", [1, 78])
def test_a_wrong_value_that_fits_the_message_is_shown_whole(write: Any, size: int) -> None:
    """Up to 80 characters of repr (78 letters and their quotes) the value is shown as it is."""
    path = write(patched(pt4={"point": "B" * size}))
    with pytest.raises(BundleError, match=rf"pt4-smoke\.json: point must be 'smoke', got '{'B' * size}'$"):
        read_bundle(path)


def test_a_wrong_value_one_character_too_long_is_cut_and_its_length_given(write: Any) -> None:
    """81 characters of repr: the first 80 are shown, then how long the whole is."""
    path = write(patched(pt4={"point": "B" * 79}))
    with pytest.raises(BundleError, match=rf"pt4-smoke\.json: point must be 'smoke', got '{'B' * 79}\u2026 "
                                          r"\(81 characters\)$"):
        read_bundle(path)


@pytest.mark.parametrize("doc", ["pt1", "pt2", "pt3", "pt4"])
def test_missing_point(write: Any, doc: str) -> None:
    path = write(without(REF_DOCS, doc, "point"))
    with pytest.raises(BundleError, match=rf"{re.escape(FILES[doc])}: point must be .*<absent>"):
        read_bundle(path)


@pytest.mark.parametrize("doc", ["pt1", "pt2", "pt3", "pt4"])
@pytest.mark.parametrize("schema", [2, 0, "1", None, [1]])
def test_pt_schema_other_than_one(write: Any, doc: str, schema: Any) -> None:
    """§2.2.6: a ``schema`` key, when present, must equal 1."""
    path = write(patched(**{doc: {"schema": schema}}))
    with pytest.raises(BundleError, match=rf"{re.escape(FILES[doc])}: schema must be 1"):
        read_bundle(path)


@pytest.mark.parametrize("doc", ["pt1", "pt2", "pt3", "pt4"])
def test_pt_schema_is_checked_before_point(write: Any, doc: str) -> None:
    """§2.2.6: a file wrong in both is reported for its schema, as the reference reports it."""
    path = write(patched(**{doc: {"schema": 2, "point": "BOGUS"}}))
    with pytest.raises(BundleError, match=rf"{re.escape(FILES[doc])}: schema must be 1, got 2$"):
        read_bundle(path)


@pytest.mark.parametrize("doc", ["pt1", "pt2", "pt3", "pt4"])
@pytest.mark.parametrize("schema", [1, 1.0, True, "absent"])
def test_pt_schema_one_or_absent_is_accepted(write: Any, doc: str, schema: Any) -> None:
    documents = without(REF_DOCS, doc, "schema") if "schema" in REF_DOCS[doc] else copy.deepcopy(REF_DOCS)
    if schema != "absent":
        documents[doc]["schema"] = schema
    assert read_bundle(write(documents)).schema == 1


@pytest.mark.parametrize("schema", [1, 1.0, True])
def test_manifest_schema_uses_python_equality(write: Any, schema: Any) -> None:
    """§2.2.3: ``1.0`` and ``true`` pass, exactly as in the reference."""
    assert read_bundle(write(patched(manifest={"schema": schema}))).schema == 1


@pytest.mark.parametrize("schema", ["1", "2", 0, 3, None, [1], {"v": 1}, 1.5, False])
def test_manifest_schema_unsupported(write: Any, schema: Any) -> None:
    path = write(patched(manifest={"schema": schema}))
    with pytest.raises(BundleError, match=rf"manifest\.json: unsupported schema {re.escape(repr(schema))}"):
        read_bundle(path)


def test_manifest_schema_absent(write: Any) -> None:
    path = write(without(REF_DOCS, "manifest", "schema"))
    with pytest.raises(BundleError, match=r"manifest\.json: unsupported schema '<absent>'"):
        read_bundle(path)


@pytest.mark.parametrize("key", sorted(MANIFEST_KEYS_V1 - {"schema"}))
def test_manifest_missing_key(write: Any, key: str) -> None:
    """§2.2.4: each of the 20 keys is required."""
    path = write(without(REF_DOCS, "manifest", key))
    with pytest.raises(BundleError, match=rf"manifest\.json: missing keys {key}$"):
        read_bundle(path)


def test_manifest_missing_keys_are_listed_sorted(write: Any) -> None:
    documents = without(without(REF_DOCS, "manifest", "utc_ts"), "manifest", "arch_family")
    with pytest.raises(BundleError, match=r"manifest\.json: missing keys arch_family, utc_ts$"):
        read_bundle(write(documents))


def test_every_missing_manifest_key_is_listed_sorted(write: Any) -> None:
    """The message is the same on every run, whatever order the keys were found in."""
    path = write(docs(manifest={"schema": 1}))
    expected = ", ".join(sorted(MANIFEST_KEYS_V1 - {"schema"}))
    with pytest.raises(BundleError, match=rf"manifest\.json: missing keys {re.escape(expected)}$"):
        read_bundle(path)


def test_manifest_has_twenty_required_keys() -> None:
    assert len(MANIFEST_KEYS_V1) == 20
    assert MANIFEST_KEYS_V1 == set(REF_MANIFEST)


def test_manifest_values_are_not_type_checked(write: Any) -> None:
    """§2.2.4: ``null`` (or any type) is fine for every key but schema and failure_class."""
    nulls = {k: None for k in MANIFEST_KEYS_V1 - {"schema", "failure_class"}}
    bundle = read_bundle(write(patched(manifest=nulls)))
    assert bundle.model_id is None and bundle.quant_label == "none"


@pytest.mark.parametrize("value", ["genuine-oom", "unknown", False, 0, "", [], {}])
def test_failure_class_must_be_null(write: Any, value: Any) -> None:
    """Group 12: the producer never classifies."""
    path = write(patched(manifest={"failure_class": value}))
    with pytest.raises(BundleError, match=r"manifest\.json: failure_class must be null"):
        read_bundle(path)


@pytest.mark.parametrize("doc", ["manifest", "pt1", "pt2", "pt3", "pt4", "pt5"])
@pytest.mark.parametrize("text", ["null", "[]", "[{}]", '"manifest"', "1", "true"])
def test_file_is_not_an_object(write: Any, doc: str, text: str) -> None:
    path = write(REF_DOCS)
    (path / FILES[doc]).write_text(text + "\n")
    with pytest.raises(BundleError, match=rf"{re.escape(FILES[doc])}: expected a JSON object"):
        read_bundle(path)


@pytest.mark.parametrize("doc", ["manifest", "pt1", "pt3", "pt5"])
@pytest.mark.parametrize("text", ["", "{", '{"point": "gate",}', "{'point': 'gate'}", "{} {}"])
def test_file_is_not_json(write: Any, doc: str, text: str) -> None:
    path = write(REF_DOCS)
    (path / FILES[doc]).write_text(text)
    with pytest.raises(BundleError, match=rf"{re.escape(FILES[doc])}: invalid JSON"):
        read_bundle(path)


def test_checks_run_in_reference_order(write: Any) -> None:
    """§2.2: schema, manifest keys, failure_class, pt1..pt4, pt5; the first failure is reported."""
    broken = docs(pt1=None, pt5={"point": "nope"})
    broken["manifest"].update(schema=7, failure_class="unknown")
    del broken["manifest"]["utc_ts"]
    steps = [
        (r"manifest\.json: unsupported schema 7", {"schema": 1}),
        (r"manifest\.json: missing keys utc_ts", {"utc_ts": "t"}),
        (r"manifest\.json: failure_class must be null", {"failure_class": None}),
    ]
    refused_in_turn(write, broken, steps)
    with pytest.raises(BundleError, match=r"pt1-gate\.json: missing"):
        read_bundle(write(broken))
    broken["pt1"] = copy.deepcopy(REF_DOCS["pt1"])
    with pytest.raises(BundleError, match=r"pt5-override-capture\.json: point must be"):
        read_bundle(write(broken))


@pytest.mark.parametrize("broken", [
    docs(manifest=None), docs(pt3=None), patched(manifest={"schema": 7}), without(REF_DOCS, "manifest", "model"),
    patched(manifest={"failure_class": "unknown"}), patched(pt2={"schema": 2}), patched(pt4={"point": "x"}),
    docs(pt5={"point": "x"}), docs(GATE_DOCS, pt1=None), patched(GATE_DOCS, manifest={"outcome": "ok"}),
    docs(GATE_DOCS, manifest={"schema": 2}), patched(GATE_DOCS, manifest={"failure_class": "unknown"}),
    patched(GATE_DOCS, pt1={"schema": 1}),
])
def test_error_carries_the_bundle_path(write: Any, broken: dict[str, Any]) -> None:
    """``BundleError.path`` is the bundle directory, whichever check refused it."""
    path = write(broken)
    with pytest.raises(BundleError) as info:
        read_bundle(path)
    assert info.value.path == path


# -- schema 2: gate-only bundles (§2.6, §7.1 groups 8, 33-44) ------------------


def test_gate_bundle_reads(write: Any) -> None:
    """Groups 33-37."""
    bundle = read_bundle(write(GATE_DOCS))
    assert bundle.schema == 2
    assert bundle.is_gate_only is True
    assert (bundle.pt2, bundle.pt3, bundle.pt4, bundle.pt5) == (None, None, None, None)
    assert bundle.outcome == "hard-block"
    assert bundle.manifest["failure_class"] is None
    assert bundle.abort_reason == "engine-support-unknown/no-arch-row"
    assert bundle.arch_family is None
    assert bundle.model_id == "Org/Gate-Model"
    assert bundle.quant_label == "none"
    assert bundle.pt1 == GATE_DOCS["pt1"]


def test_gate_dedup_tuple(write: Any) -> None:
    """Groups 38, 39: 7 positions, 5 and 6 None; stable across reads; no consensus key."""
    path = write(GATE_DOCS)
    key = dedup_key(read_bundle(path))
    assert key == ("Org/Gate-Model", "none", None, None, None, None, None)
    assert key.digest() == dedup_key(read_bundle(path)).digest()
    assert consensus_key(read_bundle(path)) is None


def test_gate_abort_reason_comes_from_pt1(write: Any) -> None:
    """§2.1: ``abort_reason`` is ``pt1_gate.abort_reason``, even when the manifest differs."""
    documents = patched(GATE_DOCS, manifest={"abort_reason": "disk-short"},
                        pt1={"abort_reason": "no-fit-model"})
    assert read_bundle(write(documents)).abort_reason == "no-fit-model"


@pytest.mark.parametrize(("model_id", "model", "expected"), [
    ("Org/Id", "Org/Model", "Org/Id"),
    ("", "Org/Model", "Org/Model"),
    (None, "Org/Model", "Org/Model"),
])
def test_gate_model_id_prefers_truthy_model_id(write: Any, model_id: Any, model: str, expected: str) -> None:
    """§2.3: gate bundles prefer a truthy ``model_id``; the dedup tuple still reads ``model``."""
    bundle = read_bundle(write(patched(GATE_DOCS, manifest={"model_id": model_id, "model": model})))
    assert bundle.model_id == expected
    assert dedup_key(bundle).model_id == "Org/Model"


def test_schema_1_bundle_with_schema_2_manifest_dispatches_to_gate(write: Any) -> None:
    """Groups 8, 41 and §2.1 dispatch: schema 2 goes to the gate reader, which wants its 7 keys."""
    path = write(patched(manifest={"schema": 2}))
    with pytest.raises(BundleError, match=r"manifest\.json: missing keys abort_reason$"):
        read_bundle(path)


def test_schema_2_manifest_over_full_capture_reads_only_the_gate(write: Any) -> None:
    """Dispatch, once the gate keys are there: pt2-pt4 are not read at all."""
    documents = patched(manifest={"schema": 2, "outcome": "hard-block", "abort_reason": "disk-short"},
                        pt1={"schema": 2})
    documents["pt3"] = None
    bundle = read_bundle(write(documents))
    assert bundle.is_gate_only and bundle.pt2 is None and bundle.pt3 is None


def test_gate_bundle_with_float_schema_dispatches_to_gate(write: Any) -> None:
    """Dispatch uses Python equality too: ``2.0`` is schema 2."""
    assert read_bundle(write(patched(GATE_DOCS, manifest={"schema": 2.0}))).is_gate_only


def test_string_schema_2_is_not_a_gate_bundle(write: Any) -> None:
    """``"2"`` is not 2: it goes to the schema-1 reader, which refuses it."""
    path = write(patched(GATE_DOCS, manifest={"schema": "2"}))
    with pytest.raises(BundleError, match=r"manifest\.json: unsupported schema '2'"):
        read_bundle(path)


def test_gate_manifest_with_only_required_keys(write: Any) -> None:
    """Group 44: only the 7 §2.6 keys; every other lookup is None."""
    manifest = {k: GATE_MANIFEST[k] for k in MANIFEST_KEYS_V2}
    bundle = read_bundle(write(docs(GATE_DOCS, manifest=manifest)))
    assert set(bundle.manifest) == MANIFEST_KEYS_V2 and len(MANIFEST_KEYS_V2) == 7
    assert bundle.model_id is None and bundle.engine_version is None
    assert bundle.quant_label == "none"
    assert dedup_key(bundle) == (None, "none", None, None, None, None, None)


@pytest.mark.parametrize("key", sorted(MANIFEST_KEYS_V2 - {"schema"}))
def test_gate_manifest_missing_key(write: Any, key: str) -> None:
    path = write(without(GATE_DOCS, "manifest", key))
    with pytest.raises(BundleError, match=rf"manifest\.json: missing keys {key}$"):
        read_bundle(path)


def test_gate_manifest_missing_keys_are_listed_sorted(write: Any) -> None:
    """The message is the same on every run, whatever order the keys were found in."""
    path = write(docs(GATE_DOCS, manifest={"schema": 2}))
    with pytest.raises(BundleError, match=r"manifest\.json: missing keys abort_reason, club3090_commit, "
                                          r"failure_class, outcome, slug, utc_ts$"):
        read_bundle(path)


@pytest.mark.parametrize("outcome", ["ok", "failed", "partial", "HARD-BLOCK", None, ""])
def test_gate_outcome_must_be_hard_block(write: Any, outcome: Any) -> None:
    """Group 42."""
    path = write(patched(GATE_DOCS, manifest={"outcome": outcome}))
    with pytest.raises(BundleError, match=r"manifest\.json: a gate-only bundle must have outcome 'hard-block'"):
        read_bundle(path)


@pytest.mark.parametrize("value", ["genuine-oom", False, 0, ""])
def test_gate_failure_class_must_be_null(write: Any, value: Any) -> None:
    """Group 43."""
    path = write(patched(GATE_DOCS, manifest={"failure_class": value}))
    with pytest.raises(BundleError, match=r"manifest\.json: failure_class must be null"):
        read_bundle(path)


def test_gate_missing_pt1(write: Any) -> None:
    path = write(docs(GATE_DOCS, pt1=None))
    with pytest.raises(BundleError, match=r"pt1-gate\.json: missing"):
        read_bundle(path)


@pytest.mark.parametrize("schema", [1, "2", None])
def test_gate_pt1_schema_must_be_2(write: Any, schema: Any) -> None:
    """Group 40: a schema-1 pt1 under a gate manifest is refused."""
    path = write(patched(GATE_DOCS, pt1={"schema": schema}))
    with pytest.raises(BundleError, match=r"pt1-gate\.json: schema must be 2"):
        read_bundle(path)


def test_gate_pt1_without_schema_reads(write: Any) -> None:
    assert read_bundle(write(without(GATE_DOCS, "pt1", "schema"))).is_gate_only


def test_gate_checks_run_in_reference_order(write: Any) -> None:
    """§2.6: manifest keys, outcome, failure_class, then pt1; the first failure is reported."""
    broken = docs(GATE_DOCS, pt1=None)
    broken["manifest"].update(outcome="ok", failure_class="unknown")
    del broken["manifest"]["utc_ts"]
    steps = [
        (r"manifest\.json: missing keys utc_ts$", {"utc_ts": "t"}),
        (r"manifest\.json: a gate-only bundle must have outcome 'hard-block', got 'ok'$", {"outcome": "hard-block"}),
        (r"manifest\.json: failure_class must be null, got 'unknown'$", {"failure_class": None}),
    ]
    refused_in_turn(write, broken, steps)
    with pytest.raises(BundleError, match=r"pt1-gate\.json: missing$"):
        read_bundle(write(broken))


def test_gate_pt1_schema_is_checked_before_point(write: Any) -> None:
    path = write(patched(GATE_DOCS, pt1={"schema": 1, "point": "boot"}))
    with pytest.raises(BundleError, match=r"pt1-gate\.json: schema must be 2, got 1$"):
        read_bundle(path)


@pytest.mark.parametrize("point", ["boot", None, "GATE"])
def test_gate_pt1_wrong_point(write: Any, point: Any) -> None:
    path = write(patched(GATE_DOCS, pt1={"point": point}))
    with pytest.raises(BundleError, match=r"pt1-gate\.json: point must be 'gate'"):
        read_bundle(path)


def test_gate_reads_no_other_file(write: Any) -> None:
    """§2.6.4: broken pt2-pt5 next to a gate bundle are never opened."""
    path = write(GATE_DOCS)
    for doc in ("pt2", "pt3", "pt4", "pt5"):
        (path / FILES[doc]).write_text("{ not json")
    bundle = read_bundle(path)
    assert bundle.pt2 is None and bundle.pt5 is None


def test_dedup_tuple_reads_engine_pin_not_engine_version(write: Any) -> None:
    """§2.5: the engine of the dedup tuple (and so its hash) is ``engine_pin``."""
    documents = patched(manifest={"engine_version": "other:tag"})
    key = dedup_key(read_bundle(write(documents)))
    assert key.engine_version == "vllm/vllm-openai:nightly-abc123"
    assert key.digest() == dedup_key(read_bundle(write(REF_DOCS))).digest()
