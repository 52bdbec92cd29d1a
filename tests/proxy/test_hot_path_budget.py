"""The request path's budget (issue 9): before the first byte PostgreSQL sees one statement
(client key, settings, fingerprint and candidates together); Redis sees one call to order and
acquire a slot and one to release it. The ledger is written later, in batches."""

from __future__ import annotations

import json

import psycopg
import pytest
import requests
from redis.asyncio.client import Redis

from tests.proxy.conftest import make_pool_account


@pytest.fixture
def counted(monkeypatch):
    calls = {"postgres": [], "redis": []}
    original_execute = psycopg.AsyncConnection.execute
    original_command = Redis.execute_command

    async def execute(self, query, *args, **kwargs):
        calls["postgres"].append(" ".join(str(query).split())[:60])
        return await original_execute(self, query, *args, **kwargs)

    async def command(self, *args, **options):
        calls["redis"].append(args[0])
        return await original_command(self, *args, **options)

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", execute)
    monkeypatch.setattr(Redis, "execute_command", command)
    return calls


def test_one_postgres_statement_and_two_redis_calls_per_request(
    proxy, upstream, client_key, counted
):
    make_pool_account("tok-a")
    make_pool_account("tok-b")

    def call() -> None:
        response = requests.post(
            f"{proxy.url}/v1/responses",
            data=json.dumps({"model": "gpt-5.4", "input": []}),
            headers={"Authorization": f"Bearer {client_key.key}"},
            timeout=30,
        )
        assert response.status_code == 200 and response.content.endswith(b"data: [DONE]\n\n")

    call()  # warms up: scripts loaded, connections opened
    proxy.drain()
    counted["postgres"].clear()
    counted["redis"].clear()

    call()

    hot_path = [
        statement
        for statement in counted["postgres"]
        if not statement.startswith("update client_api_keys")
    ]
    assert len(hot_path) == 1 and hot_path[0].startswith("select k.id")
    assert counted["redis"] == ["EVALSHA", "EVALSHA"]
