"""``make bench``: the project's cost per request, as ratios against calling the fake directly,
a bare Python pass-through and (optionally) LiteLLM's proxy — all measured in one run.

Every target is started here on loopback: the fake upstream (tests/fakes/codex.py, 20 deltas
per answer), the bare pass-through (bench/passthrough.py), the project (uvicorn, real
PostgreSQL and Redis, ledger on) and LiteLLM (its own venv under var/bench/, offline). Rounds
are interleaved — the target order rotates each round — so machine noise spreads evenly.

    python -m bench.run [--duration 6] [--rounds 2] [--concurrency 1,32,128] [--workers 2]
                        [--skip-litellm]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psutil

from bench.load import LoadResult, introduce_conversations, run_load
from bench.processes import CpuMeter, postgres_processes, redis_processes, tree
from bench.project import prepare_project, project_env, web_command, web_env
from config.embedded import free_port

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
# LiteLLM as pinned by the project's `bench` extra (pyproject.toml), installed into its own venv.
LITELLM_REQUIREMENT = next(
    requirement
    for requirement in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["bench"]
    if requirement.startswith("litellm")
)
MODEL = "gpt-5.4"
RESPONSES_BODY = {
    "model": MODEL,
    "stream": True,
    "input": [{"role": "user", "content": "Say hello"}],
}
CHAT_BODY = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "Say hello"}]}


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[:4]} exited with {process.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


@dataclass
class Target:
    name: str
    url: str
    body: dict
    baseline: str  # the direct target its ratios are computed against
    headers: dict = field(default_factory=dict)


class Services:
    """The processes of one benchmark run; stopped together."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen] = []
        self.project: subprocess.Popen | None = None

    def start(
        self, command: list[str], *, env: dict | None = None, log: Path | None = None
    ) -> subprocess.Popen:
        output = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 - closed at exit
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env or os.environ.copy(),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def project_rss_mib(process: subprocess.Popen) -> float:
    parent = psutil.Process(process.pid)
    return sum(p.memory_info().rss for p in [parent, *parent.children(recursive=True)]) / 2**20


def setup_litellm(fake_url: str, port: int, services: Services, log_dir: Path) -> Target | None:
    venv = ROOT / "var" / "bench" / "litellm-venv"
    litellm = venv / "bin" / "litellm"
    if not litellm.exists():
        print(f"installing {LITELLM_REQUIREMENT} into {venv} (once) ...", flush=True)
        try:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run(
                [str(venv / "bin" / "pip"), "install", "--quiet", LITELLM_REQUIREMENT],
                check=True,
                timeout=900,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            print(f"LiteLLM not run: install failed ({error})", flush=True)
            shutil.rmtree(venv, ignore_errors=True)
            return None
    config = log_dir / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: {fake_url}/v1\n"
        "      api_key: bench-upstream-key\n"
    )
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_MASTER_KEY": "sk-bench-master",
        "LITELLM_LOG": "ERROR",
    }
    process = services.start(
        [
            str(litellm),
            "--config",
            str(config),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--num_workers",
            "1",
        ],
        env=env,
        log=log_dir / "litellm.log",
    )
    try:
        wait_for_port(port, process, timeout=180)
    except RuntimeError as error:
        print(f"LiteLLM not run: {error} (see {log_dir / 'litellm.log'})", flush=True)
        return None
    return Target(
        "litellm-chat",
        f"http://127.0.0.1:{port}/v1/chat/completions",
        CHAT_BODY,
        "direct-chat",
        {"Authorization": "Bearer sk-bench-master"},
    )


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def summarize(result: LoadResult) -> dict:
    """The figures the table and the results file show for (all rounds of) one measurement."""
    return {
        "requests": result.requests,
        "errors": result.errors,
        "req_per_s": result.requests / result.elapsed_seconds if result.elapsed_seconds else 0.0,
        "p50_ms": percentile(result.latencies_ms, 0.50),
        "p95_ms": percentile(result.latencies_ms, 0.95),
        "p99_ms": percentile(result.latencies_ms, 0.99),
        "ttfb_p50_ms": percentile(result.first_byte_ms, 0.50),
        "ttfb_p99_ms": percentile(result.first_byte_ms, 0.99),
        # What the project says it added before the first byte (x-cpr-overhead-ms).
        "overhead_p50_ms": percentile(result.overhead_ms, 0.5),
        "overhead_p99_ms": percentile(result.overhead_ms, 0.99),
        "generator_cpu_ms_per_request": 1000 * result.cpu_seconds / result.requests
        if result.requests
        else None,
        "error_samples": result.error_samples,
    }


