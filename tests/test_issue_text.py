"""Hostile text through ``draft_issue``: what reaches a tracker stays inert, bounded and secret-free.

Every draft is built the way the pipeline builds it: a bundle from
``make_bundle`` with hostile text in the model slug, the architecture and the
boot log excerpt, classified by the default engine, rendered by
``draft_issue`` with the final error as evidence. The body is checked with a
small CommonMark fence scanner of our own (not the renderer's helpers), so a
fence that closes early or never closes is caught.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loop_core import Bundle, Classification, Engine
from loop_core.dedup import (
    BODY_LIMIT,
    LOG_CHARS,
    LOG_LINE_CHARS,
    LOG_LINES,
    PLUSONE_MARKER,
    SCHEMA,
    TITLE_LIMIT,
    TUPLE_MARKER,
    IssueDraft,
    _log_excerpt,
    body_tuple_matches,
    draft_issue,
    occurrence_of,
    parse_body_tuple,
    plus_one_comment,
    plus_one_submission,
    sanitize,
    scrub_secrets,
)
from loop_core.keys import arch_label, dedup_key
from loop_core.testing import make_bundle
from loop_core.view import View

LABEL = re.compile(r"^[a-z0-9:._-]+$")
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
CONTROLS = "".join(chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)])
LIVE_MENTION = re.compile(r"@[\w-]")
CODE_SPAN = re.compile(r"`[^`\n]+`")
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


# -- a tiny CommonMark fence scanner ----------------------------------------------

_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass(frozen=True)
class Block:
    start: int  # line of the opening fence
    end: int | None  # line of the closing fence; None when it never closes
    fence: str
    info: str
    content: str


def scan(markdown: str) -> tuple[list[Block], list[str]]:
    """Fenced code blocks (CommonMark §4.5) and the lines outside them."""
    lines = markdown.split("\n")
    blocks: list[Block] = []
    outside: list[str] = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if m and not (m["fence"][0] == "`" and "`" in m["info"]):
            char, n = m["fence"][0], len(m["fence"])
            close = re.compile(rf"^ {{0,3}}{re.escape(char)}{{{n},}}[ \t]*$")
            j = i + 1
            while j < len(lines) and not close.match(lines[j]):
                j += 1
            blocks.append(Block(i, j if j < len(lines) else None, m["fence"], m["info"].strip(),
                                "\n".join(lines[i + 1:j])))
            i = j + 1
            continue
        outside.append(lines[i])
        i += 1
    return blocks, outside


def test_the_scanner_itself() -> None:
    blocks, outside = scan("a\n````py\nx\n```\n````\nb\n~~~\n```\n~~~~\n```\nopen")
    assert [(b.fence, b.info, b.content, b.end) for b in blocks] == [
        ("````", "py", "x\n```", 4), ("~~~", "", "```", 8), ("```", "", "open", None)]
    assert outside == ["a", "b"]
    assert scan("``` a`b\nnot a fence")[0] == []


# -- building drafts ------------------------------------------------------------------


def classified(engine: Engine, *, model: str = "acme/Model-7B", arch: str = "LlamaForCausalLM",
               excerpt: str = OOM, manifest: dict[str, Any] | None = None) -> tuple[Bundle, Classification]:
    bundle = make_bundle({"manifest": {"model": model, "model_id": model, "slug": model, "arch_family": arch,
                                       **(manifest or {})},
                          "pt3": {"failure_log_excerpt": excerpt}})
    return bundle, engine.classify(bundle)


def render(engine: Engine, **kw: Any) -> tuple[Bundle, Classification, IssueDraft, str]:
    bundle, verdict = classified(engine, **kw)
    evidence = View(bundle).signal("final_error")
    draft = draft_issue(bundle, verdict, evidence=evidence)
    # The built-in hook renders the same text (it drops evidence the substring already shows).
    hooked = engine.pm.hook.loop_draft_issue(bundle=bundle, verdict=verdict)
    assert hooked.dedup_hash == draft.dedup_hash and hooked.title == draft.title
    check(bundle, verdict, hooked, hooked_evidence(bundle, verdict))
    return bundle, verdict, draft, evidence


def rendered_log(engine: Engine, excerpt: str) -> tuple[str, str]:
    """The heading and text of the log section of a checked draft for a capture with *excerpt*."""
    bundle, verdict, draft, evidence = render(engine, excerpt=excerpt)
    check(bundle, verdict, draft, evidence)
    log = _log_excerpt(bundle, verdict.error_substring)
    assert log is not None
    return log


def hooked_evidence(bundle: Bundle, verdict: Classification) -> str | None:
    final = View(bundle).signal("final_error")
    return final if final and final.lower() not in verdict.error_substring else None


def published(value: Any) -> Any:
    """A canonical value as an issue may show it: strings scrubbed of secrets."""
    if isinstance(value, str):
        return scrub_secrets(value)
    if isinstance(value, list):
        return [published(v) for v in value]
    if isinstance(value, dict):
        return {k: published(v) for k, v in value.items()}
    return value


def _prefix(content: str, full: str) -> bool:
    """The block shows ``full``, or a cut of it marked with an ellipsis."""
    if content == full:
        return True
    return content.endswith("\u2026") and full.startswith(content[:-1])


def check(bundle: Bundle, verdict: Classification, draft: IssueDraft, evidence: str | None) -> None:
    """Every invariant of a rendered issue."""
    key = dedup_key(bundle, verdict.failure_class.value)
    comment = plus_one_comment(draft, occurrence_of(bundle))
    texts = {"title": draft.title, "body": draft.body, "comment": comment,
             **{f"label{i}": label for i, label in enumerate(draft.labels)}}
    # Bounded, valid Unicode.
    assert len(draft.title) <= TITLE_LIMIT
    assert len(draft.body) <= BODY_LIMIT
    assert len(draft.labels) == 3
    for label in draft.labels:
        assert len(label) <= 50 and LABEL.match(label), label
    for name, text in texts.items():
        text.encode("utf-8")  # raises on a lone surrogate
        assert not any(0xD800 <= ord(c) <= 0xDFFF for c in text), name
        # No bidi marks anywhere, no control characters but newlines (and tabs in code).
        assert not set(text) & set(BIDI), name
        allowed = "\n\t" if name in ("body", "comment") else ""
        assert not set(text) & (set(CONTROLS) - set(allowed)), (name, text)
    assert "\n" not in draft.title and "\t" not in draft.title

    # The fences: the tuple block, the error block, the evidence block, the log block; all
    # closed, nothing else (the log may be dropped when the evidence filled the body).
    blocks, outside = scan(draft.body)
    assert all(b.end is not None for b in blocks), "a fence never closes"
    log = _log_excerpt(bundle, verdict.error_substring)
    expected_blocks = 2 + bool(evidence) + bool(log)
    assert len(blocks) in (expected_blocks, expected_blocks - bool(log)), [b.info for b in blocks]
    tuple_block, error_block = blocks[0], blocks[1]
    assert tuple_block.info == "json" and draft.body.split("\n")[tuple_block.start - 1] == TUPLE_MARKER
    assert json.loads(tuple_block.content) == published(draft.canonical)
    parsed = parse_body_tuple(draft.body)
    assert parsed == published(list(key))
    assert body_tuple_matches(draft.body, key)
    assert draft.canonical["tuple_ordered"] == list(key) and draft.canonical["schema"] == SCHEMA
    assert error_block.info == ""
    assert _prefix(error_block.content, sanitize(verdict.error_substring))
    lines = draft.body.split("\n")
    after = lines[error_block.end + 1:]  # type: ignore[operator]
    if evidence:
        assert after[:2] == ["", "**Final error (scrubbed):**"]
        assert blocks[2].info == "" and _prefix(blocks[2].content, sanitize(evidence))
        after = lines[blocks[2].end + 1:]  # type: ignore[operator]
    if log and len(blocks) == expected_blocks:
        assert after[:2] == ["", log[0]]
        assert blocks[-1].info == "" and _prefix(blocks[-1].content, log[1])
        after = lines[blocks[-1].end + 1:]  # type: ignore[operator]
    assert after in ([], ["", "_(evidence cut to fit the issue size limit)_"])

    # Outside code (blocks and spans): no live mention, link, image, URL or raw HTML (our tuple marker aside).
    for line in outside:
        assert not LIVE_MENTION.search(line), line
        text = CODE_SPAN.sub("", line.replace(TUPLE_MARKER, ""))
        assert "`" not in text, line  # every span closed
        assert "<" not in text and "](" not in text and "][" not in text, line
        assert "://" not in text and "www." not in text, line
    # +1 comment: ours, parseable, the same submission.
    assert comment.startswith(PLUSONE_MARKER)
    assert plus_one_submission(comment) == occurrence_of(bundle).submission
    assert all(b.end is not None for b in scan(comment)[0])


# -- hostile strings, one kind at a time -------------------------------------------------


def test_plain_issue(engine: Engine) -> None:
    bundle, verdict, draft, evidence = render(engine)
    assert verdict.failure_class.value == "genuine-oom"
    check(bundle, verdict, draft, evidence)
    assert draft.title == f"[loop][genuine-oom] acme/Model-7B (dedup {draft.dedup_hash})"
    # The fields line names the tuple's fields in the order tuple_ordered lists their values.
    assert ("\n**Dedup tuple:** model_id, quant_label, arch_family, kv_calc_version, engine_version, "
            "failure_class, topology_class\n") in draft.body


def test_the_body_and_the_comment_carry_the_references_markers(engine: Engine) -> None:
    """§5.4-§5.5: the literal markers and schema tag the reference writes and looks for, so
    issues and comments of either tool are recognised by the other."""
    bundle, _verdict, draft, _evidence = render(engine)
    assert '\n<!-- club3090-loop-dedup canonical-tuple -->\n```json\n{\n  "dedup_hash": ' in draft.body
    assert '"schema": "club3090-loop-dedup-v1"' in draft.body
    comment = plus_one_comment(draft, occurrence_of(bundle)).split("\n")
    assert comment[0] == "<!-- club3090-loop-dedup +1 -->"
    assert comment[3] == "```json" and comment[5:] == ["```"]
    payload = json.loads(comment[4])
    assert (payload["kind"], payload["schema"], payload["dedup_hash"]) == (
        "dedup-plusone", "club3090-loop-dedup-v1", draft.dedup_hash)


def test_the_model_slug_and_the_title_name_the_manifests_model_not_its_alias(engine: Engine) -> None:
    """§5.3-§5.4: ``model_slug`` and the title are the manifest's ``model``, as the dedup key's
    first field is; a differing ``model_id`` alias changes neither."""
    bundle, verdict = classified(engine, manifest={"model_id": "acme/Alias-7B"})
    draft = draft_issue(bundle, verdict)
    assert draft.canonical["model_slug"] == "acme/Model-7B"
    assert json.loads(scan(draft.body)[0][0].content)["model_slug"] == "acme/Model-7B"
    assert "acme/Model-7B" in draft.title and "Alias" not in draft.title


def test_the_log_up_to_the_final_error_shows_what_failed(engine: Engine) -> None:
    # llama.cpp names the architecture it lacks lines before its last message, past the
    # 240-character substring (tests/corpus/real, llama.cpp-drift-003).
    excerpt = ("common_init_result: fitting params to device memory, for bugs during this step try to reproduce "
               "them with -fit off, or provide --verbose logs if the bug only occurs with -fit on\n"
               "llama_model_load: error loading model: error loading model architecture: unknown model "
               "architecture: 'gemma4'\n"
               "llama_model_load_from_file_impl: failed to load model\n"
               "llama_params_fit: fitting params to free memory took 0.38 seconds\n"
               "llama_model_load_from_file_impl: using device CUDA0 (NVIDIA RTX 5000) - 15074 MiB free\n")
    bundle, verdict, draft, evidence = render(engine, excerpt=excerpt)
    check(bundle, verdict, draft, evidence)
    assert "'gemma4'" not in verdict.error_substring
    assert "unknown model architecture: 'gemma4'" in draft.body
    assert "**Log up to the final error (scrubbed; lines 1-3 of 5):**" in draft.body  # its last failed line


def test_the_log_ends_at_the_final_error_and_is_bounded(engine: Engine) -> None:
    noise = "".join(f"INFO step {i} of the loader with a long line of detail to pad it out\n" for i in range(300))
    tail = "".join(f"INFO shutting down worker {i}\n" for i in range(50))
    excerpt = (noise + "llama_model_load: reading /home/alice/models/x.gguf\n"
               "llama_model_load: error loading model: token=hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567 is refused\n"
               + tail + "x" * 5000 + "\n")
    heading, text = rendered_log(engine, excerpt)
    assert heading == "**Log up to the final error (scrubbed; lines 263-302 of 353):**"
    lines = text.split("\n")
    assert len(lines) == LOG_LINES and len(text) <= LOG_CHARS
    assert lines[-1] == "llama_model_load: error loading model: token=<REDACTED> is refused"
    assert "/home/alice" not in text
    assert "shutting down" not in text


def test_a_log_over_its_size_keeps_the_final_error_and_drops_the_oldest_lines(engine: Engine) -> None:
    padding = "".join(f"INFO shard {i:02d} " + "y" * 400 + "\n" for i in range(30))
    final = "llama_model_load: the tensor layout could not be read, load failed"
    heading, text = rendered_log(engine, padding + final + "\nINFO exiting\n")
    lines = text.split("\n")
    assert lines[-1] == final and len(text) <= LOG_CHARS
    assert lines[0].startswith("INFO shard ") and "INFO shard 00 " not in text
    assert heading == f"**Log up to the final error (scrubbed; lines {32 - len(lines)}-31 of 32):**"


def test_the_log_heading_numbers_the_lines_of_the_text(engine: Engine) -> None:
    # Blank lines the log starts with are left out, and counted; a final error line logged
    # twice is its last occurrence, the one the final error names.
    failed = "loader: the shard load failed"
    excerpt = ("\n\nINFO loading " + "z" * 250 + f"\n{failed}\n" + "".join(f"INFO retry {i}\n" for i in range(5))
               + f"{failed}\nINFO bye\n")
    heading, text = rendered_log(engine, excerpt)
    assert heading == "**Log up to the final error (scrubbed; lines 3-10 of 11):**"
    assert text.split("\n")[0].startswith("INFO loading zz") and text.split("\n")[-1] == failed


def test_a_long_log_line_is_cut_and_marked(engine: Engine) -> None:
    failed = "loader: the shard load failed"
    excerpt = "INFO loading " + "z" * 250 + "\nINFO shapes " + "q" * 1500 + f"\n{failed}\nINFO bye\n"
    _heading, text = rendered_log(engine, excerpt)
    lines = text.split("\n")
    assert lines[1] == "INFO shapes " + "q" * (LOG_LINE_CHARS - len("INFO shapes ")) + "\u2026"
    assert lines[0] == "INFO loading " + "z" * 250 and lines[2] == failed


def test_no_log_when_the_final_error_is_the_first_line(engine: Engine) -> None:
    # A one-line log would only repeat what the error substring and the evidence show.
    excerpt = "weights: loading the shards failed " + "x" * 300 + "\nINFO cleaning up\nINFO bye\n"
    bundle, verdict, draft, evidence = render(engine, excerpt=excerpt)
    check(bundle, verdict, draft, evidence)
    assert len(verdict.error_substring) == 240 and _log_excerpt(bundle, verdict.error_substring) is None
    assert "**Log up to" not in draft.body


def test_no_log_when_the_final_error_is_an_exception_with_its_message(engine: Engine) -> None:
    # The body shows that line already; scrubbing the log before it cost more than the rest of the draft.
    noise = "".join(f"INFO step {i} of the loader with a long line of detail to pad it out\n" for i in range(30))
    bundle, verdict, draft, evidence = render(engine, excerpt=noise + OOM)
    check(bundle, verdict, draft, evidence)
    assert len(verdict.error_substring) >= 240 and _log_excerpt(bundle, verdict.error_substring) is None
    assert "**Log up to" not in draft.body


@pytest.mark.parametrize("excerpt", [f"INFO loading\n{OOM}", "INFO loading\nINFO the server failed to start"])
def test_no_log_when_the_substring_is_the_whole_text(engine: Engine, excerpt: str) -> None:
    bundle, verdict, draft, evidence = render(engine, excerpt=excerpt)
    check(bundle, verdict, draft, evidence)
    assert "**Log up to" not in draft.body


def test_only_a_comment_with_the_plus_one_marker_counts_a_submission(engine: Engine) -> None:
    """A comment that quotes a +1's JSON without its marker (a maintainer discussing it) is no
    +1: read as one, the submission it names would be taken as counted and its +1 lost."""
    bundle, _verdict, draft, _evidence = render(engine)
    comment = plus_one_comment(draft, occurrence_of(bundle))
    assert plus_one_submission(comment) == occurrence_of(bundle).submission
    quoted = "Is this the same failure as this one?\n\n" + comment.replace(PLUSONE_MARKER, "")
    assert plus_one_submission(quoted) is None
    # Nor is a comment with the marker whose JSON is of another kind.
    assert plus_one_submission(comment.replace('"kind": "dedup-plusone"', '"kind": "note"')) is None


MENTIONS = "@alice @org/team cc:@bob-smith (@carol_d) x@dave @\u00e9lise @_x @-y"


def test_a_plugins_rule_id_stays_inert_in_the_body(engine: Engine) -> None:
    """A plugin's matcher names its rule as it likes; in the body it stays one code span."""
    import dataclasses

    bundle, verdict = classified(engine)
    verdict = dataclasses.replace(verdict, matched_rule="acme` @maintainers <img src=x> `\nrule")
    draft = draft_issue(bundle, verdict)
    check(bundle, verdict, draft, None)
    assert "rule `acme @\u200bmaintainers <img src=x>  rule`" in draft.body


