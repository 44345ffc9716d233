"""The curated-model catalog: which HF repos are curated models, and their compose names.

File shape (YAML)::

    schema: 1
    models:
      - id: qwen3.6-27b
        hf_repos: [Lorbus/Qwen3.6-27B-int4-AutoRound, ...]
    composes:
      - name: vllm/minimal
        model: qwen3.6-27b

Order matters and is kept: the first matching model wins, and the first
compose of a model is its fallback (CONTRACTS §4.5). Without a catalog every
anchor is derived.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import CatalogError

__all__ = ["Catalog", "load_catalog"]


@dataclass(frozen=True, slots=True)
class Catalog:
    """Curated models in catalog order, and composes in definition order."""

    models: tuple[tuple[str, tuple[str, ...]], ...] = ()
    composes: tuple[tuple[str, str], ...] = ()

    def curated_model(self, hf_slug: Any) -> str | None:
        """§4.5: the first catalog model with a compose whose ``hf_repos`` holds the slug exactly."""
        if not isinstance(hf_slug, str):
            return None
        wanted = hf_slug.strip()
        registry = {model for _name, model in self.composes if model}
        for model_id, repos in self.models:
            if model_id in registry and any(repo.strip() == wanted for repo in repos):
                return model_id
        return None

    def compose_for(self, model_id: str, profile_like: Any) -> str | None:
        """The pt1 ``profile_like`` compose if it serves the model, else the model's first compose."""
        names = [name for name, model in self.composes if model == model_id]
        if isinstance(profile_like, str) and profile_like in names:
            return profile_like
        return names[0] if names else None


def load_catalog(path: str | os.PathLike[str] | None) -> Catalog:
    """Read a catalog file; ``None`` gives the empty catalog (every anchor derived).

    Read as strictly as a rule file (no duplicate keys, no anchors or aliases),
    and every key is checked: a misspelt ``hf_repos`` would otherwise demote
    every curated anchor without a word.

    :raises CatalogError: the file is unreadable or not of the documented shape;
        the message names the place.
    """
    if path is None:
        return Catalog()
    from .errors import RuleError
    from .rules import load_yaml_text  # the strict loader rule files are read with

    where = Path(path)
    try:
        doc = load_yaml_text(where.read_text(encoding="utf-8"), str(where))
    except (OSError, UnicodeDecodeError) as e:
        raise CatalogError(f"{where}: cannot read catalog: {e}") from e
    except RuleError as e:
        raise CatalogError(str(e)) from e
    if doc is None:
        return Catalog()
    if not isinstance(doc, dict):
        raise CatalogError(f"{where}: a catalog is a mapping with schema, models and composes, "
                           f"got {type(doc).__name__}")
    _known(doc, _TOP_KEYS, str(where))
    schema = doc.get("schema", 1)
    if type(schema) is not int or schema != 1:  # not True, not 1.0
        raise CatalogError(f"{where}: schema must be 1, got {doc['schema']!r}")
    models = []
    first: dict[str, str] = {}  # a model id, a compose name -> where it was listed first
    for i, entry in enumerate(_entries(doc, "models", where)):
        place = f"{where}: models[{i}]"
        model_id = _named(entry, place, _MODEL_KEYS)
        _once(first, f"model {model_id!r}", f"models[{i}]", place)
        repos = entry.get("hf_repos")
        repos = [] if repos is None else repos
        if not isinstance(repos, list) or not all(isinstance(r, str) and r.strip() for r in repos):
            raise CatalogError(f"{place} {model_id}: hf_repos must be a list of repository names (text)")
        models.append((model_id, tuple(repos)))
    composes = []
    for i, entry in enumerate(_entries(doc, "composes", where)):
        place = f"{where}: composes[{i}]"
        name = _named(entry, place, _COMPOSE_KEYS)
        _once(first, f"compose {name!r}", f"composes[{i}]", place)
        model = entry.get("model")
        if model is not None and not isinstance(model, str):
            raise CatalogError(f"{place} {name}: model must be a model id (text)")
        if model and f"model {model!r}" not in first:  # a typo would leave the model derived, silently
            raise CatalogError(f"{place} {name}: model {model!r} is not one of this catalog's models")
        composes.append((name, model or ""))
    return Catalog(tuple(models), tuple(composes))


_TOP_KEYS = ("schema", "models", "composes")
_MODEL_KEYS = ("id", "hf_repos")
_COMPOSE_KEYS = ("name", "model")


def _once(first: dict[str, str], what: str, index: str, place: str) -> None:
    """Refuse a second model with one id, or a second compose with one name: which of
    the two a lookup found would depend on the order they are listed in."""
    if what in first:
        raise CatalogError(f"{place}: {what} is listed twice (first at {first[what]})")
    first[what] = index


def _named(entry: Any, place: str, keys: tuple[str, str]) -> str:
    """The name (``keys[0]``: a model's id, a compose's name) of a catalog entry that is
    a mapping of ``keys`` only."""
    if not isinstance(entry, dict):
        raise CatalogError(f"{place}: must be a mapping with {' and '.join(keys)}, got {type(entry).__name__}")
    _known(entry, keys, place)
    name = entry.get(keys[0])
    if not isinstance(name, str) or not name.strip():
        raise CatalogError(f"{place}: needs a{'n' if keys[0] == 'id' else ''} {keys[0]} (text)")
    return name


def _known(mapping: dict[Any, Any], keys: tuple[str, ...], place: str) -> None:
    extra = sorted(str(k) for k in mapping if k not in keys)
    if extra:
        raise CatalogError(f"{place}: unknown keys {extra} (expected {', '.join(keys)})")


def _entries(doc: dict[str, Any], key: str, where: Path) -> list[Any]:
    found = doc.get(key)
    if found is None:
        return []
    if not isinstance(found, list):
        raise CatalogError(f"{where}: {key} must be a list, got {type(found).__name__}")
    return found
