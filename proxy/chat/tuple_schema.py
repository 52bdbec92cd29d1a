"""The tuple-schema round trip of `response_format: json_schema`.

Structured outputs on the upstream do not accept JSON Schema tuples (`prefixItems`), which is what
pydantic (and so the `openai` SDK's `parse()`) emits for `tuple[...]` fields. The request side
rewrites every tuple into an object keyed by position (`{"0": …, "1": …}`, all required, closed);
the response side walks the model's JSON with the client's original schema and turns those
objects back into arrays, so the client receives what its schema describes.

Tuples are rewritten as closed, fixed-length objects: an `items` schema for elements past the
prefix cannot be expressed that way and is dropped.
"""

from __future__ import annotations

import json
from typing import Any

# Keys whose values are data, not sub-schemas: never rewrite inside them.
DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})
# Keys whose values map names to sub-schemas: the names are the client's (a property may well be
# called "default" or "prefixItems"), so they are never read as keywords.
SCHEMA_MAP_KEYWORDS = frozenset(
    {"properties", "patternProperties", "dependentSchemas", "$defs", "definitions"}
)
# Array-only keywords that make no sense on the object a tuple becomes.
ARRAY_KEYWORDS = frozenset(
    {"type", "prefixItems", "items", "minItems", "maxItems", "uniqueItems", "contains"}
)
# Bound on `$ref` hops, so a self-referencing schema cannot recurse without end.
MAX_REFERENCE_DEPTH = 64


def rewrite_tuple_schemas(schema: Any) -> tuple[Any, bool]:
    """Return `(schema with every prefixItems tuple rewritten, whether anything was rewritten)`.

    The input is not modified; rewritten nodes are new dicts.
    """
    rewritten = _rewrite(schema)
    return rewritten, rewritten != schema


def _rewrite(node: Any) -> Any:
    if isinstance(node, list):
        return [_rewrite(element) for element in node]
    if not isinstance(node, dict):
        return node
    result = {}
    for key, value in node.items():
        if key in DATA_KEYWORDS:
            result[key] = value
        elif key in SCHEMA_MAP_KEYWORDS and isinstance(value, dict):
            result[key] = {name: _rewrite(schema) for name, schema in value.items()}
        else:
            result[key] = _rewrite(value)
    prefix = result.get("prefixItems")
    if not isinstance(prefix, list):
        return result
    tuple_object: dict[str, Any] = {
        key: value for key, value in result.items() if key not in ARRAY_KEYWORDS
    }
    tuple_object["type"] = "object"
    tuple_object["properties"] = {str(position): item for position, item in enumerate(prefix)}
    tuple_object["required"] = [str(position) for position in range(len(prefix))]
    tuple_object["additionalProperties"] = False
    return tuple_object


def restore_tuples_in_text(text: str, schema: dict[str, Any]) -> str:
    """Return `text` with index-keyed objects turned back into arrays where `schema` has tuples.

    `schema` is the client's original schema. Text that is not JSON, or JSON with nothing to
    restore, is returned unchanged (byte for byte).
    """
    try:
        value = json.loads(text)
    except ValueError:
        return text
    restored = _restore(value, schema, schema, 0)
    if restored == value:
        return text
    return json.dumps(restored, ensure_ascii=False, separators=(",", ":"))


def _restore(value: Any, schema: Any, root: dict[str, Any], depth: int) -> Any:
    if not isinstance(schema, dict) or depth > MAX_REFERENCE_DEPTH:
        return value
    reference = schema.get("$ref")
    if isinstance(reference, str):
        target = _resolve_reference(reference, root)
        if target is not None:
            value = _restore(value, target, root, depth + 1)
    for keyword in ("anyOf", "oneOf"):
        branches = schema.get(keyword)
        if isinstance(branches, list):
            for branch in branches:
                candidate = _restore(value, branch, root, depth)
                if candidate != value:
                    # The first branch that recognises a tuple decides, as a validator would.
                    return candidate
    all_of = schema.get("allOf")
    if isinstance(all_of, list):
        for branch in all_of:
            value = _restore(value, branch, root, depth)
    prefix = schema.get("prefixItems")
    if isinstance(prefix, list) and isinstance(value, dict):
        expected_keys = {str(position) for position in range(len(prefix))}
        if set(value) == expected_keys:
            return [
                _restore(value[str(position)], item, root, depth)
                for position, item in enumerate(prefix)
            ]
        return value
    if isinstance(value, dict):
        return _restore_object(value, schema, root, depth)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_restore(element, schema["items"], root, depth) for element in value]
    return value


def _restore_object(
    value: dict[str, Any], schema: dict[str, Any], root: dict[str, Any], depth: int
) -> dict[str, Any]:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    additional = schema.get("additionalProperties")
    additional = additional if isinstance(additional, dict) else None
    result = {}
    for key, item in value.items():
        item_schema = properties.get(key, additional)
        result[key] = item if item_schema is None else _restore(item, item_schema, root, depth)
    return result


def _resolve_reference(reference: str, root: dict[str, Any]) -> Any:
    """Return the local schema `reference` points at (`#/$defs/Name`), or None."""
    if not reference.startswith("#/"):
        return None
    node: Any = root
    for segment in reference[2:].split("/"):
        segment = segment.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or segment not in node:
            return None
        node = node[segment]
    return node
