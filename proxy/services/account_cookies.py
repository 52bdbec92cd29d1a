"""Writes of ``account_cookies`` from the request path: the cookies an upstream answer set."""

from __future__ import annotations

from datetime import datetime

from proxy.identifiers import new_id
from proxy.loop_resources import database_connection


async def account_cookies_store(*, account_id: str, cookies: list[dict], now: datetime) -> None:
    """Upsert by (account, domain, name, path): a newer value replaces the old one."""
    if not cookies:
        return
    async with database_connection() as connection:
        for cookie in cookies:
            await connection.execute(
                "insert into account_cookies"
                " (id, account_id, domain, name, value, path, expires_at, updated_at)"
                " values (%s, %s, %s, %s, %s, %s, %s, %s)"
                " on conflict (account_id, domain, name, path) do update set"
                " value = excluded.value, expires_at = excluded.expires_at,"
                " updated_at = excluded.updated_at",
                [
                    new_id("cookie"),
                    account_id,
                    cookie["domain"],
                    cookie["name"],
                    cookie["value"],
                    cookie["path"],
                    cookie["expires_at"],
                    now,
                ],
            )
