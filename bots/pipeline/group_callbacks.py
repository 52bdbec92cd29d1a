"""Button presses in the support group (spec §1.7): routed by the payload's prefix.

``d:`` → the /deluser prompt; ``b:`` → a broadcast's control message; anything else → the
/wipealldata prompt, whose handler ignores payloads that are not its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bots.pipeline.broadcast.callbacks import handle_broadcast_callback
from bots.pipeline.context import UpdateContext
from bots.pipeline.deluser import handle_deletion_callback
from bots.pipeline.wipe import handle_wipe_callback


def handle_group_callback(ctx: UpdateContext, callback: Mapping[str, Any]) -> None:
    data = callback.get("data")
    if not isinstance(data, str):
        return  # a game or other button without callback data: not ours
    if data.startswith("d:"):
        handle_deletion_callback(ctx, callback)
    elif data.startswith("b:"):
        handle_broadcast_callback(ctx, callback)
    else:
        handle_wipe_callback(ctx, callback)
