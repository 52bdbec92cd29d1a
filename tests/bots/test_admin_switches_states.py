"""The verification switches on the console's settings page work in every state (issue 38): on a
fresh install before setwebhook has recorded the bot (until now "Nothing changed: no bot yet"),
with or without a token, and from every combination of switches in effect, stored values a
hand edit or an import left unreadable included."""

from __future__ import annotations

import pytest
from django.urls import reverse

from bots.models import AdminAuditEntry, Setting
from proxy.services.admin_users import admin_user_create_default
from tests.bots.conftest import START
from tests.bots.helpers import set_switches

SETTINGS = reverse("admin:bots_setting_changelist")
SWITCHES = reverse("admin:bots_setting_verification")


@pytest.fixture
def operator(client, db):
    admin_user = admin_user_create_default(password="a long operator passphrase 7", now=START)
    client.force_login(admin_user)
    return client


def _messages(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def _audit_rows() -> list[tuple[int, str, str, str]]:
    return list(AdminAuditEntry.objects.values_list("bot_id", "surface", "action", "detail"))


def test_before_setwebhook_the_switches_are_set_and_audited_for_the_token_bot(operator, settings):
    # A fresh install: the token is configured, the bot not recorded yet (no `bots` row).
    settings.TELEGRAM_BOT_TOKEN = "4242424242:AAE-fresh-install-token"
    page = operator.get(SETTINGS).content.decode()
    assert "No bot is recorded yet (setwebhook has not run)" in page
    assert 'name="verify_enabled"' in page

    response = operator.post(
        SWITCHES, {"verify_enabled": "0", "verify_mode": "button"}, follow=True
    )

    assert _messages(response) == ["Switches saved; outstanding challenges were voided."]
    assert dict(Setting.objects.values_list("key", "value")) == {
        "verify_enabled": "0",
        "verify_mode": "button",
        "verify_generation": "2",  # one real change each
    }
    assert _audit_rows() == [
        (4242424242, "console", "verification", "verification off, mode button")
    ]
    assert "In effect: verification <strong>off</strong>" in response.content.decode()


def test_without_a_token_the_switches_are_still_saved_and_the_page_says_why_no_audit_row(
    operator, settings
):
    settings.TELEGRAM_BOT_TOKEN = None

    response = operator.post(
        SWITCHES, {"verify_enabled": "1", "verify_mode": "button"}, follow=True
    )

    assert _messages(response) == [
        "Switches saved; outstanding challenges were voided. No bot is configured yet "
        "(TELEGRAM_BOT_TOKEN), so the audit trail has no row."
    ]
    assert Setting.objects.get(key="verify_mode").value == "button"
    assert _audit_rows() == []


TURNSTILE_KEYS = {"TURNSTILE_SITE_KEY": "0x4AAAAAAAsite", "TURNSTILE_SECRET_KEY": "0x4AAAAAAAkey"}
NO_TURNSTILE_KEYS = {"TURNSTILE_SITE_KEY": None, "TURNSTILE_SECRET_KEY": None}


@pytest.mark.parametrize(
    ("stored", "keys", "posted"),
    [
        ({"verify_enabled": "1", "verify_mode": "math"}, NO_TURNSTILE_KEYS, ("0", "math")),
        ({"verify_enabled": "0", "verify_mode": "math"}, NO_TURNSTILE_KEYS, ("1", "button")),
        ({"verify_enabled": "1", "verify_mode": "button"}, NO_TURNSTILE_KEYS, ("1", "math")),
        ({"verify_enabled": "0", "verify_mode": "button"}, NO_TURNSTILE_KEYS, ("1", "button")),
        ({"verify_enabled": "1", "verify_mode": "turnstile"}, TURNSTILE_KEYS, ("0", "turnstile")),
        ({"verify_enabled": "0", "verify_mode": "turnstile"}, TURNSTILE_KEYS, ("1", "math")),
        # Turnstile in effect, its keys removed since: off, or away from it, still works.
        (
            {"verify_enabled": "1", "verify_mode": "turnstile"},
            NO_TURNSTILE_KEYS,
            ("0", "turnstile"),
        ),
        ({"verify_enabled": "0", "verify_mode": "turnstile"}, NO_TURNSTILE_KEYS, ("0", "button")),
        # Values no switch writes (a hand edit, an import): read as the defaults, replaced.
        ({"verify_enabled": "yes", "verify_mode": "captcha"}, NO_TURNSTILE_KEYS, ("0", "button")),
        ({"verify_generation": "not a number"}, NO_TURNSTILE_KEYS, ("1", "button")),
    ],
)
@pytest.mark.parametrize("bot_recorded", [True, False], ids=["bot", "no-bot"])
def test_the_switches_change_from_every_state(
    operator, settings, request, stored, keys, posted, bot_recorded
):
    if bot_recorded:
        request.getfixturevalue("bot_row")
    for name, value in keys.items():
        setattr(settings, name, value)
    set_switches(**stored)
    page = operator.get(SETTINGS)
    assert page.status_code == 200
    enabled, mode = posted

    response = operator.post(
        SWITCHES, {"verify_enabled": enabled, "verify_mode": mode}, follow=True
    )

    assert _messages(response)[0].startswith("Switch")  # saved or unchanged, never refused
    in_effect = dict(Setting.objects.values_list("key", "value"))
    assert (in_effect["verify_enabled"], in_effect["verify_mode"]) == posted
