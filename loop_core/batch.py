"""Find bundles under a path and classify them one by one (streaming, never all in memory)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from .bundle import BUNDLE_FILES, Bundle, ReadLimits, path_text, read_bundle
from .engine import Engine
from .errors import BundleError
from .jsontext import dumps_indented, strict_dumps
from .keys import consensus_key, dedup_key, dedup_labels
from .verdict import Classification
from .view import is_failure

__all__ = ["Outcome", "classify_paths", "classify_rows", "discover_bundle_paths", "discover_bundles",
           "verdict_row"]


def _is_bundle_dir(path: str) -> tuple[bool, list[str], set[str]]:
    """Whether ``path`` holds bundle files, and else its subdirectories (sorted) and
    which of them are symbolic links to a directory."""
    names = []
    links = set()
    try:
        with os.scandir(path) as it:
            for entry in it:
                if entry.name in BUNDLE_FILES:
                    return True, [], set()  # a bundle: its subdirectories are never searched
                if entry.name.startswith((".", "_")):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    names.append(entry.name)
                elif entry.is_symlink() and entry.is_dir():  # only a link costs a stat here
                    names.append(entry.name)
                    links.add(entry.name)
    except OSError:
        return True, [], set()  # let the reader report it
    names.sort(key=os.path.normcase)  # the order of the paths themselves: they share a parent
    if path == os.curdir:  # as pathlib joins: Path(".") / "x" is "x"
        return False, names, links
    return False, [os.path.join(path, name) for name in names], {os.path.join(path, name) for name in links}


def discover_bundles(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Path]:
    """Yield bundle directories under ``paths`` in sorted order.

    A directory holding any bundle file (``manifest.json``, ``pt1-gate.json``
    ...) is a bundle, even a broken one, so the reader can say what is wrong
    with it. Other directories are searched recursively; those whose name
    starts with ``_`` (spools such as ``_dedup-queue``) or ``.`` are skipped.
    A symbolic link to a directory is followed, but a directory reached
    through links is searched only once (a link to an ancestor ends there).
    A path given explicitly that holds no bundle at any depth is reported as a
    bundle (the reader then says it is not one), so a wrong path does not pass
    as an empty corpus.
    Paths that overlap (a folder and a bundle inside it, one folder twice)
    yield each bundle once, where it is first found.
    """
    return map(Path, discover_bundle_paths(paths))


def discover_bundle_paths(paths: Iterable[str | os.PathLike[str]]) -> Iterator[str]:
    """:func:`discover_bundles` as plain strings (each as ``str(path)`` of the
    ``Path`` it yields), for callers that pass them on: a pass over 10,000
    bundles makes no ``Path`` objects."""
    tops = [os.fspath(Path(raw)) for raw in paths]  # normalised once, as a Path would show it
    if _overlapping(tops):
        # A bundle reached from two of the paths was classified, counted and compared twice.
        return _once(_walk(tops))
    return _walk(tops)


def _where(path: str) -> str:
    return os.path.normcase(os.path.abspath(path))


def _overlapping(tops: list[str]) -> bool:
    """Whether one of ``tops`` is another, or inside another, as written (no links
    are resolved: a shell glob of 10,000 bundles costs no system call here)."""
    if len(tops) < 2:
        return False
    # Sorted by their parts, a folder is followed by what lies inside it (if anything
    # does): comparing neighbours is enough.
    parts = sorted(tuple(part for part in _where(top).split(os.sep) if part) for top in tops)
    return any(later[:len(earlier)] == earlier for earlier, later in pairwise(parts))


def _once(found: Iterator[str]) -> Iterator[str]:
    seen: set[str] = set()
    for path in found:
        where = _where(path)
        if where not in seen:
            seen.add(where)
            yield path


def _walk(tops: list[str]) -> Iterator[str]:
    for top in tops:
        if not os.path.isdir(top):
            yield top
            continue
        is_bundle, subdirs, links = _is_bundle_dir(top)
        if is_bundle or not subdirs:
            yield top
            continue
        # The real path of each directory searched through a link (a folder under a link
        # is the same folder however it is reached): a cycle ends, nothing comes twice.
        through_links: set[str] = set()
        stack = [(path, False) for path in reversed(subdirs)]
        found = False
        while stack:
            current, linked = stack.pop()
            if linked or current in links:
                if not _first_visit(current, top, through_links):
                    continue
                linked = True
            is_bundle, subdirs, more = _is_bundle_dir(current)
            if is_bundle:
                found = True
                yield current
            else:
                links |= more
                stack.extend((path, linked) for path in reversed(subdirs))
        if not found:  # folders, but no bundle in any of them: a wrong path, as an empty one is
            yield top


def _first_visit(path: str, top: str, seen: set[str]) -> bool:
    """Whether the directory ``path`` (reached through a symbolic link) is new to the
    search: not inside the tree under ``top``, which is searched anyway, nor one
    already searched through another link. A new one is added to ``seen``."""
    real = os.path.realpath(path)
    root = os.path.realpath(top)
    if real == root or real.startswith(root.rstrip(os.sep) + os.sep) or real in seen:
        return False
    seen.add(real)
    return True


@dataclass(frozen=True, slots=True)
class Outcome:
    """One bundle's result: either an error from the reader or a classification."""

    path: Path
    bundle: Bundle | None
    error: BundleError | None
    verdict: Classification | None


