"""Where the project's CPU goes: one target under load, the CPU of every process group per
request, and optionally a py-spy profile of one web worker.

    python -m bench.profile [--target responses|chat|responses-ws] [--concurrency 32]
                            [--duration 15] [--workers 2] [--py-spy var/bench/profile.svg]
                            [--py-spy-format flamegraph|speedscope|raw] [--env NAME=VALUE ...]

The same processes as ``bench.run`` (the fake upstream, the project on the bench's PostgreSQL
and Redis, ledger on, 4 accounts) but one target, measured long enough for a profile. py-spy
must be installed in the venv (``pip install py-spy``); it samples the first worker for the
whole measurement (``--subprocesses`` is not used: one worker's stacks are easier to read).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil

from bench.load import introduce_conversations, run_load
from bench.processes import CpuMeter, own_process, postgres_processes, redis_processes, tree
from bench.project import prepare_project, project_env, web_command, web_env
from bench.run import CHAT_BODY, RESPONSES_BODY, ROOT, Services, wait_for_port
from config.embedded import free_port


def start_project(
    services: Services, *, fake_url: str, workers: int, log_dir: Path, extra_env: dict, policy: bool
) -> tuple[subprocess.Popen, int, str, dict]:
    """Migrate and seed the bench database, start the web; returns (process, port, key, env)."""
    env = project_env(fake_url, extra_env)
    key = prepare_project(env, accounts=4, key_policy=policy)
    port = free_port()
    project = services.start(
        web_command(), env=web_env(env, port=port, workers=workers), log=log_dir / "project.log"
    )
    wait_for_port(port, project)
    return project, port, key, env


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--target", default="responses", choices=["responses", "chat", "responses-ws", "bare"]
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--py-spy", default="", help="write a py-spy profile of one worker here")
    parser.add_argument("--py-spy-format", default="flamegraph")
    parser.add_argument("--key-policy", action="store_true")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the project")
    arguments = parser.parse_args()
    extra_env = dict(item.split("=", 1) for item in arguments.env)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    log_dir = ROOT / "var" / "bench" / f"profile-{stamp}"
    log_dir.mkdir(parents=True, exist_ok=True)
    services = Services()
    try:
        fake_port = free_port()
        fake = services.start(
            [sys.executable, "-m", "tests.fakes.codex", "--port", str(fake_port), "--deltas", "20"],
            log=log_dir / "fake.log",
        )
        wait_for_port(fake_port, fake)
        project, port, key, env = start_project(
            services,
            fake_url=f"http://127.0.0.1:{fake_port}",
            workers=arguments.workers,
            log_dir=log_dir,
            extra_env=extra_env,
            policy=arguments.key_policy,
        )
        scheme, path, body = {
            "responses": ("http", "/v1/responses", RESPONSES_BODY),
            "chat": ("http", "/v1/chat/completions", CHAT_BODY),
            "responses-ws": ("ws", "/v1/responses", RESPONSES_BODY),
            "bare": ("http", "/v1/responses", RESPONSES_BODY),
        }[arguments.target]
        url = f"{scheme}://127.0.0.1:{port}{path}"
        headers = {"Authorization": f"Bearer {key}"}
        if arguments.target == "bare":
            # The ceiling, measured the same way (bench/passthrough.py); its CPU is "project".
            port = free_port()
            project = services.start(
                [
                    sys.executable,
                    "-m",
                    "bench.passthrough",
                    "--port",
                    str(port),
                    "--upstream",
                    f"http://127.0.0.1:{fake_port}",
                ],
                log=log_dir / "passthrough.log",
            )
            wait_for_port(port, project)
            url, headers = f"http://127.0.0.1:{port}/v1/responses", {}
        if arguments.target != "bare":
            asyncio.run(
                introduce_conversations(
                    url=url, payload=body, headers=headers, numbers=range(arguments.concurrency)
                )
            )
        asyncio.run(run_load(url=url, payload=body, headers=headers, concurrency=4, duration=2.0))
        meter = CpuMeter(
            {
                "project": lambda: tree(project.pid),
                "postgres": lambda: postgres_processes(env["DATABASE_URL"]),
                "redis": lambda: redis_processes(env["REDIS_URL"]),
                "fake": lambda: tree(fake.pid),
                "generator": own_process,
            }
        )
        spy = None
        if arguments.py_spy:
            # A uvicorn worker (multiprocessing's spawn), or the server itself with one worker.
            children = psutil.Process(project.pid).children(recursive=True)
            worker = next(
                (p for p in children if "spawn_main" in " ".join(p.cmdline())),
                psutil.Process(project.pid),
            )
            spy = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "py-spy"),
                    "record",
                    "--pid",
                    str(worker.pid),
                    "--duration",
                    str(int(arguments.duration)),
                    "--rate",
                    "200",
                    "--format",
                    arguments.py_spy_format,
                    "--output",
                    arguments.py_spy,
                    "--nonblocking",
                    "--gil",
                ]
            )
        meter.start()
        started = time.monotonic()
        result = asyncio.run(
            run_load(
                url=url,
                payload=body,
                headers=headers,
                concurrency=arguments.concurrency,
                duration=arguments.duration,
            )
        )
        spent = meter.stop()
        wall = time.monotonic() - started
        if spy is not None:
            spy.wait(60)
        requests = max(result.requests, 1)
        print(
            f"{arguments.target} c={arguments.concurrency} workers={arguments.workers}: "
            f"{result.requests / result.elapsed_seconds:.0f} req/s, {result.errors} errors"
        )
        total = sum(spent.values())
        for name, seconds in spent.items():
            per_request = 1000 * seconds / requests
            print(f"  {name:<10} {per_request:6.2f} ms CPU/request  ({seconds / wall:4.2f} cores)")
        per_request = 1000 * total / requests
        print(f"  {'all':<10} {per_request:6.2f} ms CPU/request  ({total / wall:4.2f} cores)")
        if result.error_samples:
            print("  errors:", result.error_samples)
    finally:
        services.stop()


if __name__ == "__main__":
    main()
