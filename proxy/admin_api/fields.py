"""Input checks shared by the admin API's views: strict key sets, id lists, texts."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from proxy.admin_api.envelope import bad_request
from proxy.storable_text import unstorable_text

LONGEST_ID = 128
MOST_IDS = 1000


def refuse_unknown_keys(body: dict[str, Any], allowed: set[str], *, how: str) -> None:
    """40001 naming the first key of ``body`` not in ``allowed`` (``how`` finishes the
    message: "is not editable", "is not a field of this request")."""
    for key in body:
        if key not in allowed:
            raise bad_request(f"{key} {how}")


class IdListField(serializers.ListField):
    child = serializers.CharField(max_length=LONGEST_ID, allow_blank=False)

    def __init__(self, **kwargs):
        kwargs.setdefault("allow_empty", False)
        kwargs.setdefault("max_length", MOST_IDS)
        super().__init__(**kwargs)


class IdsSerializer(serializers.Serializer):
    ids = IdListField()


class IdSerializer(serializers.Serializer):
    id = serializers.CharField(max_length=LONGEST_ID)


def required_query(request, name: str, *, longest: int = LONGEST_ID) -> str:
    value = (request.query_params.get(name) or "").strip()
    if not value:
        raise bad_request(f"{name} is required")
    if len(value) > longest:
        raise bad_request(f"{name} is too long")
    return value


def optional_text(value: Any, name: str, *, longest: int) -> str | None:
    """A trimmed text or None for blank/absent; 40001 for non-strings or too long."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad_request(f"{name} must be a string")
    value = value.strip()
    if len(value) > longest:
        raise bad_request(f"{name} is longer than {longest} characters")
    return value or None


def refuse_nul(value: Any, where: str) -> None:
    """40001 when a text anywhere in ``value`` (a query value, a JSON body: keys and strings at
    any depth) holds what PostgreSQL cannot store in text — a NUL character, or a lone
    surrogate (JSON's ``"\\ud800"``, which no UTF-8 can carry): a clear answer in the envelope
    instead of a 500 from the database."""
    stack = [(value, where)]
    while stack:
        item, name = stack.pop()
        if isinstance(item, str):
            problem = unstorable_text(item)
            if problem is not None:
                raise bad_request(f"{name} contains {problem}")
        elif isinstance(item, dict):
            for key, child in item.items():
                problem = unstorable_text(key) if isinstance(key, str) else None
                if problem is not None:
                    raise bad_request(f"a key of {name} contains {problem}")
                stack.append((child, str(key)))
        elif isinstance(item, list | tuple):
            stack.extend((child, name) for child in item)
