"""GuardedRegex must find exactly what a plain search finds, only faster."""

from __future__ import annotations

import pluggy
import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loop_core import Engine
from loop_core import fastregex
from loop_core.fastregex import GuardedRegex, TextIndex, required_literals, split_alternatives
from loop_core.selftest import _regex_nodes
from loop_rules.tier1 import REFERENCE_SIGNATURE

HAND_PATTERNS = [
    r"(?i)no kernel image is available",
    r"(?i)(flash[-_ ]?attention[-_ ]?3|\bfa3\b)[^\n]{0,80}(requires?|only)",
    r"(?i)^RuntimeError: (CUDA|HIP) error",
    r"(?im)^RuntimeError: (CUDA|HIP) error$",
    r"error\s+code: \d+",
    r"(?i)(?<=torch\.)OutOfMemoryError",
    r"(?s)Traceback.*Error",
    r"(?i)killed process \d+",
    r"(?x) out \s of \s memory",
    r"(?:kernel){e<=1}",
    r"[A-Z]{3}\d+ failed",
    r"a|b",
    r"(?m)^ValueError: .*memory$",
    r"^torch\.OutOfMemoryError",
    r"memory$",
    r"(?<!host )out of memory(?! on the host)",
    r"\Aerror: boom",
    r"(?i)cuda out of memory|kv cache is needed",
    r"(?i)error\s{1,3}code",
    r"(?is)out of.{0,12}memory",
    r"(?i)killed(?=\s{0,2}process)",
    r"(?im)^\W{0,3}killed\s{0,4}$",
    r"(?i)not enough memory\W{1,3}please",
    r"(?m)memory\n\nerror$",
    r"(?<=out of )memory\b",
]


def _pack_patterns() -> list[str]:
    from loop_core import make_plugin_manager

    out = list(HAND_PATTERNS) + ["(?i)" + "|".join(REFERENCE_SIGNATURE)]
    for pack in ("default", "reference"):
        for rule in Engine.build(pack, make_plugin_manager(entry_points=False)).pack.rules:
            out.extend(node.operand.pattern for node in _regex_nodes(rule.when))
    return out


PATTERNS = _pack_patterns()
WORDS = ["error", "Error", "RuntimeError:", "CUDA", "cuda", "out", "of", "memory", "kernel", "image", "is",
         "available", "no", "FlashAttention-3", "fa3", "requires", "Hopper", "sm_90", "Killed", "process", "4242",
         "torch.", "OutOfMemoryError", "Traceback", "\n", " ", "  ", "\t", "code:", "7", "KV", "cache", "needed",
         "awq", "marlin", "import", "cannot", "name", "Model", "architectures", "['X']", "are", "not", "supported",
         "é", "ſ", "K", "İ", "█", "→", "ValueError:", "failed", "HIP", "error:", "ABC12", "unsupported", "compute_80"]


# `lookup` (conftest) runs each property once with the literal scanner, once without.
ONCE_PER_LOOKUP = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]


@settings(max_examples=400, deadline=None, suppress_health_check=ONCE_PER_LOOKUP)
@given(st.sampled_from(PATTERNS), st.lists(st.sampled_from(WORDS), max_size=60))
def test_guarded_search_equals_plain_search(lookup: str, pattern: str, words: list[str]) -> None:
    text = " ".join(words)
    compiled = regex.compile(pattern)
    plain = compiled.search(text)
    guarded = GuardedRegex(compiled)
    for fast in (guarded.search(text),
                 guarded.search(text, index=TextIndex(text))):
        assert (plain is None) == (fast is None)
        if plain is not None:
            assert plain.span() == fast.span()
    assert guarded.test(text) == (plain is not None)


FILLER = ["INFO 05-17 10:00:01 engine step ok", "", "   ", "DEBUG loading shard 3 of 8", "Traceback (most recent call last):"]


@settings(max_examples=400, deadline=None, suppress_health_check=ONCE_PER_LOOKUP)
@given(st.sampled_from(PATTERNS),
       st.lists(st.one_of(st.sampled_from(FILLER), st.lists(st.sampled_from(WORDS), max_size=12).map(" ".join)),
                min_size=1, max_size=80))
