"""The operators' console over the proxy and ledger tables: lists, masking, writes via services.

URLs quote primary keys the way the admin does (``_`` followed by two hex digits would
otherwise be read as an escape in ids like ``key_2c…``).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest
from django import forms
from django.contrib.admin.utils import quote
from django.db import connection, transaction
from django.utils import timezone

from proxy.models import Account, AccountPolicy, ClientApiKey, RuntimeSettings
from proxy.services.admin_users import admin_user_create_default
from proxy.services.client_api_keys import client_api_key_create
from proxy.services.runtime_settings import runtime_settings_ensure
from telemetry.services.ledger import ops_error_log_create, usage_record_create
from tests.proxy.factories import make_account, make_cookie, make_fingerprint


@pytest.fixture
def operator(client, db):
    admin = admin_user_create_default(password="operator passphrase", now=datetime.now(UTC))
    client.force_login(admin)
    return client


CHANGELISTS = [
    "/admin/proxy/adminuser/",
    "/admin/proxy/runtimesettings/",
    "/admin/proxy/clientapikey/",
    "/admin/proxy/account/",
    "/admin/proxy/accountusage/",
    "/admin/proxy/accountcookie/",
    "/admin/proxy/fingerprint/",
    "/admin/proxy/fingerprintupdatehistory/",
    "/admin/telemetry/usagerecord/",
    "/admin/telemetry/opserrorlog/",
    "/admin/telemetry/requesttimebucketlisting/",
]


@pytest.mark.parametrize("url", CHANGELISTS)
def test_every_changelist_renders(operator, url):
    now = timezone.now()
    runtime_settings_ensure(now=now)
    account = make_account(email="ops@example.com")
    make_cookie(account=account)
    make_fingerprint()
    usage_record_create(
        created_at=now, account_id=account.id, model="gpt-5.4", message="ok", request_id="req_1"
    )
    ops_error_log_create(created_at=now, message="upstream failed", failure_class="upstream")

    response = operator.get(url)

    assert response.status_code == 200


def test_secrets_are_masked_in_lists(operator):
    account = make_account(
        access_token="eyJsecret-access-token-value", refresh_token="rt_secret_refresh"
    )
    cookie = make_cookie(account=account, value="cf-clearance-secret-value")
    key = client_api_key_create(name="ci", now=timezone.now())

    pages = [
        operator.get("/admin/proxy/account/").content.decode(),
        operator.get(f"/admin/proxy/account/{quote(account.pk)}/change/").content.decode(),
        operator.get("/admin/proxy/accountcookie/").content.decode(),
        operator.get(f"/admin/proxy/accountcookie/{quote(cookie.pk)}/change/").content.decode(),
        operator.get("/admin/proxy/clientapikey/").content.decode(),
    ]

    for page in pages:
        assert "eyJsecret-access-token-value" not in page
        assert "rt_secret_refresh" not in page
        assert "cf-clearance-secret-value" not in page
        assert key.key not in page
    assert f"{key.prefix}…" in pages[4]
    assert "eyJsec… (28 chars)" in pages[1]  # the account page (the list shows no token)


def test_a_client_key_is_shown_in_full_on_its_own_page(operator):
    key = client_api_key_create(name="ci", now=timezone.now())

    page = operator.get(f"/admin/proxy/clientapikey/{quote(key.pk)}/change/").content.decode()

    assert key.key in page


def test_creating_a_client_key_in_the_admin_issues_a_real_key(operator):
    response = operator.post(
        "/admin/proxy/clientapikey/add/", {"name": "laptop", "label": "", "enabled": "on"}
    )

    assert response.status_code == 302
    key = ClientApiKey.objects.get(name="laptop")
    assert key.key.startswith("sk_") and len(key.key) == 3 + 43
    assert key.prefix == key.key[:12] and key.id.startswith("key_")


def test_setting_active_on_a_quota_limited_account_stores_quota_exhausted(operator):
    account = make_account(status="disabled", quota_limit_reached=True)

    response = operator.post(
        f"/admin/proxy/account/{quote(account.pk)}/change/", {"label": "main", "status": "active"}
    )

    assert response.status_code == 302
    account.refresh_from_db()
    assert (account.status, account.label) == ("quota_exhausted", "main")


def test_operators_cannot_set_banned_or_expired(operator):
    account = make_account(status="active")

    response = operator.post(
        f"/admin/proxy/account/{quote(account.pk)}/change/", {"label": "", "status": "banned"}
    )

    assert response.status_code == 200  # the form again, with an error
    assert Account.objects.get(pk=account.pk).status == "active"


def browser_submission(page, **edits) -> dict:
    """What a browser posts from the admin change form on ``page``: every field as rendered,
    with the hidden copies of initial values, and ``edits`` on top. A select none of whose
    options is selected submits its first option, as browsers do."""
    form = page.context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        shown = form[name].value()
        shown = "" if shown is None else str(shown)
        submitted = shown
        if isinstance(field, forms.ChoiceField):
            offered = [str(value) for value, _ in field.choices]
            submitted = shown if shown in offered else offered[0]
        data[name] = submitted
        if field.show_hidden_initial:
            data[f"initial-{name}"] = shown
    data.update(edits)
    return data


@pytest.mark.parametrize("status", ["banned", "expired", "quota_exhausted"])
def test_renaming_an_account_the_proxy_took_out_of_service_keeps_its_status(operator, status):
    # given
    account = make_account(status=status, label="old")
    url = f"/admin/proxy/account/{quote(account.pk)}/change/"

    # when: the operator changes only the label
    response = operator.post(url, browser_submission(operator.get(url), label="renamed"))

    # then
    assert response.status_code == 302
    account.refresh_from_db()
    assert (account.label, account.status) == ("renamed", status)


def test_a_ban_that_arrives_while_the_operator_edits_the_label_is_kept(operator):
    # given: the page was shown while the account was active, then the proxy banned it
    account = make_account(status="active", label="old")
    url = f"/admin/proxy/account/{quote(account.pk)}/change/"
    page = operator.get(url)
    Account.objects.filter(pk=account.pk).update(status="banned")

    # when
    response = operator.post(url, browser_submission(page, label="renamed"))

    # then
    assert response.status_code == 302
    account.refresh_from_db()
    assert (account.label, account.status) == ("renamed", "banned")


def test_an_operator_can_still_disable_a_banned_account(operator):
    # given
    account = make_account(status="banned")
    url = f"/admin/proxy/account/{quote(account.pk)}/change/"

    # when
    response = operator.post(url, browser_submission(operator.get(url), status="disabled"))

    # then
    assert response.status_code == 302
    assert Account.objects.get(pk=account.pk).status == "disabled"


def _alias_rows(*rows: tuple[str, str]) -> dict[str, str]:
    """The settings page's model alias rows as posted (none stored before)."""
    data = {"alias-TOTAL_FORMS": str(len(rows)), "alias-INITIAL_FORMS": "0"}
    for index, (alias, target) in enumerate(rows):
        data.update({f"alias-{index}-alias": alias, f"alias-{index}-target": target})
    return data


