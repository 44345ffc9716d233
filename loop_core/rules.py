"""Load a rule pack: parse, validate and compile every file once.

A pack is a directory of ``*.yml`` files loaded in sorted file-name order
(order is priority), plus an optional ``pack.yml`` with settings. Each rule
file is either a list of rules or a mapping with ``rules`` and/or ``exact``
(the exact-fingerprint table). See ``docs/rules.md``.

Loading rejects unknown keys, YAML anchors and aliases (alias bombs),
duplicate keys and ids, classes outside the six, invalid regexes and
selectors, and rules without examples. With ``collect_errors=True`` every
problem is reported at once, each naming ``file[index] rule-id``.
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from . import packcache
from .bundle import path_text
from .conditions import (
    DEFAULT_REGEX_TIMEOUT,
    Condition,
    ConditionKind,
    KindAnswerError,
    Trace,
    compile_condition,
)
from .errors import (
    PLUGIN_FAILURES,
    RuleError,
    failure_detail,
    pattern_text,
    show_traceback,
)
from .fastregex import GuardedRegex, RegexCache
from .litscan import scanner
from .prefilter import RuleIndex
from .verdict import FailureClass
from .view import View

__all__ = ["Locator", "PackSettings", "Rule", "RulePack", "RuleSource", "any_of", "load_rules", "load_yaml_text"]

PACK_FILE = "pack.yml"
RULE_KEYS = frozenset({"id", "class", "description", "when", "examples"})
OPTIONAL_RULE_KEYS = frozenset({"mode"})
MODES = ("active", "shadow")
EXAMPLE_FILES = frozenset({"manifest", "pt1", "pt2", "pt3", "pt4", "pt5"})
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}\Z")
_FINGERPRINT = re.compile(r"[0-9a-f]{12}\Z")
_CLASSES = {c.value for c in FailureClass}


@dataclass(frozen=True, slots=True)
class RuleSource:
    """Where a rule came from: a file of the pack and the rule's index in it."""

    path: str
    index: int

    def __str__(self) -> str:
        return f"{self.path}[{self.index}]"


@dataclass(frozen=True, slots=True)
class Rule:
    """One compiled condition rule (Tier-2)."""

    id: str
    failure_class: FailureClass
    description: str
    when: Condition
    match_examples: tuple[Any, ...]
    no_match_examples: tuple[Any, ...]
    source: RuleSource
    mode: str = "active"

    @property
    def shadow(self) -> bool:
        """A shadow rule is evaluated and reported but never decides a class."""
        return self.mode == "shadow"

    def matches(self, view: View) -> bool:
        """Whether ``when`` holds for ``view``.

        A regex search that times out anywhere while the rule is evaluated makes
        the whole rule not match: counting only that comparison as "no match"
        would turn a ``not`` around it into a match. So does an error raised
        while it is evaluated (a JSONPath filter that fails on this bundle's
        values, a plugin's condition kind), reported as a warning: the rules
        after it are still evaluated.
        """
        before, first = view.timeouts, len(view.warnings)
        try:
            hit = self.when.evaluate(view)
        except PLUGIN_FAILURES as e:  # one rule's failure must not end the bundle's classification
            view.warnings.append(self._failed(e))
            return False
        if view.timeouts == before:
            return hit
        self._own(view, first)
        if hit:
            view.warnings.append(f"rule {self.id!r} would match, but a regex timed out while it was "
                                 "evaluated; counted as no match")
        return False

    def explain(self, view: View) -> tuple[Trace, bool]:
        """``(trace of when, matched)``, with the same timeout and error rules as :meth:`matches`."""
        before, first = view.timeouts, len(view.warnings)
        try:
            trace = self.when.explain(view)
        except PLUGIN_FAILURES as e:  # as in matches
            message = self._failed(e)
            view.warnings.append(message)
            return Trace("when", False, message), False
        self._own(view, first)
        return trace, trace.matched and view.timeouts == before

    def _own(self, view: View, first: int) -> None:
        """Name this rule in the warnings its conditions added (a regex that timed out
        knows its pattern and selector, not the rule), so a run's list says which rule to fix."""
        view.warnings[first:] = [f"rule {self.id!r}: {w}" for w in view.warnings[first:]]

    def _failed(self, error: BaseException) -> str:
        if isinstance(error, KindAnswerError):
            message = f"rule {self.id!r}: {error}; counted as no match"
        else:
            message = (f"rule {self.id!r} raised {type(error).__name__} while evaluated: "
                       f"{failure_detail(error)}; counted as no match")
        show_traceback(message, error)
        return message


