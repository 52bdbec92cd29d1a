"""Clients of the outside HTTP APIs the bot talks to (the Telegram Bot API)."""
