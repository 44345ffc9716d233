"""The trust pipeline's inputs: the curated-model catalog, read strictly, and consensus priors."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from loop_core import CatalogError, load_catalog
from loop_core.cli import cli

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "catalog.yml"

GOOD = """\
schema: 1
models:
  - id: tiny-7b
    hf_repos: [acme/Tiny-7B-AWQ, acme/Tiny-7B]
  - id: no-repos-yet
    hf_repos: []
composes:
  - name: vllm/minimal
    model: tiny-7b
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "catalog.yml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_example_catalog_and_a_small_one_load(tmp_path: Path) -> None:
    example = load_catalog(EXAMPLE)
    assert example.curated_model("Lorbus/Qwen3.6-27B-int4-AutoRound") == "qwen3.6-27b"
    small = load_catalog(write(tmp_path, GOOD))
    assert small.models == (("tiny-7b", ("acme/Tiny-7B-AWQ", "acme/Tiny-7B")), ("no-repos-yet", ()))
    assert small.curated_model(" acme/Tiny-7B ") == "tiny-7b" and small.curated_model("acme/other") is None
    assert small.compose_for("tiny-7b", None) == "vllm/minimal"
    assert load_catalog(write(tmp_path, "")).models == ()  # an empty file is an empty catalog
    sparse = load_catalog(write(tmp_path, "models: [{id: bare}]\ncomposes: [{name: tgi/any}]\n"))
    assert (sparse.models, sparse.composes) == ((("bare", ()),), (("tgi/any", ""),))  # both keys may be left out


def test_a_model_is_curated_only_through_a_compose_and_a_compose_is_found_by_profile(tmp_path: Path) -> None:
    """§4.5: a repository listed under a model no compose serves stays derived, one listed
    twice is the first model's, and the pt1 profile picks which of a model's composes is
    named, the first one otherwise."""
    text = GOOD.replace("hf_repos: []", "hf_repos: [acme/Loose-3B]") + (
        "  - name: sglang/fast\n    model: tiny-7b\n  - name: tgi/plain\n    model: tiny-7b\n")
    catalog = load_catalog(write(tmp_path, text))
    assert catalog.curated_model("acme/Loose-3B") is None
    shared = load_catalog(write(tmp_path, GOOD.replace("hf_repos: []", "hf_repos: [' acme/Tiny-7B ', ' acme/Mini ']")
                                + "  - name: tgi/plain\n    model: no-repos-yet\n"))
    assert shared.curated_model("acme/Tiny-7B") == "tiny-7b"  # the first model listing it wins
    assert shared.curated_model("acme/Mini") == "no-repos-yet"  # spaces around a listed name do not count
    assert catalog.compose_for("tiny-7b", "tgi/plain") == "tgi/plain"
    assert catalog.compose_for("tiny-7b", "vllm/other") == "vllm/minimal"
    assert catalog.compose_for("no-repos-yet", "tgi/plain") is None


