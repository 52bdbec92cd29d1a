"""Django admin over the support bot's tables: the operators' console.

* users — search by id, name or @username; filters banned / high-risk / verified / status; the
  topic and the ledger one click away; actions ban, unban, mark high-risk, clear high-risk,
  archive; on a user's page "Export data (JSON)" and "Delete user…" (as /deluser, behind a
  confirmation page that offers the export first);
* topics — with their note (editable: saved through the /note step, card refreshed); archive;
  on a topic's page "Purge messages…" (as /purgemsg, behind a confirmation page);
* the message ledger and processed updates — read-only; the ledger's *Response times* page
  (time to first admin reply, open conversations, messages in/out per day and conversation);
* settings — the raw rows read-only, and a form for the verification switches;
* the bots row — read-only;
* the audit trail — every admin action from Telegram or here (who, when, which user, the
  outcome), read-only, filterable by action, surface, outcome and day;
* broadcasts — in progress (state, counts, remaining, the admin who started it); the action
  stops one (a draft is cancelled, a running send stops before its next recipient).

**Composite primary keys.** Django 5.2's admin refuses models with one, so ``users``, ``topics``
and ``processed_updates`` are listed through unmanaged mirror models (``bots.models.*Listing``)
keyed by a column that is unique within one bot. One deployment serves one bot (spec §1.6) and
every list here is limited to that bot (``bot_current_id``), so the key is unique wherever the
admin uses it, and every statement the admin runs on a business table names the bot. An action
reads ``(bot_id, user_id)`` from the selected rows and hands them to the services.

**Writes are never raw field edits.** They go through the same services and steps as the admin
commands: ban/unban → ``bots.services.users``; high-risk, note and archive →
``bots.pipeline.moderation`` (which also refresh the pinned card through the Telegram client);
the switches → ``bots.services.settings.verification_setting_change`` (voids challenges and
advances the generation on a real change); delete user and purge → ``bots.admin.deletion``,
which runs the commands' own deletion code and never skips its Telegram side. The admin's
archive is the command's archive without its two group messages (the notice in the topic and
the report in General are the command's conversation with the admins in Telegram): the topic is
closed, the user soft-archived, the card edited and the user told. When the bot is not
configured (no token, invalid SUPPORT_CHAT_ID), database-only changes still happen and the page
says what Telegram step was skipped — except delete user and purge, which then do nothing.
"""

# Importing the screens registers them with the admin site (Django imports ``bots.admin``).
from bots.admin import audit, broadcasts, conversations, records, switches  # noqa: F401