def test_windowed_search_on_long_logs_equals_plain_search(lookup: str, pattern: str, lines: list[str]) -> None:
    # Many lines, most of them noise: the searches run in windows of a few lines.
    noise = "\n".join(FILLER[i % len(FILLER)] for i in range(120))
    text = "\n".join([noise, *lines, noise])
    compiled = regex.compile(pattern)
    plain = compiled.search(text)
    index = TextIndex(text)
    guarded = GuardedRegex(compiled)
    for fast in (guarded.search(text), guarded.search(text, index=index), guarded.search(text, index=index)):
        assert (plain is None) == (fast is None)
        if plain is not None:
            assert plain.span() == fast.span()
    assert guarded.test(text, index=index) == (plain is not None)  # alternative by alternative


@pytest.mark.parametrize("pattern, reach", [
    (r"(?i)no kernel image [^\n]{0,40}available", 0),  # line-local
    (r"(?i)error\s{1,3}code", 3),                   # \s crosses at most three newlines
    (r"(?is)traceback.{0,5}boom", 5),
    (r"(?i)killed\s*process", None),                  # unbounded: the whole text
    (r"error code$", None),                            # a single-line $ would match at a window's end
    (r"(?m)error code$", 0),
    (r"(?i)kill(?=\s\s)ed", 2),                       # what a lookahead reads counts
    (r"(?i)killed[^x]process", 1),                     # a negated set takes a newline
    (r"(?i)traceback(?s:.{0,5})boom", 5),              # so does a dot where a group turns DOTALL on
    (r"(?is)traceback(?-s:.{0,5})boom", 0),            # and not where one turns it off
])
def test_reach_in_lines(pattern: str, reach: int | None) -> None:
    assert GuardedRegex(regex.compile(pattern)).reach == reach


@pytest.mark.parametrize("pattern, middle", [
    (r"(?m)memory\n\nerror$", "cuda memory\n\nerror"),
    (r"(?i)error\s{1,3}code", "RuntimeError\n\n code 7"),
    (r"(?is)out of.{0,6}memory", "out of\n\n memory"),
    (r"(?i)killed(?=\s{0,2}process)", "Killed\n process 12"),
    (r"(?i)killed[^x]process", "Killed\nprocess 12"),
    (r"(?i)out of(?s:.{0,6})memory", "out of\n\n memory"),
])
def test_matches_that_cross_lines_are_found_in_windows(pattern: str, middle: str) -> None:
    noise = "\n".join(f"INFO step {i} ok" for i in range(300))
    text = f"{noise}\n{middle}\n{noise}"
    g = GuardedRegex(regex.compile(pattern))
    assert g.reach and g.reach > 0
    assert g.search(text, index=TextIndex(text)).span() == regex.search(pattern, text).span()


def test_a_log_with_the_literal_on_every_line_is_searched_whole() -> None:
    text = "\n".join(f"line {i} error here" for i in range(500)) + "\nerror  code 7"
    g = GuardedRegex(regex.compile(r"error\s{1,3}code"))
    assert g.search(text).span() == regex.search(r"error\s{1,3}code", text).span()


@pytest.mark.parametrize("pattern, pieces", [
    (r"(?i)no kernel|cuda (error|fault)|x[|]y", ["(?i)no kernel", "cuda (error|fault)", "x[|]y"]),
    (r"[]|]a|b\|c", ["[]|]a", "b\\|c"]),
    (r"(a)\1|b", None),          # a back-reference: group numbers would shift
    (r"(?x) a | b", None),         # verbose: a | may sit in a comment
    (r"only one", None),
    (r"a|(b", None),               # unbalanced: left to the regex engine
])
def test_split_alternatives(pattern: str, pieces: list[str] | None) -> None:
    assert split_alternatives(pattern) == pieces


def test_every_pack_pattern_is_analysed_without_error() -> None:
    for pattern in PATTERNS:
        GuardedRegex(regex.compile(pattern))  # never raises


