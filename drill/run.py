"""``make drill``: start the whole system on the drill's stores, run the parts, print the
figures, exit 1 when an invariant broke (2 when the system could not be started).

    python -m drill.run [--quick] [--parts proxy,bot,fuzz] [--requests N] [--concurrency 32]

Parts: ``proxy`` (load at c=32 with Redis flushes, PostgreSQL connections terminated and a web
worker SIGTERMed then SIGKILLed), ``bot`` (a redelivery storm against the webhook with the fake
Bot API injecting 429s and 5xx, then the same with a web worker killed, then click storms on a
broadcast's confirm button and on /deluser's two buttons), ``inbox`` (the bot's inbox with
updates waiting behind a long 429 while the web process, the Celery worker and Redis are
killed in turn: nothing lost, nothing doubled, each user's order kept), ``fuzz`` (hypothesis
over the webhook, /v1 bodies and headers and the admin API; schemathesis over the OpenAPI
document). The secrets scan always runs last, over everything collected. Logs and a JSON of the
figures go to ``var/drill/<timestamp>/``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from datetime import UTC, datetime

from drill.logs import LogWindow
from drill.report import Part, as_json, print_report
from drill.secrets_scan import Scanner
from drill.system import ROOT, System

PARTS = ("proxy", "bot", "inbox", "fuzz")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a few hundred requests/updates")
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--requests", type=int, help="proxy requests (3000; --quick 600)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--users", type=int, help="storm users (60; --quick 20)")
    parser.add_argument("--messages", type=int, default=4, help="messages per storm user")
    parser.add_argument("--copies", type=int, default=3, help="deliveries of each update")
    parser.add_argument("--clicks", type=int, default=12, help="presses of a broadcast's confirm")
    parser.add_argument("--inbox-users", type=int, help="inbox users per round (12; --quick 6)")
    parser.add_argument("--examples", type=int, help="fuzz examples per target (150; --quick 40)")
    parser.add_argument("--web-workers", type=int, default=3)
    chosen = parser.parse_args()
    chosen.requests = chosen.requests or (600 if chosen.quick else 3000)
    chosen.users = chosen.users or (20 if chosen.quick else 60)
    chosen.examples = chosen.examples or (40 if chosen.quick else 150)
    chosen.inbox_users = chosen.inbox_users or (6 if chosen.quick else 12)
    unknown = set(chosen.parts.split(",")) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    return chosen


def main() -> int:
    chosen = arguments()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    log_dir = ROOT / "var" / "drill" / stamp
    system = System(log_dir, web_workers=chosen.web_workers)
    parts: list[Part] = []
    started = time.monotonic()
    print(f"drill {stamp}: logs in {log_dir.relative_to(ROOT)}", flush=True)
    try:
        system.start()
    except Exception as error:  # reported; then everything started is stopped
        print(f"the system did not start: {error}", file=sys.stderr)
        system.stop()
        return 2
    scanner = Scanner(system.secrets)
    try:
        wanted = chosen.parts.split(",")
        if "proxy" in wanted:
            from drill import proxy_load

            parts.append(
                _logged(
                    system,
                    lambda: proxy_load.run(
                        system, scanner, total=chosen.requests, concurrency=chosen.concurrency
                    ),
                )
            )
        if "bot" in wanted:
            from drill import bot_storm

            for kill in (False, True):
                parts.append(
                    _logged(
                        system,
                        lambda kill=kill: bot_storm.run(
                            system,
                            scanner,
                            users=chosen.users,
                            messages=chosen.messages,
                            copies=chosen.copies,
                            kill_worker=kill,
                        ),
                    )
                )
            from drill import clicks

            parts.append(_logged(system, lambda: clicks.run(system, scanner, clicks=chosen.clicks)))
            parts.append(
                _logged(system, lambda: clicks.run_deluser(system, scanner, clicks=chosen.clicks))
            )
        if "inbox" in wanted:
            from drill import bot_inbox

            for kill in bot_inbox.ROUNDS:
                parts.append(
                    _logged(
                        system,
                        lambda kill=kill: bot_inbox.run(
                            system,
                            scanner,
                            kill=kill,
                            users=chosen.inbox_users,
                            messages=chosen.messages,
                        ),
                    )
                )
        if "fuzz" in wanted:
            from drill import fuzz

            parts.append(
                _logged(
                    system,
                    lambda: fuzz.run(system, scanner, examples=chosen.examples),
                    tracebacks_break=True,
                )
            )
    finally:
        system.stop()
    parts.append(scanner.part(system.log_files()))
    total = Part("run")
    total.figure(
        "machine", f"{platform.node()}: {os.cpu_count()} cores, Python {sys.version.split()[0]}"
    )
    total.figure("load average at the end", tuple(round(value, 1) for value in os.getloadavg()))
    total.figure("minutes", (time.monotonic() - started) / 60)
    parts.insert(0, total)
    print_report(parts)
    (log_dir / "figures.json").write_text(json.dumps(as_json(parts), indent=2, default=str))
    return 1 if any(part.broken for part in parts) else 0


def _logged(system: System, body, *, tracebacks_break: bool = False) -> Part:
    """Run one part; add the tracebacks its time left in the logs (an invariant for the bad
    input part, a figure elsewhere: a terminated connection is logged with its traceback).
    A part that crashes is reported as one broken invariant; the other parts still run."""
    window = LogWindow(system.log_files())
    try:
        part = body()
    except Exception:
        part = Part("a part that crashed")
        part.require(False, "the part ran to its end:\n" + traceback.format_exc())
    tracebacks = window.tracebacks(system.log_files())
    part.figure("tracebacks logged", len(tracebacks))
    if tracebacks_break:
        part.require(not tracebacks, "no traceback in the logs")
    for excerpt in tracebacks[:3]:
        part.note(f"traceback: {excerpt}")
    return part


if __name__ == "__main__":
    sys.exit(main())
