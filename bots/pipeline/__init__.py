"""Processing of one Telegram update: classification, then the inbound, outbound, callback and
topic-event pipelines, under the idempotency claim of ``bots.pipeline.webhook``; the admin
commands (``commands``, with ``deluser``, ``purge`` and ``wipe``), their buttons
(``group_callbacks``) and the paced bulk deletions behind purge and wipe (``bulk``)."""