@pytest.mark.parametrize("text, problem", [
    ("models: 5\n", "models must be a list, got int"),
    ("composes: 5\n", "composes must be a list, got int"),
    ("models: {id: x}\n", "models must be a list, got dict"),
    ("- id: x\n", "a catalog is a mapping with schema, models and composes, got list"),
    (GOOD.replace("hf_repos:", "hf-repos:", 1), "models[0]: unknown keys ['hf-repos'] (expected id, hf_repos)"),
    (GOOD.replace("schema: 1", "modles: []"), "unknown keys ['modles'] (expected schema, models, composes)"),
    (GOOD.replace("schema: 1", "schema: 7"), "schema must be 1, got 7"),
    (GOOD.replace("schema: 1", "schema: true"), "schema must be 1, got True"),
    (GOOD.replace("schema: 1", "schema: 1.0"), "schema must be 1, got 1.0"),
    (GOOD + "models: []\n", "duplicate key 'models'"),
    (GOOD.replace("[acme/Tiny-7B-AWQ, acme/Tiny-7B]", "[null]"), "models[0] tiny-7b: hf_repos must be a list of"),
    (GOOD.replace("[acme/Tiny-7B-AWQ, acme/Tiny-7B]", "acme/Tiny-7B"), "models[0] tiny-7b: hf_repos must be a list of"),
    (GOOD.replace("[acme/Tiny-7B-AWQ, acme/Tiny-7B]", "''"), "models[0] tiny-7b: hf_repos must be a list of"),
    ("models: [7]\n", "models[0]: must be a mapping with id and hf_repos, got int"),
    ("composes: [vllm/minimal]\n", "composes[0]: must be a mapping with name and model, got str"),
    ("models: [{id: x, zeta: 1, alpha: 2}]\n", "models[0]: unknown keys ['alpha', 'zeta'] (expected id, hf_repos)"),
    (GOOD.replace("id: tiny-7b", "id: 7"), "models[0]: needs an id (text)"),
    (GOOD.replace("id: tiny-7b", "id: ' '"), "models[0]: needs an id (text)"),
    (GOOD.replace("name: vllm/minimal", "name: ''"), "composes[0]: needs a name (text)"),
    (GOOD.replace("[acme/Tiny-7B-AWQ, acme/Tiny-7B]", "[acme/Tiny-7B, ' ']"), "models[0] tiny-7b: hf_repos must be"),
    (GOOD.replace("model: tiny-7b", "model: [tiny-7b]"), "composes[0] vllm/minimal: model must be a model id"),
    ("models: [" * 3000 + "]" * 3000 + "\n", "invalid YAML"),
    # Which of two entries a lookup found would depend on the order they are listed in.
    (GOOD.replace("id: no-repos-yet", "id: tiny-7b"), "models[1]: model 'tiny-7b' is listed twice (first at models[0])"),
    (GOOD + "  - name: vllm/minimal\n    model: no-repos-yet\n",
     "composes[1]: compose 'vllm/minimal' is listed twice (first at composes[0])"),
    (GOOD.replace("model: tiny-7b", "model: tiny-7B"), "composes[0] vllm/minimal: model 'tiny-7B' is not one of this"),
])
def test_a_malformed_catalog_is_one_error_naming_the_place(tmp_path: Path, text: str, problem: str) -> None:
    """Each of these used to crash (exit 70), or to be read as an empty or other catalog,
    which demotes every curated anchor without a word."""
    path = write(tmp_path, text)
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    assert problem in str(info.value) and str(path) in str(info.value)
    result = CliRunner().invoke(cli, ["trust", "--catalog", str(path), str(ROOT / "examples" / "pull-captures")])
    assert result.exit_code == 2 and problem in result.output and "internal error" not in result.output


def test_a_catalog_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    with pytest.raises(CatalogError) as info:
        load_catalog(tmp_path / "missing.yml")
    assert str(info.value).startswith(f"{tmp_path / 'missing.yml'}: cannot read catalog: ")


def test_a_catalog_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yml"
    path.write_bytes(b"models:\n  - id: caf\xe9-7b\n")
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    assert str(info.value).startswith(f"{path}: cannot read catalog: 'utf-8' codec can't decode byte 0xe9")
    result = CliRunner().invoke(cli, ["trust", "--catalog", str(path), str(ROOT / "examples" / "pull-captures")])
    assert result.exit_code == 2 and f"{path}: cannot read catalog" in result.stderr


def test_a_bad_catalog_leaves_the_table_empty(tmp_path: Path) -> None:
    # The catalog was read on the first row: the header had gone to stdout by then.
    path = write(tmp_path, "models: 5\n")
    result = CliRunner().invoke(cli, ["trust", "--catalog", str(path), str(ROOT / "examples" / "pull-captures")])
    assert result.exit_code == 2 and result.stdout == "" and "models must be a list" in result.stderr


@pytest.mark.parametrize("command", [["classify"], ["trust"], ["run", "--dry-run"], ["report", "--out", "-"]])
def test_every_command_that_takes_a_catalog_refuses_a_malformed_one(tmp_path: Path, command: list[str]) -> None:
    """classify accepted --catalog without reading it, so the command line it shares
    with trust passed a misspelt hf_repos there: the docs say all four refuse it."""
    path = write(tmp_path, GOOD.replace("hf_repos:", "hf-repos:", 1))
    result = CliRunner().invoke(cli, [*command, "--catalog", str(path), str(ROOT / "examples" / "pull-captures")])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert "models[0]: unknown keys ['hf-repos'] (expected id, hf_repos)" in result.stderr


def test_priors_that_give_no_readable_bundle_are_named(tmp_path: Path) -> None:
    examples = ROOT / "examples" / "pull-captures"
    manifest = next(examples.glob("*/*/manifest.json"))
    result = CliRunner().invoke(cli, ["trust", "--priors", str(manifest), "--priors", str(examples),
                                                      str(examples)])
    assert result.exit_code == 1  # the examples hold one unreadable bundle, as ever
    assert result.stderr.count("warning: --priors ") == 1
    assert f"warning: --priors {manifest}: no readable bundle there; it counts for nothing" in result.stderr


