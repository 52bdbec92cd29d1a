"""Reads over the ledger for the admin API and the dashboard (seed 004 §5: each number from
the table its rule names). Nothing here imports the proxy: callers pass ids and times in and
get plain values back."""
