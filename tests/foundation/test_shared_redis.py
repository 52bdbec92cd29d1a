"""No test flushes the shared Redis: every run and every xdist worker keeps its keys under its own
prefix on one server (tests/run_isolation.py), and a FLUSHALL there wipes the others' state
mid-test — a CI run's burst test lost its send limiter's window to another worker's FLUSHALL and
its fake Bot API answered 429. A test that needs a real FLUSHALL takes ``private_redis`` (a
server of its own); one that needs what a FLUSHALL does to its run calls
``tests.conftest.flush_this_runs_keys``."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import PROJECT_ROOT

FLUSHES = {"flushall", "flushdb"}
PRIVATE_FIXTURES = {"private_redis", "private_proxy"}


def _flushes_outside_a_private_redis(source: str) -> list[str]:
    """Test functions calling ``.flushall()``/``.flushdb()`` without a private Redis fixture."""
    offenders = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if not node.name.startswith("test"):
            continue
        flushes = any(
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in FLUSHES
            for call in ast.walk(node)
        )
        fixtures = {argument.arg for argument in node.args.args + node.args.kwonlyargs}
        if flushes and not fixtures & PRIVATE_FIXTURES:
            offenders.append(node.name)
    return offenders


def test_the_check_sees_a_flush_of_the_shared_server():
    source = (
        "def test_shared(redis_client):\n    redis_client.flushall()\n"
        "def test_private(private_redis):\n    Redis(private_redis.url).flushdb()\n"
    )
    assert _flushes_outside_a_private_redis(source) == ["test_shared"]


def test_no_test_flushes_the_shared_redis():
    offenders = {
        str(path.relative_to(PROJECT_ROOT)): names
        for path in Path(PROJECT_ROOT / "tests").rglob("test_*.py")
        if (names := _flushes_outside_a_private_redis(path.read_text()))
    }

    assert offenders == {}
