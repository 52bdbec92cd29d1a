"""Both PostgreSQL pools hand out only connections the server has not closed, without a round
trip, and whatever the file descriptor's number."""

from __future__ import annotations

import asyncio
import os

import psycopg
import pytest
from django.conf import settings
from django.db import connection, connections

from config.postgres.pool import connection_is_alive as django_pool_check
from proxy.loop_resources import close_current_loop_resources, database_connection
from proxy.loop_resources import connection_is_alive as request_path_check
from tests.database_faults import fill_django_pool, terminate_connections

pytestmark = pytest.mark.django_db(transaction=True)


def _libpq_connection() -> psycopg.Connection:
    database = settings.DATABASES["default"]
    return psycopg.connect(
        host=database["HOST"] or None,
        port=database["PORT"] or None,
        user=database["USER"],
        password=database["PASSWORD"] or None,
        dbname=connection.settings_dict["NAME"],
        autocommit=True,
    )


@pytest.mark.parametrize("check", [django_pool_check, request_path_check])
def test_the_check_works_for_a_socket_numbered_above_1023(check):
    """select.select refuses descriptors past 1023; a busy web process holds that many."""
    fillers = []
    try:
        while not fillers or fillers[-1] < 1100:
            fillers.append(os.dup(0))
        database_connection_ = _libpq_connection()
        assert database_connection_.pgconn.socket > 1023
        assert check(database_connection_) is True
        with _libpq_connection() as killer:  # only this connection: the test's own stays
            killer.execute(
                "select pg_terminate_backend(%s, 5000)", [database_connection_.info.backend_pid]
            )
        assert check(database_connection_) is False
        database_connection_.close()
    finally:
        for descriptor in fillers:
            os.close(descriptor)


def test_django_s_pool_replaces_every_dead_idle_connection_at_once():
    """psycopg_pool's own check backs off 1 s, 2 s, 4 s… per dead connection: seven of them
    outlast the 5 s acquire timeout. This pool skips them all."""
    fill_django_pool(7)
    connections.close_all()
    assert terminate_connections(settings.DATABASES["default"], connection.settings_dict["NAME"])

    with connection.cursor() as cursor:
        cursor.execute("select 1")
        assert cursor.fetchone() == (1,)


def test_the_request_path_pool_replaces_every_dead_idle_connection_at_once():
    async def scenario() -> tuple[int, int]:
        async def query() -> None:
            async with database_connection() as live:
                await live.execute("select pg_sleep(0.05)")

        await asyncio.gather(*(query() for _ in range(8)))  # the pool grows to 8 connections
        killed = terminate_connections(
            settings.DATABASES["default"], connection.settings_dict["NAME"]
        )
        async with database_connection() as live:
            answer = await (await live.execute("select 1")).fetchone()
        await close_current_loop_resources()
        return killed, answer[0]

    killed, answer = asyncio.run(scenario())

    assert killed >= 8
    assert answer == 1