@dataclass(frozen=True, slots=True)
class PackSettings:
    """Pack-wide settings from ``pack.yml``.

    ``tier1_oom_signature`` replaces the reference's Tier-1 OOM signature
    when set; ``tier1_oom_unless`` vetoes it (e.g. host-RAM OOM kills);
    ``tier1_oom_surface`` is ``reference`` (CONTRACTS §3.5.2) or ``all_text``.
    """

    name: str = ""
    description: str = ""
    regex_timeout: float = DEFAULT_REGEX_TIMEOUT
    tier1_oom_signature: tuple[str, ...] = ()
    tier1_oom_unless: tuple[str, ...] = ()
    tier1_oom_surface: str = "reference"


# The Tier-1 matcher holds each pack's compiled signature weakly (loop_rules/tier1.py).
# weakref_slot is Python 3.11's: on 3.10 a pack, one object a pack, keeps a __dict__.
_WEAKREF_SLOTS: dict[str, bool] = {"slots": True, "weakref_slot": True} if sys.version_info >= (3, 11) else {}


@dataclass(frozen=True, **_WEAKREF_SLOTS)
class RulePack:
    """A loaded, compiled rule pack. Evaluation never sees raw YAML."""

    name: str
    root: Path | None
    rules: tuple[Rule, ...]
    exact: Mapping[str, str]
    settings: PackSettings
    version: str
    files: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)
    # Makes (and remembers) the pack's regexes; see loop_core.packcache.
    regexes: RegexCache = field(default_factory=RegexCache, repr=False, compare=False)
    content: str = ""  # the full hash of the pack's files (version is its first 12 digits)
    shown: str = ""  # how messages name the pack's directory ("rules.d"; "" for the current one)
    # Derived from ``rules`` once: the rules that decide, the shadow rules, and
    # the index of what the deciding rules need (loop_core.prefilter).
    active_rules: tuple[Rule, ...] = field(init=False, repr=False, compare=False)
    shadow_rules: tuple[Rule, ...] = field(init=False, repr=False, compare=False)
    index: RuleIndex = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        active = tuple(r for r in self.rules if not r.shadow)
        object.__setattr__(self, "active_rules", active)
        object.__setattr__(self, "shadow_rules", tuple(r for r in self.rules if r.shadow))
        object.__setattr__(self, "index", RuleIndex([rule.when.needs() for rule in active]))

    def regex(self, pattern: str, flags: int = 0) -> GuardedRegex:
        """A guarded regex for a pattern that belongs to the pack (a plugin's Tier-1
        signature built from ``pack.yml``, say), analysed once across starts.

        :raises regex.error: the pattern does not compile.
        """
        guarded = self.regexes.make(pattern, flags)
        if self.regexes.dirty and self.root is not None:
            packcache.save(self.regexes, self.content)
        return guarded

    def remember_literals(self) -> None:
        """Keep what this process's literal scanner learnt in the pack cache, for
        the next start to seed its scanner with (see :mod:`loop_core.packcache`);
        written only when it learnt something new.

        Only literals this pack's rules can ask for are kept: the scanner serves
        every pack of the process (``loop-rules diff`` runs two), and another
        pack's literals would only make this one's scans slower.
        """
        found = scanner()
        if found is None or self.root is None:
            return
        learnt = found.learnt()
        if learnt <= self.regexes.literals:
            return  # the usual end once a pack has run: nothing new, and no walk of the pack
        if self.regexes.learn_literals(learnt & self._literals()):
            packcache.save(self.regexes, self.content)

    def _literals(self) -> frozenset[str]:
        """Every literal a search or the rule index of this pack may look up: those of
        its regexes' analyses (alternatives included), of its rules' needs and of the
        lookups their conditions make (``contains``)."""
        out: set[str] = set()
        stack = list(self.regexes.entries.values())
        while stack:
            data = stack.pop()
            if not isinstance(data, dict):
                continue
            for key in ("literals", "also"):
                out.update(x for x in data.get(key) or () if isinstance(x, str))
            stack.extend(sub for _piece, sub in data.get("branches") or ())
        for rule in self.rules:
            out.update(need.literal for need in rule.when.needs() or ())
            out.update(rule.when.lookups())
        return frozenset(out)

    def candidates(self, view: View) -> Iterator[Rule]:
        """The active rules that may match ``view``, in order; the others cannot."""
        return map(self.active_rules.__getitem__, self.index.candidates(view))


