"""Plumbing every app shares and no app owns: the clock, the Redis Lua loader (with the one
compare-and-delete script) and the outgoing HTTP session builders. It imports no app (and no
app's settings beyond ``django.conf.settings``), so bots/, proxy/, telemetry/ and config/ may all
stand on it without an arrow running between them."""