def classify_paths(paths: Iterable[str | os.PathLike[str]], engine: Engine,
                   limits: ReadLimits | None = None) -> Iterator[Outcome]:
    for path in discover_bundles(paths):
        yield _outcome(path, engine, limits)


def _outcome(path: Path, engine: Engine, limits: ReadLimits | None = None) -> Outcome:
    try:
        bundle = read_bundle(path, limits=limits)
    except BundleError as e:
        return Outcome(path, None, e, None)
    return Outcome(path, bundle, None, engine.classify(bundle))


def _row(path: str, engine: Engine) -> dict[str, Any]:
    return verdict_row(_outcome(Path(path), engine))


# json.dumps(row, ensure_ascii=False), without building an encoder for every row
# (json.dumps reuses its own only for the default options): 20 -> 17 us a row.
_JSONL_LINE = json.JSONEncoder(ensure_ascii=False).encode


def _jsonl(path: str, engine: Engine) -> tuple[bool, str]:
    row = _row(path, engine)
    return row["reader_error"] is not None, strict_dumps(_JSONL_LINE, row)


def _json_element(path: str, engine: Engine) -> tuple[bool, str]:
    row = _row(path, engine)
    return row["reader_error"] is not None, strict_dumps(_indented, row)


def _indented(row: dict[str, Any]) -> str:
    return dumps_indented(row, ensure_ascii=False)


def classify_text(paths: Iterable[str | os.PathLike[str]], engine: Engine, *, indent: bool = False,
                  jobs: int = 1, rules: str | None = None) -> Iterator[tuple[bool, str]]:
    """``(unreadable, JSON text)`` of every :func:`verdict_row`, in discovery order.

    Like :func:`classify_rows`, but the JSON is written where the bundle was
    classified: with ``jobs > 1`` the workers do it, and only text travels
    back. ``indent`` gives ``json.dumps(row, indent=2)``, else one line.
    """
    from .parallel import engine_map

    found = discover_bundle_paths(paths)
    return engine_map(_json_element if indent else _jsonl, found, engine, jobs=jobs, rules=rules)


def classify_rows(paths: Iterable[str | os.PathLike[str]], engine: Engine, *, jobs: int = 1,
                  rules: str | None = None) -> Iterator[dict[str, Any]]:
    """:func:`verdict_row` of every bundle under ``paths``, in discovery order, streamed.

    With ``jobs > 1`` bundles are read and classified in that many worker
    processes (:func:`loop_core.parallel.engine_map`); only the rows travel back.
    """
    from .parallel import engine_map

    found = discover_bundle_paths(paths)
    return engine_map(_row, found, engine, jobs=jobs, rules=rules)