@functools.cache
def _loaders() -> tuple[Any, Any]:
    """``(fast, strict)`` YAML loaders, made on first use: a start whose pack comes
    from the pack cache (:mod:`loop_core.packcache`) never imports ``yaml``.

    The strict loader is safe YAML that refuses duplicate keys and keeps
    mapping keys as the text written, so an exact-table fingerprint such as
    ``012345670123`` is never read as a number (CONTRACTS §8.2.10). Anchors and
    aliases are refused before construction (:func:`_refuse_aliases`).
    """
    import yaml

    fast: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class StrictLoader(fast):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            if not isinstance(node, yaml.MappingNode):
                raise yaml.constructor.ConstructorError(
                    None, None, f"expected a mapping, found {node.id}", node.start_mark)
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise yaml.constructor.ConstructorError(
                        None, None, "mapping keys must be plain text", key_node.start_mark)
                key = key_node.value
                if key in out:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark)
                out[key] = self.construct_object(value_node, deep=deep)
            return out

    StrictLoader.add_constructor("tag:yaml.org,2002:map",
                                 lambda loader, node: loader.construct_mapping(node, deep=True))
    return fast, StrictLoader


def _refuse_aliases(text: str) -> None:
    """Anchors and aliases (the alias-bomb vector) are not allowed in rule files."""
    import yaml

    for event in yaml.parse(text, Loader=_loaders()[0]):
        if isinstance(event, yaml.AliasEvent):
            raise yaml.constructor.ConstructorError(
                None, None, "aliases are not allowed in rule files", event.start_mark)  # type: ignore[arg-type]
        if getattr(event, "anchor", None) is not None:
            raise yaml.constructor.ConstructorError(
                None, None, "anchors are not allowed in rule files", event.start_mark)  # type: ignore[arg-type]


def load_yaml_text(text: str, name: str = "<string>") -> Any:
    """Parse YAML with the strict rule-file loader; raises ``RuleError`` naming ``name``."""
    import yaml

    try:
        _refuse_aliases(text)
        return yaml.load(text, Loader=_loaders()[1])  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise RuleError(f"{name}: invalid YAML: {_yaml_message(e)}") from e
    except RecursionError as e:  # nesting PyYAML's own limit lets through, but Python's stack does not
        raise RuleError(f"{name}: invalid YAML: nested too deeply") from e


def _yaml_message(e: Exception) -> str:
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e)
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark else problem


class _Problems:
    def __init__(self, collect: bool, locate: Callable[[str], str] | None = None) -> None:
        self.collect = collect
        self.items: list[str] = []
        self._locate = locate

    def add(self, message: str) -> None:
        if self._locate is not None:
            message = self._locate(message)
        if not self.collect:
            raise RuleError(message)
        self.items.append(message)