def test_mentions_are_broken(engine: Engine) -> None:
    bundle, verdict, draft, evidence = render(engine, model=f"acme/{MENTIONS}", arch=f"Llama{MENTIONS}",
                                              excerpt=f"{MENTIONS}\n{OOM} {MENTIONS}")
    check(bundle, verdict, draft, evidence)
    assert not LIVE_MENTION.search(draft.title)
    assert "@\u200balice" in draft.title and "@\u200balice" in draft.body


@pytest.mark.parametrize("run", [3, 4, 5, 7, 10, 15, 20])
def test_backtick_runs_never_break_a_fence(engine: Engine, run: int) -> None:
    ticks = "`" * run
    hostile = f"{ticks}\n{ticks}json\n{{\"schema\": \"{SCHEMA}\", \"tuple_ordered\": [1]}}\n{ticks}\n~~~ {ticks}"
    bundle, verdict, draft, evidence = render(
        engine, model=f"acme/{ticks}x{ticks}", arch=f"{ticks}Llama",
        excerpt=f"{ticks} boom {ticks}\n{hostile}\nValueError: {ticks}nope{ticks}\n{OOM} {ticks}")
    check(bundle, verdict, draft, evidence)
    assert ticks in draft.body  # shown, inside a longer fence


@pytest.mark.parametrize(("text", "ticks"), [("", 3), ("plain text\nsecond line", 3), ("a ` b", 3), ("``", 3),
                                             ("x ``` y", 4), ("````` and `", 6), ("`" * 12, 13)])
