"""Every computed example of CONTRACTS §2.7, §3.4, §3.9, §5.1, §5.2 and §6, byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loop_core import (
    FailureClass,
    consensus_key,
    dedup_key,
    dedup_labels,
    submission_fingerprint,
    tier2_fingerprint,
)
from loop_core.keys import (
    DedupKey,
    arch_label,
    error_source,
    error_substring,
    kv_calc_version,
    normalize_text,
)
from loop_core.testing import make_bundle

COMMIT = "0123456789abcdef0123456789abcdef01234567"
TWO_3090 = "[(NVIDIA GeForce RTX 3090, 24576), (NVIDIA GeForce RTX 3090, 24576)]"
ONE_3090 = "[(NVIDIA GeForce RTX 3090, 24576)]"

# The constructed OOM bundle of CONTRACTS §1.11.
EXAMPLE = {
    "manifest": {
        "arch_family": "LlamaForCausalLM", "club3090_commit": COMMIT,
        "engine_pin": "vllm/vllm-openai:v0.21.0", "engine_version": "vllm/vllm-openai:v0.21.0",
        "kv_calc_version": "kvcalc-v0.8.0+1a2b3c4d5e6f", "kv_format": "fp8_e5m2",
        "model": "acme/Tiny-Llama-7B-AWQ", "model_id": "acme/Tiny-Llama-7B-AWQ",
        "slug": "acme/Tiny-Llama-7B-AWQ", "outcome": "failed", "quant_label": "AWQ",
        "selected_ctx": 65536, "smoke_capability_set": [],
        "submission_fingerprint": "eaaf9a56cc489024a9a56146b210d89bf42553ba71110d5a2eb10127d703471b",
        "topology_class": "2x24576MiB", "topology_summary_canonical": TWO_3090,
        "utc_ts": "20260801T093000Z",
    },
    "pt1": {"predicted_b_breakdown": {"activations": 1.1, "kv_cache": 16.25, "overhead": 0.75, "weights": 3.9}},
    "pt3": {
        "actual": {"attempted_alloc_mib": 1280, "gpu_worker_reported_mib": 23817},
        "failure": "server did not become ready before timeout",
        "failure_log_excerpt": (
            "vllm-1  | INFO 08-01 09:29:58 [gpu_worker.py:184] GPU memory peak: 23817.00 MiB after profiling\n"
            "vllm-1  | ERROR 08-01 09:30:01 torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            "1.25 GiB (GPU 0; 24.00 GiB total capacity)\n"),
        "ok": False, "seconds": 41.5,
    },
}


def fixture_manifest(outcome: str) -> dict:
    return {
        "model": "Org/My-Model", "club3090_commit": "cafef00d", "topology_summary_canonical": ONE_3090,
        "quant_label": "BFloat16", "kv_calc_version": "kvcalc-v0.8.0",
        "engine_version": "vllm/vllm-openai:nightly-abc123", "utc_ts": "20260517T000000Z", "outcome": outcome,
    }


def test_submission_fingerprint_of_the_example_bundle() -> None:
    assert submission_fingerprint(EXAMPLE["manifest"]) == (
        "eaaf9a56cc489024a9a56146b210d89bf42553ba71110d5a2eb10127d703471b")


def test_submission_fingerprint_of_a_success_anchor() -> None:
    manifest = {"model": "acme/Tiny-Llama-7B", "club3090_commit": COMMIT, "topology_summary_canonical": ONE_3090,
                "quant_label": "BF16", "kv_calc_version": "kvcalc-v0.8.0+1a2b3c4d5e6f",
                "engine_version": "vllm/vllm-openai:v0.21.0", "utc_ts": "20260801T120000Z", "outcome": "partial"}
    assert submission_fingerprint(manifest) == "e5cfdedb5eae9ce10881f52b31d0e9c73d228c9bfa2bc36875b96e63262598c3"


@pytest.mark.parametrize("outcome, expected", [
    ("ok", "2af24715fb30e5bde9666479799cd4a273b957ca67ec8ea4042a554d2033fe60"),
    ("failed", "cd653388d1e640cffe746f5696556df09cc735b284c4bd20386a2cd68c71737c"),
    ("partial", "225cb9f68fb1180e43d8c55ed4fd86a357cca5e61ea31559cf5a185a4721f23f"),
])
def test_submission_fingerprint_of_reference_fixtures(outcome: str, expected: str) -> None:
    assert submission_fingerprint(fixture_manifest(outcome)) == expected


def test_reader_dedup_tuple_and_hash_of_the_example_bundle() -> None:
    key = dedup_key(make_bundle(EXAMPLE))
    assert key == ("acme/Tiny-Llama-7B-AWQ", "awq", "LlamaForCausalLM", "kvcalc-v0.8.0+1a2b3c4d5e6f",
                   "vllm/vllm-openai:v0.21.0", None, "2x24576MiB")
    assert key.digest() == "c08da7ae1ea0"


def test_consensus_key_of_the_example_bundle() -> None:
    assert consensus_key(make_bundle(EXAMPLE)) == (
        "acme/Tiny-Llama-7B-AWQ", "awq", "LlamaForCausalLM", "2x24576MiB", "vllm/vllm-openai:v0.21.0",
        "kvcalc-v0.8.0+1a2b3c4d5e6f", 65536, "fp8_e5m2", ())


@pytest.mark.parametrize("fields, expected", [
    (("Org/My-Model", "bfloat16", "LlamaForCausalLM", "kvcalc-v0.8.0", "vllm/vllm-openai:nightly-abc123",
      None, "1x24576MiB"), "e3d6169f267f"),
    (("Org/Gate-Model", "none", None, None, None, None, None), "6f647d22889f"),
    (("acme/Tiny-Llama-7B-AWQ", "awq", "LlamaForCausalLM", "kvcalc-v0.8.0+1a2b3c4d5e6f",
      "vllm/vllm-openai:v0.21.0", "genuine-oom", "2x24576MiB"), "b6b82dc71cf6"),
    (("acme/Tiny-Llama-7B-AWQ", "awq", "LlamaForCausalLM", "kvcalc-v0.8.0+1a2b3c4d5e6f",
      "vllm/vllm-openai:v0.21.0", "quant-unsupported", "2x24576MiB"), "48cec51899a1"),
    (("Org/My-Model", "bfloat16", "LlamaForCausalLM", "kvcalc-v0.8.0", "vllm/vllm-openai:nightly-abc123",
      "genuine-oom", "1x24576MiB"), "037e429e1088"),
    (("acme/Exotic-9B", "bf16", "ExoticForCausalLM", None, None, "kernel-unsupported", None), "ee5cc36def2f"),
])
def test_dedup_hash_examples(fields: tuple, expected: str) -> None:
    assert DedupKey(*fields).digest() == expected


def test_the_class_given_as_a_member_keys_as_its_value() -> None:
    # FailureClass is text: a caller handing dedup_key the verdict's class itself must get
    # the hash and labels of its value, not of "FailureClass.GENUINE_OOM".
    key = dedup_key(make_bundle(EXAMPLE), FailureClass.GENUINE_OOM)
    assert key.digest() == "b6b82dc71cf6"
    assert dedup_labels(key)[1] == "class:genuine-oom"


def test_effective_key_substitutes_only_the_class() -> None:
    bundle = make_bundle(EXAMPLE)
    reader, effective = dedup_key(bundle), dedup_key(bundle, "genuine-oom")
    assert effective.failure_class == "genuine-oom"
    assert effective._replace(failure_class=None) == reader
    assert effective.digest() == "b6b82dc71cf6" != reader.digest()


@pytest.mark.parametrize("cls, expected", [("kernel-unsupported", "e453fc6a8c46"), ("unknown", "ddaae7128fff")])
def test_gate_fixture_effective_hash(cls: str, expected: str) -> None:
    gate = make_bundle({"manifest": {"schema": 2, "model": "Org/Gate", "model_id": "Org/Gate",
                                     "slug": "Org/Gate", "quant_label": None, "arch_family": None}})
    assert dedup_key(gate, cls).digest() == expected


def test_error_substring_normalization() -> None:
    assert normalize_text("  RuntimeError:\tCUDA   kernel\n\nfailed  ") == "runtimeerror: cuda kernel failed"
    assert normalize_text("x" * 255) == "x" * 240
    # str.split() whitespace includes U+001C..U+001F and NBSP.
    assert normalize_text("a\x1fb\u00a0c") == "a b c"


def test_a_word_cut_by_the_prefix_is_not_lower_cased_as_if_it_ended_there() -> None:
    # A capital sigma lower-cases to a final sigma at a word's end only: the word the
    # prefix cuts must be read whole, or the substring would end in the wrong letter.
    text = " " * 10 + "abcdefghi" + "\u03a3" * 40
    assert normalize_text(text, 10) == "abcdefghi\u03c3" == " ".join(text.split()).lower()[:10]


def test_error_substring_source_precedence() -> None:
    assert error_substring(make_bundle({"pt3": {"failure_log_excerpt": "Excerpt", "failure": "Failure"}})) == "excerpt"
    assert error_substring(make_bundle({"pt3": {"failure": "Failure"}})) == "failure"
    red = {"pt3": {"failure": None}, "pt4": {"results": {"tool-call": "red", "streaming": "red"},
                                             "results_detail": {"streaming": {"status": 500, "error": ""}}}}
    # The alphabetically first red capability wins, even without error text.
    assert error_substring(make_bundle(red)) == "smoke red:streaming"
    assert error_substring(make_bundle({"pt3": {"failure": None}})) == ""


@pytest.mark.parametrize("substring, arch, engine, expected", [
    ("runtimeerror: cuda kernel failed", "Qwen3ForCausalLM", "vllm/vllm-openai:v0.21.0", "5b2444582dd9"),
    ("x" * 240, "Qwen3ForCausalLM", "vllm/vllm-openai:v0.21.0", "fb224f079f27"),
    ("", "ExoticForCausalLM", None, "19dde07c0c0c"),
    ("", None, None, "08a14830cef1"),
])
def test_tier2_fingerprint_examples(substring: str, arch: object, engine: object, expected: str) -> None:
    assert tier2_fingerprint(substring, arch, engine) == expected


def test_fingerprint_of_the_example_bundle() -> None:
    bundle = make_bundle(EXAMPLE)
    sub = error_substring(bundle)
    assert len(sub) == 234
    assert tier2_fingerprint(sub, "LlamaForCausalLM", "vllm/vllm-openai:v0.21.0") == "4e746053884b"


def test_fingerprint_of_the_awq_variant() -> None:
    sub = normalize_text("ValueError: Cannot find the config file for awq")
    assert sub == "valueerror: cannot find the config file for awq"
    assert tier2_fingerprint(sub, "LlamaForCausalLM", "vllm/vllm-openai:v0.21.0") == "7aacf141b273"


@pytest.mark.parametrize("arch, label", [
    (None, "arch:none"),
    ("LlamaForCausalLM", "arch:llamaforcausallm"),
    ("Qwen2_5_VLForConditionalGeneration", "arch:qwen2-5-vlforconditionalgeneration"),
    ("日本Model", "arch:model"),
])
def test_arch_labels(arch: object, label: str) -> None:
    assert arch_label(arch) == label


def test_arch_label_fits_githubs_fifty_characters() -> None:
    # The reference keeps 48 characters and emits a 53-character label (§8.4.2).
    label = arch_label("Some::Weird/Arch  With Spaces!!" * 5)
    assert len(label) <= 50
    assert label.startswith("arch:some-weird-arch-with-spaces")
    assert not label.endswith("-")


@pytest.mark.parametrize("arch, label", [
    ("a" * 60, "arch:" + "a" * 45),
    ("__" + "a" * 60, "arch:" + "a" * 45),
    ("A" * 45 + "!!!b", "arch:" + "a" * 45),
    ("a" * 44 + "::bbb", "arch:" + "a" * 44),
])
def test_a_long_arch_label_keeps_45_characters_of_the_sanitized_name(arch: str, label: str) -> None:
    # docs/compatibility.md: the architecture part is cut to 45 characters, counted after
    # the punctuation at its ends is gone, and a cut never leaves a dash at the end.
    assert arch_label(arch) == label


def test_labels_are_three_and_bounded() -> None:
    labels = dedup_labels(DedupKey("m", "awq", "LlamaForCausalLM", "kv", "e", "genuine-oom", "1x1MiB"))
    assert labels == (f"loop:dedup-{DedupKey('m', 'awq', 'LlamaForCausalLM', 'kv', 'e', 'genuine-oom', '1x1MiB').digest()}",
                      "class:genuine-oom", "arch:llamaforcausallm")


def _kv_tree(root: Path, calibration: dict[str, str] | None) -> Path:
    (root / "tools").mkdir(parents=True)
    (root / "tools" / "kv-calc.py").write_bytes(b"print('kv')\n")
    if calibration is not None:
        cal = root / "scripts" / "lib" / "profiles" / "calibration"
        cal.mkdir(parents=True)
        for name, text in calibration.items():
            (cal / name).write_bytes(text.encode())
    return root


def test_kv_calc_version_with_calibration(tmp_path: Path) -> None:
    root = _kv_tree(tmp_path, {"a.yml": "rows: []\n", "b.yml": "rows: [1]\n", "c.yaml": "ignored\n"})
    assert kv_calc_version(root) == "kvcalc-v0.8.0+792d0731a261"


def test_kv_calc_version_without_calibration(tmp_path: Path) -> None:
    assert kv_calc_version(_kv_tree(tmp_path, None)) == "kvcalc-v0.8.0+75a96c6c4179"


def test_kv_calc_version_moves_with_content(tmp_path: Path) -> None:
    root = _kv_tree(tmp_path, {"a.yml": "rows: []\n"})
    before = kv_calc_version(root)
    (root / "tools" / "kv-calc.py").write_bytes(b"print('kv2')\n")
    assert kv_calc_version(root) != before


def test_kv_calc_version_degrades_to_the_base(tmp_path: Path) -> None:
    assert kv_calc_version(tmp_path / "missing") == "kvcalc-v0.8.0"
    assert kv_calc_version(tmp_path) == "kvcalc-v0.8.0"


def test_a_folder_named_like_a_calibration_file_gives_the_base(tmp_path: Path) -> None:
    # §6: anything that raises, a directory named *.yml included, gives the bare base.
    root = _kv_tree(tmp_path, {"a.yml": "rows: []\n"})
    (root / "scripts" / "lib" / "profiles" / "calibration" / "b.yml").mkdir()
    assert kv_calc_version(root) == "kvcalc-v0.8.0"


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["a", "B", " ", "\n", "\t", "İ", "ß", "x" * 50, "Word", "\u2003", "ǅ", " " * 300,
                                 "ΑΣ", "Σ" * 90]),
                max_size=120).map("".join),
       st.sampled_from([1, 10, 240]))
def test_normalize_text_reads_only_what_the_limit_needs_and_says_the_same(text: str, limit: int) -> None:
    # Long texts are normalised from a prefix; the result must be the §3.4 formula's.
    assert normalize_text(text, limit) == " ".join(text.split()).lower()[:limit]
    assert normalize_text(" " * 2000 + text, limit) == " ".join(text.split()).lower()[:limit]


def test_an_empty_excerpt_gives_way_to_the_boot_failure() -> None:
    assert error_substring(make_bundle({"pt3": {"failure_log_excerpt": "", "failure": "Failure"}})) == "failure"


@pytest.mark.parametrize("pt3, pt4, source, substring", [
    ({"failure_log_excerpt": "Excerpt", "failure": "Failure"}, None, "excerpt", "excerpt"),
    ({"failure": "Failure"}, None, "failure", "failure"),
    # An empty boot failure is no failure: the red capability speaks.
    ({"failure": ""}, {"results": {"streaming": "red"}}, "smoke", "smoke red:streaming"),
    # No recorded error (null, false, an empty text): the capability's name stands in.
    ({"failure": None}, {"results": {"streaming": "red"}, "results_detail": {"streaming": {"error": None}}},
     "smoke", "smoke red:streaming"),
    ({"failure": None}, {"results": {"streaming": "red"}, "results_detail": {"streaming": {"error": False}}},
     "smoke", "smoke red:streaming"),
    # A recorded error of blanks is an error, if an empty one once collapsed.
    ({"failure": None}, {"results": {"streaming": "red"}, "results_detail": {"streaming": {"error": "  "}}},
     "smoke", ""),
    # A failure recorded as a number is rendered, not dropped.
    ({"failure": 500}, None, "failure", "500"),
    ({"failure": None}, {"results": {"streaming": "green"}}, "", ""),
])
def test_error_source_names_the_field_the_text_came_from(pt3: dict, pt4: dict | None, source: str,
                                                         substring: str) -> None:
    bundle = make_bundle({"pt3": pt3, **({"pt4": pt4} if pt4 is not None else {})})
    assert error_source(bundle)[0] == source
    assert error_substring(bundle) == substring


def test_a_red_capability_whose_detail_is_plain_text_gives_that_text() -> None:
    red = {"pt3": {"failure": None}, "pt4": {"results": {"streaming": "red"},
                                             "results_detail": {"streaming": "HTTP 500: Internal  Error"}}}
    assert error_substring(make_bundle(red)) == "http 500: internal error"
