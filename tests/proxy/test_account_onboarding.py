"""Adding accounts as an operator does it (spec §6.3): from tokens alone (the JWT claims fill
the identity), a refresh-token-only add, re-adding an identity, OAuth authorize → exchange
end to end against the fake OAuth server, the management commands and the admin's token
actions."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.conf import settings
from django.contrib.admin.utils import quote
from django.utils import timezone

from proxy.clients.oauth import code_challenge
from proxy.models import Account, AccountUsage
from proxy.runtime_state.refresh_leases import refresh_lease_acquire, refresh_lease_release
from proxy.services.account_tokens import (
    AccountTokensRejected,
    TokenExchangeFailed,
    account_tokens_resolve,
    account_upsert_from_tokens,
)
from proxy.services.admin_users import admin_user_create_default
from proxy.services.oauth_onboarding import (
    OAuthCallbackInvalid,
    OAuthSessionInvalid,
    oauth_session_exchange,
    oauth_session_start,
)
from proxy.token_claims import token_expiry
from tests.conftest import PROJECT_ROOT, project_environment, run_database_url, run_project
from tests.fakes.oauth import Identity, access_token_for

pytestmark = pytest.mark.django_db

CAROL = Identity("org-carol", "user-carol", "team", "carol@example.com")


def _add(**tokens):
    now = timezone.now()
    resolved = account_tokens_resolve(now=now, **tokens)
    return account_upsert_from_tokens(resolved=resolved, now=now)


def test_an_access_token_alone_fills_the_identity(oauth):
    access, _ = oauth.issue(CAROL, expires_in=7200)

    account, created = _add(access_token=access, refresh_token=None)

    assert created
    assert (
        account.chatgpt_account_id,
        account.chatgpt_user_id,
        account.plan_type,
        account.email,
    ) == ("org-carol", "user-carol", "team", "carol@example.com")
    assert account.access_token_expires_at == token_expiry(access)
    assert (account.status, account.refresh_token) == ("active", None)
    assert oauth.token_calls() == []


def test_a_refresh_token_alone_is_exchanged_at_once(oauth):
    _, refresh = oauth.issue(CAROL)

    account, created = _add(access_token=None, refresh_token=refresh)

    assert created
    assert account.access_token == oauth.issued_access_tokens[-1]
    assert account.refresh_token == oauth.issued_refresh_tokens[-1] != refresh
    assert oauth.is_spent(refresh)
    assert account.chatgpt_account_id == "org-carol" and account.email == "carol@example.com"
    assert account.access_token_expires_at == token_expiry(account.access_token)


def test_an_expired_access_token_with_its_refresh_token_is_renewed(oauth):
    expired, refresh = oauth.issue(CAROL, expires_in=-60)

    account, _ = _add(access_token=expired, refresh_token=refresh)

    assert account.access_token != expired
    assert account.access_token_expires_at > timezone.now()


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (
            "opaque-token",
            "The access token is not a JWT (an opaque token says nothing about its account), "
            "and no refresh token was given to get a new one.",
        ),
        ("expired", "and no refresh token was given to get a new one."),
        ("anonymous", "The access token carries no ChatGPT account id"),
    ],
)
def test_unusable_tokens_are_refused_with_a_clear_message(oauth, token, message):
    if token == "expired":
        token, _ = oauth.issue(CAROL, expires_in=-60)
    elif token == "anonymous":
        token = access_token_for(Identity("", "user-x"), expires_in=3600)

    with pytest.raises(AccountTokensRejected) as refused:
        _add(access_token=token, refresh_token=None)

    assert message in str(refused.value)
    assert token not in str(refused.value)
    assert not Account.objects.exists()


def test_a_refresh_token_the_server_refuses_is_a_400_and_an_outage_a_502(oauth):
    with pytest.raises(AccountTokensRejected, match="refused the refresh token"):
        _add(access_token=None, refresh_token="rt_never_issued")
    _, refresh = oauth.issue(CAROL)
    oauth.fail(refresh, "status")
    with pytest.raises(TokenExchangeFailed) as failed:
        _add(access_token=None, refresh_token=refresh)
    assert failed.value.http_status == 502
    assert not Account.objects.exists()


def test_re_adding_an_identity_rotates_its_tokens(oauth):
    first, _ = oauth.issue(CAROL)
    account, _ = _add(access_token=first, refresh_token=None)
    AccountUsage.objects.create(account=account, request_count=41)
    Account.objects.filter(pk=account.pk).update(status="expired", label="kept")
    second, refresh = oauth.issue(CAROL)

    again, created = _add(access_token=second, refresh_token=refresh)

    assert not created and again.pk == account.pk
    assert (again.access_token, again.refresh_token, again.status, again.label) == (
        second,
        refresh,
        "active",
        "kept",
    )
    assert AccountUsage.objects.get(account=account).request_count == 41
    assert Account.objects.count() == 1


def test_re_adding_a_banned_identity_keeps_it_banned(oauth):
    first, _ = oauth.issue(CAROL)
    account, _ = _add(access_token=first, refresh_token=None)
    Account.objects.filter(pk=account.pk).update(status="banned")
    second, _ = oauth.issue(CAROL)

    again, _ = _add(access_token=second, refresh_token=None)

    assert (again.access_token, again.status) == (second, "banned")


# ----------------------------------------------------------------------------- OAuth


def _log_in(auth_url: str) -> str:
    """What the operator's browser does: open the authorize URL, log in, get redirected."""
    answer = requests.get(auth_url, allow_redirects=False, timeout=10)
    assert answer.status_code == 302
    return answer.headers["Location"]