def verdict_row(outcome: Outcome) -> dict[str, Any]:
    """The ``classify --format json/jsonl`` row (docs/cli.md, "JSON and JSONL output")."""
    row: dict[str, Any] = {"bundle": path_text(outcome.path)}
    if outcome.error is not None or outcome.bundle is None or outcome.verdict is None:
        row.update({
            "schema": None,
            "reader_error": {"type": type(outcome.error).__name__, "message": path_text(outcome.error)},
            "failure_class": None, "tier": None, "matched_rule": None, "fingerprint": None,
            "error_substring": None, "should_file": None, "review_queue": None,
            "route_as_kv_calc_bug": None, "delta_mib": None, "consensus_key": None,
            "dedup_tuple": None, "dedup_hash": None, "labels": None,
        })
        return row
    bundle, v = outcome.bundle, outcome.verdict
    key = dedup_key(bundle, v.failure_class.value)
    digest = key.digest()
    ckey = consensus_key(bundle)
    row.update({
        "schema": bundle.schema,
        "reader_error": None,
        "failure_class": v.failure_class.value,
        "tier": v.tier.value,
        "matched_rule": v.matched_rule,
        "fingerprint": v.fingerprint,
        "error_substring": v.error_substring,
        "should_file": v.should_file,
        "review_queue": v.review_queue,
        "route_as_kv_calc_bug": v.route_as_kv_calc_bug,
        "delta_mib": v.delta_mib,
        "consensus_key": None if ckey is None else [*ckey[:8], list(ckey[8])],
        "dedup_tuple": list(key),
        "dedup_hash": digest,
        "labels": list(dedup_labels(key, digest)),
        "tier1_inputs": v.tier1_inputs,
        "rules_version": v.rules_version,
        "warnings": list(v.warnings),
        "shadow_matches": list(v.shadow_matches),
        "failure": is_failure(bundle),
    })
    return row


TRUST_FIELDS = ("stage", "reason", "graduation_set", "fingerprint_ok", "curated", "curated_model",
                "consensus_count", "consensus_reached", "calibration_row")


def _trust_fields(result: Any) -> dict[str, Any]:
    if result is None:
        return dict.fromkeys(TRUST_FIELDS)
    d = result.to_dict()
    return {k: d[k] for k in TRUST_FIELDS}


def trust_rows(paths: Iterable[str | os.PathLike[str]], *, catalog: str | os.PathLike[str] | None = None,
               promote: bool = False, priors: Iterable[str | os.PathLike[str]] = (),
               consensus_n: int = 2, pm: Any = None, limits: ReadLimits | None = None,
               warn: Callable[[str], None] | None = None) -> Iterator[dict[str, Any]]:
    """``trust --format jsonl`` rows: one per bundle under ``paths``.

    The catalog and the priors are read when this is called, before the first
    row (a bad catalog raises ``CatalogError`` then); the priors are indexed by
    consensus key, so a batch costs one lookup per anchor instead of a scan of
    every prior. ``warn`` is told of a prior path that gave no readable bundle.
    """
    from .catalog import load_catalog
    from .plugins import make_plugin_manager
    from .trust import ConsensusIndex, graduation_set

    pm = pm or make_plugin_manager()
    cat = load_catalog(catalog)
    index: ConsensusIndex | None = None
    prior_paths = list(priors)
    if prior_paths:
        index = ConsensusIndex()
        for given in prior_paths:
            readable = 0
            for path in discover_bundles([given]):
                try:
                    prior = read_bundle(path, limits=limits)
                except BundleError:
                    continue  # an unreadable prior simply does not count
                readable += 1
                if not prior.is_gate_only and graduation_set(prior):
                    # Consensus is other submissions that saw this configuration work, as in
                    # `run`: a submission whose every capability failed vouches for nothing.
                    index.add(prior)
            if not readable and warn is not None:
                warn(f"--priors {path_text(given)}: no readable bundle there; it counts for nothing")
    return _trust_rows(paths, pm, cat, index, promote, consensus_n, limits)


def _trust_rows(paths: Iterable[str | os.PathLike[str]], pm: Any, cat: Any, index: Any, promote: bool,
                consensus_n: int, limits: ReadLimits | None) -> Iterator[dict[str, Any]]:
    from .trust import trust_of

    for path in discover_bundles(paths):
        row: dict[str, Any] = {"bundle": path_text(path)}
        try:
            bundle = read_bundle(path, limits=limits)
        except BundleError as e:
            row["reader_error"] = {"type": type(e).__name__, "message": path_text(e)}
            row.update(_trust_fields(None))
            yield row
            continue
        row["reader_error"] = None
        result = None
        if not bundle.is_gate_only:
            result = trust_of(pm, bundle, catalog=cat, priors=index, maintainer_promoted=promote,
                              consensus_n=consensus_n)
        row.update(_trust_fields(result))
        yield row