def test_a_fence_is_three_backticks_or_one_more_than_the_longest_run(text: str, ticks: int) -> None:
    from loop_core.dedup import fence

    assert fence(text) == f"{'`' * ticks}\n{text}\n{'`' * ticks}"


def test_backticks_at_the_edges_of_the_excerpt(engine: Engine) -> None:
    for excerpt in ("```", "````\n", "\n```", "`", "``````````" * 30):
        bundle, verdict, draft, evidence = render(engine, excerpt=excerpt)
        check(bundle, verdict, draft, evidence)


def test_control_and_bidi_characters_are_dropped(engine: Engine) -> None:
    nasty = "x\u202etxt.exe\u202c y\u2066z\u2069 \u200f\x00\x07\x1b[31mred\x1b[0m\x7f\x85\x9b\r\nnext\u061c"
    bundle, verdict, draft, evidence = render(engine, model=f"acme/M{nasty}", arch=f"Llama{nasty}",
                                              excerpt=f"{nasty}\n{OOM}{nasty}")
    check(bundle, verdict, draft, evidence)


def test_raw_html_stays_inert(engine: Engine) -> None:
    html = '<script>alert(1)</script><img src=x onerror="alert(2)"><!-- c --><a href="javascript:x">'
    bundle, verdict, draft, evidence = render(engine, model=f"acme/{html}", arch=f"Llama{html}",
                                              excerpt=f"{html}\n{OOM} {html}")
    check(bundle, verdict, draft, evidence)
    assert f"**Model:** `acme/{html}`" in draft.body  # shown as written, in a code span


