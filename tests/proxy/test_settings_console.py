"""The console's runtime settings page (issue 38, "settings without JSON"): the model aliases as
rows stored in ``runtime_settings.model_aliases_json``, the strategy and limits with what they
mean, and the admin API key regenerated (shown once) or revoked from the page."""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.utils import timezone

from proxy.models import RuntimeSettings
from proxy.services.admin_api_key import admin_api_key_regenerate
from proxy.services.admin_users import admin_user_create_default
from proxy.services.runtime_settings import runtime_settings_ensure, runtime_settings_update

PAGE = "/admin/proxy/runtimesettings/1/change/"
REGENERATE = "/admin/proxy/runtimesettings/admin-api-key/regenerate/"
REVOKE = "/admin/proxy/runtimesettings/admin-api-key/revoke/"


@pytest.fixture
def operator(client, db):
    runtime_settings_ensure(now=timezone.now())
    admin = admin_user_create_default(password="operator passphrase", now=datetime.now(UTC))
    client.force_login(admin)
    return client


@pytest.fixture
def version(redis_client, settings):
    """The settings version the service bumps on every write (read now and again later)."""
    key = f"{settings.REDIS_KEY_PREFIX}settings:version"
    return lambda: int(redis_client.get(key) or 0)


def _page_data(operator) -> dict[str, object]:
    """What the page posts back untouched: every field as shown, no alias rows."""
    form = operator.get(PAGE).context["adminform"].form
    data = {name: form.initial.get(name) for name in form.fields}
    return {name: value for name, value in data.items() if value is not None}


def _rows(*rows: tuple[str, str] | tuple[str, str, bool], stored: int) -> dict[str, object]:
    """The alias formset as a browser posts it: ``stored`` rows came from the database
    (alias, model[, delete ticked]); the rest were blank rows filled in or left blank."""
    data: dict[str, object] = {
        "alias-TOTAL_FORMS": str(len(rows)),
        "alias-INITIAL_FORMS": str(stored),
        "alias-MIN_NUM_FORMS": "0",
        "alias-MAX_NUM_FORMS": "503",
    }
    for index, row in enumerate(rows):
        data[f"alias-{index}-alias"] = row[0]
        data[f"alias-{index}-target"] = row[1]
        if len(row) == 3 and row[2]:
            data[f"alias-{index}-DELETE"] = "on"
    return data


def _store_aliases(aliases: dict[str, str]) -> None:
    runtime_settings_update(changes={"model_aliases_json": aliases}, now=timezone.now())


def test_the_page_shows_each_alias_as_a_row_and_no_json(operator):
    _store_aliases({"fast": "gpt-5.4-mini", "big": "gpt-5.5"})

    page = operator.get(PAGE).content.decode()

    # Sorted by alias, then three blank rows; nothing of the JSON column as text.
    assert 'name="alias-0-alias" value="big"' in page
    assert 'name="alias-0-target" value="gpt-5.5"' in page
    assert 'name="alias-1-alias" value="fast"' in page
    assert 'name="alias-1-target" value="gpt-5.4-mini"' in page
    assert 'name="alias-4-alias"' in page and 'name="alias-5-alias"' not in page
    assert 'name="alias-TOTAL_FORMS" value="5"' in page
    assert "model_aliases_json" not in page and "{&quot;fast&quot;" not in page
    # The targets the proxy knows are offered (no plan snapshot yet: the built-in list).
    assert '<datalist id="alias-targets"><option value="codex-auto-review"></option>' in page
    assert "admin/js/inlines.js" in page


def test_rows_are_stored_as_the_alias_map_through_the_service(
    operator, version, django_capture_on_commit_callbacks
):
    _store_aliases({"big": "gpt-5.5", "fast": "gpt-5.4-mini", "old": "gpt-5.2"})
    before = version()
    data = {
        **_page_data(operator),
        **_rows(
            ("big", "gpt-5.4"),  # target changed
            (" fast ", " gpt-5.4-mini "),  # kept (spaces trimmed)
            ("old", "gpt-5.2", True),  # deleted
            ("review", "codex-auto-review"),  # added in a blank row
            ("", ""),  # left blank
            stored=3,
        ),
    }

    with django_capture_on_commit_callbacks(execute=True):
        response = operator.post(PAGE, data)

    assert response.status_code == 302
    assert RuntimeSettings.objects.get().model_aliases_json == {
        "big": "gpt-5.4",
        "fast": "gpt-5.4-mini",
        "review": "codex-auto-review",
    }
    assert version() == before + 1
    # The row's history says what changed.
    assert "Model aliases" in LogEntry.objects.get().get_change_message()


