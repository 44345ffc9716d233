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

    :raises CatalogError: the file is unreadable or not of the documented shape.
    """
    if path is None:
        return Catalog()
    import yaml  # only when there is a file to read: most runs have no catalog

    where = Path(path)
    try:
        doc = yaml.safe_load(where.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError) as e:
        raise CatalogError(f"{where}: cannot read catalog: {e}") from e
    except yaml.YAMLError as e:
        raise CatalogError(f"{where}: invalid YAML: {e}") from e
    if not isinstance(doc, dict):
        raise CatalogError(f"{where}: a catalog is a mapping with models and composes")
    models = []
    for i, entry in enumerate(doc.get("models") or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise CatalogError(f"{where}: models[{i}]: needs an id")
        repos = entry.get("hf_repos") or []
        if not isinstance(repos, list):
            raise CatalogError(f"{where}: models[{i}] {entry['id']}: hf_repos must be a list")
        models.append((entry["id"], tuple(str(r) for r in repos)))
    composes = []
    for i, entry in enumerate(doc.get("composes") or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise CatalogError(f"{where}: composes[{i}]: needs a name")
        composes.append((entry["name"], str(entry.get("model") or "")))
    return Catalog(tuple(models), tuple(composes))