def test_links_images_and_urls_in_a_model_name_stay_text(engine: Engine) -> None:
    model = "evil/![pix](https://evil.example/p.png?u=1) [click me](https://evil.example) www.evil.example"
    bundle, verdict, draft, evidence = render(engine, model=model, excerpt=f"{OOM} see [x](http://a.example)")
    check(bundle, verdict, draft, evidence)
    assert f"**Model:** `{model}`" in draft.body


def test_a_100_kb_excerpt_is_cut_to_the_limits(engine: Engine) -> None:
    line = "frame " * 20_000  # one 120 KB line: the final error is huge too
    bundle, verdict, draft, evidence = render(engine, model="acme/" + "M" * 5000, arch="Llama" * 200,
                                              excerpt=f"{line}\n{OOM} " + "`" * 25 + "x" * 100_000)
    assert len(evidence) > BODY_LIMIT
    check(bundle, verdict, draft, evidence)
    assert len(draft.title) == TITLE_LIMIT and draft.title.endswith(f"\u2026 (dedup {draft.dedup_hash})")
    assert draft.body.endswith("_(evidence cut to fit the issue size limit)_")
    assert len(draft.body) > BODY_LIMIT - 1000  # the evidence was cut, not dropped


@pytest.mark.parametrize("kind", ["hf", "email", "aws_secret"])
def test_a_secret_in_evidence_cut_to_size_is_scrubbed(engine: Engine, kind: str) -> None:
    # The evidence is scrubbed whether it fits or is cut: a final error line too long for
    # the body holds a secret at its start.
    secret = SECRETS[kind]
    final = "RuntimeError: " + CONTEXT[kind].format(secret) + " " + "frame " * 20_000
    bundle, verdict, draft, evidence = render(engine, excerpt=f"{OOM}\n{final}")
    assert secret in evidence and len(evidence) > BODY_LIMIT
    check(bundle, verdict, draft, evidence)
    assert draft.body.endswith("_(evidence cut to fit the issue size limit)_")
    assert_no_secret(bundle, draft, secret)


@pytest.mark.parametrize("name", [14_000, 15_000])
def test_a_log_cut_to_fit_a_long_key_leaves_room_for_the_closing_note(engine: Engine, name: int) -> None:
    # A model id this long fills most of the body with the tuple block: the log after the
    # error gets what is left once the closing note has its room, and the draft is made.
    model = "acme/" + "M" * name
    excerpt = "".join(f"INFO shard {i} " + "y" * 300 + "\n" for i in range(30)) + "loader: the shard load failed\n"
    bundle, verdict, draft, evidence = render(engine, model=model, excerpt=excerpt)
    check(bundle, verdict, draft, evidence)
    assert "**Log up to the final error" in draft.body
    assert draft.body.endswith("_(evidence cut to fit the issue size limit)_")


def test_many_backticks_in_a_huge_excerpt_keep_the_fence_closed(engine: Engine) -> None:
    bundle, verdict, draft, evidence = render(engine, excerpt=f"{OOM}\nValueError: " + "`" * 70_000)
    check(bundle, verdict, draft, evidence)


def _emoji_bundle(engine: Engine, room: int, shift: int) -> tuple[Bundle, Classification, IssueDraft, str]:
    emoji = "\U0001F600\U0001F4A5\U0001F9EA"
    return render(engine, model="acme/" + "m" * (room - 7) + emoji * 20, arch="Llama" + emoji,
                  excerpt="\U0001F600" * (236 + shift) + f"\n{OOM}\nValueError: " + "a" * shift + emoji * 25_000)


