"""The bot's outbound pacing: what every process sending to Telegram shares (``limiter``)."""
