"""Maintainer workflow: learn from the review queue, preview rule changes, lint a pack."""

from __future__ import annotations

import contextlib
import os
import re
import site
import sysconfig
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .batch import classify_paths, discover_bundle_paths
from .bundle import Bundle, path_text, read_bundle
from .engine import Engine
from .dedup import occurrence_of
from .errors import BundleError, LoopError
from .keys import dedup_key, tier2_fingerprint
from .pipeline import process_bundle
from .rules import Rule, RulePack, load_rules, load_yaml_text
from .testing import make_bundle
from .trackers import ReviewQueue, Settled, held, occurrence_list, write_texts_many
from .verdict import FailureClass
from .view import View

__all__ = ["Change", "DiffReport", "Lint", "OccurrenceBundles", "diff_packs", "learn", "lint_pack",
           "review_fingerprint", "settle_review_entry", "waiting_fingerprint"]

EXACT_FILE = "exact.yml"
_CLASSES = [c.value for c in FailureClass]
_FINGERPRINT = re.compile(r"[0-9a-f]{12}\Z")


# -- learn ------------------------------------------------------------------


def review_fingerprint(item: dict[str, Any]) -> str:
    """The Tier-2 fingerprint of a review-queue entry (recomputed for entries that lack one)."""
    if isinstance(item.get("fingerprint"), str) and _FINGERPRINT.match(item["fingerprint"]):
        return str(item["fingerprint"])
    ordered = (item.get("canonical") or {}).get("tuple_ordered") or []
    if len(ordered) != 7:
        raise LoopError(f"review entry {item.get('dedup_hash')!r}: no fingerprint and no canonical tuple")
    return tier2_fingerprint(str(item.get("error_substring") or ""), ordered[2], ordered[4])


def check_class(failure_class: str) -> None:
    """:raises LoopError: ``failure_class`` (learn's ``--as``) is not one of the six."""
    if failure_class not in _CLASSES:
        raise LoopError(f"--as {failure_class!r}: not one of the six classes ({', '.join(_CLASSES)})")


def learn(pack_dir: Path, fingerprint: str, failure_class: str, kinds: Any, *, note: str = "") -> bool:
    """Append ``fingerprint -> class`` to the pack's exact table (``exact.yml``).

    The file is edited as text so everything else in it (comments, order) is
    kept; keys are quoted so YAML never reads them as numbers. The pack is
    reloaded afterwards and the edit is undone if it no longer loads.

    :returns: False when the entry was already there with the same class.
    :raises LoopError: an unknown class, a bad fingerprint, or a conflicting entry.
    """
    check_class(failure_class)
    if not _FINGERPRINT.match(fingerprint):
        raise LoopError(f"{fingerprint!r}: not a 12-hex-digit fingerprint")
    pack_dir = Path(pack_dir)
    if not pack_dir.is_dir():
        raise LoopError(f"{pack_dir}: --rules must be a pack directory you can edit")
    installed = _installed_under(pack_dir)
    if installed is not None:
        # The installed copy of a shipped pack (the default pack after `pip install`):
        # learning worked, and the next upgrade of the package put the old table back.
        raise LoopError(f"{pack_dir}: is a pack installed with a Python package (under {installed}), which a "
                        f"reinstall or upgrade replaces, losing what was learned: copy it (cp -r {pack_dir} "
                        "my-rules), learn into the copy and give classify, run and report "
                        "--rules my-rules")
    # Two learns on one pack at once each read the table, added their line and wrote it
    # back: one entry was lost, and a learn undoing its edit could remove the other's
    # file. One at a time, from the first read to the last write.
    with _pack_locked(pack_dir):
        existing = load_rules(pack_dir, kinds, allow_empty=True).exact.get(fingerprint)
        if existing == failure_class:
            return False
        if existing is not None:
            raise LoopError(f"{fingerprint}: already learned as {existing!r}; edit {pack_dir / EXACT_FILE} "
                            "to change it")
        path = pack_dir / EXACT_FILE
        before = path.read_text(encoding="utf-8") if path.exists() else None
        stamp = time.strftime("%Y-%m-%d", time.gmtime())
        origin = f" from {_comment_text(note)}" if note.strip() else ""
        entry = f"'{fingerprint}': {failure_class}  # learned {stamp}{origin}\n"
        _replace_text(path, _with_entry(before, entry))
        try:
            learned = load_rules(pack_dir, kinds, allow_empty=True).exact.get(fingerprint)
            problem = None if learned == failure_class else "the table read back without it"
        except LoopError as e:  # RuleError included: the edit broke the pack, which loaded before it
            problem = str(e)
        if problem is not None:
            if before is None:
                path.unlink()
            else:
                _replace_text(path, before)
            # Said as the edit's failure: the file, as it was and is again, is not at fault
            # (a table that is not a block mapping read back as a duplicate key "exact").
            raise LoopError(f"{path}: could not add the entry as text ({problem}); the file is as it was: "
                            "write its exact: table as a block mapping (one '<fingerprint>': <class> line each)")
    return True


