"""The update router: the pipeline an update's classification selects (spec §1.7). The
webhook runs it inline, the inbox's worker later (``bots.pipeline.inbox_work``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from bots.pipeline.broadcast.creation import handle_broadcast_command
from bots.pipeline.classify import Classification, UpdateKind, classify_update
from bots.pipeline.context import UpdateContext
from bots.pipeline.edits import handle_inbound_edit, handle_outbound_edit
from bots.pipeline.group_callbacks import handle_group_callback
from bots.pipeline.inbound import handle_inbound
from bots.pipeline.outbound import handle_outbound, handle_topic_event
from bots.verification.flow import handle_verification_callback

logger = logging.getLogger(__name__)


def _thread(classification: Classification) -> int:
    # classify_update gives every update in a group topic its thread.
    assert classification.thread_id is not None
    return classification.thread_id


def route_update(context: UpdateContext, update: Mapping[str, Any]) -> None:
    """Run the pipeline the update's classification selects."""
    classification = classify_update(update, context.config.support_chat_id)
    kind = classification.kind
    if kind == UpdateKind.INBOUND:
        handle_inbound(context, update["message"])
    elif kind == UpdateKind.CALLBACK:
        handle_verification_callback(context, update["callback_query"])
    elif kind == UpdateKind.OUTBOUND:
        handle_outbound(context, update["message"], thread_id=_thread(classification))
    elif kind == UpdateKind.TOPIC_EVENT:
        handle_topic_event(context, update["message"], thread_id=_thread(classification))
    elif kind == UpdateKind.GROUP_CALLBACK:
        handle_group_callback(context, update["callback_query"])
    elif kind == UpdateKind.BROADCAST:
        handle_broadcast_command(context, update["message"])
    elif kind == UpdateKind.EDIT_INBOUND:
        handle_inbound_edit(context, update["edited_message"])
    elif kind == UpdateKind.EDIT_OUTBOUND:
        handle_outbound_edit(context, update["edited_message"], thread_id=_thread(classification))
    else:
        logger.debug("update %s: %s, nothing to do", context.update_id, kind)