@pytest.mark.parametrize("pattern, literals", [
    (r"(?i)no kernel image is available", {"no kernel image is available"}),
    (r"(?i)(cuda|hip) out of memory", {" out of memory"}),
    (r"(?i)(?:cuda) out of memory", {"cuda out of memory"}),  # a group of one string joins the run
    (r"flash[-]attn", {"flash-attn"}),
    (r"foo|bar\d+|bazz", {"foo", "bar", "bazz"}),
    (r"a|bc", None),  # too short to be worth a prefilter
    (r"\d+ MiB", {" mib"}),
    (r"(?:kernel){e<=1}", None),  # fuzzy matching: not analysed
    (r"x\\(?:kernel){e<=1}", None),  # after an escaped backslash the brace is still fuzzy syntax
    (r"\{?(valueerror|keyerror)\W{1,4}[:}]", {"valueerror", "keyerror"}),  # an escaped brace is a brace
    (r"(?V1)[[a-z]--[aeiou]]error", None),  # version-1 set operations
])
def test_required_literals(pattern: str, literals: set[str] | None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the literal scanner every literal costs a find: one string per stretch.
    monkeypatch.setattr(fastregex, "scanner", lambda: None)
    got = required_literals(pattern)
    assert (got if got is None else set(got)) == literals


@pytest.mark.parametrize("pattern, literals", [
    (r"(?i)(cuda|hip) out of memory", {"cuda out of memory", "hip out of memory"}),
    (r"(?i)needs? (an? )?gpu", {"need gpu", "needs gpu", "need a gpu", "needs a gpu", "need an gpu",
                                "needs an gpu"}),
    (r"flash[-_ ]?attn", {"flashattn", "flash-attn", "flash_attn", "flash attn"}),
    (r"\bsm_\d+ (is )?unsupported", {" unsupported", " is unsupported"}),
])
def test_required_literals_with_expansion(pattern: str, literals: set[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Where one scan finds every literal, stretches of few-string items expand into
    # every concatenation (rarer literals), up to MAX_STRINGS_SCANNED.
    monkeypatch.setattr(fastregex, "scanner", lambda: object())
    assert fastregex.strings_limit() == fastregex.MAX_STRINGS_SCANNED == 16
    assert set(required_literals(pattern) or ()) == literals


def test_anchor_words_are_interior_words() -> None:
    g = GuardedRegex(regex.compile(r"(?i)no kernel image is available|flashattention"))
    assert dict(zip(g.literals, g.anchors)) == {"no kernel image is available": "kernel",
                                                "flashattention": None}


def test_a_second_literal_set_rules_out_what_the_first_lets_through() -> None:
    # Every match holds "unsupported" and also "sm_" or "compute_": a text with only the
    # first (vLLM's long "... are not supported for now" list) is not searched at all.
    g = GuardedRegex(regex.compile(r"(?i)\b(sm|compute)_\d+ (is )?unsupported"))
    assert g.literals and all("unsupported" in lit for lit in g.literals)
    assert set(g._also or ()) == {"sm_", "compute_"}
    searched: list[str] = []

    class Counting:
        def __init__(self, real: object) -> None:
            self.real = real

        def search(self, *args: object, **kwargs: object) -> object:
            searched.append("x")
            return self.real.search(*args, **kwargs)  # type: ignore[attr-defined]

    g._compiled = Counting(g.compiled)
    assert g.search("ValueError: dtype is unsupported\n" * 40) is None
    assert searched == []  # "sm_" and "compute_" are nowhere: no regex ran
    text = "INFO ok\n" * 40 + "RuntimeError: SM_75 is unsupported\n"
    assert g.search(text) is not None and searched
    # The pack cache keeps the second set.
    restored = GuardedRegex.restore(g.pattern, g.flags, g.export())
    assert restored._also == g._also and restored.search(text).span() == g.search(text).span()


@pytest.mark.parametrize("damage", [
    {"flags": 0, "code": None},  # the flags lost, and the compiled code with them: (?i) must stay
    {"reach": -1},  # a reach below zero would search the literal's line only
])
def test_a_kept_analysis_that_does_not_fit_its_pattern_is_made_again(damage: dict[str, object]) -> None:
    pattern, flags = r"error\s{1,3}code", int(regex.IGNORECASE | regex.VERSION0)
    kept = fastregex.RegexCache().make(pattern, flags).export()
    cache = fastregex.RegexCache({f"{flags}:{pattern}": {**kept, **damage}})
    text = "INFO step ok\n" * 80 + "ERROR\n\nCODE 7\n" + "INFO step ok\n" * 80
    assert cache.make(pattern, flags).search(text).span() == regex.search(pattern, text, flags).span()
    assert cache.dirty  # analysed again, to be saved whole


def test_line_locality() -> None:
    assert GuardedRegex(regex.compile(r"(?i)no kernel [^\n]{0,40}image")).line_local
    assert not GuardedRegex(regex.compile(r"error\s+code")).line_local  # \s crosses lines
    assert GuardedRegex(regex.compile(r"^RuntimeError: boom")).line_local  # ^ only matches at real starts
    assert GuardedRegex(regex.compile(r"(?m)^RuntimeError: boom$")).line_local
    assert not GuardedRegex(regex.compile(r"RuntimeError: boom$")).line_local  # a single-line $
    assert GuardedRegex(regex.compile(r"(?<!host )out of memory")).line_local
    assert not GuardedRegex(regex.compile(r"out of memory(?=\s+host)")).line_local
    assert not GuardedRegex(regex.compile(r"(?s)Trace.*boom")).line_local


def test_spans_are_relative_to_the_whole_text(pm: pluggy.PluginManager) -> None:
    text = "INFO start\n" * 500 + "RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
    g = GuardedRegex(regex.compile(r"(?i)no kernel image is available"))
    assert g.search(text).span() == regex.search(r"(?i)no kernel image is available", text).span()


def _pack_examples() -> list[str]:
    from loop_core import make_plugin_manager

    texts = []
    for pack in ("default", "reference"):
        for rule in Engine.build(pack, make_plugin_manager(entry_points=False)).pack.rules:
            texts.extend(e for e in (*rule.match_examples, *rule.no_match_examples) if isinstance(e, str))
    return texts


def test_alternative_by_alternative_agrees_on_every_rule_example() -> None:
    # The examples exercise the alternatives one by one, where random text rarely does.
    texts = _pack_examples()
    assert len(texts) > 150
    for pattern in PATTERNS:
        compiled = regex.compile(pattern)
        guarded = GuardedRegex(compiled)
        for text in texts:
            assert guarded.test(text) == (compiled.search(text) is not None), (pattern, text)


@pytest.mark.parametrize("pattern", [
    r"(?i)CUDA out of memory\. Tried to allocate (?P<size>\d+(?:\.\d+)?) ?(MiB|GiB)",
    r"(?m)^\s*(?:no kernel image|sm_\d+ is not (?:compatible|supported))\b",
    r"ünïcode (?:wörds)+ \p{L}{2,}",
    r"",
])
def test_compiled_code_rebuilds_the_same_pattern(pattern: str) -> None:
    compiled = regex.compile(pattern)
    frozen = fastregex.freeze_compiled(compiled)
    assert frozen is not None
    import json

    rebuilt = fastregex.thaw_compiled(pattern, json.loads(json.dumps(frozen)))  # through JSON, as the cache keeps it
    assert rebuilt is not None and rebuilt is not compiled
    assert (rebuilt.pattern, rebuilt.flags, rebuilt.groupindex) == (compiled.pattern, compiled.flags, compiled.groupindex)
    for text in ["CUDA out of memory. Tried to allocate 2.50 GiB", "x\n  sm_61 is not supported here",
                 "ünïcode wördswörds ab", "nothing"]:
        a, b = compiled.search(text), rebuilt.search(text)
        assert (a and (a.span(), a.groups())) == (b and (b.span(), b.groups()))


def test_compiled_code_for_another_pattern_or_damaged_is_refused() -> None:
    frozen = fastregex.freeze_compiled(regex.compile("abc+"))
    assert frozen is not None
    assert fastregex.thaw_compiled("abd+", frozen) is None
    assert fastregex.thaw_compiled("abc+", {**frozen, "sum": "0"}) is None
    assert fastregex.thaw_compiled("abc+", {"args": {"bytes": "%%%"}, "sum": fastregex._checksum({"bytes": "%%%"})}) is None
    assert fastregex.thaw_compiled("abc+", None) is None


def test_the_characters_lower_treats_oddly_are_the_ones_named() -> None:
    # TextIndex reads a text as it is, ignoring the case of ASCII letters, unless it
    # holds one of these: this Python's Unicode tables must have no others.
    import sys

    odd_length = [chr(c) for c in range(sys.maxunicode + 1) if len(chr(c).lower()) != 1]
    to_ascii = [chr(c) for c in range(128, sys.maxunicode + 1) if chr(c).lower().isascii()]
    assert odd_length == [fastregex.LOWER_GROWS]
    assert to_ascii == [fastregex.LOWERS_TO_ASCII]


_LONG_NOISE = "\n".join(f"INFO 05-17 10:00:{i % 60:02d} engine step {i} ok" for i in range(400))


@pytest.mark.parametrize("pattern, text", [
    # The match ends the text (no newline after it): the last window reaches the text's end.
    (r"(?i)cuda out of memory", f"{_LONG_NOISE}\nRuntimeError: CUDA out of memory"),
    # LATIN SMALL LETTER LONG S matches (?i)s but lower() keeps it: the literal "misaligned" is not in the text lower-cased.
    (r"(?i)misaligned address", "RuntimeError: CUDA error: mi\u017faligned address"),
    # KELVIN SIGN matches (?i)k and lower() makes it a "k": a read of the text as it is must not miss it.
    (r"(?i)no kernel image", f"{_LONG_NOISE}\nno \u212aernel image is available for execution\n{_LONG_NOISE}"),
    # The literal's first word may end a longer token ("torch.cuda"): only its inner words are whole tokens.
    (r"(?i)(?:cuda) out of memory", f"{_LONG_NOISE}\ntorch.cuda out of memory\n{_LONG_NOISE}"),
    # More literal hits than windows are kept: the hits past that many are searched too.
    (r"(?i)error [^\n]{0,20}fatal", "\n".join(["error ok"] * 70 + ["error x fatal", _LONG_NOISE, _LONG_NOISE])),
    # A negated class matches a newline, so a match can cross lines.
    (r"(?i)killed[^xy]{1,3}process", f"{_LONG_NOISE}\nKilled\nprocess 4242\n{_LONG_NOISE}"),
    # A group repeated zero times or more is in no match's required literals.
    (r"(?i)(?:cuda )*out of memory", "RuntimeError: out of memory"),
    (r"(?i)(?:device-side assert )*triggered", "assert triggered"),
    # A second hit within the first hit's window still widens it by its own reach.
    (r"error\s{1,3}code", f"{_LONG_NOISE}\nerror x\nerror\n\n\ncode 7\n{_LONG_NOISE}"),
    # A literal with regex syntax in it ("c++") is found as written at each of its hits.
    (r"(?i)c\+\+ compiler not found: \d",
     f"{_LONG_NOISE}\nC++ compiler not found: none\n{_LONG_NOISE}\nC++ compiler not found: 7\n{_LONG_NOISE}"),
    # MICRO SIGN: (?i) matches it as GREEK SMALL LETTER MU, which lower() keeps.
    (r"(?i)timeout after 5\u00b5s", "timeout after 5\u03bcs"),
    # A text lower() moves (a dotted capital I) tries every alternative, the last too.
    (r"(?i)no kernel image|illegal memory access", "\u0130 CUDA error: an illegal memory access was encountered"),
])
def test_guarded_search_finds_what_a_plain_search_finds_in_odd_texts(lookup: str, pattern: str, text: str) -> None:
    compiled = regex.compile(pattern)
    plain = compiled.search(text)
    guarded = GuardedRegex(compiled)
    index = TextIndex(text)
    found = guarded.search(text, index=index)
    assert (found and found.span()) == (plain and plain.span())
    assert guarded.test(text, index=index) == guarded.test(text) == (plain is not None)