# What follows "file[" in a problem with a rule: its index, its id, and the place
# inside the rule the problem is about ("when.all[0].select", "examples.match[2]"),
# after ": " or, in an example's failure, a space.
_RULE_PLACE = re.compile(r"(\d+)\]((?: [^\s:]\S*?)?)(?:: | (?=examples))"
                         r"((?:when|examples)(?:\.[A-Za-z_][\w-]*|\[\d+\])*)?")
# Problems with one key of the rule that name no place: the key's value is their place.
_KEY_OF_MESSAGE = (("unknown class ", "class"), ("mode must", "mode"), ("id must", "id"),
                   ("description must", "description"), ("regex ", "when"), ("no no_match", "examples"),
                   ("needs at least one examples", "examples"))
_PLACE_STEP = re.compile(r"\.?([A-Za-z_][\w-]*)|\[(\d+)\]")


class Locator:
    """Puts the line a problem with a rule is about into its message, after the
    rule's id: "50-quant.yml[2] packed (line 70): when.all[0]: invalid regex ...".

    ``sources`` maps each file's label, as messages name it, to its text
    (:attr:`RulePack.sources`). A file is parsed into nodes, which keep their
    place, only when one of its rules has a problem, and at most once.
    """

    def __init__(self, sources: Mapping[str, str]) -> None:
        self._sources = sources
        self._labels = sorted(sources, key=len, reverse=True)  # "a/10.yml" before "10.yml"
        self._nodes: dict[str, Any] = {}

    def __call__(self, message: str) -> str:
        label = next((label for label in self._labels if message.startswith(label + "[")), None)
        match = _RULE_PLACE.match(message, len(label) + 1) if label is not None else None
        if label is None or match is None:
            return message
        node = self._rule_node(label, int(match.group(1)))
        if node is None:
            return message
        place = match.group(3) or next((key for start, key in _KEY_OF_MESSAGE
                                        if message.startswith(start, match.end())), "")
        for step in _PLACE_STEP.finditer(place):
            inner = _child(node, *step.groups())
            if inner is None:
                break
            node = inner
        at = match.end(2)
        return f"{message[:at]} (line {node.start_mark.line + 1}){message[at:]}"

    def line(self, source: RuleSource) -> str:
        """", line N" where the rule at ``source`` starts; "" where that is not known."""
        node = self._rule_node(source.path, source.index) if source.path in self._sources else None
        return f", line {node.start_mark.line + 1}" if node is not None else ""

    def _rule_node(self, label: str, index: int) -> Any:
        if label not in self._nodes:
            import yaml

            try:
                self._nodes[label] = yaml.compose(self._sources[label], Loader=_loaders()[0])
            except (yaml.YAMLError, RecursionError):
                self._nodes[label] = None
        top = self._nodes[label]
        rules = _child(top, "rules", None) if _is_mapping(top) else top
        return _child(rules, None, str(index))


def _is_mapping(node: Any) -> bool:
    return getattr(node, "id", None) == "mapping"


def _child(node: Any, key: str | None, index: str | None) -> Any:
    """The node under ``key`` of a mapping node, or at ``index`` of a sequence node; None if none."""
    if key is not None and _is_mapping(node):
        for key_node, value_node in node.value:
            if getattr(key_node, "value", None) == key:
                return value_node
        return None
    if index is not None and getattr(node, "id", None) == "sequence" and int(index) < len(node.value):
        return node.value[int(index)]
    return None


