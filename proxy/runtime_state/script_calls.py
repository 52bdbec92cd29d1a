"""Lua script calls sent together: many calls, one round trip (a non-transactional pipeline
of EVALSHAs), for the Redis writes that follow a response (slot releases, key settlements,
affinity records; ``proxy.ledger.affinity``'s writer batches them).

redis-py's ``Script`` objects check ``SCRIPT EXISTS`` on every pipeline (one more round trip
each time); here a server that does not know a script answers NOSCRIPT for that call alone,
the script is loaded and only those calls are sent again.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError


@dataclass(frozen=True)
class ScriptCall:
    """One call of ``script``; ``what`` names it in a log line when it fails (no ids)."""

    script: AsyncScript
    keys: list[str]
    args: list
    what: str


async def execute_calls(client: Redis, calls: list[ScriptCall]) -> list[object]:
    """Run ``calls`` in order in one round trip (two when a script had to be loaded); returns
    each call's reply, or the exception it raised (never raises for one call's failure)."""
    if not calls:
        return []
    replies = await _pipelined(client, calls)
    unknown = [index for index, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if unknown:
        for script in {id(calls[index].script): calls[index].script for index in unknown}.values():
            await client.script_load(script.script)
        retried = await _pipelined(client, [calls[index] for index in unknown])
        for index, reply in zip(unknown, retried, strict=True):
            replies[index] = reply
    return replies


async def _pipelined(client: Redis, calls: list[ScriptCall]) -> list[object]:
    pipeline = client.pipeline(transaction=False)
    for call in calls:
        pipeline.evalsha(call.script.sha, len(call.keys), *call.keys, *call.args)
    return list(await pipeline.execute(raise_on_error=False))