def test_a_trust_summary_of_unreadable_bundles_only_reads_well(tmp_path: Path) -> None:
    (tmp_path / "b" / "manifest.json").parent.mkdir()
    (tmp_path / "b" / "manifest.json").write_text("{")
    last = CliRunner().invoke(cli, ["trust", str(tmp_path / "b")]).output.splitlines()[-1]
    assert last == "1 bundle(s): 1 unreadable"


def test_an_unreadable_bundle_has_a_trust_row_of_the_same_keys_all_empty() -> None:
    import json

    result = CliRunner().invoke(cli, ["trust", "--format", "jsonl", str(ROOT / "examples" / "pull-captures")])
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    (broken,) = [row for row in rows if row["reader_error"] is not None]
    fields = ["stage", "reason", "graduation_set", "fingerprint_ok", "curated", "curated_model", "consensus_count",
              "consensus_reached", "calibration_row"]
    assert all(list(row) == ["bundle", "reader_error", *fields] for row in rows)
    assert [broken[key] for key in fields] == [None] * len(fields)


def test_an_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    levels = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi"):
        levels.append(f"{name}: &{name} [{', '.join(['*' + prev] * 10)}]")
    path = write(tmp_path, "\n".join(levels) + "\nmodels: [{id: x, hf_repos: [*i]}]\n")
    with pytest.raises(CatalogError, match="anchors are not allowed"):  # refused before anything expands
        load_catalog(path)


# -- consensus ------------------------------------------------------------------

GREEN = {"pt3": {"ok": True, "failure": None}, "pt4": {"results": {"plain-chat": "green", "streaming": "red"}},
         "manifest": {"outcome": "ok", "smoke_capability_set": ["plain-chat", "streaming"]}}


def _twin(ts: str, *, green: bool) -> dict:  # type: ignore[type-arg]
    twin = {key: dict(value) for key, value in GREEN.items()}
    twin["manifest"] = {**GREEN["manifest"], "utc_ts": ts}
    if not green:
        twin["manifest"]["outcome"] = "failed"
        twin["pt4"] = {"results": {"plain-chat": "red", "streaming": "red"}}
    return twin