def test_oauth_authorize_then_exchange_adds_the_account(oauth, redis_client):
    oauth.authorize_identity = CAROL
    session = oauth_session_start(now=timezone.now())

    query = parse_qs(urlsplit(session.auth_url).query)
    assert session.auth_url.startswith(f"{oauth.url}/oauth/authorize?")
    assert {name: values[0] for name, values in query.items() if name != "code_challenge"} == {
        "response_type": "code",
        "client_id": "app_EMoamEEZ73f0CkXaXp7hrann",
        "redirect_uri": "http://localhost:1455/auth/callback",
        "scope": "openid profile email offline_access",
        "state": query["state"][0],
        "code_challenge_method": "S256",
        "id_token_add_organizations": "true",
        "codex_cli_simplified_flow": "true",
    }
    assert len(query["state"][0]) == 64
    keys = list(redis_client.scan_iter(f"{settings.REDIS_KEY_PREFIX}oauth:session:*"))
    assert len(keys) == 1 and session.session_id.encode() not in keys[0]
    assert 1790 <= redis_client.ttl(keys[0]) <= 1800

    callback = _log_in(session.auth_url)
    account, created = oauth_session_exchange(
        session_id=session.session_id, callback_url=callback, now=timezone.now()
    )

    assert created
    assert (account.chatgpt_account_id, account.email, account.plan_type) == (
        "org-carol",
        "carol@example.com",
        "team",
    )
    assert account.refresh_token == oauth.issued_refresh_tokens[-1]
    [call] = oauth.token_calls()
    assert call["grant_type"] == "authorization_code"
    assert call["redirect_uri"] == "http://localhost:1455/auth/callback"
    assert code_challenge(call["code_verifier"]) == query["code_challenge"][0]
    # A session is used once.
    with pytest.raises(OAuthSessionInvalid):
        oauth_session_exchange(
            session_id=session.session_id, callback_url=callback, now=timezone.now()
        )


def test_a_callback_with_another_state_is_refused_and_the_session_kept(oauth):
    oauth.authorize_identity = CAROL
    session = oauth_session_start(now=timezone.now())
    callback = _log_in(session.auth_url)
    forged = callback.replace("state=", "state=0")

    with pytest.raises(OAuthCallbackInvalid, match="state does not match"):
        oauth_session_exchange(
            session_id=session.session_id, callback_url=forged, now=timezone.now()
        )
    assert oauth.token_calls() == []

    account, _ = oauth_session_exchange(
        session_id=session.session_id, callback_url=callback, now=timezone.now()
    )
    assert account.chatgpt_account_id == "org-carol"


def test_a_failed_code_exchange_is_a_502(oauth):
    session = oauth_session_start(now=timezone.now())
    state = parse_qs(urlsplit(session.auth_url).query)["state"][0]

    with pytest.raises(TokenExchangeFailed) as failed:
        oauth_session_exchange(
            session_id=session.session_id, code="ac_made_up", state=state, now=timezone.now()
        )

    assert failed.value.http_status == 502
    assert "ac_made_up" not in str(failed.value)
    assert not Account.objects.exists()


def test_unknown_sessions_and_denied_logins_are_400s(oauth):
    with pytest.raises(OAuthSessionInvalid):
        oauth_session_exchange(session_id="oauth_nope", code="x", state="y", now=timezone.now())
    session = oauth_session_start(now=timezone.now())
    with pytest.raises(OAuthCallbackInvalid, match="access_denied"):
        oauth_session_exchange(
            session_id=session.session_id,
            callback_url="http://localhost:1455/auth/callback?error=access_denied",
            now=timezone.now(),
        )


# ----------------------------------------------------------------------------- commands


