"""Writes to the bot's tables, named ``<entity>_<action>``, keyword-only, taking ``now``.

Every atomic claim is one conditional UPDATE (or one INSERT … ON CONFLICT) whose row count or
returned row decides; every statement on a business table filters by ``bot_id``. The two claims
kept in Redis (``bulk_lock``, the wipe prompt's decision in ``wipe``) are one command or one Lua
script each.
"""