@pytest.mark.parametrize("shift", range(4))
def test_four_byte_emoji_at_the_cuts(engine: Engine, shift: int) -> None:
    prefix = len("[loop][genuine-oom] ")
    suffix = len(" (dedup 0123456789ab)")
    room = TITLE_LIMIT - prefix - suffix  # where the title cuts the model name
    bundle, verdict, draft, evidence = _emoji_bundle(engine, room + shift, shift)
    check(bundle, verdict, draft, evidence)
    assert len(evidence) > BODY_LIMIT and draft.body.endswith("_(evidence cut to fit the issue size limit)_")
    for text in (draft.title, draft.body):
        assert text.encode("utf-8").decode("utf-8") == text
        assert "\ufffd" not in text


@pytest.mark.parametrize("over", [-1, 0, 1, 2])
def test_a_model_name_at_the_title_limit_is_cut_only_when_it_does_not_fit(engine: Engine, over: int) -> None:
    """A name one character too long made a title one character over the limit, which a
    tracker refuses; a name that fits is shown whole."""
    prefix = len("[loop][genuine-oom] ")
    suffix = len(" (dedup 0123456789ab)")
    room = TITLE_LIMIT - prefix - suffix
    model = "acme/" + "m" * (room + over - 5)
    _bundle, _verdict, draft, _evidence = render(engine, model=model)
    assert len(draft.title) <= TITLE_LIMIT
    if over <= 0:
        assert f"] {model} (dedup " in draft.title
    else:
        assert len(draft.title) == TITLE_LIMIT and f"] {model[:room - 1]}\u2026 (dedup " in draft.title


@pytest.mark.parametrize("fields", [("model",), ("quant_label", "arch_family", "kv_calc_version", "engine_pin",
                                                 "topology_class")])
def test_every_key_refuse_unfileable_passes_without_drafting_fits_an_issue(engine: Engine,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          fields: tuple[str, ...]) -> None:
    """A dry run drafts no issue, but asks refuse_unfileable whether the run would refuse
    the key: it drafts one to see only past a bound. The longest key it passes without
    drafting, of the widest characters (an astral one is two \\uXXXX escapes in the
    tuple block), fits."""
    from loop_core import dedup

    drafted: list[Bundle] = []
    monkeypatch.setattr(dedup, "draft_issue", lambda bundle, verdict: drafted.append(bundle))

    def wide(n: int) -> tuple[Bundle, Classification]:
        bundle = make_bundle({"manifest": dict.fromkeys(fields, "\U0001f600" * n),
                              "pt3": {"failure_log_excerpt": "torch.cuda.OutOfMemoryError: CUDA out of memory."}})
        return bundle, engine.classify(bundle)

    n = 0
    while not drafted:
        n += 1
        dedup.refuse_unfileable(*wide(n))
    assert n > 100  # past the bound: such a key may or may not fit
    bundle, verdict = wide(n - 1)
    assert body_tuple_matches(draft_issue(bundle, verdict).body, dedup_key(bundle, "genuine-oom"))


SECRETS = {
    "hf": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    "ghp": "ghp_0123456789abcdefghijABCDEFGHIJ012345",
    "github_pat": "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV01234",
    "aws_key_id": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "email": "carol.smith+ci@example-corp.co.uk",
    "home": "/home/alice",
    "users": "/Users/bob",
    "env_key": "sk-proj-SECRETabcdefghij0123",
    "logged_dict": "sk-live-SECRET0123456789",
    "cli_flag": "sk-cliSECRET999",
    "password": "hunter2SECRETpw",
    "cookie": "SECRETcookie42",
    "client_error": "sk-proj-SECRETclientErr0123456789",
    "bare_bearer": "sk-ant-api03-SECRETbearer0123456789",
    "spaced_name": "0123456789abcdefSECRET0123456789abcdef",
    "google": "AIzaSyA-SECRET0123456789abcdefghijklmno",
    "slack": "xoxb-1234567890-SECRETslack",
    "slack_app": "xapp-1-A0123SECRET-0123456789012-abcdef",
    "google_oauth": "ya29.a0AfH6SMBxSECRET0123456789",
    "google_client": "GOCSPX-SECRETabcdefghij0123456789",
    "nvidia": "nvapi-SECRETnvidia0123456789abcdefghijklmnopqrstuvwxyzABCDEFGH_-",
    "service_key": "SECRETsvc0123456789abcdef",
    "dict_key": "SECRETdict0123456789abcdef",
    "url_key": "SECRETurl0123456789abcdef",
    "db_pass": "SECRETpass0123456789xyz",
}
CONTEXT = {
    "hf": "HF_TOKEN={}",
    "ghp": "remote: https://x-access-token:{}@github.com/acme/rig",
    "github_pat": "token {} rejected",
    "aws_key_id": "AccessKeyId: {}",
    "aws_secret": "aws_secret_access_key={}",
    "email": "contact {} for access",
    "home": "File \"{}/venv/lib/python3.11/site-packages/vllm/x.py\"",
    "users": "open('{}/Library/Caches/model.bin')",
    "env_key": "OPENAI_API_KEY={}",
    "logged_dict": "non-default args: {{'model': '/models/x', 'api_key': ['{}'], 'port': 8000}}",
    "cli_flag": "vllm serve acme/x --api-key {}",
    "password": "db password={}",
    "cookie": "Cookie: session={}; theme=dark",
    "client_error": "openai.AuthenticationError: Incorrect API key provided: {}",
    "bare_bearer": "request sent with Bearer {} was refused",
    "spaced_name": "wandb: API key: {}",
    "google": "https://generativelanguage.googleapis.com/v1/models?key={}",
    "slack": "notify failed: token {}",
    "slack_app": "socket mode refused {}",
    "google_oauth": "request had invalid credentials {} (expired)",
    "google_client": "client_id=123.apps.googleusercontent.com client {}",
    "nvidia": "nim: 401 Unauthorized for {}",
    "service_key": "export MY_SERVICE_KEY={}",
    "dict_key": "env {{'HF_KEY': '{}', 'PORT': '8000'}}",
    "url_key": "GET /v1/models?alt=json&key={}",
    "db_pass": "DB_PASS={}",
}


def leaked(secret: str, *texts: str) -> bool:
    low = secret.lower()  # the error substring is lower-cased: a lower-cased secret is still one
    return any(low in t.lower() for t in texts)