def load_rules(
    root: str | Path,
    kinds: Mapping[str, ConditionKind],
    *,
    name: str | None = None,
    collect_errors: bool = False,
    display_root: str | None = None,
    allow_empty: bool = False,
) -> RulePack:
    """Load and compile the pack in directory ``root``.

    :param kinds: the condition kinds plugins registered (name -> kind).
    :param collect_errors: report every problem at once instead of the first.
    :param allow_empty: a directory without rule files is an empty pack (``learn``
        starting a new one), not the mistyped ``--rules`` it usually is.
    :raises RuleError: the pack is invalid; ``problems`` lists every problem.
    """
    root = Path(root)
    shown = display_root if display_root is not None else root.name
    if not root.is_dir():
        raise RuleError(f"{root}: rule pack directory not found")
    # A broken symbolic link is listed (and reported unreadable), not passed over; hidden
    # files (an editor's lock link .#10-x.yml, a Mac's ._10-x.yml) are not the pack's.
    files = sorted(p for p in root.iterdir() if p.suffix in (".yml", ".yaml") and not p.name.startswith(".")
                   and (p.is_file() or p.is_symlink()))
    if not files and not allow_empty:  # a mistyped --rules (a docs folder, say): a pack deciding nothing
        raise RuleError(f"{root}: no rule files (*.yml or *.yaml) in this directory; is it a rule pack?")
    sources: dict[str, str] = {}
    digest = hashlib.sha256()
    texts: dict[str, str] = {}
    unreadable: list[str] = []
    for path in files:
        label = f"{shown}/{path.name}" if shown else path.name
        try:
            path.name.encode("utf-8")
        except UnicodeEncodeError:  # a byte that is not UTF-8: the pack's version hashes the name
            unreadable.append(f"{path_text(label)}: cannot read: the file name is not UTF-8; rename the file")
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            unreadable.append(f"{label}: cannot read: {e}")
            continue
        texts[path.name] = text
        digest.update(path.name.encode() + b"\x1f" + text.encode() + b"\x1f")
        sources[label] = text
    content = digest.hexdigest()
    # The analysis, and the parsed files, of an earlier load of these very files.
    regexes = packcache.load(content)
    base = PackSettings(name=name or root.name)
    try:
        settings, rules, exact, parsed = _compile(texts, shown, base, kinds, collect_errors, unreadable, regexes)
    except RuleError:
        if not regexes.documents:
            raise
        # Parsed files from the cache that do not validate were changed behind the
        # cache's key (by hand, say): the files themselves decide.
        regexes.documents = None
        settings, rules, exact, parsed = _compile(texts, shown, base, kinds, collect_errors, unreadable, regexes)
    pack = RulePack(
        name=settings.name or name or root.name or root.resolve().name,
        root=root,
        rules=tuple(rules),
        exact=MappingProxyType(exact),
        settings=settings,
        version=content[:12],
        files=tuple(p.name for p in files),
        sources=MappingProxyType(sources),
        regexes=regexes,
        content=content,
        shown=shown,
    )
    regexes.remember(parsed)
    packcache.save(regexes, content)  # after the index analysed every regex it needs
    found = scanner()
    if found is not None and regexes.literals:
        found.seed(regexes.literals)  # what earlier runs of this pack learnt
    return pack


