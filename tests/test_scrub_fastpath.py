"""scrub_secrets skips the patterns a text cannot match: the result must not change."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loop_core import dedup, litscan
from loop_core.dedup import (
    _CONTROLS,
    _MENTION,
    _SECRET_GUARDS,
    _SECRETS,
    _sanitize,
    _hint_finder,
    sanitize,
    scrub_secrets,
)

# Pieces that (nearly) trigger each pattern, plus case and Unicode traps: the Kelvin
# sign and the long s match k and s case-insensitively, dotted/dotless i match i.
PIECES = [
    "hf_" + "A1b2" * 8, "HF_" + "x" * 31, "ghp_" + "Z9" * 16, "gho_abc", "ghs_" + "k" * 30, "ghr_" + "R" * 36, "ghu_" + "7" * 30, "GHP_" + "x" * 30, "github_pat_" + "a_1" * 8,
    "AKIA" + "ABCDEFGHIJKLMNOP", "akia" + "abcdefghijklmnop", "ASIA0123456789ABCDEF",
    "aws_secret_access_key = 'abcdEFGH12345678/+=='", "AWS_SESSION_TOKEN: " + "Q" * 20,
    "hf_token=abc", "OPENAI_API_KEY: sk-123", "api key = x", "github_token:", "token", "key=",
    "Authorization: Bearer abc.def", "authorization:  token zzz", "'api_key': ['sk-1']", "--api-key sk-2",
    "password=p", "Cookie: a=b", "x-api-key: k", "Authorization=Basic b", "a.b@example.com", "x@y", "@user",
    "sk-proj-" + "Ab1_" * 5, "SK-" + "x" * 32, "sk-ant-api03-" + "z" * 20, "AIzaSy" + "B" * 33, "aiza_", "xoxb-12345-abcdef",
    "XOXP-1-" + "1" * 12, "xapp-1-" + "a" * 20, "hooks.slack.com/services/T0/B1/x", "hooks.slack.com/workflows/x",
    "ya29." + "a" * 20, "GOCSPX-" + "b" * 20, "Bearer " + "t1" * 10, "bearer <x>", "api key: k", "API KEY = " + "9" * 16,
    "/home/alice/models", "/Users/Bob/x", "/HOME/carol", "C:\\Users\\dave\\cache", "c:\\users\\",
    "\u212a", "\u017f", "\u0130", "\u0131", "\u200e", "\x00", "\r\n", "\n", " ", "=", ":", "_", "'", '"',
    "RuntimeError: CUDA out of memory", "plain words", "ü", "日本",
    "nvapi-" + "x1" * 20, "getty@tty1.service", "pkg@0.1.post2", "@1.2", ".socket",
    "MY_KEY=" + "a1" * 8, "db_pass: '" + "Z9/" * 6, "key=eyJ" + "a1" * 8 + ".", "==",
]


def plain_scrub(text: str) -> str:
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def plain_sanitize(text: str, inline: bool) -> str:
    """sanitize() as specified: scrub, drop controls, scrub again, break mentions."""
    out = plain_scrub(text)
    out = _CONTROLS.sub("", out.replace("\r\n", "\n").replace("\r", "\n"))
    out = _MENTION.sub("@\u200b", plain_scrub(out))
    return " ".join(out.split()) if inline else out


@pytest.fixture(params=["aho-corasick", "regex"], autouse=True)
def pre_check(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every test here runs with each way of looking for the patterns' literals
    (Aho-Corasick where ahocorasick_rs is installed, and the regex alternation)."""
    package = litscan.package() if request.param == "aho-corasick" else None
    if request.param == "aho-corasick" and package is None:
        pytest.skip("ahocorasick_rs is not installed")
    monkeypatch.setattr(dedup, "_has_hint", _hint_finder(package))
    dedup._scrub_short.cache_clear()
    dedup._sanitize_short.cache_clear()
    yield request.param
    dedup._scrub_short.cache_clear()
    dedup._sanitize_short.cache_clear()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(PIECES), st.text(alphabet=st.characters(max_codepoint=127), max_size=12)),
                max_size=12))
def test_both_pre_checks_find_the_same_literals(parts: list[str]) -> None:
    text = "".join(parts).lower()
    if text.isascii():
        assert _hint_finder(litscan.package())(text) == _hint_finder(None)(text)


def test_the_pre_check_keeps_off_ahocorasick_when_the_scanner_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOP_RULES_SCANNER", "off")
    assert litscan.package() is None


def test_one_guard_per_pattern() -> None:
    assert len(_SECRET_GUARDS) == len(_SECRETS)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=12)), max_size=12))
def test_guarded_scrub_equals_every_pattern_run(parts: list[str]) -> None:
    text = "".join(parts)
    assert scrub_secrets(text) == plain_scrub(text)
    assert scrub_secrets(text.upper()) == plain_scrub(text.upper())
    assert scrub_secrets(text.lower()) == plain_scrub(text.lower())


@settings(max_examples=600, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=12)), max_size=12), st.booleans())
def test_sanitize_with_its_shortcuts_equals_the_plain_steps(parts: list[str], inline: bool) -> None:
    # The second scrub is skipped when neither the first nor dropping controls changed
    # the text, and dropping controls when the text is printable: never another result.
    text = "".join(parts)
    for variant in (text, "hf_\u200e" + text, text + "\x00" + text):
        assert _sanitize(variant, inline) == plain_sanitize(variant, inline)


