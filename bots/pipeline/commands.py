"""Admin commands (spec §4) — the next issue builds them here.

Until then an admin's command is acknowledged silently: like every command, it is never relayed
to a user and never written to the ledger.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from bots.pipeline.context import UpdateContext

logger = logging.getLogger(__name__)


def handle_admin_command(ctx: UpdateContext, message: Mapping, *, thread_id: int) -> None:
    """Run an admin's ``/command`` written in ``thread_id`` (1 = General)."""
    logger.info("admin command in thread %s not handled yet", thread_id)