@pytest.fixture
def command_environment(django_db_blocker, fake_oauth, tmp_path):
    return project_environment(
        run_database_url(django_db_blocker), tmp_path, OPENAI_AUTH_BASE=fake_oauth.url
    )


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_manage_account_add_reads_the_tokens_from_stdin(oauth, command_environment):
    _, refresh = oauth.issue(CAROL)

    added = subprocess.run(
        [sys.executable, "manage.py", "account_add", "--stdin", "--label", "cli"],
        cwd=PROJECT_ROOT,
        env=command_environment,
        input=f"\n{refresh}\n",
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert added.returncode == 0, added.stderr
    account = Account.objects.get()
    assert added.stdout.startswith(f"Added account {account.pk} (carol@example.com, team")
    assert account.label == "cli" and account.refresh_token == oauth.issued_refresh_tokens[-1]
    assert refresh not in added.stdout + added.stderr
    refused = run_project("manage.py", "account_add", "--stdin", environment=command_environment)
    assert refused.returncode == 1
    assert "Give an access token, a refresh token, or both. Nothing was added." in refused.stderr


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_manage_account_oauth_prints_the_url_and_takes_the_callback(oauth, command_environment):
    oauth.authorize_identity = CAROL
    process = subprocess.Popen(
        [sys.executable, "manage.py", "account_oauth"],
        cwd=PROJECT_ROOT,
        env=command_environment,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        auth_url = None
        for line in process.stdout:
            if line.startswith(f"{oauth.url}/oauth/authorize?"):
                auth_url = line.strip()
            if line.startswith("Then paste"):
                break
        assert auth_url is not None
        callback = _log_in(auth_url)
        output, errors = process.communicate(callback + "\n", timeout=60)
    finally:
        if process.poll() is None:
            process.kill()

    assert process.returncode == 0, errors
    account = Account.objects.get()
    assert f"Added account {account.pk} (carol@example.com, team" in output
    code = parse_qs(urlsplit(callback).query)["code"][0]
    assert code not in output + errors


# ----------------------------------------------------------------------------- the admin


@pytest.fixture
def operator(client):
    admin = admin_user_create_default(password="operator passphrase", now=timezone.now())
    client.force_login(admin)
    return client


def _change_page(account) -> str:
    return f"/admin/proxy/account/{quote(account.pk)}/change/"


def test_the_admin_rotates_an_accounts_tokens_on_its_page(operator, oauth):
    first, _ = oauth.issue(CAROL)
    account, _ = _add(access_token=first, refresh_token=None)
    second, refresh = oauth.issue(CAROL)

    response = operator.post(
        _change_page(account),
        {
            "label": "rotated",
            "status": "active",
            "initial-status": "active",
            "new_access_token": second,
            "new_refresh_token": refresh,
        },
    )

    assert response.status_code == 302
    row = Account.objects.get(pk=account.pk)
    assert (row.access_token, row.refresh_token, row.label) == (second, refresh, "rotated")


def test_the_admin_refuses_tokens_of_another_account(operator, oauth):
    first, _ = oauth.issue(CAROL)
    account, _ = _add(access_token=first, refresh_token=None)
    strangers, _ = oauth.issue(Identity("org-other", "user-other"))

    response = operator.post(
        _change_page(account),
        {
            "label": "",
            "status": "active",
            "initial-status": "active",
            "new_access_token": strangers,
        },
    )

    assert response.status_code == 200
    assert response.context["adminform"].form.non_field_errors() == [
        "These tokens belong to ChatGPT account org-other, not to this account's org-carol."
    ]
    assert Account.objects.get(pk=account.pk).access_token == first
    assert strangers not in response.content.decode()


def test_the_list_shows_refreshing_and_the_next_refresh(operator, oauth):
    access, refresh = oauth.issue(CAROL)
    account, _ = _add(access_token=access, refresh_token=refresh)
    due = timezone.localtime(account.next_refresh_at).strftime("%Y-%m-%d %H:%M")

    assert due in operator.get("/admin/proxy/account/").content.decode()
    refresh_lease_acquire(account_id=account.pk, owner='"worker"', ttl_ms=60_000)
    try:
        page = operator.get("/admin/proxy/account/").content.decode()
    finally:
        refresh_lease_release(account_id=account.pk, owner='"worker"')
    assert "refreshing" in page and due not in page


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_refresh_now_runs_in_the_worker(operator, oauth, celery_worker):
    access, refresh = oauth.issue(CAROL, expires_in=86400)
    oauth.expires_in = 86400
    account, _ = _add(access_token=access, refresh_token=refresh)
    no_refresh, _ = _add(
        access_token=access_token_for(Identity("org-x", "user-x"), expires_in=3600),
        refresh_token=None,
    )

    response = operator.post(
        "/admin/proxy/account/",
        {"action": "refresh_tokens_now", "_selected_action": [account.pk, no_refresh.pk]},
        follow=True,
    )

    messages = [str(message) for message in response.context["messages"]]
    assert messages == [
        "Token refresh queued for 1 account(s). 1 skipped (no refresh token, disabled or banned)."
    ]
    deadline = time.monotonic() + 30
    while Account.objects.get(pk=account.pk).access_token == access:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert Account.objects.get(pk=account.pk).next_refresh_at > timezone.now() + timedelta(hours=1)
    assert [call["refresh_token"] for call in oauth.token_calls()] == [refresh]
