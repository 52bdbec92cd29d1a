"""The Lua loader and the one compare-and-delete, against the run's real Redis."""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings

from common.redis_scripts import COMPARE_AND_DELETE, lua_script


def test_a_script_is_its_file_with_the_constants_written_in():
    take_turn = lua_script("proxy", "fair_admission_take_turn", batch_last="15")

    assert "start + 15)" in take_turn
    assert "${" not in take_turn


def test_a_placeholder_without_a_value_fails_at_load():
    with pytest.raises(KeyError):
        lua_script("proxy", "fair_admission_take_turn")


def test_a_missing_script_fails_at_load():
    with pytest.raises(FileNotFoundError):
        lua_script("proxy", "no_such_script")


def test_compare_and_delete_deletes_only_the_holders_key(redis_client):
    key = f"{settings.REDIS_KEY_PREFIX}test:compare-and-delete:{uuid.uuid4().hex}"
    script = redis_client.register_script(COMPARE_AND_DELETE)
    redis_client.set(key, "holder", px=60_000)

    by_another = script(keys=[key], args=["another"])
    still_there = redis_client.get(key)
    by_holder = script(keys=[key], args=["holder"])
    again = script(keys=[key], args=["holder"])

    assert (by_another, still_there) == (0, b"holder")
    assert (by_holder, redis_client.exists(key), again) == (1, 0, 0)
