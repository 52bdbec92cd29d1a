"""Accounts over the admin API (spec §6.3): list, search, paging by page and by cursor,
summary, eligibility verdicts, add, update, delete, export, refresh, quota, models, health
check."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import parse_qsl, urlsplit

import pytest
import requests
from django.utils import timezone

from proxy.accounts import ineligibility
from proxy.models import Account, AccountUsage
from proxy.runtime_state.affinity import affinity_get, affinity_record
from proxy.runtime_state.model_snapshots import model_snapshots_get_all, model_snapshots_replace
from proxy.runtime_state.oauth_sessions import oauth_session_get
from proxy.runtime_state.refresh_leases import refresh_lease_acquire, refresh_lease_release
from telemetry.services.ledger import ops_error_log_create
from tests.fakes.oauth import Identity, access_token_for
from tests.proxy.admin_api.conftest import data_of, error_of
from tests.proxy.conftest import make_oauth_account
from tests.proxy.factories import make_account

CAROL = Identity("org-carol", "user-carol", "team", "carol@example.com")


def _accounts(count: int, *, start=None):
    start = start or timezone.now() - timedelta(days=1)
    return [
        make_account(
            id=f"acct_{index:03d}",
            email=f"user{index}@example.com",
            added_at=start + timedelta(minutes=index),
        )
        for index in range(count)
    ]


def test_the_list_pages_by_number_newest_first(api):
    _accounts(5)

    first = data_of(api.get("/api/admin/accounts?page=1&pageSize=2&search="))
    third = data_of(api.get("/api/admin/accounts?page=3&pageSize=2"))

    assert [item["id"] for item in first["items"]] == ["acct_004", "acct_003"]
    assert first["page"] == {
        "page": 1,
        "pageSize": 2,
        "total": 5,
        "totalPages": 3,
        "nextCursor": first["page"]["nextCursor"],
        "hasMore": True,
    }
    assert [item["id"] for item in third["items"]] == ["acct_000"]
    assert third["page"]["hasMore"] is False and third["page"]["nextCursor"] is None


def test_the_cursor_walks_every_account_once_on_the_keyset(api):
    accounts = _accounts(7)
    # Two accounts added at the same moment: the id breaks the tie.
    Account.objects.filter(pk="acct_002").update(added_at=accounts[3].added_at)

    seen, cursor = [], None
    while True:
        url = "/api/admin/accounts?pageSize=3" + (f"&cursor={cursor}" if cursor else "")
        data = data_of(api.get(url))
        seen += [item["id"] for item in data["items"]]
        cursor = data["page"]["nextCursor"]
        if cursor:
            assert data["page"]["total"] is None or data["page"]["page"] == 1
        if not cursor:
            break

    assert seen == [
        "acct_006",
        "acct_005",
        "acct_004",
        "acct_003",
        "acct_002",
        "acct_001",
        "acct_000",
    ]


def test_paging_validation(api):
    assert error_of(api.get("/api/admin/accounts?page=x"), 400, 40001) == "page must be an integer"
    assert error_of(api.get("/api/admin/accounts?cursor=%%%"), 400, 40001) == "cursor is not valid"
    clamped = data_of(api.get("/api/admin/accounts?pageSize=100000&page=-3"))
    assert clamped["page"]["pageSize"] == 200 and clamped["page"]["page"] == 1


def test_search_matches_id_email_label_and_chatgpt_ids(api):
    make_account(id="acct_a", email="Alice@Example.com")
    make_account(id="acct_b", label="team blue")
    make_account(id="acct_c", chatgpt_account_id="org-XYZ")
    make_account(id="acct_d")

    def found(term):
        return sorted(
            item["id"] for item in data_of(api.get(f"/api/admin/accounts?search={term}"))["items"]
        )

    assert found("alice@") == ["acct_a"]
    assert found("BLUE") == ["acct_b"]
    assert found("org-xyz") == ["acct_c"]
    assert found("acct_d") == ["acct_d"]


def test_summary_cards_count_the_whole_pool(api):
    now = timezone.now()
    make_account(status="active")
    make_account(
        status="active",
        quota_json={
            "snapshots": [
                {
                    "source": "core",
                    "primary": {
                        "used_percent": 85,
                        "window_minutes": 300,
                        "reset_at": int(now.timestamp()) + 60,
                    },
                }
            ]
        },
    )
    make_account(status="expired")
    make_account(status="disabled")
    make_account(status="banned")
    make_account(status="quota_exhausted")

    summary = data_of(api.get("/api/admin/accounts?pageSize=1"))["summary"]

    assert summary == {"total": 6, "active": 2, "highUsage": 1, "attention": 3}


def test_an_item_shows_identity_quota_windows_usage_but_no_token(api):
    now = timezone.now()
    reset = int((now + timedelta(hours=2)).timestamp())
    account = make_account(
        id="acct_seen",
        email=None,
        chatgpt_account_id="org-1",
        plan_type="plus",
        refresh_token="rt-secret-value",
        access_token="at-secret-value",
        quota_json={
            "plan_type": "plus",
            "snapshots": [
                {
                    "source": "core",
                    "primary": {"used_percent": 40, "window_minutes": 300, "reset_at": reset},
                    "secondary": {
                        "used_percent": 10,
                        "window_minutes": 10080,
                        "reset_at": reset + 86400,
                    },
                }
            ],
        },
        quota_fetched_at=now,
    )
    AccountUsage.objects.create(account=account, request_count=9, total_tokens=900)

    response = api.get("/api/admin/accounts")
    item = data_of(response)["items"][0]

    assert "at-secret-value" not in response.content.decode()
    assert "rt-secret-value" not in response.content.decode()
    assert item["email"] == ""  # never null: the console trims it
    assert item["hasRefreshToken"] is True
    assert item["displayStatus"] == "active" and item["tokenRefreshing"] is False
    windows = item["quota"]["windows"]
    assert [(w["key"], w["group"], w["windowSeconds"], w["usedPercent"]) for w in windows] == [
        ("codex-five-hour", "shortTerm", 18000, 40.0),
        ("codex-weekly", "shortTerm", 604800, 10.0),
    ]
    assert windows[0]["usedPercentDisplay"] == "40%"
    assert item["usage"]["windowKey"] == "codex-weekly"
    assert item["usage"]["lifetimeRequestCount"] == 9


def test_refreshing_overrides_the_display_status(api):
    account = make_account(refresh_token="rt")
    refresh_lease_acquire(account_id=account.pk, owner='"test"', ttl_ms=60_000)
    try:
        item = data_of(api.get("/api/admin/accounts"))["items"][0]
    finally:
        refresh_lease_release(account_id=account.pk, owner='"test"')

    assert (item["status"], item["displayStatus"], item["tokenRefreshing"]) == (
        "active",
        "refreshing",
        True,
    )
    assert item["eligibility"]["refreshing"] is True


CASES = {
    "eligible": {},
    "quota_limited": {"quota_limit_reached": True, "quota_cooldown_until": "+1h"},
    "not_active": {"status": "disabled"},
    "token_expired": {"access_token_expires_at": "-1m"},
    "cloudflare_cooldown": {"cloudflare_cooldown_until": "+30s"},
}


def _relative_fields(fields: dict, now) -> dict:
    values = {}
    for name, value in fields.items():
        if isinstance(value, str) and value[0] in "+-":
            amount, unit = int(value[1:-1]), value[-1]
            delta = {
                "h": timedelta(hours=amount),
                "m": timedelta(minutes=amount),
                "s": timedelta(seconds=amount),
            }[unit]
            value = now + delta if value[0] == "+" else now - delta
        values[name] = value
    return values


@pytest.mark.parametrize("verdict", sorted(CASES))
def test_the_eligibility_verdict_is_the_schedulers_own(api, verdict):
    now = timezone.now()
    fields = {"access_token_expires_at": now + timedelta(days=1), "chatgpt_account_id": "org"}
    fields.update(_relative_fields(CASES[verdict], now))
    account = make_account(**fields)

    eligibility = data_of(api.get(f"/api/admin/accounts/detail?id={account.pk}"))["eligibility"]

    assert eligibility["verdict"] == verdict
    assert eligibility["eligible"] is (verdict == "eligible")
    assert (ineligibility(account, now=timezone.now()) or "eligible") == verdict
    failing = [check["name"] for check in eligibility["checks"] if not check["passed"]]
    expected = {
        "eligible": [],
        "quota_limited": ["quotaLimit"],
        "not_active": ["status"],
        "token_expired": ["accessToken"],
        "cloudflare_cooldown": ["cloudflareCooldown"],
    }[verdict]
    assert failing == expected
    if verdict in ("quota_limited", "cloudflare_cooldown"):
        assert eligibility["until"].endswith("+08:00")


def test_the_verdict_names_the_last_failure(api):
    account = make_account()
    ops_error_log_create(
        created_at=timezone.now(),
        message="v1 responses dispatch failed",
        account_id=account.pk,
        failure_class="rate_limited",
        status_code=429,
        request_id="req_1",
    )

    last = data_of(api.get(f"/api/admin/accounts/detail?id={account.pk}"))["eligibility"][
        "lastFailure"
    ]

    assert (last["failureClass"], last["statusCode"], last["requestId"]) == (
        "rate_limited",
        429,
        "req_1",
    )


def test_detail_of_an_unknown_account_is_404(api):
    assert error_of(api.get("/api/admin/accounts/detail?id=nope"), 404, 40401)
    assert error_of(api.get("/api/admin/accounts/detail"), 400, 40001) == "id is required"


def test_add_by_access_token(api):
    token = access_token_for(CAROL, expires_in=3600)

    item = data_of(api.post_json("/api/admin/accounts", {"token": f"Bearer {token}", "label": "c"}))

    account = Account.objects.get()
    assert item["id"] == account.pk and account.access_token == token
    assert (item["email"], item["planType"], item["label"]) == ("carol@example.com", "team", "c")
    assert token not in str(item)


def test_add_by_refresh_token_alone_exchanges_it(api, oauth):
    _, refresh = oauth.issue(CAROL)

    item = data_of(api.post_json("/api/admin/accounts", {"refreshToken": refresh}))

    assert item["accountId"] == "org-carol"
    assert oauth.is_spent(refresh)
    assert Account.objects.get().refresh_token == oauth.issued_refresh_tokens[-1]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "Give an access token, a refresh token, or both."),
        ({"token": "opaque"}, "The access token is not a JWT"),
        ({"token": "x", "extra": 1}, "extra is not a field of this request"),
    ],
)
def test_add_refusals_write_nothing(api, body, message):
    assert error_of(api.post_json("/api/admin/accounts", body), 400, 40001).startswith(message)
    assert Account.objects.count() == 0


def test_update_label_and_status(api):
    account = make_account(label="old", quota_limit_reached=False)

    item = data_of(
        api.post_json("/api/admin/accounts/update", {"id": account.pk, "status": "disabled"})
    )
    assert (item["status"], item["label"]) == ("disabled", "old")
    item = data_of(api.post_json("/api/admin/accounts/update", {"id": account.pk, "label": "  "}))
    assert item["label"] is None and item["status"] == "disabled"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"id": "X", "email": "e"}, "email is not editable"),
        ({"id": "X", "status": "banned"}, 'status: "banned" is not a valid choice.'),
        ({"id": "X", "label": "x" * 65}, "label: Ensure this field has no more than 64"),
    ],
)
def test_update_validation(api, body, message):
    account = make_account(label="kept")
    body = {**body, "id": account.pk}

    assert error_of(api.post_json("/api/admin/accounts/update", body), 400, 40001).startswith(
        message
    )
    account.refresh_from_db()
    assert (account.label, account.status) == ("kept", "active")


def test_delete_reports_deleted_and_missing_and_purges_affinity(api):
    account = make_account()
    affinity_record(
        response_id="resp_1", account_id=account.pk, conversation_id="c1", created_at=timezone.now()
    )

    result = data_of(api.post_json("/api/admin/accounts/delete", {"ids": [account.pk, "nope"]}))

    assert result == {"deleted": 1, "notFound": ["nope"]}
    assert Account.objects.count() == 0
    assert affinity_get("resp_1") is None
    assert error_of(api.post_json("/api/admin/accounts/delete", {"ids": []}), 400, 40001)


def test_export_needs_the_explicit_confirmation(api):
    account = make_account(access_token="at-secret", refresh_token="rt-secret")

    refused = api.get(f"/api/admin/accounts/export?ids={account.pk}")
    wrong = api.get(f"/api/admin/accounts/export?ids={account.pk}&confirm=yes")

    for response in (refused, wrong):
        assert error_of(response, 400, 40001).startswith("Exporting tokens needs confirm=")
        assert "at-secret" not in response.content.decode()


def test_export_with_confirmation_is_the_cpr_format_that_imports_again(api):
    account = make_account(
        access_token=access_token_for(CAROL, expires_in=3600),
        refresh_token="rt-secret",
        chatgpt_account_id="org-carol",
        chatgpt_user_id="user-carol",
        label="carol",
    )

    exported = data_of(
        api.get(f"/api/admin/accounts/export?ids={account.pk}&confirm=export_sensitive_accounts")
    )

    assert exported["sourceFormat"] == "cpr"
    [entry] = exported["accounts"]
    assert (entry["id"], entry["token"], entry["refreshToken"], entry["label"]) == (
        account.pk,
        account.access_token,
        "rt-secret",
        "carol",
    )
    assert error_of(
        api.get("/api/admin/accounts/export?ids=nope&confirm=export_sensitive_accounts"), 404, 40401
    )
    report = data_of(api.post_json("/api/admin/accounts/import", exported))
    assert (report["imported"], report["updated"]) == (0, 1)


def test_refresh_now_is_alive_or_skipped(api, oauth):
    account = make_oauth_account(oauth, CAROL)
    disabled = make_account(status="disabled", refresh_token="rt-x")

    alive = data_of(api.post_json("/api/admin/accounts/refresh", {"id": account.pk}))
    skipped = data_of(api.post_json("/api/admin/accounts/refresh", {"id": disabled.pk}))

    assert (alive["result"], alive["previousStatus"], alive["error"]) == ("alive", "active", None)
    assert alive["durationMs"] >= 0
    account.refresh_from_db()
    assert account.access_token == oauth.issued_access_tokens[-1]
    assert skipped["result"] == "skipped"
    assert error_of(api.post_json("/api/admin/accounts/refresh", {"id": "nope"}), 404, 40401)


@pytest.mark.slow
def test_a_refresh_refused_twice_is_dead_and_expires_the_account(api, oauth):
    account = make_oauth_account(oauth, CAROL)
    oauth.fail(account.refresh_token, "invalid_grant", "invalid_grant")

    result = data_of(api.post_json("/api/admin/accounts/refresh", {"id": account.pk}))

    assert result["result"] == "dead" and "expired" in result["error"]
    account.refresh_from_db()
    assert account.status == "expired"


@pytest.mark.django_db(transaction=True)
def test_health_check_refreshes_each_account(transactional_db, api, oauth):
    first = make_oauth_account(oauth, CAROL)
    second = make_oauth_account(oauth, Identity("org-dan", "user-dan"))
    make_account(status="banned", refresh_token="rt")

    result = data_of(
        api.post_json("/api/admin/accounts/health-check", {"stagger_ms": 0, "concurrency": 2})
    )

    assert result["summary"] == {"total": 3, "alive": 2, "dead": 0, "skipped": 1}
    assert {row["id"] for row in result["results"] if row["result"] == "alive"} == {
        first.pk,
        second.pk,
    }
    assert (
        error_of(api.post_json("/api/admin/accounts/health-check", {"stagger_ms": 100}), 400, 40001)
        == "stagger_ms: must be 0 or 500–30000"
    )


@pytest.mark.django_db(transaction=True)
def test_quota_query_reads_usage_now_and_applies_it(transactional_db, api, upstream):
    account = make_account(access_token="tok-quota", chatgpt_account_id="org-q")
    reset = int((timezone.now() + timedelta(hours=1)).timestamp())
    upstream.usage["tok-quota"] = {
        "plan_type": "pro",
        "rate_limit": {
            "allowed": True,
            "limit_reached": False,
            "primary_window": {
                "used_percent": 42,
                "limit_window_seconds": 18000,
                "reset_at": reset,
            },
        },
    }

    data = data_of(api.get(f"/api/admin/accounts/quota?id={account.pk}"))

    assert data["planType"] == "pro"
    assert data["raw"]["rate_limit"]["primary_window"]["used_percent"] == 42
    assert data["quotaData"]["windows"][0]["usedPercent"] == 42.0
    assert "tok-quota" not in str(data)
    account.refresh_from_db()
    assert account.plan_type == "pro" and account.quota_fetched_at is not None


@pytest.mark.django_db(transaction=True)
def test_quota_query_failure_is_502(transactional_db, api, upstream):
    account = make_account(access_token="tok-none")
    upstream.usage["tok-none"] = 500

    assert error_of(api.get(f"/api/admin/accounts/quota?id={account.pk}"), 502, 50201).startswith(
        "Quota query failed"
    )


def test_models_of_the_accounts_plan(api, upstream):
    previous = model_snapshots_get_all()
    account = make_account(access_token="tok-models", plan_type="edu")
    upstream.models_payload = {"models": [{"slug": "gpt-5.4", "display_name": "GPT-5.4"}]}
    try:
        data = data_of(api.get(f"/api/admin/accounts/models?id={account.pk}"))
        assert data == {"models": [{"id": "gpt-5.4", "label": "GPT-5.4"}]}
        assert model_snapshots_get_all()["edu"]["models"][0]["id"] == "gpt-5.4"
        upstream.models_payload = {"models": []}
        model_snapshots_replace(previous)
        assert (
            error_of(api.get(f"/api/admin/accounts/models?id={account.pk}"), 400, 40001)
            == "no available models returned"
        )
    finally:
        model_snapshots_replace(previous)


def test_adding_the_refresh_token_of_an_account_being_refreshed_is_a_409(api, oauth, caplog):
    access, refresh = oauth.issue(CAROL, expires_in=-60)
    carol = make_account(
        chatgpt_account_id="org-carol",
        chatgpt_user_id="user-carol",
        access_token=access,
        refresh_token=refresh,
    )
    owner = '"runtime-token-refresh:worker"'
    assert refresh_lease_acquire(account_id=carol.pk, owner=owner, ttl_ms=60_000)
    try:
        response = api.post_json("/api/admin/accounts", {"refreshToken": refresh})
    finally:
        refresh_lease_release(account_id=carol.pk, owner=owner)

    message = error_of(response, 409, 40901)
    assert carol.pk in message and refresh not in message
    assert oauth.token_calls() == [] and oauth.is_live(refresh)
    # The log names the account being added, never the token.
    assert "being refreshed" in caplog.text and refresh not in caplog.text

    added = data_of(api.post_json("/api/admin/accounts", {"refreshToken": refresh}))

    carol.refresh_from_db()
    assert added["id"] == carol.pk
    assert carol.refresh_token == oauth.issued_refresh_tokens[-1] and oauth.is_spent(refresh)


@pytest.mark.django_db(transaction=True)
def test_a_quota_query_of_a_hung_upstream_ends_at_its_deadline(
    transactional_db, api, upstream, settings
):
    import time

    settings.ADMIN_UPSTREAM_DEADLINE_SECONDS = 1
    account = make_account(access_token="tok-hung")
    upstream.usage["tok-hung"] = {"rate_limit": {}}
    upstream.usage_delay = 20
    started = time.monotonic()

    message = error_of(api.get(f"/api/admin/accounts/quota?id={account.pk}"), 502, 50201)

    assert time.monotonic() - started < 5
    assert message == "Quota query failed: no answer from the usage endpoint within 1 s"


# ----------------------------------------------------------------------------- OAuth onboarding

OAUTH_AUTHORIZE = "/api/admin/accounts/oauth/authorize"
OAUTH_EXCHANGE = "/api/admin/accounts/oauth/exchange"
DORA = Identity("org-dora", "user-dora", "plus", "dora@example.com")


def _oauth_login(api, oauth, identity=DORA) -> tuple[dict, str]:
    """Start a session over the API and "log in" at the fake: (started data, callback URL)."""
    oauth.authorize_identity = identity
    started = data_of(api.post_json(OAUTH_AUTHORIZE, {}))
    answer = requests.get(started["authUrl"], allow_redirects=False, timeout=10)
    assert answer.status_code == 302
    return started, answer.headers["Location"]


def test_oauth_authorize_then_exchange_imports_the_account(api, oauth):
    started, callback = _oauth_login(api, oauth)

    assert set(started) == {"sessionId", "authUrl", "expiresAt", "expiresAtDisplay"}
    assert started["authUrl"].startswith(f"{oauth.url}/oauth/authorize?")
    done = data_of(
        api.post_json(
            OAUTH_EXCHANGE,
            {"sessionId": started["sessionId"], "callbackUrl": callback, "label": "dora"},
        )
    )

    assert (done["sourceFormat"], done["imported"], done["updated"]) == ("oauth", 1, 0)
    account = Account.objects.get()
    assert account.chatgpt_account_id == DORA.account_id and account.email == DORA.email
    assert account.access_token == oauth.issued_access_tokens[-1]
    assert account.refresh_token == oauth.issued_refresh_tokens[-1]
    assert done["account"]["id"] == account.pk
    # The answer shows the account, never its tokens.
    assert account.access_token not in str(done) and account.refresh_token not in str(done)
    code = dict(parse_qsl(urlsplit(callback).query))["code"]
    assert [call["code"] for call in oauth.token_calls()] == [code]

    # Logging the same ChatGPT account in again updates it, no second row.
    started, callback = _oauth_login(api, oauth)
    again = data_of(
        api.post_json(OAUTH_EXCHANGE, {"sessionId": started["sessionId"], "callbackUrl": callback})
    )
    assert (again["imported"], again["updated"]) == (0, 1)
    assert Account.objects.count() == 1


def test_oauth_exchange_takes_the_code_and_state_instead_of_the_url(api, oauth):
    started, callback = _oauth_login(api, oauth)
    query = dict(parse_qsl(urlsplit(callback).query))

    done = api.post_json(
        OAUTH_EXCHANGE,
        {"sessionId": started["sessionId"], "code": query["code"], "state": query["state"]},
    )

    assert data_of(done)["imported"] == 1
    assert Account.objects.get().chatgpt_account_id == DORA.account_id


def test_oauth_exchange_refuses_a_forged_state_and_keeps_the_session(api, oauth):
    started, callback = _oauth_login(api, oauth)
    forged = callback.replace("state=", "state=0")

    message = error_of(
        api.post_json(OAUTH_EXCHANGE, {"sessionId": started["sessionId"], "callbackUrl": forged}),
        400,
        40001,
    )

    assert "state" in message
    assert oauth.token_calls() == [] and not Account.objects.exists()
    # A mistyped callback leaves the session usable.
    done = api.post_json(
        OAUTH_EXCHANGE, {"sessionId": started["sessionId"], "callbackUrl": callback}
    )
    assert data_of(done)["imported"] == 1


def test_oauth_exchange_refuses_a_used_or_unknown_session(api, oauth):
    started, callback = _oauth_login(api, oauth)
    body = {"sessionId": started["sessionId"], "callbackUrl": callback}
    assert data_of(api.post_json(OAUTH_EXCHANGE, body))["imported"] == 1

    reused = error_of(api.post_json(OAUTH_EXCHANGE, body), 400, 40001)
    unknown = error_of(
        api.post_json(OAUTH_EXCHANGE, {"sessionId": "nope", "code": "ac_x", "state": "s"}),
        400,
        40001,
    )

    assert "start again" in reused and "start again" in unknown
    assert len(oauth.token_calls()) == 1  # neither reached the OAuth server
    assert Account.objects.count() == 1


@pytest.mark.parametrize("upstream", ["refused code", "server error"])
def test_oauth_exchange_failing_upstream_is_a_502_without_secrets(api, oauth, upstream):
    started, callback = _oauth_login(api, oauth)
    session = oauth_session_get(session_id=started["sessionId"])
    query = dict(parse_qsl(urlsplit(callback).query))
    if upstream == "refused code":
        callback = callback.replace(query["code"], "ac_never_issued")
        query["code"] = "ac_never_issued"
    else:
        oauth.fail(query["code"], "status", status=503)

    response = api.post_json(
        OAUTH_EXCHANGE, {"sessionId": started["sessionId"], "callbackUrl": callback}
    )

    message = error_of(response, 502, 50201)
    assert "could not be exchanged" in message
    assert len(oauth.token_calls()) == 1 and not Account.objects.exists()
    body = response.content.decode()
    for secret in (query["code"], query["state"], session["codeVerifier"], started["sessionId"]):
        assert secret not in body
