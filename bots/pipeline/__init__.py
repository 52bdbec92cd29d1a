"""Processing of one Telegram update: classification, then the inbound, outbound, callback and
topic-event pipelines, under the idempotency claim of ``bots.pipeline.webhook``."""