def _compile(texts: dict[str, str], shown: str, settings: PackSettings, kinds: Mapping[str, ConditionKind],
             collect_errors: bool, unreadable: list[str], regexes: packcache.PackCache,
             ) -> tuple[PackSettings, list[Rule], dict[str, str], dict[str, Any]]:
    """Parse (or take from ``regexes.documents``) and validate every file of a pack:
    ``(settings, rules, exact table, parsed files)``.

    :raises RuleError: a problem (every one with ``collect_errors``).
    """
    locator = Locator({f"{shown}/{file_name}" if shown else file_name: text for file_name, text in texts.items()})
    problems = _Problems(collect_errors, locator)
    for message in unreadable:
        problems.add(message)
    cached = regexes.documents or {}
    parsed: dict[str, Any] = {}

    def parse(file_name: str, label: str) -> Any:
        doc = cached[file_name] if file_name in cached else load_yaml_text(texts[file_name], label)
        parsed[file_name] = doc
        return doc

    if PACK_FILE in texts:
        label = f"{shown}/{PACK_FILE}"
        try:
            settings = _load_settings(parse(PACK_FILE, label), label, settings, problems, regexes)
        except RuleError as e:
            problems.add(str(e))

    rules: list[Rule] = []
    exact: dict[str, str] = {}
    exact_from: dict[str, str] = {}  # fingerprint -> the file that listed it first
    seen_ids: dict[str, RuleSource] = {}
    for file_name in texts:
        if file_name == PACK_FILE:
            continue
        label = f"{shown}/{file_name}" if shown else file_name
        try:
            doc = parse(file_name, label)
        except RuleError as e:
            problems.add(str(e))
            continue
        if doc is None:
            continue
        raw_rules: Any = doc
        if isinstance(doc, dict):
            extra = sorted(set(doc) - {"rules", "exact"})
            if extra:
                # pack.yaml, Pack.yml: the settings read only from pack.yml, taken for a rule file.
                rename = f"; pack settings are read from {PACK_FILE} only: rename the file" if (
                    file_name.lower().rsplit(".", 1)[0] == "pack" and file_name != PACK_FILE) else ""
                problems.add(f"{label}: unknown top-level keys {extra} (expected rules, exact){rename}")
            raw_rules = doc.get("rules", [])
            if raw_rules is None:
                raw_rules = []
            _load_exact(doc.get("exact"), label, exact, exact_from, problems)
        if not isinstance(raw_rules, list):
            problems.add(f"{label}: rules must be a list, got {type(raw_rules).__name__}")
            continue
        for index, raw in enumerate(raw_rules):
            source = RuleSource(label, index)
            rule_id = raw.get("id") if isinstance(raw, dict) else None
            if not (isinstance(rule_id, str) and _ID.match(rule_id)):
                rule_id = None  # _load_rule says what is wrong with it
            duplicate = False
            if rule_id is not None and rule_id in seen_ids:
                first = seen_ids[rule_id]
                problems.add(f"{source} {rule_id}: duplicate id (first defined at {first}{locator.line(first)})")
                duplicate = True
            elif rule_id is not None:
                seen_ids[rule_id] = source
            rule = _load_rule(raw, source, kinds, settings, problems, regexes)  # its own problems too
            if rule is not None and not duplicate:
                rules.append(rule)
    if problems.items:
        raise RuleError(
            f"{len(problems.items)} problem(s) in rule pack {shown}:\n" + "\n".join(problems.items),
            problems=tuple(problems.items),
        )
    return settings, rules, exact, parsed


def _load_settings(doc: Any, label: str, base: PackSettings, problems: _Problems,
                   regexes: RegexCache) -> PackSettings:
    doc = doc or {}
    if not isinstance(doc, dict):
        problems.add(f"{label}: must be a mapping")
        return base
    allowed = {"name", "description", "regex_timeout", "tier1_oom"}
    extra = sorted(set(doc) - allowed)
    if extra:
        problems.add(f"{label}: unknown keys {extra} (expected {', '.join(sorted(allowed))})")
    timeout = doc.get("regex_timeout", base.regex_timeout)
    if isinstance(timeout, str):
        try:
            timeout = float(timeout)
        except ValueError:
            pass
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not 0 < timeout <= 10:
        problems.add(f"{label}: regex_timeout must be a number of seconds in (0, 10], got {timeout!r}")
        timeout = base.regex_timeout
    tier1 = doc.get("tier1_oom")
    if tier1 is None:  # left out, or written with no value
        tier1 = {}
    signature: tuple[str, ...] = ()
    unless: tuple[str, ...] = ()
    surface = "reference"
    if not isinstance(tier1, dict):
        problems.add(f"{label}: tier1_oom must be a mapping")
    else:
        extra = sorted(set(tier1) - {"signature", "unless", "surface"})
        if extra:
            problems.add(f"{label}: tier1_oom: unknown keys {extra} (expected signature, surface, unless)")
        # An empty signature would read as "keep the default": refused, where an empty veto list is none.
        signature = _regex_list(tier1.get("signature"), f"{label}: tier1_oom.signature", problems, regexes,
                                empty_ok=False)
        unless = _regex_list(tier1.get("unless"), f"{label}: tier1_oom.unless", problems, regexes)
        surface = tier1.get("surface", "reference")
        if surface not in ("reference", "all_text"):
            problems.add(f"{label}: tier1_oom.surface must be reference or all_text, got {surface!r}")
            surface = "reference"
    for key in ("name", "description"):
        if doc.get(key) is not None and not isinstance(doc[key], str):
            problems.add(f"{label}: {key} must be text, got {doc[key]!r}")
    return PackSettings(
        name=str(doc.get("name") or base.name),
        description=str(doc.get("description") or ""),
        regex_timeout=float(timeout),
        tier1_oom_signature=signature,
        tier1_oom_unless=unless,
        tier1_oom_surface=surface,
    )