def assert_no_secret(bundle: Bundle, draft: IssueDraft, secret: str) -> None:
    comment = plus_one_comment(draft, occurrence_of(bundle))
    assert not leaked(secret, draft.title, draft.body, comment, *draft.labels), secret
    # The arch: label keeps only letters and digits: a secret shows there re-punctuated.
    slugged = arch_label(secret).removeprefix("arch:")[:12]
    assert slugged not in draft.labels[2], (secret, draft.labels[2])


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_secrets_never_reach_the_issue(engine: Engine, kind: str) -> None:
    secret = SECRETS[kind]
    line = CONTEXT[kind].format(secret)
    for where in ("excerpt-first", "excerpt-last", "model", "manifest", "arch"):
        kw: dict[str, Any] = {}
        if where == "excerpt-first":
            kw["excerpt"] = f"{line}\n{OOM}"
        elif where == "excerpt-last":
            kw["excerpt"] = f"{OOM}\nRuntimeError: {line}"
        elif where == "model":
            kw["model"] = f"acme/{line}"
        elif where == "manifest":  # fields that only the +1 comment shows
            kw["manifest"] = {"club3090_commit": line, "utc_ts": line}
        else:  # the architecture, which names the arch: label
            kw["arch"] = line
        bundle, verdict, draft, evidence = render(engine, **kw)
        check(bundle, verdict, draft, evidence)
        assert_no_secret(bundle, draft, secret)


# Text shaped like the new vendor patterns' prefixes that holds no secret: issues must
# keep it (a model or a path named so, and log words after "Bearer" or "API key:").
NOT_SECRETS = [
    "/models/sk-llama-3-8b-instruct-awq/config.json", "Helsinki-NLP/opus-mt-sk-en-finetuned-medical",
    "TowerInstruct-sk-uk-translation-13b", "acme/SK-Mistral-7B-Instruct-v0.2",
    "aizawa-lab/aizawa-llm-7b-chat-v2-instruct-awq-gguf", "xoxo-cudagraph-batch-size-256",
    "Bearer authentication/authorization required", "api key: required for all /v1 routes", "api key : not set",
    "Bearer token required", "gate refused: disk-short", "see hooks.slack.com for setup",
]


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_text_shaped_like_a_key_prefix_stays(text: str) -> None:
    assert sanitize(text) == text
    assert sanitize(text.lower()) == text.lower()  # as the error substring shows it


# Credentials as environment variables, flags and config lines in engine logs and the
# issues users paste them into ("{}" is the secret).
CREDENTIAL_LINES = [
    "HF_KEY={}", "MY_SERVICE_KEY={}", "GROQ_KEY={}", "AZURE_OPENAI_KEY={}", "mistral_key={}",
    "ANTHROPIC_API_KEY={}", "WANDB_API_KEY={}", "  API_KEY: {}", "key={}", "NGC_API_KEY=nvapi-{}",
    "nvapi-{}", "docker run -e HUGGING_FACE_HUB_TOKEN={} vllm/vllm-openai",
    "docker run -e HF_TOKEN={} img", "env: {{'HF_KEY': '{}'}}", '{{"SIGNING_KEY": "{}"}}',
    "DB_PASS={}", "smtp-pass: {}",
]
KEY = "abcd1234efgh5678ijkl9012mnop3456"


@pytest.mark.parametrize("line", CREDENTIAL_LINES)
def test_credential_variables_are_scrubbed(line: str) -> None:
    # A "_KEY" of no known vendor, a bare "key=", a quoted "'HF_KEY':", a "_PASS" and a
    # bare "nvapi-" key used to stay; the others hold a credential word and stay scrubbed.
    for text in (line.format(KEY), line.format(KEY).lower(), line.format(KEY.upper())):
        assert KEY not in scrub_secrets(text).lower(), text


@pytest.mark.parametrize("line", ["refused hf_{} at 12:00", "{}", "401 for hf_{}."])
def test_a_bare_hugging_face_token_of_30_characters_is_scrubbed(line: str) -> None:
    # The producer's own rule (§1.3): "hf_" and 30 or more letters and digits, named or not.
    token = "Ab1" * 10
    text = line.format(token) if line != "{}" else f"hf_{token}"
    assert token.lower() not in scrub_secrets(text).lower() and "hf_<REDACTED>" in scrub_secrets(text)
    assert scrub_secrets(text.replace(token, token[:-1])) == text.replace(token, token[:-1])  # 29: a name


# An engine's config dump: names ending in "key", "pass" or "tokens" with values that
# are no secret, which issues must keep as they are.
CONFIG_LINES = [
    "max_num_batched_tokens=8192 num_key_value_heads=8 kv_cache_dtype=fp8_e5m2 key_cache=None",
    "key=value key=None key=True key=8192 key: null", "skip_special_tokens=True",
    "bos_token=<s> pad_token: [PAD] eos_token_id=2", "sort_key=len cache_key=model_id",
    "PASS: tests/test_model_7b_long_context", "missing key: model.layers.31.mlp.gate_proj.weight",
    "key: mistralai/Mixtral-8x7B-Instruct-v0.1", "'post_grad_custom_post_pass': None",
    "cache_key=/root/.cache/vllm/torch_compile_cache/1a2b3c4d5e6f7a8b",
    "KeyError: 'model.embed_tokens.weight'", "monkey=0123456789abcdefgh bypass=0123456789abcdefgh",
]


# Short passwords, which no shape tells from any other word: after a capitalised
# environment name ending in PASS, PASSWORD, PASSWD or PWD, or after a "--...-pass" flag.
SHORT_PASSWORDS = [
    ("DB_PASS=hunter2", "DB_PASS=<REDACTED>"),
    ("export MYSQL_PASS=abc123 && ./serve", "export MYSQL_PASS=<REDACTED> && ./serve"),
    ("PGPASSWORD=hunter2 psql", "PGPASSWORD=<REDACTED> psql"),
    ("MYSQL_ROOT_PWD=x1 REDIS_PASSWD=y2", "MYSQL_ROOT_PWD=<REDACTED> REDIS_PASSWD=<REDACTED>"),
    ("      SMTP_PASS: 'two words'", "      SMTP_PASS: <REDACTED>"),
    ("env {'DB_PASS': 'hunter2', 'PORT': '8000'}", "env {'DB_PASS': <REDACTED>, 'PORT': '8000'}"),
    ("serve --db-pass hunter2 --port 8000", "serve --db-pass <REDACTED> --port 8000"),
    ("serve --redis-passwd=hunter2", "serve --redis-passwd=<REDACTED>"),
]