def test_runtime_settings_are_edited_through_the_service(
    operator, redis_client, settings, django_capture_on_commit_callbacks
):
    runtime_settings_ensure(now=timezone.now())
    version_key = f"{settings.REDIS_KEY_PREFIX}settings:version"
    before = int(redis_client.get(version_key) or 0)
    form = operator.get("/admin/proxy/runtimesettings/1/change/").context["adminform"].form
    data = {name: form.initial.get(name) for name in form.fields}
    data.update({"rotation_strategy": "sticky", **_alias_rows(("fast", "gpt-5.4-mini"))})

    with django_capture_on_commit_callbacks(execute=True):
        response = operator.post("/admin/proxy/runtimesettings/1/change/", data)

    assert response.status_code == 302
    stored = RuntimeSettings.objects.get()
    assert stored.rotation_strategy == "sticky"
    assert stored.model_aliases_json == {"fast": "gpt-5.4-mini"}
    assert int(redis_client.get(version_key)) == before + 1


def test_an_alias_equal_to_its_target_is_refused_by_the_settings_page(
    operator, redis_client, settings
):
    # Spec §1.6 "alias ≠ target enforced on write", as the admin API refuses it (400 there).
    runtime_settings_ensure(now=timezone.now())
    version_key = f"{settings.REDIS_KEY_PREFIX}settings:version"
    before = int(redis_client.get(version_key) or 0)
    form = operator.get("/admin/proxy/runtimesettings/1/change/").context["adminform"].form
    data = {name: form.initial.get(name) for name in form.fields}
    data.update({"rotation_strategy": "sticky", **_alias_rows(("gpt-5.4", "gpt-5.4"))})

    response = operator.post("/admin/proxy/runtimesettings/1/change/", data)

    assert response.status_code == 200  # the form again, with its error
    rows = response.context["adminform"].form.aliases
    assert rows.errors[0] == {
        "target": ["An alias cannot be its own model: it would rename nothing."]
    }
    stored = RuntimeSettings.objects.get()
    assert (stored.rotation_strategy, stored.model_aliases_json) == ("smart", {})
    assert int(redis_client.get(version_key) or 0) == before


def test_fact_search_is_exact_on_ids_or_words_of_the_message(operator):
    now = timezone.now()
    usage_record_create(
        created_at=now, account_id="a", model="m", message="stream completed", request_id="req_abc"
    )
    usage_record_create(
        created_at=now, account_id="a", model="m", message="other", request_id="req_abcdef"
    )

    by_id = operator.get("/admin/telemetry/usagerecord/", {"q": "req_abc"})
    by_words = operator.get("/admin/telemetry/usagerecord/", {"q": "stream"})

    assert by_id.context["cl"].result_count == 1
    assert by_words.context["cl"].result_count == 1