def print_table(summaries: dict, targets: list[Target], concurrencies: list[int]) -> None:
    header = (
        f"{'target':<20}{'conc':>5}{'req/s':>9}{'ratio':>7}{'p50':>8}{'p95':>8}{'p99':>8}"
        f"{'ttfb50':>8}{'ttfb99':>8}{'Δttfb50':>9}{'ovh50':>7}{'err':>5}{'gen cpu':>9}"
    )
    print("\n" + header)
    print("-" * len(header))
    for concurrency in concurrencies:
        for target in targets:
            summary = summaries.get((target.name, concurrency))
            if summary is None:
                continue
            base = summaries.get((target.baseline, concurrency), summary)
            ratio = summary["req_per_s"] / base["req_per_s"] if base["req_per_s"] else 0.0
            delta = (summary["ttfb_p50_ms"] or 0) - (base["ttfb_p50_ms"] or 0)

            def number(value, width=8, digits=1):
                return f"{value:>{width}.{digits}f}" if value is not None else f"{'-':>{width}}"

            latencies = "".join(number(summary[name]) for name in ("p50_ms", "p95_ms", "p99_ms"))
            first_bytes = number(summary["ttfb_p50_ms"]) + number(summary["ttfb_p99_ms"])
            generator_cpu = number(summary["generator_cpu_ms_per_request"], 9, 2)
            overhead = number(summary.get("overhead_p50_ms"), 7, 2)
            rate = number(summary["req_per_s"], 9, 0)
            print(
                f"{target.name:<20}{concurrency:>5}{rate}{ratio:>7.2f}"
                f"{latencies}{first_bytes}{number(delta, 9)}{overhead}"
                f"{summary['errors']:>5}{generator_cpu}"
            )
        print()


