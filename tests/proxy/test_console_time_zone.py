"""One time zone for the whole console (issue 38 item 6): ``CONSOLE_TIME_ZONE`` (China time by
default, spec §0) is Django's ``TIME_ZONE``, shown in every page's header; the dashboard's
figures (the admin API) and the lists show the same moment as the same wall-clock time, and
"today" starts at that zone's midnight. Also the header's links: "Dashboard" where Django's
"View site" led to a 404, and no "Groups"."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from common import clock
from config.env import InvalidEnvironmentValue, env_time_zone
from proxy.admin_api.display import console_midnight
from proxy.services.admin_users import admin_user_create_default
from proxy.services.fingerprints import fingerprint_ensure_current
from proxy.services.runtime_settings import runtime_settings_ensure
from proxy.sessions import admin_session_login
from telemetry.services.ledger import usage_record_create

PASSWORD = "operator passphrase for the zone"
# 12:00 UTC: 20:00 in Shanghai, 08:00 in New York (EDT), and still the 15th in all three.
MOMENT = datetime(2026, 5, 15, 12, 0, tzinfo=UTC)


@pytest.fixture
def consoles(db):
    """(the Django admin's client, the admin API's) for one logged-in operator."""
    now = timezone.now()
    runtime_settings_ensure(now=now)
    fingerprint_ensure_current(now=now)
    admin = admin_user_create_default(password=PASSWORD, now=now)
    django_admin = Client()
    django_admin.force_login(admin)
    api = Client()
    token, _ = admin_session_login(user=admin, now=now)
    api.cookies["cpr_admin_session"] = token
    return django_admin, api


def test_the_setting_is_an_iana_zone_and_refuses_anything_else():
    assert env_time_zone("CONSOLE_TIME_ZONE", "Asia/Shanghai", environ={}) == "Asia/Shanghai"
    assert env_time_zone("CONSOLE_TIME_ZONE", "x", environ={"CONSOLE_TIME_ZONE": "UTC"}) == "UTC"
    for bad in ("Mars/Olympus", "+08:00", "../etc/passwd"):
        with pytest.raises(InvalidEnvironmentValue, match="CONSOLE_TIME_ZONE"):
            env_time_zone("CONSOLE_TIME_ZONE", "UTC", environ={"CONSOLE_TIME_ZONE": bad})


def test_the_default_is_china_time_as_the_spec_says(settings):
    assert settings.CONSOLE_TIME_ZONE == "Asia/Shanghai"
    assert settings.TIME_ZONE == settings.CONSOLE_TIME_ZONE


@pytest.mark.parametrize(
    ("zone", "header", "shown_in_list", "shown_by_the_api"),
    [
        (
            "Asia/Shanghai",
            "Asia/Shanghai (UTC+08:00)",
            "2026-05-15 20:00:00",
            "2026-05-15 20:00:00",
        ),
        (
            "America/New_York",
            "America/New_York (UTC-04:00)",
            "2026-05-15 08:00:00",
            "2026-05-15 08:00:00",
        ),
    ],
)
def test_every_page_shows_its_zone_and_the_lists_agree_with_the_dashboard(
    consoles, settings, zone, header, shown_in_list, shown_by_the_api
):
    settings.TIME_ZONE = zone
    django_admin, api = consoles
    usage_record_create(
        created_at=MOMENT,
        account_id="acct_zone",
        model="gpt-5.4",
        message="v1 responses completed",
        request_id="req_zone",
        input_tokens=10,
        output_tokens=5,
    )

    with clock.frozen(MOMENT):
        pages = {
            url: django_admin.get(url).content.decode()
            for url in (
                reverse("admin:index"),
                reverse("admin:dashboard"),
                reverse("admin:telemetry_usagerecord_changelist"),
                reverse("admin:proxy_clientapikey_changelist"),
                reverse("admin:bots_adminauditentry_changelist"),
            )
        }
        records = api.get("/api/admin/usage/records?page=1&pageSize=10").json()["data"]
        summary = api.get("/api/admin/dashboard/summary").json()["data"]

    for url, page in pages.items():
        assert f'<div id="console-time-zone" class="console-time-zone">Times in {header}</div>' in (
            page
        ), url
    usage_list = pages[reverse("admin:telemetry_usagerecord_changelist")]
    assert shown_in_list in usage_list
    [record] = records["items"]
    assert record["createdAtDisplay"] == shown_by_the_api
    # The dashboard's hourly trend puts the request in the hour the list shows it in.
    hour = shown_by_the_api[11:13]
    [point] = [point for point in summary["trend"]["points"] if point["requestsValue"]]
    assert point["time"] == hour
    assert summary["cards"]["traffic"]["todayRequestsValue"] == 1


def test_today_starts_at_the_console_zones_midnight(settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    assert console_midnight(MOMENT) == datetime(2026, 5, 14, 16, 0, tzinfo=UTC)
    settings.TIME_ZONE = "UTC"
    assert console_midnight(MOMENT) == datetime(2026, 5, 15, 0, 0, tzinfo=UTC)
    settings.TIME_ZONE = "America/New_York"
    assert console_midnight(MOMENT) == datetime(2026, 5, 15, 4, 0, tzinfo=UTC)


def test_the_header_leads_to_the_dashboard_and_groups_are_gone(consoles):
    django_admin, _ = consoles

    index = django_admin.get(reverse("admin:index")).content.decode()

    assert '<a id="view-site" href="/admin/dashboard/">Dashboard</a>' in index
    assert "View site" not in index
    assert "Groups" not in index and "/admin/auth/" not in index
    assert django_admin.get("/admin/auth/group/").status_code == 404
    assert django_admin.get("/admin/dashboard/").status_code == 200