def any_of(patterns: Sequence[str]) -> str:
    """The one regex a list of ``pack.yml`` patterns is searched as (case-insensitively):
    ``(?:p1)|(?:p2)|...``."""
    return "|".join(f"(?:{p})" for p in patterns)


# A numbered back-reference (\1, \g<1>) not itself escaped: joined after a pattern
# with groups of its own, it would refer to that pattern's group instead.
_NUMBERED_REFERENCE = re.compile(r"(?<!\\)(?:\\\\)*\\(?:[1-9]|g<\d+>)")


def _regex_list(value: Any, where: str, problems: _Problems, regexes: RegexCache, *,
                empty_ok: bool = True) -> tuple[str, ...]:
    import regex

    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        problems.add(f"{where}: must be a list of regular expressions")
        return ()
    if not value and not empty_ok:
        problems.add(f"{where}: must be a non-empty list of regular expressions (leave the key out "
                     "to keep the reference's signature)")
        return ()
    ok = True
    for i, pattern in enumerate(value):  # each named by its place in the list, as check's probes name it
        try:
            regexes.make(pattern, 0)
        except regex.error as e:
            problems.add(f"{where}[{i}]: invalid regex {pattern_text(pattern)}: {e}")
            ok = False
    if not ok:
        return tuple(value)
    for i, pattern in enumerate(value):
        if i and _NUMBERED_REFERENCE.search(pattern) and any(regex.compile(p).groups for p in value[:i]):
            problems.add(f"{where}[{i}]: {pattern_text(pattern)} refers to a group by number, but the patterns are searched "
                         "as one regex where an earlier pattern's groups come first; use a named group")
    try:
        regexes.make(any_of(value), regex.IGNORECASE)
    except regex.error as e:
        problems.add(f"{where}: the patterns are searched as one regex, {pattern_text(any_of(value))}, and that does not "
                     f"compile: {e} (a comment of a verbose pattern or an inline flag can cause this)")
    return tuple(value)


def _load_exact(raw: Any, label: str, exact: dict[str, str], exact_from: dict[str, str],
                problems: _Problems) -> None:
    """Add a file's exact table to ``exact``; ``exact_from`` says which file listed each first."""
    if raw is None:
        return
    if not isinstance(raw, dict):
        problems.add(f"{label}: exact must be a mapping of fingerprint -> class")
        return
    for key, value in raw.items():
        if not _FINGERPRINT.match(key):
            problems.add(f"{label}: exact: {key!r} is not a 12-hex-digit fingerprint")
        elif not isinstance(value, str) or value not in _CLASSES:
            problems.add(f"{label}: exact: {key}: unknown class {value!r} (classes: {', '.join(sorted(_CLASSES))})")
        elif key in exact and exact[key] != value:
            problems.add(f"{label}: exact: {key}: listed twice with classes {exact[key]!r} and {value!r} "
                         f"(first in {exact_from[key]})")
        else:
            exact[key] = value
            exact_from.setdefault(key, label)