def print_cpu_table(summaries: dict, targets: list[Target], concurrencies: list[int]) -> None:
    """CPU milliseconds per request of each process group while a target was measured: the
    server (the bare pass-through or the project's web processes), PostgreSQL, Redis, the fake
    upstream and the load generator. Other work on the machine is not in it."""
    groups = ("server", "postgres", "redis", "fake", "generator")
    header = f"{'CPU ms/request':<20}{'conc':>5}" + "".join(f"{group:>10}" for group in groups)
    header += f"{'all':>10}"
    print("\n" + header)
    print("-" * len(header))
    for concurrency in concurrencies:
        for target in targets:
            summary = summaries.get((target.name, concurrency))
            if summary is None:
                continue
            cpu = summary["cpu_ms_per_request"]
            cells = "".join(f"{cpu.get(group, 0.0):>10.2f}" for group in groups)
            print(f"{target.name:<20}{concurrency:>5}{cells}{sum(cpu.values()):>10.2f}")
        print()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", default="1,32,128")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn workers of the project")
    parser.add_argument("--accounts", type=int, default=4)
    parser.add_argument("--skip-litellm", action="store_true")
    parser.add_argument(
        "--key-policy",
        action="store_true",
        help="give the bench key a policy whose every limit is checked and never reached",
    )
    parser.add_argument("--only", default="", help="comma-separated target names to run")
    arguments = parser.parse_args()
    concurrencies = [int(value) for value in arguments.concurrency.split(",")]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    log_dir = ROOT / "var" / "bench" / stamp
    log_dir.mkdir(parents=True, exist_ok=True)
    services = Services()
    try:
        fake_port, bare_port, project_port, litellm_port = (free_port() for _ in range(4))
        fake = services.start(
            [sys.executable, "-m", "tests.fakes.codex", "--port", str(fake_port), "--deltas", "20"],
            log=log_dir / "fake.log",
        )
        wait_for_port(fake_port, fake)
        fake_url = f"http://127.0.0.1:{fake_port}"
        bare = services.start(
            [
                sys.executable,
                "-m",
                "bench.passthrough",
                "--port",
                str(bare_port),
                "--upstream",
                fake_url,
            ],
            log=log_dir / "passthrough.log",
        )
        wait_for_port(bare_port, bare)

        project_environment = project_env(fake_url)
        key = prepare_project(
            project_environment, accounts=arguments.accounts, key_policy=arguments.key_policy
        )
        project = services.start(
            web_command(),
            env=web_env(project_environment, port=project_port, workers=arguments.workers),
            log=log_dir / "project.log",
        )
        wait_for_port(project_port, project)
        project_headers = {"Authorization": f"Bearer {key}"}
        litellm_process: subprocess.Popen | None = None
        targets = [
            Target(
                "direct-responses", f"{fake_url}/v1/responses", RESPONSES_BODY, "direct-responses"
            ),
            Target("direct-chat", f"{fake_url}/v1/chat/completions", CHAT_BODY, "direct-chat"),
            Target(
                "bare-responses",
                f"http://127.0.0.1:{bare_port}/v1/responses",
                RESPONSES_BODY,
                "direct-responses",
            ),
            Target(
                "project-responses",
                f"http://127.0.0.1:{project_port}/v1/responses",
                RESPONSES_BODY,
                "direct-responses",
                project_headers,
            ),
            Target(
                "project-responses-ws",
                f"ws://127.0.0.1:{project_port}/v1/responses",
                RESPONSES_BODY,
                "direct-responses",
                project_headers,
            ),
            Target(
                "project-chat",
                f"http://127.0.0.1:{project_port}/v1/chat/completions",
                CHAT_BODY,
                "direct-chat",
                project_headers,
            ),
        ]
        if not arguments.skip_litellm:
            litellm = setup_litellm(fake_url, litellm_port, services, log_dir)
            if litellm is not None:
                targets.append(litellm)
                litellm_process = services.processes[-1]
        if arguments.only:
            wanted = set(arguments.only.split(",")) | {"direct-responses", "direct-chat"}
            targets = [target for target in targets if target.name in wanted]

        # The load clients' conversations, started one after another as real sessions are
        # (bench/load.py, introduce_conversations), before anything else: the accounts' usage
        # is even then, so the pool spreads them evenly.
        for target in targets:
            if target.name.startswith("project"):
                asyncio.run(
                    introduce_conversations(
                        url=target.url,
                        payload=target.body,
                        headers=target.headers,
                        numbers=range(max(concurrencies)),
                    )
                )

        # Warm up every target (connections, caches, JIT-free but lazy imports).
        for target in targets:
            asyncio.run(
                run_load(
                    url=target.url,
                    payload=target.body,
                    headers=target.headers,
                    concurrency=4,
                    duration=1.0,
                )
            )

        # All rounds of one (target, concurrency) added up.
        aggregates: dict[tuple[str, int], LoadResult] = {}
        rss = {"before_mib": project_rss_mib(project)}
        # CPU seconds per process group of each (target, concurrency), all rounds added up.
        meter = CpuMeter(
            {
                "server": lambda: [],  # set per target below
                "postgres": lambda: postgres_processes(project_environment["DATABASE_URL"]),
                "redis": lambda: redis_processes(project_environment["REDIS_URL"]),
                "fake": lambda: tree(fake.pid),
            }
        )
        servers = {
            **({"litellm-chat": litellm_process} if litellm_process is not None else {}),
            "bare-responses": bare,
            **{t.name: project for t in targets if t.name.startswith("project")},
        }
        cpu: dict[tuple[str, int], dict[str, float]] = {}
        for round_index in range(arguments.rounds):
            shift = round_index % len(targets)
            order = targets[shift:] + targets[:shift]
            for concurrency in concurrencies:
                for target in order:
                    server = servers.get(target.name)
                    meter.groups["server"] = (lambda pid=server.pid: tree(pid)) if server else list
                    meter.start()
                    result = asyncio.run(
                        run_load(
                            url=target.url,
                            payload=target.body,
                            headers=target.headers,
                            concurrency=concurrency,
                            duration=arguments.duration,
                        )
                    )
                    spent = meter.stop()
                    spent["generator"] = result.cpu_seconds
                    totals = cpu.setdefault((target.name, concurrency), {})
                    for group, seconds in spent.items():
                        totals[group] = totals.get(group, 0.0) + seconds
                    aggregates.setdefault((target.name, concurrency), LoadResult()).merge(result)
                    rate = result.requests / result.elapsed_seconds
                    print(
                        f"round {round_index + 1} c={concurrency:<4} {target.name:<18}"
                        f" {rate:8.0f} req/s  errors {result.errors}",
                        flush=True,
                    )
        rss["after_mib"] = project_rss_mib(project)
        summaries = {key: summarize(aggregate) for key, aggregate in aggregates.items()}
        for key, summary in summaries.items():
            requests = max(aggregates[key].requests, 1)
            summary["cpu_ms_per_request"] = {
                group: 1000 * seconds / requests for group, seconds in cpu[key].items()
            }
        print_table(summaries, targets, concurrencies)
        print_cpu_table(summaries, targets, concurrencies)
        print(
            f"project RSS (all uvicorn processes): {rss['before_mib']:.0f} MiB before,"
            f" {rss['after_mib']:.0f} MiB after the run"
        )
        RESULTS.mkdir(parents=True, exist_ok=True)
        output = RESULTS / f"{stamp}.json"
        output.write_text(
            json.dumps(
                {
                    "when": stamp,
                    "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
                    "settings": vars(arguments),
                    "project_rss": rss,
                    "results": [
                        {"target": name, "concurrency": concurrency, **summary}
                        for (name, concurrency), summary in summaries.items()
                    ],
                },
                indent=2,
            )
        )
        print(f"results: {output.relative_to(ROOT)}  logs: {log_dir.relative_to(ROOT)}")
    finally:
        services.stop()


if __name__ == "__main__":
    main()
