"""A runtime_settings save is not undone by Redis: the version bump after the commit may fail
(an outage) without turning the saved change into an error."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from proxy.models import RuntimeSettings
from proxy.services.runtime_settings import runtime_settings_ensure, runtime_settings_update


@pytest.mark.django_db
def test_a_settings_save_succeeds_while_redis_is_down(
    private_redis, django_capture_on_commit_callbacks
):
    runtime_settings_ensure(now=timezone.now())
    caches = {"default": {**settings.CACHES["default"], "LOCATION": private_redis.url}}

    with override_settings(CACHES=caches):
        private_redis.stop()  # a real outage of the Redis the version key lives in
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            saved = runtime_settings_update(
                changes={"rotation_strategy": "sticky"}, now=timezone.now()
            )

    assert len(callbacks) == 1  # the bump was attempted, after the commit
    assert saved.rotation_strategy == "sticky"
    assert RuntimeSettings.objects.get().rotation_strategy == "sticky"
