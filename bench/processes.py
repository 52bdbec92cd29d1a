"""CPU time per process group during a measurement: the project, PostgreSQL, Redis, the fake
upstream and the load generator itself, so a table can say where the machine's CPU went per
request (issue 23 asks for the per-process CPU per request beside the throughput)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import psutil

ROOT = Path(__file__).resolve().parent.parent


def tree(pid: int) -> list[psutil.Process]:
    """``pid`` and all its descendants (the ones alive now)."""
    try:
        parent = psutil.Process(pid)
        return [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def postgres_processes(database_url: str) -> list[psutil.Process]:
    """The PostgreSQL server of ``database_url``: the embedded one's postmaster (from its
    postmaster.pid) and its backends; for an external server, every local ``postgres``."""
    pid_file = ROOT / "var" / "postgres" / "postmaster.pid"
    host = urlsplit(database_url).hostname or ""
    if pid_file.exists() and (host in ("", "localhost") or host.startswith("/")):
        try:
            return tree(int(pid_file.read_text().split()[0]))
        except (ValueError, IndexError):
            pass
    return [
        p for p in psutil.process_iter(["name"]) if p.info["name"] in ("postgres", "postmaster")
    ]


def redis_processes(redis_url: str) -> list[psutil.Process]:
    """The Redis-protocol server listening on ``redis_url``'s port (Redis or Valkey)."""
    port = str(urlsplit(redis_url).port or 6379)
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        name = process.info["name"] or ""
        cmdline = process.info["cmdline"] or ()
        if ("redis" in name or "valkey" in name) and any(
            part.endswith(f":{port}") or part == port for part in cmdline
        ):
            found.append(process)
    return found


class CpuMeter:
    """Adds up user+system CPU seconds of each named group between ``start()`` and ``stop()``.

    Groups are re-listed at each reading (uvicorn workers and PostgreSQL backends come and go);
    a process that exited in between is missing from the second reading, which makes its
    share read low, never high."""

    def __init__(self, groups: dict[str, Callable[[], list[psutil.Process]]]):
        self.groups = groups
        self._started: dict[str, dict[int, float]] = {}

    @staticmethod
    def _read(processes: list[psutil.Process]) -> dict[int, float]:
        seconds = {}
        for process in processes:
            try:
                times = process.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            seconds[process.pid] = times.user + times.system
        return seconds

    def start(self) -> None:
        self._started = {name: self._read(list_()) for name, list_ in self.groups.items()}

    def stop(self) -> dict[str, float]:
        """CPU seconds per group since ``start()``."""
        spent = {}
        for name, list_ in self.groups.items():
            before = self._started.get(name, {})
            now = self._read(list_())
            spent[name] = sum(value - before.get(pid, 0.0) for pid, value in now.items())
        return spent


def own_process() -> list[psutil.Process]:
    return [psutil.Process(os.getpid())]
