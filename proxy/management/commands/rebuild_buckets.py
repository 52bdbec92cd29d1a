"""``python manage.py rebuild_buckets``: recompute request_time_buckets inside the facts' window.

cutoff = now − min(usage, ops-error retention days), rounded *up* to the next 15-minute
boundary. Buckets from the cutoff on are deleted and recomputed from usage_records and
ops_error_logs in one transaction; older buckets and account_usage are never touched. (The
original floors the cutoff; that takes in the bucket straddling it, part of whose facts the
hourly trim has already deleted, and would rebuild it smaller than it was.)
"""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from proxy.services.runtime_settings import runtime_settings_ensure
from telemetry.services.buckets import BUCKET_SECONDS, bucket_start_for, buckets_rebuild


class Command(BaseCommand):
    help = (
        "Recompute request_time_buckets from usage_records and ops_error_logs (retention window)."
    )

    def handle(self, *args, **options) -> None:
        now = timezone.now()
        settings_row = runtime_settings_ensure(now=now)
        window_days = min(settings_row.usage_retention_days, settings_row.ops_error_retention_days)
        oldest_fact_kept = now - timedelta(days=window_days)
        cutoff = bucket_start_for(oldest_fact_kept)
        if cutoff < oldest_fact_kept:
            cutoff += timedelta(seconds=BUCKET_SECONDS)
        with transaction.atomic():
            result = buckets_rebuild(cutoff=cutoff, now=now)
        self.stdout.write(f"cutoff: {result.cutoff.isoformat()}")
        self.stdout.write(f"deleted: {result.deleted}")
        self.stdout.write(f"rebuilt: {result.rebuilt}")
