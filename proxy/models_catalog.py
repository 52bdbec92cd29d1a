"""The model catalog the proxy recognises (spec §1.6): built-in list, plan snapshots, aliases."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BUILTIN_MODEL_IDS = (
    "gpt-5.5",
    "gpt-5.4",
    "gpt-5.4-mini",
    "gpt-5.3-codex",
    "gpt-5.3-codex-spark",
    "codex-auto-review",
    "gpt-5.2",
    "gpt-image-1",
)
DEFAULT_MODEL_ID = "gpt-5.5"
ALIAS_CHAIN_LIMIT = 20
_EFFORTS = ("minimal", "low", "medium", "high")


def builtin_catalog() -> list[dict[str, Any]]:
    """The built-in entries, used when no plan snapshot was ever fetched."""
    return [
        {
            "id": model_id,
            "displayName": model_id,
            "description": "",
            "isDefault": model_id == DEFAULT_MODEL_ID,
            "supportedReasoningEfforts": [
                {"reasoningEffort": effort, "description": effort} for effort in _EFFORTS
            ],
            "defaultReasoningEffort": "medium",
            "inputModalities": ["text"],
            "outputModalities": ["text"],
            "supportsPersonality": False,
            "upgrade": None,
            "source": "builtin",
        }
        for model_id in BUILTIN_MODEL_IDS
    ]


MOST_ALIASES = 500
LONGEST_MODEL_NAME = 200


class InvalidAliases(ValueError):
    """An alias map an operator may not save; the message says why, for the operator."""


def checked_aliases(raw: Any) -> dict[str, str]:
    """The alias map an operator writes (admin API or console), names and targets trimmed.

    Raises InvalidAliases for anything but an object of model names to model names: more than
    ``MOST_ALIASES`` pairs, a name or target empty or over ``LONGEST_MODEL_NAME`` characters,
    or an alias equal to its target (spec §1.6 "alias ≠ target enforced on write": such a pair
    renames nothing, and at request time it would be dropped without a word).
    """
    if not isinstance(raw, dict):
        raise InvalidAliases("model aliases must be an object of alias names to model names")
    if len(raw) > MOST_ALIASES:
        raise InvalidAliases(f"at most {MOST_ALIASES} aliases")
    cleaned: dict[str, str] = {}
    for name, target in raw.items():
        if not isinstance(name, str) or not isinstance(target, str):
            raise InvalidAliases("alias names and their targets must be strings")
        name, target = name.strip(), target.strip()
        if not name or len(name) > LONGEST_MODEL_NAME:
            raise InvalidAliases(f"alias names must be 1–{LONGEST_MODEL_NAME} characters")
        if not target or len(target) > LONGEST_MODEL_NAME:
            raise InvalidAliases(
                f"the target of {name!r} must be 1–{LONGEST_MODEL_NAME} characters"
            )
        if name == target:
            raise InvalidAliases(f"the alias {name!r} cannot be its own target")
        cleaned[name] = target
    return cleaned


def clean_aliases(raw: Any) -> dict[str, str]:
    """The alias map with names trimmed and empty or self-referencing pairs dropped."""
    if not isinstance(raw, dict):
        return {}
    aliases = {}
    for name, target in raw.items():
        if not isinstance(name, str) or not isinstance(target, str):
            continue
        name, target = name.strip(), target.strip()
        if name and target and name != target:
            aliases[name] = target
    return aliases


def resolve_alias(model: str, aliases: dict[str, str]) -> str:
    """Follow the alias chain at most 20 hops; a cycle gives back the original name; an
    unknown name resolves to itself."""
    current = model
    seen = {model}
    for _ in range(ALIAS_CHAIN_LIMIT):
        target = aliases.get(current)
        if target is None:
            return current
        if target in seen:
            return model
        seen.add(target)
        current = target
    return current


# --------------------------------------------------------------------------- upstream entries


def _first_text(entry: dict, *keys: str) -> str | None:
    for key in keys:
        value = entry.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def normalise_upstream_entry(entry: dict) -> dict[str, Any] | None:
    """One catalog entry from an upstream model object (spec §1.6), or None without an id."""
    model_id = _first_text(entry, "slug", "id", "name")
    if model_id is None:
        return None
    raw_efforts = entry.get("supported_reasoning_efforts") or entry.get(
        "supported_reasoning_levels"
    )
    efforts = []
    for effort in raw_efforts or []:
        if isinstance(effort, dict):
            name = _first_text(effort, "reasoning_effort", "effort")
            if name:
                efforts.append(
                    {"reasoningEffort": name, "description": effort.get("description") or name}
                )
        elif isinstance(effort, str):
            efforts.append({"reasoningEffort": effort, "description": effort})
    if not efforts:
        efforts = [{"reasoningEffort": "medium", "description": "Default"}]
    catalog_entry = {
        "id": model_id,
        "displayName": _first_text(entry, "display_name", "title", "name", "id") or model_id,
        "description": entry.get("description") or "",
        "isDefault": bool(entry.get("is_default") or entry.get("isDefault")),
        "supportedReasoningEfforts": efforts,
        "defaultReasoningEffort": _first_text(
            entry, "default_reasoning_effort", "default_reasoning_level"
        )
        or "medium",
        "inputModalities": entry.get("input_modalities") or ["text"],
        "outputModalities": entry.get("output_modalities") or ["text"],
        "supportsPersonality": bool(entry.get("supports_personality")),
        "upgrade": entry.get("upgrade"),
        "source": "backend",
    }
    for source_key, target_key in (
        ("context_window", "contextWindow"),
        ("max_context_window", "maxContextWindow"),
        ("max_output_tokens", "maxOutputTokens"),
        ("truncation_policy_limit", "truncationPolicyLimit"),
    ):
        if entry.get(source_key) is not None:
            catalog_entry[target_key] = entry[source_key]
    return catalog_entry


def entries_from_models_payload(payload: Any) -> list[dict]:
    """Model objects of a ``/codex/models`` answer: ``chat_models.models`` | ``models`` | ``data``
    | ``categories`` (nested ``models`` arrays flattened)."""
    if not isinstance(payload, dict):
        return []
    candidates: Any = None
    if isinstance(payload.get("chat_models"), dict):
        candidates = payload["chat_models"].get("models")
    for key in ("models", "data", "categories"):
        if candidates is None and isinstance(payload.get(key), list):
            candidates = payload[key]
    found: list[dict] = []

    def collect(items: Any) -> None:
        for item in items or []:
            if not isinstance(item, dict):
                continue
            if isinstance(item.get("models"), list):
                collect(item["models"])
            elif _first_text(item, "slug", "id", "name", "display_name", "title"):
                found.append(item)

    collect(candidates)
    return found


@dataclass
class Catalog:
    """The model catalog: entries in order, and which plans offer which model."""

    entries: list[dict[str, Any]]
    plans_by_model: dict[str, set[str]] = field(default_factory=dict)
    fetched_plans: set[str] = field(default_factory=set)

    @property
    def ids(self) -> set[str]:
        return {entry["id"] for entry in self.entries}

    def entry(self, model_id: str) -> dict[str, Any] | None:
        for entry in self.entries:
            if entry["id"] == model_id:
                return entry
        return None

    def allows(self, model_id: str, plan_type: str | None) -> bool:
        """Whether an account of ``plan_type`` may serve ``model_id`` (spec §3.2): yes when the
        model has no allowlist or the plan was never fetched; accounts without a plan are
        rejected once an allowlist exists."""
        plans = self.plans_by_model.get(model_id)
        if not plans:
            return True
        if plan_type is None:
            return False
        return plan_type in plans or plan_type not in self.fetched_plans


def catalog_from_snapshots(snapshots: dict[str, dict[str, Any]]) -> Catalog:
    """Union of the plan snapshots (first-seen order, later duplicates overwrite the object);
    the built-in list when there are none or they are all empty."""
    entries: dict[str, dict] = {}
    plans_by_model: dict[str, set[str]] = {}
    for plan, snapshot in snapshots.items():
        for raw in snapshot.get("models") or []:
            entry = (
                raw
                if isinstance(raw, dict) and raw.get("source")
                else normalise_upstream_entry(raw)
            )
            if entry is None:
                continue
            entries[entry["id"]] = entry
            plans_by_model.setdefault(entry["id"], set()).add(plan)
    if not entries:
        return Catalog(builtin_catalog())
    return Catalog(list(entries.values()), plans_by_model, set(snapshots))
