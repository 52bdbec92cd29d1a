"""The support bot's broadcast: its sustained send rate against Telegram's ~30 messages a second.

A real Celery worker (``--pool solo``) runs the send loop against the fake Bot API
(tests/fakes/telegram, in this process) on the embedded PostgreSQL and Redis (database
``cpr_bench``, key prefix ``cprbench:``). The fake enforces Telegram's flood control (one
message a second per chat, 30 a second for the bot; beyond that a 429), so the figure is the
rate the bot keeps *without* being refused. The rate is measured from the fake's arrival times
of the sends to users: (sends − 1) / (last arrival − first arrival).

    python -m bench.broadcast [--recipients 3000] [--no-flood-control]

Internal steps (run by the orchestrator in subprocesses with the bench database):
``python -m bench.broadcast populate --recipients N --control ID --preview ID``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from bench.stores import prepared_store_env

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
QUEUE = "bench.broadcast"
FIRST_USER_ID = 50_000_001
TELEGRAM_CEILING = 30.0  # messages a second (Telegram's guidance for one bot)
DONE = re.compile(r"✅ .*")


# ------------------------------------------------------------------ inside the bench database


def populate(recipients: int, *, preview_id: int, control_id: int) -> dict:
    """Fresh bot tables with ``recipients`` eligible users and one broadcast confirmed to them;
    its first run queued for the worker."""
    import django

    from config.bootstrap import prepare

    prepare()
    django.setup()
    from django.db import connection
    from django.utils import timezone

    from bots.models import BotUser, Topic
    from bots.services.bots import bot_upsert
    from bots.services.broadcasts import (
        broadcast_attach_preview,
        broadcast_confirm,
        broadcast_create,
        broadcast_publish,
    )
    from bots.tasks import broadcast_send_task
    from tests.fakes.telegram import BOT_ID, SUPPORT_CHAT_ID

    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("truncate users, topics, messages, broadcasts, bots")
    bot_upsert(bot_id=BOT_ID, username="hodor_bench_bot", display_name="Hodor", now=now)
    ids = list(range(FIRST_USER_ID, FIRST_USER_ID + recipients))
    BotUser.objects.bulk_create(
        BotUser(bot_id=BOT_ID, user_id=user_id, first_seen_at=now, last_seen_at=now)
        for user_id in ids
    )
    Topic.objects.bulk_create(
        Topic(bot_id=BOT_ID, user_id=user_id, thread_id=user_id, created_at=now) for user_id in ids
    )
    broadcast = broadcast_create(
        bot_id=BOT_ID,
        source_update_id=1,
        initiator_user_id=111111111,
        support_chat_id=SUPPORT_CHAT_ID,
        message_html="<b>📣 Bench</b>\n\nHow fast does this go out?\n\n<i>— Hodor</i>",
        now=now,
    )
    broadcast_attach_preview(
        bot_id=BOT_ID, broadcast_id=broadcast.id, preview_msg_id=preview_id, now=now
    )
    broadcast_publish(bot_id=BOT_ID, broadcast_id=broadcast.id, control_msg_id=control_id, now=now)
    outcome = broadcast_confirm(
        bot_id=BOT_ID,
        broadcast_id=broadcast.id,
        initiator_user_id=111111111,
        recipient_ids=ids,
        now=now,
    )
    assert outcome == "won", outcome
    broadcast_send_task.apply_async(
        kwargs={"bot_id": BOT_ID, "broadcast_id": broadcast.id}, queue=QUEUE
    )
    return {"broadcast_id": broadcast.id}


# ------------------------------------------------------------------ the orchestrator


def measure(recipients: int, *, flood_control: bool) -> dict:
    from tests.fakes.telegram import FakeTelegram, most_in_one_second

    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    log_dir = ROOT / "var" / "bench" / f"broadcast-{run_id}"
    log_dir.mkdir(parents=True, exist_ok=True)
    with FakeTelegram() as telegram:
        telegram.met(
            *(
                telegram.user(user_id)
                for user_id in range(FIRST_USER_ID, FIRST_USER_ID + recipients)
            )
        )
        chat = telegram.support_chat_id
        preview_id = telegram.bot_sends(chat, text="📣 Bench")
        control_id = telegram.bot_sends(chat, text="📋 confirmed")
        if flood_control:
            telegram.limit_rate(1, methods=("sendMessage", "editMessageText"))
            telegram.limit_global_rate(30, methods=("sendMessage", "editMessageText"))
        env = {
            **os.environ,
            **prepared_store_env(),
            "LOG_LEVEL": "warning",
            "TELEGRAM_API_BASE": telegram.api_base,
            "TELEGRAM_BOT_TOKEN": telegram.token,
            "SUPPORT_CHAT_ID": str(chat),
            "BROADCAST_MAX_RECIPIENTS": str(recipients),
            "DJANGO_SETTINGS_MODULE": "config.settings",
        }
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env=env,
            check=True,
        )
        subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.broadcast",
                "populate",
                "--recipients",
                str(recipients),
                "--preview",
                str(preview_id),
                "--control",
                str(control_id),
            ],
            cwd=ROOT,
            env=env,
            check=True,
        )
        with open(log_dir / "worker.log", "w") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "solo"]
                + ["-Q", QUEUE, "-n", "bench@%h", "-l", "warning"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            started = time.monotonic()
            try:
                deadline = started + 30 + recipients / 10
                while not DONE.match(telegram.message(chat, control_id).text or ""):
                    if worker.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"the broadcast did not finish (see {log_dir})")
                    time.sleep(0.2)
            finally:
                worker.terminate()
                worker.wait(20)
        sends = [call for call in telegram.calls("sendMessage") if call.params["chat_id"] != chat]
        messages = [
            call
            for call in telegram.calls()
            if call.method in ("sendMessage", "editMessageText") and call.at >= sends[0].at
        ]
        accepted = [call for call in sends if call.ok]
        by_chat = defaultdict(list)
        for call in messages:
            by_chat[call.params["chat_id"]].append(call.at)
        gaps = [
            later - earlier
            for times in by_chat.values()
            for earlier, later in zip(times, times[1:], strict=False)
        ]
        span = sends[-1].at - sends[0].at
        rate = (len(sends) - 1) / span if span else 0.0
        result = {
            "run": run_id,
            "recipients": recipients,
            "flood_control": flood_control,
            "sends": len(sends),
            "accepted": len(accepted),
            "refused_429": sum(1 for call in messages if call.status == 429),
            "control_message_edits": sum(
                1 for call in messages if call.method == "editMessageText"
            ),
            "seconds": round(span, 2),
            "sends_per_second": round(rate, 2),
            "of_the_ceiling": round(rate / TELEGRAM_CEILING, 3),
            "most_in_one_second": most_in_one_second([call.at for call in messages]),
            "closest_into_one_chat_seconds": round(min(gaps), 3) if gaps else None,
            "final_text": telegram.message(chat, control_id).text,
        }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"broadcast-{run_id}.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", nargs="?", default="measure", choices=["measure", "populate"])
    parser.add_argument("--recipients", type=int, default=3000)
    parser.add_argument("--preview", type=int)
    parser.add_argument("--control", type=int)
    parser.add_argument("--no-flood-control", action="store_true")
    arguments = parser.parse_args()
    if arguments.step == "populate":
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        populate(arguments.recipients, preview_id=arguments.preview, control_id=arguments.control)
        return
    result = measure(arguments.recipients, flood_control=not arguments.no_flood_control)
    print(
        f"\nbroadcast to {result['recipients']} users through a real Celery worker"
        f" (fake Bot API, flood control {'on' if result['flood_control'] else 'off'}):\n"
        f"  {result['sends_per_second']:.2f} sends/s sustained over {result['seconds']} s"
        f" = {result['of_the_ceiling']:.1%} of Telegram's 30/s\n"
        f"  {result['accepted']}/{result['sends']} accepted, {result['refused_429']} refused (429),"
        f" at most {result['most_in_one_second']} calls in any second,"
        f" {result['closest_into_one_chat_seconds']} s the closest two calls into one chat,"
        f" {result['control_message_edits']} control-message edits\n"
        f"  final: {result['final_text']!r}"
    )


if __name__ == "__main__":
    main()
