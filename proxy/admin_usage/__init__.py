"""The console's usage analytics page (``/admin/usage/``) and its CSV export: a date range
(today, 7 days, 30 days, custom), a breakdown by model, key, account, route or status, filters on
each, cards, charts and a table — figures from ``telemetry.queries.usage_analytics``, names
(accounts, keys) from the proxy's tables."""