def test_an_operator_adds_an_account_from_its_token(operator):
    from tests.fakes.oauth import Identity, access_token_for

    token = access_token_for(
        Identity("org-9", "user-9", "pro", "new@example.com"), expires_in=86400
    )

    response = operator.post(
        "/admin/proxy/account/add/",
        {"access_token": f"Bearer {token}", "refresh_token": "rt_secret", "label": "fresh"},
    )

    assert response.status_code == 302
    account = Account.objects.get(email="new@example.com")
    assert account.id.startswith("acct_") and account.status == "active"
    assert (account.chatgpt_account_id, account.chatgpt_user_id, account.plan_type) == (
        "org-9",
        "user-9",
        "pro",
    )
    assert account.access_token == token and account.refresh_token == "rt_secret"
    assert account.label == "fresh" and account.next_refresh_at is not None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "Give an access token, a refresh token, or both."),
        (
            {"access_token": "opaque-token-without-claims"},
            "The access token is not a JWT (an opaque token says nothing about its account), "
            "and no refresh token was given to get a new one.",
        ),
    ],
)
def test_an_add_without_usable_tokens_shows_why(operator, fields, message):
    response = operator.post("/admin/proxy/account/add/", fields)

    assert response.status_code == 200
    assert response.context["adminform"].form.non_field_errors() == [message]
    assert not Account.objects.exists()


def test_deleting_an_account_purges_its_affinity(operator, redis_client, settings):
    from proxy.runtime_state.affinity import affinity_get, affinity_record

    account = make_account()
    affinity_record(
        response_id=f"resp_del_{account.pk}",
        account_id=account.pk,
        conversation_id=f"conv_del_{account.pk}",
        created_at=datetime.now(UTC),
    )

    response = operator.post(f"/admin/proxy/account/{quote(account.pk)}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not Account.objects.filter(pk=account.pk).exists()
    assert affinity_get(f"resp_del_{account.pk}") is None
    assert redis_client.exists(f"{settings.REDIS_KEY_PREFIX}affinity:v2:account:{account.pk}") == 0
    assert (
        redis_client.zcard(f"{settings.REDIS_KEY_PREFIX}affinity:v2:conv:conv_del_{account.pk}")
        == 0
    )


def _hold_identity_until_someone_waits(inserted: threading.Event, chatgpt_account_id: str) -> None:
    """Insert an account with this identity in an open transaction; commit only once another
    session is waiting on the unique index for it."""
    try:
        with transaction.atomic():
            make_account(chatgpt_account_id=chatgpt_account_id, access_token="rival-token")
            inserted.set()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "select exists(select 1 from pg_stat_activity where wait_event_type ="
                        " 'Lock' and datname = current_database() and pid <> pg_backend_pid())"
                    )
                    if cursor.fetchone()[0]:
                        break
                time.sleep(0.02)
    finally:
        connection.close()


def test_an_add_racing_another_add_of_the_identity_ends_with_one_account(
    operator, transactional_db
):
    from tests.fakes.oauth import Identity, access_token_for

    # given: another session has inserted the same identity, not yet committed, so the add
    # has to wait for the unique index
    inserted = threading.Event()
    rival = threading.Thread(target=_hold_identity_until_someone_waits, args=(inserted, "org-race"))
    rival.start()
    assert inserted.wait(10)
    token = access_token_for(Identity("org-race", ""), expires_in=3600)

    # when
    response = operator.post("/admin/proxy/account/add/", {"access_token": token})
    rival.join(10)

    # then: one account, holding the tokens of the add that came second
    assert response.status_code == 302
    [account] = Account.objects.filter(chatgpt_account_id="org-race")
    assert account.access_token == token


def test_an_operator_sets_changes_and_clears_an_accounts_daily_burn_cap(operator):
    # given: an account that burned 2,500 tokens today
    account = make_account(status="active", label="main")
    usage_record_create(
        created_at=timezone.now(),
        account_id=account.pk,
        model="gpt-5.4",
        message="v1 responses completed",
        input_tokens=2000,
        output_tokens=500,
    )
    url = f"/admin/proxy/account/{quote(account.pk)}/change/"

    # when: a cap is set, the label alone edited, the cap refused at 0, then cleared
    capped = operator.post(url, browser_submission(operator.get(url), daily_burn_cap_tokens="2000"))
    listed = operator.get("/admin/proxy/account/").content.decode()
    relabelled = operator.post(url, browser_submission(operator.get(url), label="renamed"))
    kept = AccountPolicy.objects.get(pk=account.pk).daily_burn_cap_tokens
    refused = operator.post(url, browser_submission(operator.get(url), daily_burn_cap_tokens="0"))
    cleared = operator.post(url, browser_submission(operator.get(url), daily_burn_cap_tokens=""))

    # then
    assert (capped.status_code, relabelled.status_code, cleared.status_code) == (302, 302, 302)
    assert "2,500 / 2,000 tokens · capped until 00:00 UTC" in listed
    assert kept == 2000
    assert refused.status_code == 200
    assert refused.context["adminform"].form.errors["daily_burn_cap_tokens"] == [
        "must be between 1 and 1000000000000"
    ]
    assert not AccountPolicy.objects.filter(pk=account.pk).exists()
    account.refresh_from_db()
    assert account.label == "renamed"