def test_each_pattern_still_fires() -> None:
    for piece in PIECES[:37]:
        assert scrub_secrets(piece) == plain_scrub(piece)
    assert scrub_secrets("see AKIAABCDEFGHIJKLMNOP and ghp_" + "Z9" * 16) == \
        "see <REDACTED-AWS-KEY> and <REDACTED-GITHUB-TOKEN>"
    assert sanitize("ping @alice at a@b.io") == "ping @\u200balice at <EMAIL>"


def test_remembered_and_long_texts_scrub_the_same() -> None:
    from loop_core.dedup import SCRUB_MEMO_CHARS

    secret = "token: ghs_" + "k" * 36 + " mail a.b@example.com in /home/alice/x"
    for size in (SCRUB_MEMO_CHARS - 1, SCRUB_MEMO_CHARS, SCRUB_MEMO_CHARS + 1, 4 * SCRUB_MEMO_CHARS):
        text = ("x" * size + secret)[-size:] if size > len(secret) else secret
        first, again = scrub_secrets(text), scrub_secrets(text)  # the second may come from the memo
        assert first == again == plain_scrub(text)
        assert "ghs_" not in first and "alice" not in first and "a.b@" not in first


@pytest.mark.parametrize("text, kept, gone", [
    ("non-default args: {'api_key': ['sk-first1234567890', 'sk-second1234567890'], 'port': 8000}",
     ["'port': 8000"], ["sk-first", "sk-second"]),
    ('password="correct horse battery staple" then', ["then"], ["correct", "horse", "staple"]),
    ("password='hunter2,part2' x", [" x"], ["hunter2", "part2"]),
    ("token=b'abcdef123456'", [], ["abcdef123456"]),
    ("hdrs {'Authorization': 'Bearer sk-live-abcdef123456', 'Cookie': 'sid=abcdef'}", ["hdrs"],
     ["sk-live", "sid=abcdef"]),
    ("info request headers: cookie: session=abc; theme=dark runtimeerror: cuda out of memory",
     ["runtimeerror: cuda out of memory"], ["session=abc", "theme=dark"]),
    ("pad_token: [PAD] 'pad_token': None bos_token: <s> eos_token=<|eot_id|>",
     ["[PAD]", "None", "<s>", "<|eot_id|>"], []),
    ('config {\\"api_key\\": \\"sk-abcdef123456\\", \\"port\\": 1}', ["port"], ["sk-abcdef"]),
    ("SECRET_KEY=abc123 MINIO_SECRET_KEY=xyz789 secret_name=keep", ["secret_name=keep"], ["abc123", "xyz789"]),
    # An argument dump names every option, unset ones too: nothing was there to hide.
    ("Namespace(host=None, api_key=None, hf_token=null, github_token=false, ssl_keyfile=None)",
     ["api_key=None", "hf_token=null", "github_token=false"], ["REDACTED"]),
    ("HF_TOKEN=None api_key: null", ["HF_TOKEN=None", "api_key: null"], ["REDACTED"]),
    ("api_key=Nonesuch123 HF_TOKEN=none_of_yours", [], ["Nonesuch123", "none_of_yours"]),
])
def test_credentials_in_the_forms_engines_log_them(text: str, kept: list[str], gone: list[str]) -> None:
    """A list's later items, a quoted value's words after the first, and headers logged
    as a dict used to stay; a Cookie header ate the error text after it in the collapsed
    error substring; special tokens and None are not secrets."""
    out = sanitize(text)
    assert all(piece in out for piece in kept), out
    assert not any(piece in out for piece in gone), out



def test_a_line_of_unclosed_credential_lists_does_not_stall_the_scrub() -> None:
    """Each "api_key=['" without a "]" after it was scanned to the end of the line, so
    the time grew with the square of the line: a 200 KB one took half a minute in `run`
    and `report`, this 400 KB one minutes. (A hang guard, not a speed target: it now
    takes well under a second.)"""
    import signal

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError("scrubbing a 400 KB line took over 30 s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(30)
    try:
        text = "RuntimeError: " + "api_key=['" * 40_000
        assert scrub_secrets(text) == text  # no list closes: nothing to redact
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    logged = "args: {'api_key': ['sk-live-SECRET0123456789', 'second-secret'], 'port': 8000}"
    assert scrub_secrets(logged) == "args: {'api_key': [<REDACTED>], 'port': 8000}"


# One 100 KB line each, shaped to make a pattern try a long stretch from many places.
HOSTILE_LINES = {
    "addresses": "a@" * 50_000,
    "dotted-domain": "x@" + "a." * 50_000 + "1",
    "version-domain": "x@" + "1.1" * 33_000,
    "unit-domain": "x@" + "a.service." * 10_000,
    "label-then-digit": "x@" + "a.bcdefgh7" * 10_000,
    "no-at": "a." * 50_000,
    "nvapi-prefixes": "nvapi-" * 16_000,
    "key-names": "key=" * 25_000,
    "quoted-key-names": "a_key': '" * 11_000,
    "key-value-alphabets": "key=" + "a1/-" * 25_000,
    "dotted-key-value": "key=" + "a1b2c3d4e5f6g7h8." * 6_000,
    "pass-names": "a_pass=" * 14_000,
}


@pytest.mark.parametrize("name", sorted(HOSTILE_LINES))
def test_a_hostile_line_does_not_stall_the_scrub(name: str) -> None:
    """A hang guard, not a speed target: a pattern that tried a long run from each of
    its positions took minutes on such a line; each takes well under a second."""
    import signal

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"scrubbing the {name} line took over 30 s")

    text = HOSTILE_LINES[name]
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(30)
    try:
        assert scrub_secrets(text) == plain_scrub(text)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