def _installed_under(pack_dir: Path) -> Path | None:
    """The site-packages directory ``pack_dir`` lies in, if it does."""
    where = pack_dir.resolve()
    for root in _install_dirs():
        if where.is_relative_to(root):
            return root
    return None


def _install_dirs() -> list[Path]:
    """Where Python packages are installed: this environment's and the user's site-packages."""
    paths = sysconfig.get_paths()
    found = {Path(paths[key]).resolve() for key in ("purelib", "platlib") if key in paths}
    with contextlib.suppress(AttributeError):  # site may be replaced (embedded interpreters)
        found.add(Path(site.getusersitepackages()).resolve())
        found.update(Path(p).resolve() for p in site.getsitepackages())
    return sorted(found)


@contextlib.contextmanager
def _pack_locked(pack_dir: Path) -> Iterator[None]:
    """An exclusive advisory lock on the pack directory itself (no lock file is added
    to the pack), held by one ``learn`` at a time."""
    try:
        fd = os.open(pack_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as e:
        raise LoopError(f"{pack_dir}: cannot open the pack directory: {e.strerror or e}") from e
    with held(fd):
        yield


class OccurrenceBundles:
    """Finds the bundle of a review-queue occurrence under a captures folder.

    The path was stored as the run was given it, relative to wherever it ran, and
    the folder may have moved since; so a bundle counts only when it holds the
    occurrence's own submission. The stored path is tried from here, from the
    captures folder's parent and from the folder itself; failing that, every
    bundle under the folder is read once and looked up by submission (a folder
    name that is not UTF-8, stored escaped, is found that way too).
    """

    def __init__(self, captures: Path) -> None:
        self.captures = captures
        self._by_submission: dict[str, str] | None = None

    def find(self, occurrence: Any) -> Path | None:
        if not isinstance(occurrence, dict) or not isinstance(occurrence.get("submission"), str):
            return None
        submission = occurrence["submission"]
        found = occurrence.get("bundle")
        if isinstance(found, str) and found:
            path = Path(found)
            for candidate in [path] if path.is_absolute() else [path, self.captures.parent / path,
                                                                 self.captures / path]:
                if candidate.is_dir() and _submission_of(candidate) == submission:
                    return candidate
        if self._by_submission is None:
            self._by_submission = {}
            for where in discover_bundle_paths([self.captures]):
                held = _submission_of(Path(where))
                if held is not None:
                    self._by_submission.setdefault(held, where)
        hit = self._by_submission.get(submission)
        return Path(hit) if hit is not None else None


def _submission_of(path: Path) -> str | None:
    try:
        return occurrence_of(read_bundle(path)).submission
    except (BundleError, OSError):
        return None


def waiting_fingerprint(queue: ReviewQueue, dedup_hash: str, engine: Engine) -> tuple[str, str]:
    """``(fingerprint, error substring)`` of what review-queue entry ``dedup_hash``
    still holds undecided under ``engine``'s pack: its first occurrence whose bundle
    is found and still classifies for review; else the entry's own description.

    :raises LoopError: there is no such entry, or only a stale description of it
        (see :meth:`ReviewQueue.settle`) and no bundle of it to learn from.
    :raises TrackerError: its file is damaged.
    """
    doc = queue.entry(dedup_hash)
    if doc is None:
        raise LoopError(f"{queue.directory.parent}: no review-queue entry {dedup_hash!r}")
    bundles = OccurrenceBundles(queue.directory.parent)
    for occurrence in occurrence_list(doc, queue.directory / f"{dedup_hash}.json"):
        where = bundles.find(occurrence)
        item = process_bundle(where, engine) if where is not None else None
        if item is not None and item.review is not None:  # it would be queued for review still
            return item.verdict.fingerprint, item.verdict.error_substring  # type: ignore[union-attr]
    if "described_by" in doc and doc["described_by"] is None:
        raise LoopError(f"review-queue entry {dedup_hash}: the failure it was described by has been decided, "
                        "and no bundle of the occurrences left in it can be found to learn from")
    fingerprint = review_fingerprint(doc)
    decided = engine.pack.exact.get(fingerprint)
    if decided is not None:
        raise LoopError(f"review-queue entry {dedup_hash}: the failure it is described by is decided already "
                        f"({fingerprint} -> {decided}), and no bundle of the occurrences left in it can be found "
                        "to learn from")
    return fingerprint, str(doc.get("error_substring") or "")


def settle_review_entry(queue: ReviewQueue, dedup_hash: str, engine: Engine, fingerprint: str) -> tuple[int, int]:
    """After ``learn``: take out of the review-queue entry ``dedup_hash`` the
    occurrences the pack (``engine``, the exact entry included) decides now, and
    return ``(taken out, left)``.

    An entry groups the unknown failures of one model, dtype, architecture,
    engine and topology, which may differ in their error; only those the new
    decision covers leave. Each occurrence's bundle is classified again; one
    that can no longer be read counts as decided when the entry's own
    fingerprint is the one learned. An entry that keeps occurrences is described
    by one of them afresh; one left with none is deleted.
    """
    doc = queue.entry(dedup_hash)
    if doc is None:
        return 0, 0
    # A damaged list (not a list) raises, naming the file, as a run's append does.
    occurrences = occurrence_list(doc, queue.directory / f"{dedup_hash}.json")
    if not occurrences:  # an entry without occurrences (written by hand): the decision was about it
        return int(queue.remove(dedup_hash)), 0
    settled = Settled()
    own = doc.get("fingerprint") == fingerprint
    bundles = OccurrenceBundles(queue.directory.parent)
    for occurrence in occurrences:
        if not isinstance(occurrence, dict):
            continue  # kept: nothing to decide it by
        where = bundles.find(occurrence)
        item = process_bundle(where, engine) if where is not None else None
        if item is None or item.error is not None or item.verdict is None:
            decided = own
        else:
            decided = item.review is None
            if not decided and settled.payload is None and item.review is not None:
                settled.payload = item.review
        if decided and isinstance(occurrence.get("submission"), str):
            settled.submissions.add(occurrence["submission"])
    taken = queue.settle({dedup_hash: settled})
    return taken, len(occurrences) - taken


def _comment_text(note: str) -> str:
    """``note`` as one line of a YAML comment: a folder name's bytes that are not
    UTF-8 written ``\xff``, other unprintable characters as their escapes."""
    text = " ".join(path_text(note).split())
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _replace_text(path: Path, text: str) -> None:
    """Replace the file at ``path`` (a link's target, if it is a link) with ``text``
    in one step, keeping its permissions (a new file gets those the umask gives,
    as the pack's other files did, not the temp file's 0600): a full disk or a
    Ctrl-C leaves the old table whole, never a truncated one.

    :raises LoopError: the file could not be written.
    """
    target = path.resolve()
    try:
        mode = target.stat().st_mode & 0o7777 if target.exists() else None
        write_texts_many([(target, text)])
        if mode is not None:
            os.chmod(target, mode)
    except OSError as e:
        raise LoopError(f"{path}: could not write: {e.strerror or e}; the file is as it was") from e


_EXACT_LINE = re.compile(r"(?m)^(?P<bom>\ufeff?)exact:[ \t]*(?:(?:null|~|\{\s*\})[ \t]*)?(?P<comment>#.*)?$")


def _with_entry(text: str | None, entry: str) -> str:
    """``exact.yml`` (or a new one, for None) with ``entry`` (one unindented line) as
    the last line of its ``exact:`` table, indented as the table's other lines are,
    everything else as it was (comments, other keys)."""
    if text is None:
        text = ("# Maintainer decisions: Tier-2 fingerprint -> class, written by `loop-rules learn`.\n"
                "# Keys are quoted so YAML reads them as text.\n")
    if text and not text.endswith("\n"):
        text += "\n"
    found = _EXACT_LINE.search(text)
    if found is None:
        return text + "exact:\n  " + entry
    lines = text[found.end() + 1:].splitlines(keepends=True)
    comment = f"  {found['comment']}" if found["comment"] else ""
    head = f"{text[:found.start()]}{found['bom']}exact:{comment}\n"
    end = 0  # the table's lines: indented ones, with the blank and comment lines among them
    indent = "  "
    for i, line in enumerate(lines):
        if line[:1] in (" ", "\t") and line.strip() and not line.lstrip().startswith("#"):
            if not end:
                indent = line[:len(line) - len(line.lstrip())]
            end = i + 1
        elif line.strip() and not line.lstrip().startswith("#"):
            break
    return head + "".join(lines[:end]) + indent + entry + "".join(lines[end:])


# -- diff -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    bundle: str
    old_class: str
    new_class: str
    old_rule: str | None
    new_rule: str | None
    old_hash: str
    new_hash: str

    def fields(self) -> list[str]:
        out = []
        if self.old_class != self.new_class:
            out.append("class")
        if self.old_rule != self.new_rule:
            out.append("rule")
        if self.old_hash != self.new_hash:
            out.append("dedup_hash")
        return out


@dataclass(slots=True)
class DiffReport:
    old_pack: str
    new_pack: str
    bundles: int = 0
    unreadable: int = 0
    changes: list[Change] = field(default_factory=list)
    shadow_hits: Counter[str] = field(default_factory=Counter)

    def transitions(self) -> Counter[tuple[str, str]]:
        """How many bundles went from one class to another. A change of rule or dedup
        hash alone is no class transition (it read as ``unknown -> unknown``)."""
        return Counter((c.old_class, c.new_class) for c in self.changes if c.old_class != c.new_class)

    def same_class(self) -> int:
        """The changed bundles whose class stayed: another rule, or another dedup hash."""
        return sum(c.old_class == c.new_class for c in self.changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "old_pack": self.old_pack, "new_pack": self.new_pack, "bundles": self.bundles,
            "unreadable": self.unreadable, "changed": len(self.changes),
            "transitions": [{"from": a, "to": b, "count": n} for (a, b), n in sorted(self.transitions().items())],
            "changes": [{"bundle": c.bundle, "fields": c.fields(), "old": {"class": c.old_class,
                         "rule": c.old_rule, "dedup_hash": c.old_hash}, "new": {"class": c.new_class,
                         "rule": c.new_rule, "dedup_hash": c.new_hash}} for c in self.changes],
            "shadow_matches": dict(sorted(self.shadow_hits.items())),
        }

    def markdown(self, limit: int = 50) -> str:
        lines = [f"### Rule pack diff: `{_md(self.old_pack)}` → `{_md(self.new_pack)}`", "",
                 f"{self.bundles} bundle(s), **{len(self.changes)} changed**"
                 + (f", {self.unreadable} unreadable" if self.unreadable else ""), ""]
        if self.changes:
            if self.transitions():
                lines += ["| from | to | bundles |", "|---|---|---:|"]
                lines += [f"| `{a}` | `{b}` | {n} |" for (a, b), n in sorted(self.transitions().items())]
                lines.append("")
            if self.same_class():
                lines += [f"{self.same_class()} kept their class under another rule or dedup hash.", ""]
            lines += ["| bundle | class | rule | dedup hash |", "|---|---|---|---|"]
            for c in self.changes[:limit]:
                lines.append(f"| `{_md(c.bundle)}` | {_arrow(c.old_class, c.new_class)} | "
                             f"{_arrow(c.old_rule, c.new_rule)} | {_arrow(c.old_hash, c.new_hash)} |")
            if len(self.changes) > limit:
                lines.append(f"| … {len(self.changes) - limit} more | | | |")
        if self.shadow_hits:
            lines += ["", "Shadow rules (evaluated, never deciding):", ""]
            lines += [f"- `{rule}` would match {n} bundle(s)" for rule, n in sorted(self.shadow_hits.items())]
        return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    """``text`` for one cell of a Markdown table: a newline (in a folder's name, say) or
    another character that is not printable is written as its escape, as the table
    output does, so the row stays one row."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text.replace("|", "\\|").replace("`", "'")


def _arrow(old: Any, new: Any) -> str:
    return _cell(old) if old == new else f"{_cell(old)} → {_cell(new)}"


def _cell(value: Any) -> str:
    """A value as code, or "no rule" for the rule of a verdict nothing decided."""
    return "no rule" if value is None else f"`{_md(str(value))}`"


def diff_packs(paths: Iterable[Path], old: Engine, new: Engine) -> DiffReport:
    """Every bundle whose class, matched rule or dedup hash differs between two packs."""
    report = DiffReport(old.pack.name, new.pack.name)
    for outcome in classify_paths(paths, new):
        report.bundles += 1
        if outcome.bundle is None or outcome.verdict is None:
            report.unreadable += 1
            continue
        after = outcome.verdict
        before = old.classify(outcome.bundle)
        for rule in after.shadow_matches:
            report.shadow_hits[rule] += 1
        old_hash = dedup_key(outcome.bundle, before.failure_class.value).digest()
        new_hash = dedup_key(outcome.bundle, after.failure_class.value).digest()
        change = Change(path_text(outcome.path), before.failure_class.value, after.failure_class.value,
                        before.matched_rule, after.matched_rule, old_hash, new_hash)
        if change.fields():
            report.changes.append(change)
    return report


# -- lint -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lint:
    level: str  # "error" or "warning"
    message: str


def _example_bundle(example: Any) -> Bundle:
    return make_bundle(example)


# Selected texts short enough that a full search costs nothing worth a warning.
SHORT_TEXTS = frozenset({"$.signal.final_error", "$.signal.error_substring", "$.signal.first_red_cap",
                         "$.signal.abort_reason", "$.signal.quant_label", "$.signal.arch_family",
                         "$.signal.engine", "$.signal.model", "$.signal.outcome", "$.signal.error_source"})


def _slow_regexes(rule: Rule) -> list[str]:
    from .selftest import _regex_nodes

    out = []
    for node in _regex_nodes(rule.when):
        if node.selector.text in SHORT_TEXTS or node.selector.text.startswith("$.manifest."):
            continue
        guarded = node.operand
        for piece in guarded.branches or (guarded,):
            why = ("has no literal of 3 or more characters" if piece.literals is None else
                   "can cross lines without bound or ends at a single-line $" if piece.reach is None else "")
            if why:
                shown = piece.pattern if len(piece.pattern) <= 60 else piece.pattern[:57] + "..."
                out.append(f"regex '{shown}' on {node.selector.text} {why}: it is searched over the whole "
                           "text of every bundle that reaches the rule (slow on long logs)")
    return out


def _has_exact_entries(text: str, label: str) -> bool:
    """Whether a rule file (one the pack loaded) has a non-empty ``exact`` table."""
    try:
        doc = load_yaml_text(text, label)
    except LoopError:
        return False
    return isinstance(doc, dict) and bool(doc.get("exact"))


def _winner(name: str, sources: dict[str, Any], pack: RulePack) -> str:
    """What decided before a rule, said so the maintainer can find it: a rule with its
    place, a fingerprint as the exact entry it is, a matcher (Tier-1, a plugin's) by name."""
    if name in sources:
        return f"{name} ({sources[name]})"
    if name in pack.exact:
        return f"exact entry {name!r}"
    return name


def lint_pack(engine: Engine) -> list[Lint]:
    """Problems a pack loads fine with but a maintainer wants to hear about.

    - a rule that can never win: for every one of its ``match`` examples an
      earlier matcher (Tier-1, the exact table or an earlier rule) decides;
    - a rule without ``no_match`` examples;
    - a regex (or one of its alternatives) that is searched over the whole
      of a long text in every bundle that reaches it: it has no literal of
      three or more characters, or it can cross lines without bound
      (``\\s*``, ``(?s).*``) or end at a single-line ``$`` (docs/performance.md);
    - a file that contributes nothing (no rules, no exact entries, or only
      rules that can never win).
    """
    pack: RulePack = engine.pack
    out: list[Lint] = []
    dead: set[str] = set()
    sources = {rule.id: rule.source for rule in pack.rules}
    for rule in pack.active_rules:
        winners = []
        for example in rule.match_examples:
            bundle = _example_bundle(example)
            if rule.matches(View(bundle)):  # an example its rule misses is an error of its own (run_examples)
                winners.append(engine.classify(bundle).matched_rule)
        if winners and all(w != rule.id for w in winners):
            dead.add(rule.id)
            by = [_winner(w, sources, pack) for w in sorted({w or "no rule" for w in winners})]
            out.append(Lint("warning", f"{rule.source} {rule.id}: unreachable, can never win: every match example "
                                       f"is decided earlier by {', '.join(by)}"))
        if not rule.no_match_examples:
            out.append(Lint("warning", f"{rule.source} {rule.id}: no no_match examples; add a near miss"))
        out.extend(Lint("warning", f"{rule.source} {rule.id}: {problem}") for problem in _slow_regexes(rule))
    by_file: dict[str, list[str]] = {}
    for rule in pack.rules:
        by_file.setdefault(rule.source.path, []).append(rule.id)
    for label, text in pack.sources.items():
        name = label.rsplit("/", 1)[-1]
        if name == "pack.yml" or name == EXACT_FILE:
            continue
        ids = by_file.get(label, [])
        has_exact = _has_exact_entries(text, label)
        if not ids and not has_exact:
            out.append(Lint("warning", f"{label}: contributes nothing (no rules, no exact entries)"))
        elif ids and all(i in dead for i in ids) and not has_exact:
            out.append(Lint("warning", f"{label}: contributes nothing: all of its rules are unreachable"))
    return out
