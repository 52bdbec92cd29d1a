"""Tables of the support bot's storage document (seed 000_0be9a72284d8fa86, "数据表").

One module per kind: ``seed`` (the seed's eight tables), ``admin_listings`` (the admin's
unmanaged mirrors of three of them), ``audit`` and ``inbox`` (tables beside the seed). Every
model is imported here: Django, the migrations and the rest of the project know them as
``bots.models.<Model>``.

PostgreSQL renderings of the seed's D1 conventions: Telegram ids are ``bigint``, the seed's ISO-8601
text timestamps are ``timestamptz`` and its 0/1 flags are ``boolean`` (same meanings).

Naming and shape (matching the proxy's models):

* CHECK constraints are named like PostgreSQL's own ``<table>_<column>_check``; unique
  constraints ``<table>_<columns>_key``; the two ledger indexes and the two partial unique
  indexes of ``broadcasts`` carry the names the seed's schema gives them.
* The seed's "联合唯一" pairs of ``users``, ``topics`` and ``processed_updates`` are their composite
  primary keys (no surrogate ``id`` column the seed does not have), like ``delete_confirmations``'
  explicit composite key.
* No foreign keys: the relations between the tables are logical only (a hand-deleted topic leaves
  ledger rows with a dangling ``thread_id`` on purpose), and Django creates no index the seed
  does not list.
* Column defaults live in the database (``db_default``); services still pass ``now`` explicitly.
"""

from bots.models.admin_listings import BotUserListing, ProcessedUpdateListing, TopicListing
from bots.models.audit import AdminAuditEntry, AuditAction, AuditOutcome, AuditSurface
from bots.models.inbox import AlbumItem, InboxUpdate
from bots.models.seed import (
    Bot,
    BotUser,
    Broadcast,
    BroadcastStatus,
    ConfirmationStatus,
    DeleteConfirmation,
    Direction,
    ProcessedUpdate,
    RelayedMessage,
    Setting,
    Topic,
    TopicStatus,
    UpdateStatus,
    UserStatus,
)

__all__ = [
    "AdminAuditEntry",
    "AlbumItem",
    "AuditAction",
    "AuditOutcome",
    "AuditSurface",
    "Bot",
    "BotUser",
    "BotUserListing",
    "Broadcast",
    "BroadcastStatus",
    "ConfirmationStatus",
    "DeleteConfirmation",
    "Direction",
    "InboxUpdate",
    "ProcessedUpdate",
    "ProcessedUpdateListing",
    "RelayedMessage",
    "Setting",
    "Topic",
    "TopicListing",
    "TopicStatus",
    "UpdateStatus",
    "UserStatus",
]