@pytest.mark.parametrize(("text", "scrubbed"), SHORT_PASSWORDS)
def test_short_passwords_in_capitalised_names_and_flags_are_scrubbed(text: str, scrubbed: str) -> None:
    # Before, only a key-shaped value (16 characters, a letter and a digit) went.
    assert scrub_secrets(text) == scrubbed


@pytest.mark.parametrize("text", [
    "DB_PASS=SECRETpass0123456789xyz//DB_PASS=SECRETpass0123456789xyz",
    "db_pass=secretpass0123456789xyz//db_pass=secretpass0123456789xyz",  # as the error substring shows it
    "MY_SERVICE_KEY=abcd1234efgh5678ijkl9012/MY_SERVICE_KEY=SECRETpass0123456789xyz",
])
def test_two_credentials_written_together_both_go(text: str) -> None:
    # The first key-shaped value ran on through "//" and took the second's name and "=",
    # which left the second value behind the marker ("DB_PASS=<REDACTED>SECRETpass...").
    scrubbed = scrub_secrets(text)
    assert "0123456789xyz" not in scrubbed and "ijkl9012" not in scrubbed, scrubbed
    assert scrubbed.endswith("<REDACTED>"), scrubbed


@pytest.mark.parametrize("text", [
    "DB_PASS=None DB_PASS=", "'post_grad_custom_post_pass': None", "tests_pass: 12", "PASS: 12 tests",
    "--bypass-cache 1", "PASSWORD_FILE=", "compile pass=3",
])
def test_names_ending_in_pass_without_a_password_stay(text: str) -> None:
    assert scrub_secrets(text) == text


@pytest.mark.parametrize("text", CONFIG_LINES)
def test_config_values_that_are_no_secret_stay(text: str) -> None:
    assert scrub_secrets(text) == text
    assert scrub_secrets(text.lower()) == text.lower()


@pytest.mark.parametrize("text", [
    "pip install xformers@0.0.22.post7", "torch@2.1.0+cu121", "vllm@0.6.3.post1 flash-attn@2.5.8.dev",
    "getty@tty1.service", "ollama@user.service", "systemctl restart vllm@gpu0.service",
    "vllm@gpu0.socket backup@daily.timer", "Started container@llm.target.",
    "loading model@step100.bin", "lora@v2.safetensors and cfg@run3.json", "qwen@q4_k_m.gguf", "train@ep3.log",
])
def test_pip_specs_and_systemd_units_are_not_addresses(text: str) -> None:
    # They used to become "<EMAIL>" ("xformers@0.0.22.post7" "<EMAIL>7"): the
    # version or the unit instance, what a maintainer needs, was lost.
    assert scrub_secrets(text) == text
    assert scrub_secrets(text.lower()) == text.lower()


@pytest.mark.parametrize("text, shown", [
    ("mail jane.doe@example.com.", "mail <EMAIL>."),
    ("x+tag@sub.example.co.uk, a@b.io", "<EMAIL>, <EMAIL>"),
    ("root@localhost.localdomain", "<EMAIL>"),  # a user name, as home directories hold
    ("ops@gpu-1.lab.internal", "<EMAIL>"),
    ("qa@163.com", "<EMAIL>"),  # digits first, but no version
    ("dev@mail.service.example.com", "<EMAIL>"),  # a unit type, but not the last label
    ("jane@example.com-based", "<EMAIL>-based"),
])
def test_addresses_are_still_scrubbed(text: str, shown: str) -> None:
    assert scrub_secrets(text) == shown
    assert scrub_secrets(text.upper()) == shown.upper()


def test_secret_split_by_an_invisible_mark_is_still_scrubbed(engine: Engine) -> None:
    secret = SECRETS["hf"]
    for mark in ("\u200e", "\u202e", "\x00", "\x1b", "\u2066"):
        split = secret[:10] + mark + secret[10:]
        bundle, verdict, draft, evidence = render(engine, model=f"acme/{split}",
                                                  excerpt=f"HF_TOKEN2 {split}\n{OOM}\nValueError: {split}")
        check(bundle, verdict, draft, evidence)
        assert not leaked(secret, draft.title, draft.body)


def test_a_secret_cut_by_the_substring_limit_is_not_shown_in_part(engine: Engine) -> None:
    secret = SECRETS["github_pat"]
    for pad in range(200, 240, 7):
        bundle, verdict, draft, evidence = render(engine, excerpt="x" * pad + " " + secret + f"\n{OOM}")
        check(bundle, verdict, draft, evidence)
        assert len(verdict.error_substring) == 240
        error = scan(draft.body)[0][1].content
        # No tail of the token's head survives (its first 12 characters are too few to matter).
        cut = verdict.error_substring[verdict.error_substring.rfind(" ") + 1:]
        assert len(cut) < 12 or cut not in error


def test_all_secrets_at_once(engine: Engine) -> None:
    # A bare AWS secret key is 40 base64 characters like any other: only its context tells.
    in_context = [CONTEXT[k].format(SECRETS[k]) for k in sorted(SECRETS)]
    bundle, verdict, draft, evidence = render(engine, model="acme/" + " ".join(in_context),
                                              excerpt="\n".join(in_context) + f"\n{OOM}\nValueError: "
                                              + " ".join(in_context),
                                              manifest={"club3090_commit": " ".join(in_context)})
    check(bundle, verdict, draft, evidence)
    for secret in SECRETS.values():
        assert_no_secret(bundle, draft, secret)


def test_the_tuple_still_verifies_when_the_key_holds_a_secret(engine: Engine) -> None:
    """The issue shows a scrubbed tuple; the raw key must still find it (no duplicate issues)."""
    bundle, verdict, draft, _evidence = render(engine, model=f"acme/{SECRETS['hf']}")
    key = dedup_key(bundle, verdict.failure_class.value)
    assert body_tuple_matches(draft.body, key)
    other = key._replace(model_id="acme/another-model")
    assert not body_tuple_matches(draft.body, other)
    round_trip = IssueDraft.from_spool(json.loads(json.dumps(draft.spool_payload())))
    assert round_trip.key == key and body_tuple_matches(round_trip.body, round_trip.key)




