"""Fingerprint auto-update (spec §2.2) from a fake appcast over real HTTP: the ``current`` row
follows the newest release, the history keeps what changed, new requests use it at once."""

from __future__ import annotations

import pytest
from django.utils import timezone

from proxy.clients.appcast import AppcastError, parse_latest_release
from proxy.models import Fingerprint, FingerprintUpdateHistory
from proxy.services.fingerprints import fingerprint_ensure_current
from proxy.tasks import update_fingerprint_task
from tests.proxy.conftest import make_pool_account, post_responses

pytestmark = pytest.mark.django_db


def _current() -> Fingerprint:
    return Fingerprint.objects.get(id=Fingerprint.CURRENT_ID)


def test_a_new_release_updates_the_fingerprint_and_appends_history(appcast):
    fingerprint_ensure_current(now=timezone.now())
    appcast.publish(("26.601.10203", "3310"), ("26.519.81530", "3178"))

    result = update_fingerprint_task()

    assert result == {"changed": True, "app_version": "26.601.10203", "build": "3310"}
    current = _current()
    assert (current.app_version, current.build_number, current.source) == (
        "26.601.10203",
        "3310",
        "auto_update",
    )
    assert current.chromium_version == "146"  # unchanged without an extracted fingerprint
    [entry] = FingerprintUpdateHistory.objects.all()
    assert (entry.app_version, entry.build_number, entry.source) == (
        "26.601.10203",
        "3310",
        "auto_update",
    )
    assert entry.current_fingerprint_id == "current"
    assert entry.manifest_json["version"] == "26.601.10203"
    assert entry.manifest_json["url"].endswith("Codex-darwin-arm64-26.601.10203.zip")

    # The same release again changes nothing.
    assert update_fingerprint_task()["changed"] is False
    assert FingerprintUpdateHistory.objects.count() == 1


def test_older_appcasts_with_enclosure_attributes_are_read(appcast):
    fingerprint_ensure_current(now=timezone.now())
    appcast.publish(("26.602.1", "3400"), as_attributes=True)

    assert update_fingerprint_task()["changed"] is True
    assert (_current().app_version, _current().build_number) == ("26.602.1", "3400")


def test_an_unreachable_appcast_changes_nothing(appcast):
    fingerprint_ensure_current(now=timezone.now())
    appcast.fail(503)

    result = update_fingerprint_task()

    assert result == {"changed": False, "error": "appcast answered 503"}
    assert _current().source == "config_seed"
    assert FingerprintUpdateHistory.objects.count() == 0


def test_entity_expansion_in_the_appcast_is_refused():
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
        b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;">]><rss><channel><item>'
        b"<title>&lol2;</title></item></channel></rss>"
    )
    with pytest.raises(AppcastError, match="not valid XML"):
        parse_latest_release(bomb)


def test_new_requests_use_the_updated_fingerprint_at_once(proxy, upstream, appcast, client_key):
    make_pool_account("tok-fp")
    assert post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False}).ok
    appcast.publish(("26.700.5", "3999"))

    update_fingerprint_task()
    assert post_responses(proxy, client_key, {"model": "gpt-5.4", "stream": False}).ok

    before, after = upstream.responses_requests()
    assert before.header("user-agent") == "Codex Desktop/26.519.81530 (darwin; arm64)"
    assert after.header("user-agent") == "Codex Desktop/26.700.5 (darwin; arm64)"
