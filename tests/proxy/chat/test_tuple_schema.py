"""The tuple (`prefixItems`) schema rewrite and its reverse on the model's JSON output."""

from __future__ import annotations

import copy

from proxy.chat.tuple_schema import restore_tuples_in_text, rewrite_tuple_schemas

PAIR = {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "minItems": 2}
PAIR_OBJECT = {
    "type": "object",
    "properties": {"0": {"type": "string"}, "1": {"type": "integer"}},
    "required": ["0", "1"],
    "additionalProperties": False,
}
SCHEMA = {
    "type": "object",
    "$defs": {"Pair": {**PAIR, "description": "name and count"}},
    "properties": {
        "by_reference": {"$ref": "#/$defs/Pair"},
        "optional": {"anyOf": [PAIR, {"type": "null"}]},
        "many": {"type": "array", "items": PAIR},
        "nested": {"type": "array", "prefixItems": [PAIR, {"type": "boolean"}]},
        "mapping": {"type": "object", "additionalProperties": PAIR},
        "plain": {"type": "array", "items": {"type": "integer"}},
        "example": {"type": "string", "default": {"prefixItems": ["not", "a", "schema"]}},
    },
}


def test_every_tuple_is_rewritten_to_a_closed_index_keyed_object():
    # given
    original = copy.deepcopy(SCHEMA)

    # when
    rewritten, changed = rewrite_tuple_schemas(SCHEMA)

    # then
    assert changed is True
    assert rewritten == {
        "type": "object",
        "$defs": {"Pair": {**PAIR_OBJECT, "description": "name and count"}},
        "properties": {
            "by_reference": {"$ref": "#/$defs/Pair"},
            "optional": {"anyOf": [PAIR_OBJECT, {"type": "null"}]},
            "many": {"type": "array", "items": PAIR_OBJECT},
            "nested": {
                "type": "object",
                "properties": {"0": PAIR_OBJECT, "1": {"type": "boolean"}},
                "required": ["0", "1"],
                "additionalProperties": False,
            },
            "mapping": {"type": "object", "additionalProperties": PAIR_OBJECT},
            "plain": {"type": "array", "items": {"type": "integer"}},
            "example": {"type": "string", "default": {"prefixItems": ["not", "a", "schema"]}},
        },
    }
    assert original == SCHEMA


def test_a_schema_without_tuples_is_reported_unchanged():
    # when
    rewritten, changed = rewrite_tuple_schemas(
        {"type": "object", "properties": {"a": {"type": "array", "items": {}}}}
    )

    # then
    assert changed is False
    assert rewritten == {"type": "object", "properties": {"a": {"type": "array", "items": {}}}}


def test_properties_named_like_keywords_are_still_schemas():
    # given: properties called "default" and "prefixItems", and a definition called "const"
    schema = {
        "type": "object",
        "$defs": {"const": PAIR},
        "properties": {
            "default": PAIR,
            "prefixItems": {"type": "array", "items": {"type": "string"}},
            "enum": {"$ref": "#/$defs/const"},
        },
        "patternProperties": {"^x-": PAIR},
    }

    # when
    rewritten, changed = rewrite_tuple_schemas(schema)

    # then
    assert changed is True
    assert rewritten == {
        "type": "object",
        "$defs": {"const": PAIR_OBJECT},
        "properties": {
            "default": PAIR_OBJECT,
            "prefixItems": {"type": "array", "items": {"type": "string"}},
            "enum": {"$ref": "#/$defs/const"},
        },
        "patternProperties": {"^x-": PAIR_OBJECT},
    }
    assert restore_tuples_in_text('{"default":{"0":"a","1":1}}', schema) == '{"default":["a",1]}'


def test_output_objects_are_turned_back_into_arrays_wherever_the_schema_has_tuples():
    # given: what the upstream produced against the rewritten schema
    text = (
        '{"by_reference":{"0":"a","1":1},"optional":{"0":"b","1":2},'
        '"many":[{"0":"c","1":3},{"0":"d","1":4}],'
        '"nested":{"0":{"0":"e","1":5},"1":true},'
        '"mapping":{"k":{"0":"f","1":6}},"plain":[7,8],"example":"x"}'
    )

    # when
    restored = restore_tuples_in_text(text, SCHEMA)

    # then
    assert restored == (
        '{"by_reference":["a",1],"optional":["b",2],"many":[["c",3],["d",4]],'
        '"nested":[["e",5],true],"mapping":{"k":["f",6]},"plain":[7,8],"example":"x"}'
    )


def test_null_for_an_optional_tuple_and_unknown_keys_are_left_alone():
    # when
    restored = restore_tuples_in_text('{"optional":null,"extra":{"0":1,"1":2}}', SCHEMA)

    # then: nothing changed, so the text is returned byte for byte
    assert restored == '{"optional":null,"extra":{"0":1,"1":2}}'


def test_an_object_with_other_keys_than_the_positions_is_not_converted():
    # when
    restored = restore_tuples_in_text('{"by_reference": {"0": "a", "2": 1}}', SCHEMA)

    # then
    assert restored == '{"by_reference": {"0": "a", "2": 1}}'


def test_text_that_is_not_json_is_returned_unchanged():
    # when
    restored = restore_tuples_in_text('{"by_reference": {"0": "a", "1"', SCHEMA)

    # then
    assert restored == '{"by_reference": {"0": "a", "1"'


def test_a_self_referencing_schema_does_not_recurse_forever():
    # given
    schema = {"$defs": {"Loop": {"$ref": "#/$defs/Loop"}}, "$ref": "#/$defs/Loop"}

    # when
    restored = restore_tuples_in_text('{"0": 1}', schema)

    # then
    assert restored == '{"0": 1}'