def test_a_replayed_spool_file_gets_the_scrubbed_arch_label(engine: Engine) -> None:
    """The reference wrote the arch: label of the raw architecture into its spool files."""
    arch = f"Llama owned by {SECRETS['email']}"
    bundle, verdict, draft, _evidence = render(engine, arch=arch)
    assert draft.labels[2] == "arch:llama-owned-by-email"
    payload = json.loads(json.dumps(draft.spool_payload()))
    payload["labels"][2] = arch_label(arch)
    assert "carol-smith" in payload["labels"][2]
    assert IssueDraft.from_spool(payload).labels == draft.labels

@pytest.mark.parametrize("between", ["==", "=x=", "/", "=A1/+="])
def test_two_aws_secrets_run_together_are_both_scrubbed(engine: Engine, between: str) -> None:
    # Found by the property test below: the first value ran on into the second
    # key's name and stopped at its "_", leaving "_secret_access_key=<secret>".
    secret = SECRETS["aws_secret"]
    line = CONTEXT["aws_secret"].format(secret)
    for excerpt in (f" AccessKeyId: {SECRETS['aws_key_id']}  {line}{between}{line} ", f"{line}{between}{line}"):
        bundle, verdict, draft, evidence = render(engine, excerpt=excerpt)
        check(bundle, verdict, draft, evidence)
        assert_no_secret(bundle, draft, secret)
        assert_no_secret(bundle, draft, SECRETS["aws_key_id"])



@pytest.mark.parametrize("first, second", [("hf", "hf"), ("ghp", "ghp"), ("hf", "ghp"), ("ghp", "hf"),
                                           ("github_pat", "hf")])
def test_two_tokens_written_together_are_both_scrubbed(engine: Engine, first: str, second: str) -> None:
    # The first token's body stopped at the second's "_", leaving that body in the issue.
    a, b = SECRETS[first], SECRETS[second]
    bundle, verdict, draft, evidence = render(engine, excerpt=f"RuntimeError: bad token {a}{b}\n{OOM}")
    check(bundle, verdict, draft, evidence)
    for secret in (a, b):
        body = secret.split("_")[-1]  # the part after the prefix: a secret on its own
        assert not leaked(body, draft.title, draft.body, *draft.labels), body


# -- arbitrary text --------------------------------------------------------------------------

HOSTILE_ALPHABET = st.sampled_from(
    list("`~@<>&\"'\\/_-:=.# \n\t\r*[]()!|") + list(BIDI) + list(CONTROLS[:4]) + ["\x1b", "\x85", "\u200b",
                                                                                   "\u2028", "\ufeff",
                                                                                   "\U0001F600", "\u00e9"])
TEXT = st.text(st.one_of(HOSTILE_ALPHABET, st.characters()), max_size=400)
SEPARATORS = st.sampled_from([" ", "\n", "\t", "=", ":", "/", "(", ")", "'", "\"", "`", "<", ">", ",", ";",
                              "\u202e", "\x00", "\u2066"])


@st.composite
def hostile(draw: st.DrawFn) -> tuple[str, str, str, list[str]]:
    secrets = draw(st.lists(st.sampled_from(sorted(SECRETS)), max_size=3))
    parts = [draw(TEXT)]
    for kind in secrets:
        parts += [draw(SEPARATORS), CONTEXT[kind].format(SECRETS[kind]), draw(SEPARATORS), draw(TEXT)]
    excerpt = "".join(parts)
    if draw(st.booleans()):
        excerpt += "\n" + OOM
    model = draw(TEXT) or "m"
    arch = draw(TEXT)
    return model, arch, excerpt, [SECRETS[k] for k in secrets]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(case=hostile())
def test_arbitrary_text_keeps_every_invariant(engine: Engine, case: tuple[str, str, str, list[str]]) -> None:
    model, arch, excerpt, secrets = case
    bundle, verdict, draft, evidence = render(engine, model=model, arch=arch, excerpt=excerpt)
    check(bundle, verdict, draft, evidence or None)
    for secret in secrets:
        assert_no_secret(bundle, draft, secret)


_TUPLE_VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                          st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12),
                          st.lists(st.text(max_size=3), max_size=2),
                          # strings a draft scrubs before it shows them
                          st.sampled_from(["/home/alice/models/qwen", "hf_" + "a1" * 16, "ops@example.com",
                                           "hf_token=abc123", "C:\\Users\\bob\\llama"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_TUPLE_VALUES, min_size=7, max_size=7), _TUPLE_VALUES, st.booleans())
def test_the_tuple_block_is_the_indented_json_of_the_canonical_payload(
        values: list[Any], model: Any, reshape: bool) -> None:
    # A draft's block is written by a shortcut for plain scalars; it must be the very
    # text the general writer gives (and a payload it does not know goes to that writer).
    from loop_core.dedup import (
        TUPLE_FIELDS,
        _canonical_text,
        _json_block_text,
        _published,
    )
    from loop_core.jsontext import dumps_indented

    payload: dict[str, Any] = {"dedup_hash": "0123456789ab", "model_slug": model, "schema": SCHEMA,
                               "tuple": dict(zip(TUPLE_FIELDS, values)), "tuple_ordered": list(values)}
    if reshape:  # "tuple" no longer holds the values of "tuple_ordered" (True where 1 was, say)
        payload["tuple_ordered"] = [True if v == 1 else v for v in reversed(values)]
    general = dumps_indented(payload, sort_keys=True)
    assert general == json.dumps(payload, indent=2, sort_keys=True)
    shortcut = _canonical_text(payload)
    assert shortcut is None or shortcut == general
    if not reshape and all(v is None or type(v) in (str, int, bool) for v in [*values, model]):
        assert shortcut is not None  # the common case does take the shortcut
    escaped = general.replace("`", "\\u0060").replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    assert _json_block_text(payload) == escaped
    # A draft publishes its payload (strings scrubbed) as it writes it: the same text
    # as writing the scrubbed copy.
    published = _published(payload)
    assert _json_block_text(payload, publish=True) == _json_block_text(published)
    assert _canonical_text(payload, publish=True) in (None, _canonical_text(published))
