"""``Issued``: one admin command as issued (where, by which update, with which arguments), as
the command handlers of ``commands``, ``deluser`` and ``wipe`` receive it."""

from __future__ import annotations

from dataclasses import dataclass

from bots.pipeline.classify import GENERAL_THREAD_ID
from bots.pipeline.context import UpdateContext
from bots.pipeline.replies import reply_in_thread


@dataclass(frozen=True)
class Issued:
    """One command as issued: where, by which update, with which arguments."""

    ctx: UpdateContext
    thread_id: int
    arguments: str

    def reply(self, text: str) -> None:
        reply_in_thread(self.ctx, thread_id=self.thread_id, text=text)

    def report_in_general(self, text: str) -> None:
        reply_in_thread(self.ctx, thread_id=GENERAL_THREAD_ID, text=text)
