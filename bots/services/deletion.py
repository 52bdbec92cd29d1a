"""Writes of /deluser (spec §4.8, seed "delete_confirmations"): the confirmation prompt's row,
its first-click-wins decisions, and the physical delete of a user's data.

A prompt is one ``delete_confirmations`` row keyed by the prompt's message id. Cancel and confirm
are each one conditional UPDATE from ``pending``: whichever lands first wins and the other finds
nothing to update. The confirming UPDATE stores the winning callback id — only a redelivery of
that same callback may carry the deletion on (Telegram deleted the topic, the database delete
did not happen) — and requires, in the same statement, that the user's binding to the thread
still exists.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Exists, OuterRef

from bots.models import (
    AlbumItem,
    BotUser,
    ConfirmationStatus,
    DeleteConfirmation,
    RelayedMessage,
    Topic,
)


def delete_confirmation_create(
    *, bot_id: int, prompt_msg_id: int, user_id: int, thread_id: int, started_at: int
) -> DeleteConfirmation:
    """Record the prompt just sent (status ``pending``); ``started_at`` in epoch seconds."""
    return DeleteConfirmation.objects.create(
        bot_id=bot_id,
        prompt_msg_id=prompt_msg_id,
        user_id=user_id,
        thread_id=thread_id,
        started_at=started_at,
        status=ConfirmationStatus.PENDING,
    )


def delete_confirmation_cancel(*, bot_id: int, prompt_msg_id: int) -> bool:
    """pending → cancelled; False when the prompt was decided already (or has no row)."""
    return (
        DeleteConfirmation.objects.filter(
            bot_id=bot_id, prompt_msg_id=prompt_msg_id, status=ConfirmationStatus.PENDING
        ).update(status=ConfirmationStatus.CANCELLED)
        == 1
    )


def delete_confirmation_confirm(*, bot_id: int, prompt_msg_id: int, callback_id: str) -> bool:
    """pending → confirmed by ``callback_id``, only while the topics binding of the row's user
    and thread still exists; False when the prompt was decided already or the binding is gone.
    """
    binding = Topic.objects.filter(
        bot_id=OuterRef("bot_id"), user_id=OuterRef("user_id"), thread_id=OuterRef("thread_id")
    )
    return (
        DeleteConfirmation.objects.filter(
            Exists(binding),
            bot_id=bot_id,
            prompt_msg_id=prompt_msg_id,
            status=ConfirmationStatus.PENDING,
        ).update(status=ConfirmationStatus.CONFIRMED, confirm_callback_id=callback_id)
        == 1
    )


@transaction.atomic
def user_delete_data(*, bot_id: int, user_id: int) -> None:
    """Physically delete the user, in one transaction: their ledger rows (of every thread), the
    album items waiting to be relayed to or from them, their binding (and with it the note),
    their users row and their confirmation prompts. Afterwards
    the user is a stranger. Deleting what is already gone is a no-op, so a repeat converges.
    Broadcast rows are left alone (spec §4.8: a frozen recipient list is re-checked before
    sending)."""
    RelayedMessage.objects.filter(bot_id=bot_id, user_id=user_id).delete()
    AlbumItem.objects.filter(bot_id=bot_id, user_id=user_id).delete()
    Topic.objects.filter(bot_id=bot_id, user_id=user_id).delete()
    BotUser.objects.filter(bot_id=bot_id, user_id=user_id).delete()
    DeleteConfirmation.objects.filter(bot_id=bot_id, user_id=user_id).delete()