def test_clearing_a_stored_row_removes_that_alias(operator):
    _store_aliases({"fast": "gpt-5.4-mini", "big": "gpt-5.5"})
    data = {**_page_data(operator), **_rows(("big", "gpt-5.5"), ("", ""), stored=2)}

    response = operator.post(PAGE, data)

    assert response.status_code == 302
    assert RuntimeSettings.objects.get().model_aliases_json == {"big": "gpt-5.5"}


@pytest.mark.parametrize(
    ("rows", "row_errors"),
    [
        ([("fast", "")], {0: {"target": ["Give the model this alias stands for."]}}),
        ([("", "gpt-5.4")], {0: {"alias": ["Give this model an alias, or clear the row."]}}),
        (
            [("gpt-5.4", "gpt-5.4")],
            {0: {"target": ["An alias cannot be its own model: it would rename nothing."]}},
        ),
        (
            [("fast", "gpt-5.4"), ("big", "gpt-5.5"), ("fast", "gpt-5.2")],
            {2: {"alias": ["'fast' is already the alias of row 1."]}},
        ),
        (
            [("x" * 201, "gpt-5.4")],
            {0: {"alias": ["Ensure this value has at most 200 characters (it has 201)."]}},
        ),
    ],
)
def test_a_bad_row_is_named_and_nothing_is_saved(operator, version, rows, row_errors):
    _store_aliases({"kept": "gpt-5.5"})
    before = version()
    data = {**_page_data(operator), "max_concurrent_per_account": "7", **_rows(*rows, stored=0)}

    response = operator.post(PAGE, data)

    assert response.status_code == 200  # the page again, the rows as typed and marked
    form = response.context["adminform"].form
    assert form.non_field_errors() == ["Nothing was saved: correct the marked model alias rows."]
    assert {
        index: row.errors for index, row in enumerate(form.aliases.forms) if row.errors
    } == row_errors
    page = response.content.decode()
    assert "Nothing was saved: correct the marked model alias rows." in page
    for message in (
        text for errors in row_errors.values() for texts in errors.values() for text in texts
    ):
        assert message.replace("'", "&#x27;") in page
    stored = RuntimeSettings.objects.get()
    assert (stored.model_aliases_json, stored.max_concurrent_per_account) == (
        {"kept": "gpt-5.5"},
        3,
    )
    assert version() == before


def test_the_strategies_and_limits_say_what_they_do_and_their_bounds(operator):
    page = operator.get(PAGE).content.decode()

    for text in (
        "Smart (recommended): the account with the most room",
        "Quota reset first: the account whose window resets soonest",
        "Round robin: every account in turn, in the order they were added.",
        "Sticky: the account used last, while it has a free slot",
        "How many requests one account serves at the same time.",
        "1–1,000; default 3.",
        "0 never waits. 0–600,000; default 50.",
        "1–31,536,000; default 3,600.",
        "The hourly trim deletes usage records older than this. 1–3,650; default 30.",
    ):
        assert text in page
    assert 'type="radio" name="rotation_strategy" value="smart"' in page


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_concurrent_per_account", "0", "Ensure this value is greater than or equal to 1."),
        ("request_interval_ms", "600001", "Ensure this value is less than or equal to 600000."),
        ("usage_retention_days", "3651", "Ensure this value is less than or equal to 3650."),
        ("rotation_strategy", "fastest", "Select a valid choice. fastest is not one of the"),
    ],
)
def test_a_value_out_of_bounds_is_refused_and_nothing_is_saved(
    operator, version, field, value, message
):
    before = version()
    data = {**_page_data(operator), "request_interval_ms": "75", field: value, **_rows(stored=0)}

    response = operator.post(PAGE, data)

    assert response.status_code == 200
    assert response.context["adminform"].form.errors[field][0].startswith(message)
    assert RuntimeSettings.objects.get().request_interval_ms == 50
    assert version() == before


