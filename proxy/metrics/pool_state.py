"""Gauges computed when ``/metrics`` is scraped (so every worker answers the same): the
accounts by status (one PostgreSQL query) and the live concurrency slots per account (one
Redis pipeline; a crashed worker's stale slots are not counted)."""

from __future__ import annotations

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily

from proxy.admin_api.pool import slots_in_use
from proxy.models import Account, AccountStatus


class PoolStateCollector:
    def collect(self):
        by_status = dict(
            Account.objects.values_list("status").annotate(count=Count("id")).order_by()
        )
        accounts = GaugeMetricFamily(
            "cpr_pool_accounts", "Upstream accounts by status.", labels=["status"]
        )
        for status in AccountStatus.values:
            accounts.add_metric([status], by_status.get(status, 0))
        yield accounts
        account_ids = list(Account.objects.values_list("id", flat=True))
        slots = GaugeMetricFamily(
            "cpr_scheduler_slots_in_use",
            "Concurrency slots held on each account (requests in flight).",
            labels=["account_id"],
        )
        for account_id, count in slots_in_use(account_ids).items():
            slots.add_metric([account_id], count)
        yield slots
