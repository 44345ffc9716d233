"""Deduplicated failure issues: the effective key, labels, title, body, +1 comments.

Wire-compatible with the reference (CONTRACTS §5): the same three labels, the
same title shape, the same machine-readable tuple block (marker line plus a
fenced JSON payload) so issues filed by either tool dedup against each other,
and the same body-tuple verification before any +1.

Text that reaches a tracker is untrusted. Before anything leaves the machine
it is scrubbed of secrets (Hugging Face, GitHub, AWS, OpenAI, Anthropic,
Google, Slack and NVIDIA keys, credential-named values, e-mail addresses,
home-directory user names), stripped of control and bidi
characters, and kept inert: mentions are broken, raw HTML is escaped outside
code, and code fences are longer than any backtick run they hold. Titles fit
GitHub's 256 characters and bodies its 65,536.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import litscan
from .bundle import Bundle, path_text
from .errors import BundleError
from .jsontext import dumps_indented, scalar_text
from .keys import (
    ARCH_PREFIX,
    SUBSTRING_LIMIT,
    DedupKey,
    arch_label,
    dedup_key,
    dedup_labels,
    error_source,
    normalize_text,
)
from .pickling import pickled_by_fields
from .verdict import Classification
from .view import View, final_names_exception

__all__ = [
    "BODY_LIMIT",
    "IssueDraft",
    "Occurrence",
    "PLUSONE_MARKER",
    "SCHEMA",
    "TITLE_LIMIT",
    "TUPLE_MARKER",
    "body_tuple_matches",
    "canonical_payload",
    "draft_issue",
    "fence",
    "occurrence_of",
    "parse_body_tuple",
    "plus_one_comment",
    "plus_one_submission",
    "published_labels",
    "refuse_unfileable",
    "sanitize",
    "scrub_secrets",
]

SCHEMA = "club3090-loop-dedup-v1"
SPOOL_KIND = "would-be-issue"  # the "kind" of a spool file (§5.8)
TUPLE_MARKER = "<!-- club3090-loop-dedup canonical-tuple -->"
PLUSONE_MARKER = "<!-- club3090-loop-dedup +1 -->"
TITLE_LIMIT = 256
BODY_LIMIT = 65_536
# A draft leaves this much of an issue body for a tracker's own marker (the github
# tracker's first-submission line), so adding one never cuts a fence.
MARKER_ROOM = 256
DRAFT_LIMIT = BODY_LIMIT - MARKER_ROOM
TUPLE_FIELDS = DedupKey._fields

# Token patterns need no word boundary before them ("MY_hf_..." is a token too), and
# match any case: the error substring is lower-cased before it is shown. A token's
# body takes "_" too, so two tokens written one after the other ("hf_AAA...hf_BBB...")
# go as one, instead of the first stopping at the second's "_" and leaving its body.
# The start of a credential assignment up to its value (group 1 is left open: each
# pattern below closes it after what it keeps).
LIST_REACH = 256  # characters of a logged list of credentials that are scrubbed as one
_CREDENTIAL = (r"(?i)(?<![A-Za-z0-9])((?:token|api[_-]?key|secret(?:[_-]?key)?|password|passwd|access[_-]?key|"
               r"private[_-]?key|credentials?)\\?[\"']?\s*[=:]\s*")
_SECRETS = (
    # First, so that no pattern below takes the header's name ("...KEY==Cookie: ...")
    # into a value of its own: a Cookie header's name=value pairs, written as a header
    # or as a logged dict ("'Cookie': 'sid=...'"), up to the first space (the error
    # substring has its newlines collapsed: what follows the header is kept).
    (re.compile(r"(?i)((?:set-)?cookie[\"']?\s*[:=]\s*[\"']?)(?:(?:(?!(?:set-)?cookie\b)[^\s;=,\"'])+=(?:(?!(?:set-)?cookie\b)[^\s;,\"'])*(?:;[^\S\n]*)?)+"),
     r"\1<REDACTED>"),
    (re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9_]{30,}"), "hf_<REDACTED>"),
    (re.compile(r"(?<![A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9_]{30,}|github_pat_[A-Za-z0-9_]{20,})"),
     "<REDACTED-GITHUB-TOKEN>"),
    (re.compile(r"(?i)(?<![A-Za-z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}(?![A-Za-z0-9])"),
     "<REDACTED-AWS-KEY>"),
    # The value takes "_" too, which AWS secrets never hold: otherwise a value run
    # into a second "aws_secret_access_key=..." ("KEY==aws_secret...") stopped inside
    # that key's name, and the second secret, its key cut, was never recognised.
    (re.compile(r"(?i)\b(aws_secret_access_key|aws_session_token)(\s*[=:]\s*)[\"']?[A-Za-z0-9/+=_]{16,}[\"']?"),
     r"\1\2<REDACTED>"),
    # Vendor keys recognisable without a name before them, as API clients print them
    # ("Incorrect API key provided: sk-proj-..."), each in its own shape only, so that a
    # model or file named like one ("opus-mt-sk-en", "sk-llama-3-8b", "aizawa-lab",
    # "xoxo-...") is left alone: OpenAI and Anthropic (sk-proj-, sk-svcacct-, sk-admin-,
    # sk-ant-api03-, a bare sk- of 32 or more letters and digits), Google API keys
    # (AIzaSy...), OAuth tokens (ya29.) and client secrets (GOCSPX-), Slack tokens
    # (xoxb-<digits>-..., xapp-<digit>-...) and webhook paths. The text may be
    # lower-cased (the error substring is): every pattern ignores case.
    (re.compile(r"(?i)(?<![A-Za-z0-9_-])sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}|"
                r"ant-[a-z]+\d*-[A-Za-z0-9_-]{20,}|[A-Za-z0-9]{32,})"), "sk-<REDACTED>"),
    (re.compile(r"(?i)(?<![A-Za-z0-9_-])AIzaSy[0-9A-Za-z_-]{33}(?![0-9A-Za-z_-])"), "AIza<REDACTED>"),
    (re.compile(r"(?i)(?<![A-Za-z0-9])(ya29\.|GOCSPX-)[0-9A-Za-z_-]{20,}"), r"\1<REDACTED>"),
    (re.compile(r"(?i)(?<![A-Za-z0-9])(?:xox[abeprs]-\d+-|xapp-\d-)[A-Za-z0-9-]{8,}"), "xox-<REDACTED>"),
    # NVIDIA NGC and build.nvidia.com keys ("nvapi-" and some 64 URL-safe base64
    # characters), found by their shape alone: NIM users paste them under any name, or none.
    (re.compile(r"(?i)(?<![A-Za-z0-9_-])nvapi-[A-Za-z0-9_-]{32,}"), "nvapi-<REDACTED>"),
    (re.compile(r"(?i)(hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_-]+"), r"\1<REDACTED>"),
    # Not None/null/true/false: vLLM and TGI log every argument, "api_key=None" included.
    (re.compile(r"(?i)\b((?:hf|hugging_face_hub|huggingface|github|gh|openai|api)_?(?:token|key))(\s*[=:]\s*)"
                r"(?!(?:none|null|true|false)\b)[^\s\"',;\[]+"),
     r"\1\2<REDACTED>"),
    # Any name that ends in a credential word, as an assignment, an environment
    # variable or a logged dict ("OPENAI_API_KEY=sk-...", "'api_key': ['sk-...']",
    # '"hf_token": "..."', "password=...", "x-api-key: ..."): a list of values whole,
    # a quoted value to its closing quote (spaces and commas included), a bare value
    # to the next space or punctuation. Not a tokenizer's special token ("<s>",
    # "[PAD]") nor None/null/true/false.
    # (The name is matched from its credential word on, which must start a word or follow
    # a "_", "." or "-": trying a whole name at every position of a long log cost more.)
    # (A list is looked for up to LIST_REACH characters: unbounded, a line of many
    # "api_key=['" and no "]" was scanned to its end from each of them, quadratic.)
    (re.compile(_CREDENTIAL + r"\[)(?=\s*[\"'])[^\]\n]{0,%d}(\])" % LIST_REACH), r"\1<REDACTED>\2"),
    (re.compile(_CREDENTIAL + r")b?\\?(?:\"(?![<\[])[^\"\n]+\"|'(?![<\[])[^'\n]+')"), r"\1'<REDACTED>'"),
    (re.compile(_CREDENTIAL + r")(?![<\[]|(?:none|null|true|false)\b)[^\s\"',;\[\])}]+"), r"\1<REDACTED>"),
    # Any other name whose last word is "key", or "pass" after another word ("MY_SERVICE_KEY=",
    # "GROQ_KEY", "'HF_KEY': '...'", "DB_PASS=", a URL's "&key="; not a test's "PASS:"). Those
    # words end harmless names too ("sort_key=len", "cache_key=None", "missing key:
    # model.layers.0...", "post_grad_custom_post_pass"), so the value must open like a key:
    # 16 or more letters, digits and "_+/" or "_+-" (one base64 alphabet or the other, so no
    # model id, "mistralai/Mixtral-8x7B-v0.1"), a letter and a digit among them, no path. The
    # rest of the value goes with it, a JWT's dotted parts and base64 padding too. A short
    # password stays ("DB_PASS=hunter2"); a long hash goes as a key would. "key=8192",
    # "num_key_value_heads=8" and "key_cache=..." stay as they are.
    (re.compile(r"(?i)(?<![A-Za-z0-9])((?:key|(?<=[_.-])pass)\\?[\"']?\s*[=:]\s*\\?[\"']?)(?![/<\[])"
                r"(?:(?=[A-Za-z0-9_+/]*\d)(?=[A-Za-z0-9_+/]*[A-Za-z])[A-Za-z0-9_+/]{16,}|"
                r"(?=[A-Za-z0-9_+-]*\d)(?=[A-Za-z0-9_+-]*[A-Za-z])[A-Za-z0-9_+-]{16,})"
                r"[A-Za-z0-9_+/-]*(?:\.[A-Za-z0-9_+/-]{8,})*=*"),
     r"\1<REDACTED>"),
    # A password in an environment variable, which the shell, docker compose and systemd
    # write in capitals ("DB_PASS=hunter2", "PGPASSWORD=...", "SMTP_PASS: 'x y'",
    # "MYSQL_ROOT_PWD=..."): any value, a short one too, as no shape tells a password.
    # Only a capitalised name: lower-case names ending in "pass" are compiler passes
    # ("post_grad_custom_post_pass") and test tallies ("tests_pass: 12") as often.
    (re.compile(r"(?<![A-Za-z0-9])([A-Z][A-Z0-9_]*(?:_PASS|PASSWORD|PASSWD|_PWD)\\?[\"']?[^\S\n]*[=:][^\S\n]*)"
                r"(?:\\?\"[^\"\n]+\"|'[^'\n]+'|(?![<\[]|(?:None|NONE|null|true|false)\b)[^\s\"',;\[\])}]+)"),
     r"\1<REDACTED>"),
    # The same as a command-line flag: "--api-key sk-...", "--hf-token=hf_...".
    (re.compile(r"(?i)(--(?:[a-z0-9]+-)*(?:token|api-key|key|secret|password|passwd|pass))(\s+|=)([\"']?)(?![-<])"
                r"[^\s\"']+"),
     r"\1\2\3<REDACTED>"),
    (re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?(?:bearer|token|basic)\s+)[^\s\"']+"), r"\1<REDACTED>"),
    # A bearer token without its header name (a client's "Bearer sk-..." in a message):
    # long enough to be a token and holding a digit, so "Bearer token required" and
    # "Bearer authentication/authorization" are left alone.
    (re.compile(r"(?i)\b(bearer\s+)(?![<])(?=[A-Za-z._~+/=-]*\d)[A-Za-z0-9._~+/=-]{16,}"), r"\1<REDACTED>"),
    # "API key: <value>" with a space in the name (wandb's login prompt): only a value
    # shaped like a key (16 or more characters, a digit among them), not "API key: required".
    (re.compile(r"(?i)\b(api key\s*[=:]\s*)(?=[^\s\"',;]*\d)[^\s\"',;]{16,}"), r"\1<REDACTED>"),
    # An e-mail address: a domain that ends in a label of letters, the whole label (not
    # the "post" of "post7"). Not a pip spec ("xformers@0.0.22.post7", "vllm@1.2.3.dev":
    # a domain that starts as a version number does) nor a systemd unit instance
    # ("getty@tty1.service", "vllm@gpu0.socket"), whose last label is a unit type and
    # no top-level domain; engine logs and issue bodies hold both, and the version is
    # what a maintainer needs. Nor a file named with an "@" ("model@step100.bin",
    # "lora@v2.safetensors"): weight, config and log file types are no top-level
    # domain either (".pt" and ".py" are: such a name stays an address). A host-only
    # address ("root@localhost.localdomain") is still one: its local part is a user
    # name, which home directories hide too.
    # The look-behind keeps this linear: without it a long run of letters is tried
    # from every position (quadratic: a 100 KB log line took minutes).
    (re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@(?!\d+\.\d)[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\."
                r"(?!(?ai:service|socket|target|timer|path|mount|automount|swap|slice|scope|device|"
                r"bin|gguf|safetensors|ckpt|pth|onnx|json|yaml|yml|txt|log)(?!\.?[A-Za-z0-9]))"
                r"[A-Za-z]{2,}(?!\.?[A-Za-z0-9])"),
     "<EMAIL>"),
    (re.compile(r"(?i)/(?:home|Users)/[^/\s\"'`]+"), "~"),
    (re.compile(r"(?i)\b([A-Z]:\\Users\\)[^\\\s\"']+"), r"~"),
    # Last: what is glued to a redaction is the rest of what it redacted. A key-shaped value
    # runs on through "/" and base64 padding, so in two assignments written together
    # ("DB_PASS=<key>//DB_PASS=<key>") the first took the second's name and "=", and the
    # second value, its name gone, was left behind the marker.
    (re.compile(r"(?<=<REDACTED>)[^\s\"',;\[\])}<>]+"), ""),
)
# C0/C1 controls except tab and newline, zero-width spaces and joiners (which split a
# token so no pattern sees it), the bidi marks (ALM, LRM, RLM, embeddings, overrides,
# isolates), the BOM, and lone surrogates (which no tracker can store).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060\u2066-\u2069"
                       r"\ufeff\ud800-\udfff]")
_MENTION = re.compile(r"@(?=[\w-])")
_BACKTICKS = re.compile(r"`+")
# Per pattern of _SECRETS, literals one of which every match holds, and whether
# they are to be looked for in the lower-cased text (the pattern ignores case).
# Most text holds none of them: a substring test then spares the regex. Sound
# for ASCII text, where lower() is exact; other text runs every pattern.
_SECRET_GUARDS: tuple[tuple[tuple[str, ...], bool], ...] = (
    (("cookie",), True),
    (("hf_",), False),
    (("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), False),
    (("akia", "asia", "agpa", "aida", "aroa"), True),
    (("aws_s",), True),
    (("sk-",), True),
    (("aizasy",), True),
    (("ya29.", "gocspx-"), True),
    (("xox", "xapp-"), True),
    (("nvapi-",), True),
    (("hooks.slack.com/",), True),
    (("token", "key"), True),
    (("token", "key", "secret", "passw", "credential"), True),
    (("token", "key", "secret", "passw", "credential"), True),
    (("token", "key", "secret", "passw", "credential"), True),
    (("key", "pass"), True),
    (("PASS", "PWD"), False),
    (("--",), False),
    (("authorization",), True),
    (("bearer",), True),
    (("api key",), True),
    (("@",), False),
    (("/home/", "/users/"), True),
    ((":\\users\\",), True),
    (("<redacted>",), True),
)
# Any of those literals, in the lower-cased text: most text holds none and is done at once.
_HINTS = tuple(dict.fromkeys(lit.lower() for lits, _ in _SECRET_GUARDS for lit in lits))


def _hint_finder(package: Any) -> Callable[[str], bool]:
    """Whether a lower-cased ASCII text holds one of :data:`_HINTS`: one Aho-Corasick
    pass with the ``ahocorasick_rs`` module ``package``, else a regex alternation of
    them, whose search costs about five times as much (10 µs for 500 characters)."""
    if package is not None:
        automaton = package.BytesAhoCorasick([hint.encode("ascii") for hint in _HINTS])
        find = automaton.find_matches_as_indexes
        return lambda text: bool(find(text.encode("ascii")))
    search = re.compile("|".join(map(re.escape, _HINTS))).search
    return lambda text: search(text) is not None


_has_hint = _hint_finder(litscan.package())


# Texts up to this long are remembered once scrubbed: an issue draft scrubs the same
# tuple values, names and labels as the drafts before it (nine in ten calls repeat).
SCRUB_MEMO_CHARS = 512


def scrub_secrets(text: str) -> str:
    """Replace tokens, e-mail addresses and home-directory user names."""
    if len(text) <= SCRUB_MEMO_CHARS:
        return _scrub_short(text)
    return _scrub(text)


@functools.lru_cache(maxsize=4096)
def _scrub_short(text: str) -> str:
    return _scrub(text)


def _scrub(text: str) -> str:
    if not text.isascii():
        for pattern, replacement in _SECRETS:
            text = pattern.sub(replacement, text)
        return text
    lowered = text.lower()
    if not _has_hint(lowered):
        return text
    low: str | None = lowered
    for (pattern, replacement), (literals, ignore_case) in zip(_SECRETS, _SECRET_GUARDS):
        if ignore_case:
            if low is None:
                low = text.lower()
            hay = low
        else:
            hay = text
        if not any(lit in hay for lit in literals):
            continue  # no match possible: the text stays as it is
        scrubbed = pattern.sub(replacement, text)
        if scrubbed != text:  # a later pattern looks at the text this one left
            text, low = scrubbed, None
    return text


def sanitize(text: Any, *, inline: bool = False) -> str:
    """Untrusted text made safe to publish: secrets scrubbed, controls dropped, mentions broken.

    ``inline`` additionally collapses newlines (for titles and table cells).
    """
    text = str(text)
    if len(text) <= SCRUB_MEMO_CHARS:  # model names, rule ids: the same in many drafts
        return _sanitize_short(text, inline)
    return _sanitize(text, inline)


@functools.lru_cache(maxsize=4096)
def _sanitize_short(text: str, inline: bool) -> str:
    return _sanitize(text, inline)


def _sanitize(text: str, inline: bool) -> str:
    out = scrub_secrets(text)
    # isprintable() is false for every character _CONTROLS drops (and for "\r"):
    # a printable text is already clean, and most are.
    cleaned = out if out.isprintable() else _CONTROLS.sub("", out.replace("\r\n", "\n").replace("\r", "\n"))
    # Again: dropping a control or bidi mark may have joined the halves of a token. Unless
    # neither step changed a thing: the same text scrubs to the same text.
    out = cleaned if cleaned == text else scrub_secrets(cleaned)
    if "@" in out:
        out = _MENTION.sub("@\u200b", out)
    if inline:
        out = " ".join(out.split())
    return out


def fence(text: str) -> str:
    """A fenced code block that ``text`` cannot break out of (CommonMark: a longer fence)."""
    if "`" not in text:  # nearly always; a regex pass to find no backtick cost more than the rest of it
        return f"```\n{text}\n```"
    longest = max((len(m.group()) for m in _BACKTICKS.finditer(text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}\n{text}\n{ticks}"


def _fenced_within(text: str, room: int) -> str:
    """``fence(text)``, the text cut (and marked with an ellipsis) so the whole block fits ``room``.

    The block is always whole, closing fence included; "" when not even an
    empty one fits. Cutting text never lengthens its fence, so two passes do.
    """
    block = fence(text)
    keep = len(text)
    while len(block) > room:
        if keep == 0:
            return ""
        keep = max(0, keep - (len(block) - room) - 1)
        block = fence(text[:keep] + "\u2026")
    return block


def _shown_substring(bundle: Bundle, substring: str) -> str:
    """The error substring as the issue shows it: sanitized, and never half a secret.

    The substring is the first 240 characters of the error text, so a token
    may straddle the cut and be too short to recognise. Scrubbed with the
    rest of the text it is recognised; keep only what both scrubbings share.
    """
    shown = sanitize(substring)
    if len(substring) < SUBSTRING_LIMIT:
        return shown
    # What follows the cut, as far as any token reaches; not the whole (maybe huge) text,
    # which normalize_text then reads only the start of.
    whole = normalize_text(error_source(bundle)[1], len(substring) + 256)
    if not whole.startswith(substring):
        return shown
    scrubbed = sanitize(whole)
    if scrubbed.startswith(shown):
        return shown
    return os.path.commonprefix([shown, scrubbed]) + "\u2026"


# The log shown under the error: the lines of the error text that lead up to its final
# error (whose traceback or loader messages say what failed), each line and the whole cut.
LOG_LINES = 40
LOG_LINE_CHARS = 1000
LOG_CHARS = 8000


def _log_excerpt(bundle: Bundle, substring: str) -> tuple[str, str] | None:
    """``(heading, text)``: the last :data:`LOG_LINES` lines of the error text up to
    and including its final error line, sanitized; None when the error substring
    already shows the whole text or there is a single line to show.

    The error substring is the text's first 240 characters and the final error one
    line of it; what failed is often between them (llama.cpp names the missing
    architecture lines before its last message, a traceback's cause comes before
    the wrapper the walk skips), and without this the issue would not say.
    """
    if len(substring) < SUBSTRING_LIMIT:
        return None  # the substring is the whole text
    final = View.of(bundle).signal("final_error")
    if final_names_exception(final):
        # The exception and its message are in the body already. Scrubbing the log
        # before it cost each such draft more than all the rest of the draft did.
        return None
    text = error_source(bundle)[1]
    end = len(text)
    at = text.rfind(final) if final else -1
    if at >= 0:
        stop = text.find("\n", at + len(final))
        end = len(text) if stop < 0 else stop
    start = end  # back LOG_LINES line starts from the end of the final error's line
    for _ in range(LOG_LINES):
        if start <= 0:
            break
        start = text.rfind("\n", 0, start - 1) + 1
    # Whole lines are scrubbed (a token never spans two), then cut: a cut never shows half a secret.
    lines = sanitize(text[start:end]).split("\n")
    first = text.count("\n", 0, start) + 1
    while lines and not lines[0].strip():
        lines.pop(0)
        first += 1
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) < 2:
        return None
    last = first + len(lines) - 1
    lines = [line if len(line) <= LOG_LINE_CHARS else line[:LOG_LINE_CHARS] + "\u2026" for line in lines]
    while len(lines) > 1 and sum(len(line) + 1 for line in lines) > LOG_CHARS:
        lines.pop(0)
        first += 1
    total = text.count("\n") + (not text.endswith("\n"))
    heading = f"**Log up to the final error (scrubbed; lines {first}-{last} of {total}):**"
    return heading, "\n".join(lines)


def _published(value: Any) -> Any:
    """A canonical-payload value as an issue shows it: strings scrubbed of secrets."""
    if isinstance(value, str):
        return scrub_secrets(value)
    if isinstance(value, list):
        return [_published(v) for v in value]
    if isinstance(value, dict):
        return {k: _published(v) for k, v in value.items()}
    return value


def _json_block_text(payload: dict[str, Any], *, publish: bool = False) -> str:
    """The tuple block's JSON text of ``payload``; with ``publish``, of
    ``_published(payload)``, written without building that copy."""
    # §5.4: indent=2, sort_keys, ASCII-escaped. Backticks and angle brackets are
    # escaped too (\\u0060, \\u003c ...): JSON decodes them back to the same values,
    # and no value can close the fence or open HTML.
    text = _canonical_text(payload, publish)
    if text is None:
        text = dumps_indented(_published(payload) if publish else payload, sort_keys=True)
    return text.replace("`", "\\u0060").replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# The tuple fields in the order sort_keys writes them, with their JSON names.
_SORTED_FIELDS = tuple(sorted((name, pos, scalar_text(name)) for pos, name in enumerate(TUPLE_FIELDS)))


def _canonical_text(payload: dict[str, Any], publish: bool = False) -> str | None:
    """``dumps_indented(payload, sort_keys=True)`` for a canonical payload whose
    values are scalars (a draft's, nearly always), written directly; with
    ``publish``, each string scrubbed as :func:`_published` scrubs it. None for
    any other payload."""
    tuple_values, ordered = payload.get("tuple"), payload.get("tuple_ordered")
    if (payload.keys() != _CANONICAL_KEYS or type(tuple_values) is not dict or type(ordered) is not list
            or len(ordered) != len(TUPLE_FIELDS) or tuple_values.keys() != _TUPLE_FIELD_SET):
        return None
    # "tuple" written apart from "tuple_ordered" would differ: the general writer. Scrubbing
    # is a function of the string, so the same value (canonical_payload's are the very
    # objects) or the same text stays the same once published.
    for name, value in zip(TUPLE_FIELDS, ordered):
        other = tuple_values[name]
        if other is not value and (scalar_text(other) != scalar_text(value) or scalar_text(value) is None):
            return None
    shown = _published if publish else _as_is
    values = [scalar_text(shown(v)) for v in ordered]
    head = [scalar_text(shown(payload[name])) for name in ("dedup_hash", "model_slug", "schema")]
    if None in values or None in head:
        return None
    fields = ",\n    ".join(f"{name}: {values[pos]}" for _field, pos, name in _SORTED_FIELDS)
    ordered_text = ",\n    ".join(values)  # type: ignore[arg-type]  # no None: checked above
    return (f'{{\n  "dedup_hash": {head[0]},\n  "model_slug": {head[1]},\n  "schema": {head[2]},\n'
            f'  "tuple": {{\n    {fields}\n  }},\n  "tuple_ordered": [\n    {ordered_text}\n  ]\n}}')


def _as_is(value: Any) -> Any:
    return value


_CANONICAL_KEYS = frozenset({"dedup_hash", "model_slug", "schema", "tuple", "tuple_ordered"})
_TUPLE_FIELD_SET = frozenset(TUPLE_FIELDS)


def canonical_payload(bundle: Bundle, key: DedupKey, digest: str | None = None) -> dict[str, Any]:
    """§5.4: the machine-readable payload of the tuple block (``digest``: the key's, if known)."""
    return {
        "dedup_hash": key.digest() if digest is None else digest,
        "model_slug": bundle.manifest.get("model"),
        "schema": SCHEMA,
        "tuple": dict(zip(TUPLE_FIELDS, key)),
        "tuple_ordered": list(key),
    }


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class Occurrence:
    """One submission of a failure: what a +1 counts, keyed by ``submission``."""

    submission: str
    utc_ts: Any
    commit: Any
    bundle: str

    def to_dict(self) -> dict[str, Any]:
        return {"submission": self.submission, "utc_ts": self.utc_ts, "commit": self.commit, "bundle": self.bundle}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Occurrence:
        return cls(str(d["submission"]), d.get("utc_ts"), d.get("commit"), str(d.get("bundle", "")))


def occurrence_of(bundle: Bundle) -> Occurrence:
    """The submission identity of a bundle.

    The manifest's 64-hex submission fingerprint when it has one; gate-only
    bundles carry none, so a digest of the whole manifest stands in.
    """
    m = bundle.manifest
    claimed = m.get("submission_fingerprint")
    if isinstance(claimed, str) and re.fullmatch(r"[0-9a-f]{64}", claimed):
        submission = claimed
    else:
        canonical = json.dumps(m, sort_keys=True, ensure_ascii=True, default=str)
        submission = "manifest-" + hashlib.sha256(canonical.encode()).hexdigest()
    return Occurrence(submission, m.get("utc_ts"), m.get("club3090_commit"), path_text(bundle.path))


@pickled_by_fields
@dataclass(frozen=True, slots=True)
class IssueDraft:
    """Everything a tracker needs to open or count one deduplicated issue."""

    dedup_hash: str
    key: DedupKey
    failure_class: str
    title: str
    body: str
    labels: tuple[str, ...]
    canonical: dict[str, Any]

    def spool_payload(self) -> dict[str, Any]:
        """§5.8 ``_dedup-queue/<hash>.json`` keys (occurrences are added by the spool)."""
        return {"body": self.body, "canonical": self.canonical, "dedup_hash": self.dedup_hash,
                "kind": SPOOL_KIND, "labels": list(self.labels), "schema": SCHEMA, "title": self.title}

    @classmethod
    def from_spool(cls, payload: dict[str, Any]) -> IssueDraft:
        """Rebuild a draft from a spool file (ours or the reference's).

        Text outside the tuple block is sanitized again: spool files written by
        the reference were never scrubbed. The tuple block stays byte-exact.
        """
        canonical = payload["canonical"]
        key = DedupKey(*canonical["tuple_ordered"])
        labels = tuple(_published_arch_label(key) if str(label).startswith(ARCH_PREFIX) else str(label)
                       for label in payload["labels"])
        return cls(str(payload["dedup_hash"]), key, str(key.failure_class),
                   sanitize(payload["title"], inline=True)[:TITLE_LIMIT],
                   _sanitize_outside_tuple_block(str(payload["body"]))[:BODY_LIMIT], labels, canonical)


def _published_arch_label(key: DedupKey) -> str:
    """The ``arch:`` label as a tracker shows it: made from the architecture scrubbed
    of secrets. The slug keeps letters and digits, so an address or a user name in
    the architecture would otherwise reach a public label only re-punctuated."""
    return arch_label(scrub_secrets(str(key.arch_family)))


def published_labels(key: DedupKey, digest: str | None = None) -> tuple[str, str, str]:
    """:func:`~loop_core.keys.dedup_labels` as an issue carries them: the same three,
    the ``arch:`` one made from the scrubbed architecture (the same label unless it
    held a secret). ``digest``: the key's, if known."""
    dedup, failure_class, _arch = dedup_labels(key, digest)
    return dedup, failure_class, _published_arch_label(key)


def _sanitize_outside_tuple_block(body: str) -> str:
    start = body.find(TUPLE_MARKER)
    if start < 0:
        return sanitize(body)
    open_at = body.find("```json", start)
    close_at = body.find("```", open_at + len("```json")) if open_at >= 0 else -1
    if close_at < 0:
        return sanitize(body)
    end = close_at + 3
    return sanitize(body[:start]) + body[start:end] + sanitize(body[end:])


def _title(failure_class: str, name: str, dedup_hash: str) -> str:
    """The issue title around ``name``, the model as sanitized for the body, cut to fit."""
    suffix = f" (dedup {dedup_hash})"
    prefix = f"[loop][{failure_class}] "
    room = TITLE_LIMIT - len(prefix) - len(suffix)
    if len(name) > room:
        name = name[: room - 1] + "\u2026"
    return prefix + name + suffix


def draft_issue(bundle: Bundle, verdict: Classification, *, evidence: str | None = None) -> IssueDraft:
    """Render the issue for one fileable failure (title, labels, body with the tuple block).

    :param evidence: extra failure text to show (e.g. the final exception);
        scrubbed and fenced like the error substring.
    """
    key = dedup_key(bundle, verdict.failure_class.value)
    digest = key.digest()
    labels = published_labels(key, digest)
    canonical = canonical_payload(bundle, key, digest)
    model = sanitize(bundle.manifest.get("model") or "", inline=True) or "<unknown-model>"
    head = "\n".join([
        "## Loop deduped failure issue",
        "",
        f"One issue per distinct failure: every capture whose dedup key hashes to `{digest}` is counted "
        f"here (label `{labels[0]}`), as a +1 comment after its key is verified against the tuple below.",
        "",
        f"**Class:** `{verdict.failure_class.value}` (tier `{verdict.tier.value}`, rule "
        f"`{sanitize(verdict.matched_rule or 'none', inline=True).replace('`', '')}`, "
        f"rules_version `{verdict.rules_version or 'n/a'}`)",
        "",
        "**Dedup tuple:** " + ", ".join(TUPLE_FIELDS),
        "",
        TUPLE_MARKER,
        "```json",
        _json_block_text(canonical, publish=True),
        "```",
        "",
        # In a code span: a link, an image, a URL or HTML in a model name stays text.
        f"**Model:** `{model.replace('`', chr(0x2018))}`",
        "",
        "**Redacted error substring:**",
        "",
    ])
    shown = _shown_substring(bundle, verdict.error_substring or "")
    label = "\n\n**Final error (scrubbed):**\n\n"
    error = fence(shown)
    tail = label + fence(sanitize(evidence)) if evidence else ""
    log = _log_excerpt(bundle, verdict.error_substring or "")
    log_label = f"\n\n{log[0]}\n\n" if log else ""
    log_part = log_label + fence(log[1]) if log else ""
    body = head + error + tail + log_part
    if len(body) > DRAFT_LIMIT:
        # Keep the tuple block whole; cut the free text, each fence kept whole.
        note = "\n\n_(evidence cut to fit the issue size limit)_"
        error = _fenced_within(shown, DRAFT_LIMIT - len(head) - len(note))
        room = DRAFT_LIMIT - len(head) - len(error) - len(note) - len(label)
        block = _fenced_within(sanitize(evidence), room) if evidence else ""
        body = head + error + (label + block if block else "")
        room = DRAFT_LIMIT - len(body) - len(note) - len(log_label)
        log_block = _fenced_within(log[1], room) if log else ""
        body += (log_label + log_block if log_block else "") + note
        if len(body) > DRAFT_LIMIT:
            # The key alone cannot fit: a cut tuple block would never verify, and every
            # capture of this failure would open an issue of its own.
            raise BundleError(f"{bundle.path}: its dedup key takes {len(head):,} characters of the issue body, more "
                              f"than an issue holds ({DRAFT_LIMIT:,}); not filed (look at the manifest's model_id, "
                              "arch_family and version fields)", path=bundle.path)
    return IssueDraft(digest, key, verdict.failure_class.value, _title(verdict.failure_class.value, model, digest),
                      body, labels, canonical)


# A dedup key, model name and rule id shorter than this in all fit in an issue body
# whatever their characters: each character counted takes at most 24 of the body's head
# (a key's is written twice in the tuple block's escaped JSON, 12 for an astral one's
# two \uXXXX escapes; the model name, counted twice, is written four times), and the
# rest of the head is about 1,200 characters.
KEY_ALWAYS_FITS = 2_000


def refuse_unfileable(bundle: Bundle, verdict: Classification) -> None:
    """Raise the :class:`BundleError` :func:`draft_issue` raises for a failure whose
    dedup key no issue body can hold, without drafting anything for a key that fits."""
    size = sum(len(str(part)) for part in dedup_key(bundle, verdict.failure_class.value))
    if size + len(str(bundle.manifest.get("model"))) + len(verdict.matched_rule or "") >= KEY_ALWAYS_FITS:
        draft_issue(bundle, verdict)


def plus_one_comment(draft: IssueDraft, occurrence: Occurrence) -> str:
    """§5.5 +1 comment; it also carries the submission so a replay is never counted twice."""
    payload = {
        "club3090_commit": _published(occurrence.commit),
        "dedup_hash": draft.dedup_hash,
        "failure_class": draft.failure_class,
        "kind": "dedup-plusone",
        "schema": SCHEMA,
        "submission_fingerprint": occurrence.submission,
        "utc_ts": _published(occurrence.utc_ts),
    }
    text = json.dumps(payload, sort_keys=True).replace("`", "\\u0060").replace("<", "\\u003c")
    return "\n".join([PLUSONE_MARKER, "Another capture hit this failure (dedup key verified).", "",
                      "```json", text, "```"])


def _json_chunks(text: str) -> list[Any]:
    out: list[Any] = []
    start = 0
    while True:
        i = text.find("```json", start)
        if i < 0:
            return out
        begin = i + len("```json")
        end = text.find("```", begin)
        chunk = text[begin:] if end < 0 else text[begin:end]
        try:
            out.append(json.loads(chunk.strip()))
        except ValueError:
            pass
        if end < 0:
            return out
        start = end + 3


def parse_body_tuple(body: str) -> list[Any] | None:
    """§5.6: the ``tuple_ordered`` list of the first schema-tagged JSON block, or None."""
    for doc in _json_chunks(body or ""):
        if isinstance(doc, dict) and doc.get("schema") == SCHEMA and isinstance(doc.get("tuple_ordered"), list):
            ordered: list[Any] = doc["tuple_ordered"]
            return ordered
    return None


def body_tuple_matches(body: str, key: DedupKey) -> bool:
    """§5.6: the body's tuple has seven values equal, as text, to the key's.

    A value that held a secret is shown scrubbed, so it also matches the
    key's value scrubbed the same way.
    """
    parsed = parse_body_tuple(body)
    if parsed is None or len(parsed) != len(key):
        return False
    return all(str(a) == str(b) or str(a) == scrub_secrets(str(b)) for a, b in zip(parsed, key))


def plus_one_submission(comment: str) -> str | None:
    """The submission fingerprint a +1 comment counted, if it is one of ours."""
    if PLUSONE_MARKER not in (comment or ""):
        return None
    for doc in _json_chunks(comment):
        if isinstance(doc, dict) and doc.get("kind") == "dedup-plusone":
            value = doc.get("submission_fingerprint")
            return str(value) if value else None
    return None