def test_strategy_and_limits_are_saved_and_seen_by_the_admin_api(
    operator, django_capture_on_commit_callbacks
):
    data = {
        **_page_data(operator),
        "rotation_strategy": "quota_reset_priority",
        "max_concurrent_per_account": "5",
        "request_interval_ms": "0",
        **_rows(stored=0),
    }

    with django_capture_on_commit_callbacks(execute=True):
        assert operator.post(PAGE, data).status_code == 302

    settings = operator.get("/api/admin/settings").json()["data"]
    assert (
        settings["rotationStrategy"],
        settings["maxConcurrentPerAccount"],
        settings["requestIntervalMs"],
        settings["modelAliases"],
    ) == ("quota_reset_priority", 5, 0, {})


def _new_key_of(response) -> str:
    assert response.status_code == 200
    return response.context["new_key"]


def test_regenerate_shows_the_new_key_once_and_it_works_on_the_admin_api(operator, caplog):
    anonymous = Client()
    assert "Not set" in operator.get(PAGE).content.decode()
    confirm = operator.get(REGENERATE).content.decode()
    assert "No admin API key is set yet." in confirm and 'value="Generate a key"' in confirm

    with caplog.at_level(logging.DEBUG):
        issued = operator.post(REGENERATE)

    key = _new_key_of(issued)
    assert f'<code id="new-admin-api-key">{key}</code>' in issued.content.decode()
    assert "no-store" in issued["Cache-Control"]
    assert (
        RuntimeSettings.objects.get().admin_api_key_hash == hashlib.sha256(key.encode()).hexdigest()
    )
    assert anonymous.get("/api/admin/settings", headers={"x-api-key": key}).status_code == 200
    # Never again: not on the settings page (a masked hint and the hash's first characters),
    # not in the session or the messages (Redis), not in a log line.
    settings_page = operator.get(PAGE).content.decode()
    assert key not in settings_page
    fingerprint = hashlib.sha256(key.encode()).hexdigest()[:8]
    assert f"<code>admin-••••••••</code>, SHA-256 beginning\n       <code>{fingerprint}</code>" in (
        settings_page
    )
    assert key not in operator.get(REGENERATE).content.decode()
    assert key not in str(dict(operator.session.items()))
    assert all(key not in record.getMessage() for record in caplog.records)
    assert key not in LogEntry.objects.get().change_message


def test_regenerating_again_stops_the_old_key_at_once(operator):
    anonymous = Client()
    old = admin_api_key_regenerate(now=timezone.now())
    old_fingerprint = hashlib.sha256(old.encode()).hexdigest()[:8]
    confirm = operator.get(REGENERATE).content.decode()
    assert "which stops working at once" in confirm and old_fingerprint in confirm

    new = _new_key_of(operator.post(REGENERATE))

    assert new != old
    assert anonymous.get("/api/admin/settings", headers={"x-api-key": old}).status_code == 401
    assert anonymous.get("/api/admin/settings", headers={"x-api-key": new}).status_code == 200


def test_revoke_asks_first_then_refuses_the_key(operator):
    anonymous = Client()
    key = admin_api_key_regenerate(now=timezone.now())
    assert 'id="admin-api-key-revoke"' in operator.get(PAGE).content.decode()
    confirm = operator.get(REVOKE)
    assert 'value="Revoke the key"' in confirm.content.decode()
    assert RuntimeSettings.objects.get().admin_api_key_hash is not None  # asking changed nothing

    revoked = operator.post(REVOKE, follow=True)

    assert [str(message) for message in revoked.context["messages"]] == [
        "The admin API key was revoked: a call with it is now refused (401)."
    ]
    assert RuntimeSettings.objects.get().admin_api_key_hash is None
    assert anonymous.get("/api/admin/settings", headers={"x-api-key": key}).status_code == 401
    page = revoked.content.decode()
    assert "Not set" in page and 'id="admin-api-key-revoke"' not in page
    again = operator.post(REVOKE, follow=True)
    assert [str(message) for message in again.context["messages"]] == [
        "No admin API key was set: nothing to revoke."
    ]


def test_the_key_pages_need_a_logged_in_admin(client, db):
    runtime_settings_ensure(now=timezone.now())

    for url in (REGENERATE, REVOKE):
        response = client.post(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert RuntimeSettings.objects.get().admin_api_key_hash is None