@pytest.mark.parametrize("green, stage", [(True, "validated"), (False, "candidate")])
def test_only_a_prior_that_saw_the_configuration_work_counts_toward_consensus(tmp_path: Path, green: bool,
                                                                            stage: str) -> None:
    """`trust --priors` counted a submission whose every capability failed, so the same
    folder got other stages from `trust` than from `run`, which indexes successes only."""
    import json

    from loop_core.testing import make_bundle, write_bundle

    write_bundle(tmp_path / "anchor" / "20260801T093000Z", make_bundle(GREEN))
    write_bundle(tmp_path / "twin" / "20260806T093000Z", make_bundle(_twin("20260806T093000Z", green=green)))
    result = CliRunner().invoke(cli, ["trust", "--format", "jsonl", "--priors", str(tmp_path),
                                      str(tmp_path / "anchor")])
    (row,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert row["stage"] == stage
    run = CliRunner().invoke(cli, ["run", str(tmp_path), "--dry-run", "--format", "json"])
    assert json.loads(run.stdout)["anchors"][stage] >= 1


@pytest.mark.parametrize("needed, stage", [("2", "validated"), ("3", "candidate")])
def test_trust_consensus_n_is_the_number_of_agreeing_submissions_needed(tmp_path: Path, needed: str,
                                                                        stage: str) -> None:
    import json

    from loop_core.testing import make_bundle, write_bundle

    write_bundle(tmp_path / "anchor" / "20260801T093000Z", make_bundle(GREEN))
    write_bundle(tmp_path / "twin" / "20260806T093000Z", make_bundle(_twin("20260806T093000Z", green=True)))
    result = CliRunner().invoke(cli, ["trust", "--format", "jsonl", "--priors", str(tmp_path), "--consensus-n",
                                      needed, str(tmp_path / "anchor")])
    (row,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert (row["consensus_count"], row["stage"]) == (2, stage)


def _anchor(**manifest: object):  # type: ignore[no-untyped-def]
    from loop_core.testing import make_bundle

    return make_bundle({"manifest": manifest, "pt4": {"results": {"chat": "green"}}})


def test_a_prior_whose_fingerprint_does_not_verify_gives_no_consensus() -> None:
    """Consensus counts submissions: a copy of the anchor with an edited fingerprint is
    not a second submission, and the anchor stays a candidate."""
    from loop_core.trust import ConsensusIndex, Stage, evaluate_trust

    anchor = _anchor(utc_ts="20260801T000000Z")
    forged = _anchor(utc_ts="20260802T000000Z", submission_fingerprint="f" * 64)
    genuine = _anchor(utc_ts="20260803T000000Z")
    alone = evaluate_trust(anchor, priors=ConsensusIndex.of([anchor, forged]))
    assert (alone.stage, alone.reason, alone.consensus_count) == (Stage.CANDIDATE, "insufficient-consensus", 1)
    agreed = evaluate_trust(anchor, priors=ConsensusIndex.of([anchor, forged, genuine]))
    assert (agreed.stage, agreed.consensus_count) == (Stage.VALIDATED, 2)


@pytest.mark.parametrize("model", [None, 7, ["acme/Tiny-7B"]])
def test_a_manifest_model_that_is_not_text_is_simply_not_curated(tmp_path: Path, model: object) -> None:
    import json

    from loop_core.testing import make_bundle, write_bundle

    write_bundle(tmp_path / "b", make_bundle({**GREEN, "manifest": {**GREEN["manifest"], "model": model}}))
    result = CliRunner().invoke(cli, ["trust", "--format", "jsonl", "--catalog", str(write(tmp_path, GOOD)),
                                      str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["curated"] is False


@pytest.mark.parametrize("topology", ["1x24GiB", "1x24576", "1x24576MB"])
def test_a_topology_not_counted_in_mib_is_implausible(topology: str) -> None:
    from loop_core.trust import ConsensusIndex, Stage, evaluate_trust

    anchor, twin = (_anchor(utc_ts=ts, topology_class=topology) for ts in ("20260801T000000Z", "20260802T000000Z"))
    result = evaluate_trust(anchor, priors=ConsensusIndex.of([anchor, twin]))
    assert (result.stage, result.reason) == (Stage.CANDIDATE, "topology-implausible")


@pytest.mark.parametrize("topology, plausible", [
    ("1x24576MiB", True), ("+1x24576MiB", True), (" 2 x 24576 MiB", True), ("1_0x2_4576MiB", True),
    ("100000x1048576MiB", True), ("1x1MiB", True),
    ("0x24576MiB", False), ("1x1048577MiB", False), ("1x0MiB", False), ("1x-5MiB", False), ("1x24576mib", False),
    ("1X24576MiB", False), ("x24576MiB", False), (24576, False),
])
def test_the_topology_floor_of_the_contract(topology: object, plausible: bool) -> None:
    """§4.3's computed examples: Python int() leniency, at least one GPU, 1 MiB to 1 TiB a card."""
    from loop_core.trust import Stage, evaluate_trust

    result = evaluate_trust(_anchor(topology_class=topology), maintainer_promoted=True)
    assert (result.stage, result.reason) == ((Stage.VALIDATED, "derived-tier1-deferred-v0.8.1") if plausible
                                             else (Stage.CANDIDATE, "topology-implausible"))


@pytest.mark.parametrize("summary", ["", "  \n", None, 5, ["(NVIDIA GeForce RTX 3090, 24576)"]])
def test_a_topology_summary_that_is_no_text_or_blank_is_implausible(summary: object) -> None:
    """§4.3.1: the summary must be text that is not empty once trimmed."""
    from loop_core.trust import Stage, evaluate_trust

    result = evaluate_trust(_anchor(topology_summary_canonical=summary), maintainer_promoted=True)
    assert (result.stage, result.reason) == (Stage.CANDIDATE, "topology-implausible")


def test_a_curated_anchor_gives_the_calibration_row_of_the_contract(tmp_path: Path) -> None:
    """§4.6: eight keys; the VRAM of one card; the engine is engine_pin, not its alias."""
    from loop_core.testing import make_bundle
    from loop_core.trust import Stage, evaluate_trust

    anchor = make_bundle({"manifest": {"model": "acme/Tiny-7B", "engine_pin": "vllm/vllm-openai:v0.21.0",
                                       "engine_version": "vllm/vllm-openai:nightly", "topology_class": "2x12345MiB",
                                       "selected_ctx": 48000},
                          "pt4": {"results": {"chat": "green"}}})
    result = evaluate_trust(anchor, catalog=load_catalog(write(tmp_path, GOOD)), maintainer_promoted=True)
    assert (result.stage, result.reason, result.curated_model) == (Stage.TIER1, "tier1-curated", "tiny-7b")
    fingerprint = anchor.manifest["submission_fingerprint"]
    assert result.calibration_row == {
        "compose": "vllm/minimal", "vram_gb": 12.056, "measured_peak_gb": None, "ctx_override": 48000,
        "status": "candidate-tier1", "engine_pin": "vllm/vllm-openai:v0.21.0", "genesis_pin": None,
        "source": (f"loop[F]/F4 inbound-trust anchor model=acme/Tiny-7B slug-resolved=tiny-7b "
                   f"fingerprint={fingerprint} utc_ts=20260801T093000Z"),
    }


def test_without_priors_the_anchor_counts_itself_once() -> None:
    """§4.4: the count is 1 (this submission) plus the priors; a consensus of one needs no other."""
    from loop_core.trust import Stage, evaluate_trust

    alone = evaluate_trust(_anchor())
    assert (alone.consensus_count, alone.consensus_reached, alone.reason) == (1, False, "insufficient-consensus")
    one = evaluate_trust(_anchor(), consensus_n=1)
    assert (one.consensus_count, one.consensus_reached, one.stage) == (1, True, Stage.VALIDATED)


def test_no_green_capability_is_reported_before_an_implausible_topology() -> None:
    """§4.2: the candidate gates in their order, the first failing one named."""
    from loop_core.testing import make_bundle
    from loop_core.trust import Stage, evaluate_trust

    anchor = make_bundle({"manifest": {"topology_class": "0x0MiB"}, "pt4": {"results": {"chat": "red"}}})
    result = evaluate_trust(anchor, maintainer_promoted=True)
    assert (result.stage, result.reason) == (Stage.CANDIDATE, "no-green-capability")


def test_a_fingerprint_that_does_not_re_derive_is_reported_before_a_missing_green_capability() -> None:
    """§4.2: the fingerprint is the first gate; an edited manifest stays raw, whatever its smoke said."""
    from loop_core.testing import make_bundle
    from loop_core.trust import Stage, evaluate_trust

    anchor = make_bundle({"manifest": {"submission_fingerprint": "f" * 64}, "pt4": {"results": {"chat": "red"}}})
    result = evaluate_trust(anchor, maintainer_promoted=True)
    assert (result.stage, result.reason) == (Stage.RAW, "fingerprint-mismatch")


@pytest.mark.parametrize("results", [["plain-chat", "green"], "green", 7])
def test_smoke_results_that_are_no_mapping_graduate_nothing(results: object) -> None:
    """§4.2 reads ``pt4.results`` as capability to verdict; anything else there leaves no
    green capability, rather than a crash of the whole trust run."""
    from loop_core.testing import make_bundle
    from loop_core.trust import Stage, evaluate_trust

    result = evaluate_trust(make_bundle({"pt4": {"results": results}}), maintainer_promoted=True)
    assert (result.stage, result.reason, result.graduation_set) == (Stage.CANDIDATE, "no-green-capability",
                                                                     frozenset())


def test_a_trust_row_lists_the_graduated_capabilities_sorted() -> None:
    """The same anchor gives the same row on every run, whatever order a set keeps."""
    from loop_core.testing import make_bundle
    from loop_core.trust import evaluate_trust

    caps = ["vision", "streaming", "tool-call", "plain-chat", "long-context", "reasoning-streaming"]
    anchor = make_bundle({"pt4": {"results": {**{cap: "green" for cap in caps}, "structured-output": "red"}}})
    assert evaluate_trust(anchor).to_dict()["graduation_set"] == sorted(caps)


@pytest.mark.parametrize("vouched", [1, "yes"])
def test_any_truthy_maintainer_promotion_vouches(vouched: object) -> None:
    """§4.2: ``maintainer_promoted`` truthy stands in for consensus, and the result says so,
    without saying consensus was reached (§4.4: that is the count alone)."""
    from loop_core.trust import Stage, evaluate_trust

    result = evaluate_trust(_anchor(), maintainer_promoted=vouched)  # type: ignore[arg-type]
    assert (result.stage, result.maintainer_promoted) == (Stage.VALIDATED, True)
    assert (result.consensus_count, result.consensus_reached) == (1, False)


def test_a_gate_only_bundle_has_no_trust_verdict() -> None:
    from loop_core.testing import make_bundle
    from loop_core.trust import evaluate_trust

    with pytest.raises(ValueError, match="gate-only bundles have no trust verdict"):
        evaluate_trust(make_bundle({"manifest": {"schema": 2}}))