def _load_rule(raw: Any, source: RuleSource, kinds: Mapping[str, ConditionKind],
               settings: PackSettings, problems: _Problems, regexes: RegexCache) -> Rule | None:
    if not isinstance(raw, dict):
        problems.add(f"{source}: a rule must be a mapping, got {type(raw).__name__}")
        return None
    rule_id = raw.get("id")
    # An id that breaks the line (a newline, a control character) is only shown quoted, below.
    where = f"{source} {rule_id}" if isinstance(rule_id, str) and rule_id.isprintable() else str(source)
    ok = True
    extra = sorted(set(raw) - RULE_KEYS - OPTIONAL_RULE_KEYS)
    if extra:
        problems.add(f"{where}: unknown keys {extra} (expected {', '.join(sorted(RULE_KEYS | OPTIONAL_RULE_KEYS))})")
        ok = False
    mode = raw.get("mode", "active")
    if mode not in MODES:
        problems.add(f"{where}: mode must be active or shadow, got {mode!r}")
        ok = False
    # Every key present is checked even when others are missing: check reports it all at once.
    missing = sorted(RULE_KEYS - set(raw))
    if missing:
        problems.add(f"{where}: missing {', '.join(missing)}")
        ok = False
    if "id" in raw and (not isinstance(rule_id, str) or not _ID.match(rule_id)):
        problems.add(f"{where}: id must be a letter or digit, then up to 127 letters, digits, '.', '_', ':' "
                     f"or '-', got {rule_id!r}")
        ok = False
    if "class" in raw and (not isinstance(raw["class"], str) or raw["class"] not in _CLASSES):
        problems.add(f"{where}: unknown class {raw['class']!r} (classes: {', '.join(c.value for c in FailureClass)})")
        ok = False
    if "description" in raw and (not isinstance(raw["description"], str) or not raw["description"].strip()):
        problems.add(f"{where}: description must be non-empty text")
        ok = False
    when = None
    if "when" in raw:
        try:
            when = compile_condition(raw["when"], kinds, timeout=settings.regex_timeout, regexes=regexes.make)
        except ValueError as e:
            for message in getattr(e, "messages", (str(e),)):  # ConditionErrors: every item's problem
                problems.add(f"{where}: {message}")
            ok = False
    examples = _load_examples(raw["examples"], where, problems) if "examples" in raw else None
    if examples is None or when is None or not ok or not isinstance(rule_id, str):
        return None
    return Rule(rule_id, FailureClass(raw["class"]), raw["description"].strip(), when,
                examples[0], examples[1], source, mode)


def _load_examples(raw: Any, where: str, problems: _Problems) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """The ``match`` and ``no_match`` cases, or None after reporting every problem."""
    if not isinstance(raw, dict):
        problems.add(f"{where}: examples must be a mapping with match and no_match lists, "
                     f"got {type(raw).__name__}")
        return None
    ok = True
    extra = sorted(map(str, set(raw) - {"match", "no_match"}))
    if extra:
        problems.add(f"{where}: examples: unknown keys {extra} (expected match, no_match)")
        ok = False
    out = []
    for key in ("match", "no_match"):
        items = raw.get(key) or []
        if not isinstance(items, list):
            problems.add(f"{where}: examples.{key} must be a list")
            ok = False
            items = []
        for i, item in enumerate(items):
            if isinstance(item, str):
                continue
            if not isinstance(item, dict):
                problems.add(f"{where}: examples.{key}[{i}] must be log text or a mapping of "
                             f"{', '.join(sorted(EXAMPLE_FILES))}, got {type(item).__name__}")
                ok = False
                continue
            unknown = sorted(map(str, set(item) - EXAMPLE_FILES))
            if unknown:
                problems.add(f"{where}: examples.{key}[{i}]: unknown files {unknown} "
                             f"(expected {', '.join(sorted(EXAMPLE_FILES))})")
                ok = False
            odd = sorted(name for name, doc in item.items() if name in EXAMPLE_FILES and not isinstance(doc, dict))
            if odd:
                problems.add(f"{where}: examples.{key}[{i}]: {', '.join(odd)} must be a mapping of fields "
                             "(merged over the example bundle's file)")
                ok = False
        out.append(tuple(items))
    if ok and not out[0]:
        problems.add(f"{where}: needs at least one examples.match entry")
        ok = False
    return (out[0], out[1]) if ok else None
