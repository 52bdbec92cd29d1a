"""The model catalog the proxy recognises (spec §1.6): built-in list, plan snapshots, aliases."""

from __future__ import annotations

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


def is_recognised(model: str, *, aliases: dict[str, str], catalog_ids: set[str]) -> bool:
    """A model is recognised when it is an alias name or a catalog id."""
    return model in aliases or model in catalog_ids
