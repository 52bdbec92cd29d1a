"""Account import (spec §6.3): the three formats, auto-detected or named, one upsert per entry,
and a report with exact counts; a body that is no export writes nothing."""

from __future__ import annotations

import pytest

from proxy.models import Account
from proxy.runtime_state.refresh_leases import refresh_lease_acquire, refresh_lease_release
from proxy.token_claims import token_claims
from tests.fakes.oauth import Identity, access_token_for
from tests.proxy.admin_api.conftest import data_of, error_of
from tests.proxy.factories import make_account

ALICE = Identity("org-alice", "user-alice", "plus", "alice@example.com")
BOB = Identity("org-bob", "user-bob", "pro", "bob@example.com")


@pytest.fixture
def tokens(oauth):
    """A valid token of Alice, a second one of hers, and Bob's expired token with a refresh
    token the fake OAuth server will exchange."""
    bob_expired, bob_refresh = oauth.issue(BOB, expires_in=-600)
    return {
        "alice": access_token_for(ALICE, expires_in=3600),
        "alice_again": access_token_for(ALICE, expires_in=7200),
        "bob_expired": bob_expired,
        "bob_refresh": bob_refresh,
    }


def cpr_export(tokens) -> dict:
    return {
        "sourceFormat": "cpr",
        "accounts": [
            {"id": "acct_alice", "token": tokens["alice"], "label": "Alice", "status": "active"},
            {"accessToken": tokens["bob_expired"], "refresh_token": tokens["bob_refresh"]},
            {"token": tokens["alice_again"], "label": "Alice again"},
            {"token": tokens["alice"], "password": "garbage"},
        ],
    }


def sub2api_export(tokens) -> dict:
    return {
        "exported_at": "2026-11-20T10:00:00Z",
        "proxies": [],
        "accounts": [
            {
                "name": "alice",
                "platform": "openai",
                "type": "oauth",
                "credentials": {"access_token": tokens["alice"], "email": "alice@example.com"},
            },
            {
                "name": "bob",
                "platform": "openai",
                "type": "oauth",
                "credentials": {
                    "access_token": tokens["bob_expired"],
                    "refresh_token": tokens["bob_refresh"],
                },
            },
            {
                "name": "alice-2",
                "platform": "openai",
                "type": "oauth",
                "credentials": {"access_token": tokens["alice_again"]},
            },
            {
                "name": "broken",
                "platform": "openai",
                "type": "oauth",
                "credentials": {"access_token": "not-a-jwt"},
            },
            {"name": "claude", "platform": "anthropic", "type": "oauth", "credentials": {}},
        ],
    }


def cliproxyapi_export(tokens) -> list:
    return [
        {"type": "codex", "access_token": tokens["alice"], "email": "alice@example.com"},
        {
            "type": "codex",
            "access_token": tokens["bob_expired"],
            "refresh_token": tokens["bob_refresh"],
        },
        {"type": "codex", "access_token": tokens["alice_again"], "disabled": False},
        {"type": "codex", "access_token": "not-a-jwt", "expired": "2026-01-01T00:00:00Z"},
        {"type": "claude", "access_token": "sk-ant-oat01"},
    ]


FORMATS = {
    "cpr": (cpr_export, {"imported": 2, "updated": 1, "skipped": 0, "invalid": 1}),
    "sub2api": (sub2api_export, {"imported": 2, "updated": 1, "skipped": 1, "invalid": 1}),
    "cliproxyapi": (
        cliproxyapi_export,
        {"imported": 2, "updated": 1, "skipped": 1, "invalid": 1},
    ),
}


@pytest.mark.parametrize("source_format", sorted(FORMATS))
def test_each_format_is_detected_and_imported_entry_by_entry(api, tokens, oauth, source_format):
    build, counts = FORMATS[source_format]

    report = data_of(api.post_json("/api/admin/accounts/import", build(tokens)))

    assert report["sourceFormat"] == source_format
    assert {name: report[name] for name in counts} == counts
    outcomes = [result["outcome"] for result in report["results"]]
    assert outcomes[:4] == ["imported", "imported", "updated", "invalid"]
    alice = Account.objects.get(chatgpt_account_id="org-alice")
    bob = Account.objects.get(chatgpt_account_id="org-bob")
    assert Account.objects.count() == 2
    # The duplicate identity gave Alice's account the later token, not a second account.
    assert alice.access_token == tokens["alice_again"]
    assert report["results"][2]["accountId"] == alice.pk
    # Bob's expired token was exchanged: a fresh pair from the OAuth server is stored.
    assert oauth.is_spent(tokens["bob_refresh"])
    assert bob.access_token == oauth.issued_access_tokens[-1]
    assert bob.refresh_token == oauth.issued_refresh_tokens[-1]
    assert bob.plan_type == "pro" and bob.status == "active"
    assert token_claims(bob.access_token).expires_at == bob.access_token_expires_at
    assert report["results"][3]["reason"]


def test_cpr_keeps_the_given_id_and_label(api, tokens):
    data_of(api.post_json("/api/admin/accounts/import", cpr_export(tokens)))

    alice = Account.objects.get(pk="acct_alice")
    # The later entry of the same identity gave its label; an entry without one keeps it.
    assert alice.label == "Alice again"
    assert alice.email == "alice@example.com" and alice.plan_type == "plus"


def test_an_identity_already_in_the_pool_is_updated_and_a_ban_is_kept(api, tokens):
    banned = make_account(
        chatgpt_account_id="org-alice", chatgpt_user_id="user-alice", status="banned"
    )

    report = data_of(
        api.post_json("/api/admin/accounts/import", [{"token": tokens["alice"], "label": "x"}])
    )

    assert (report["imported"], report["updated"]) == (0, 1)
    banned.refresh_from_db()
    assert banned.access_token == tokens["alice"]
    assert banned.status == "banned"


def test_an_expired_token_without_refresh_token_comes_in_expired(api):
    expired = access_token_for(ALICE, expires_in=-60)

    report = data_of(api.post_json("/api/admin/accounts/import", [{"token": expired}]))

    assert report["imported"] == 1
    assert Account.objects.get().status == "expired"


def test_a_disabled_cliproxyapi_file_comes_in_disabled(api, tokens):
    body = [{"type": "codex", "access_token": tokens["alice"], "disabled": True}]

    data_of(api.post_json("/api/admin/accounts/import", body))

    assert Account.objects.get().status == "disabled"


def test_a_refused_refresh_token_makes_the_entry_invalid(api, oauth, tokens):
    oauth.fail(tokens["bob_refresh"], "invalid_grant")

    report = data_of(
        api.post_json(
            "/api/admin/accounts/import",
            [{"token": tokens["bob_expired"], "refreshToken": tokens["bob_refresh"]}],
        )
    )

    assert report["invalid"] == 1 and report["imported"] == 0
    assert "refused the refresh token" in report["results"][0]["reason"]
    assert Account.objects.count() == 0


@pytest.mark.parametrize(
    "body",
    [
        {"hello": "world"},
        {"accounts": "nope"},
        {"accounts": []},
        "just a string",
        12,
    ],
)
def test_a_body_that_is_no_export_writes_nothing(api, body):
    response = api.post_json("/api/admin/accounts/import", body)

    assert error_of(response, 400, 40001)
    assert Account.objects.count() == 0


def test_malformed_json_is_40000(api):
    response = api.post("/api/admin/accounts/import", data="{nope", content_type="application/json")

    assert error_of(response, 400, 40000) == "Malformed JSON body"


def test_a_named_format_wins_over_detection(api, tokens):
    body = [{"type": "codex", "access_token": tokens["alice"]}]

    report = data_of(api.post_json("/api/admin/accounts/import?sourceFormat=cpr", body))

    # Read as CPR, "type" is not one of its fields: the entry is invalid.
    assert report["sourceFormat"] == "cpr" and report["invalid"] == 1
    assert error_of(api.post_json("/api/admin/accounts/import?sourceFormat=xml", body), 400, 40001)


def test_the_admin_envelope_of_an_export_is_accepted(api, tokens):
    exported = {"code": 200, "message": "OK", "data": cpr_export(tokens)}

    assert data_of(api.post_json("/api/admin/accounts/import", exported))["imported"] == 2


def test_import_answers_never_carry_tokens(api, tokens):
    response = api.post_json("/api/admin/accounts/import", cpr_export(tokens))

    text = response.content.decode()
    for token in tokens.values():
        assert token not in text


@pytest.mark.django_db(transaction=True)
def test_an_import_body_may_be_larger_than_other_admin_bodies(asgi_server, tokens, admin):
    import json

    import requests
    from django.utils import timezone

    from proxy.sessions import admin_session_login

    token, _ = admin_session_login(user=admin, now=timezone.now())
    cookies = {"cpr_admin_session": token}
    padding = [{"type": "claude", "access_token": "x" * 1000} for _ in range(2500)]
    body = json.dumps([{"type": "codex", "access_token": tokens["alice"]}, *padding])
    assert 2 * 1024 * 1024 < len(body) < 16 * 1024 * 1024

    imported = requests.post(
        f"{asgi_server.url}/api/admin/accounts/import",
        data=body,
        cookies=cookies,
        headers={"Content-Type": "application/json"},
        timeout=60,
    )
    refused = requests.post(
        f"{asgi_server.url}/api/admin/keys",
        data=body,
        cookies=cookies,
        headers={"Content-Type": "application/json"},
        timeout=60,
    )

    assert imported.status_code == 200, imported.text[:300]
    assert (imported.json()["data"]["imported"], imported.json()["data"]["skipped"]) == (1, 2500)
    assert refused.status_code == 413


@pytest.mark.parametrize(
    "flaw",
    [
        {"status": "frozen"},
        {"id": "not an id!"},
        {"email": "alice\x00@example.com"},
        {"label": "x" * 65},
    ],
    ids=["unknown status", "bad id", "NUL in e-mail", "label too long"],
)
def test_an_entry_refused_for_its_own_fields_never_spends_its_refresh_token(
    api, oauth, tokens, flaw
):
    entry = {"token": tokens["bob_expired"], "refreshToken": tokens["bob_refresh"], **flaw}

    report = data_of(
        api.post_json("/api/admin/accounts/import", {"sourceFormat": "cpr", "accounts": [entry]})
    )

    assert report["invalid"] == 1 and report["imported"] == 0, report
    assert oauth.token_calls() == []
    assert oauth.is_live(tokens["bob_refresh"])
    assert Account.objects.count() == 0


def test_a_refused_write_after_an_exchange_keeps_the_exchanged_tokens(api, oauth, tokens):
    # The entry names an account of the pool that belongs to another ChatGPT account: its own
    # write is refused, but its refresh token was spent, so the rotated pair must be kept.
    make_account(id="acct_taken", chatgpt_account_id="org-carol", chatgpt_user_id="user-carol")

    report = data_of(
        api.post_json(
            "/api/admin/accounts/import",
            {
                "sourceFormat": "cpr",
                "accounts": [
                    {
                        "id": "acct_taken",
                        "token": tokens["bob_expired"],
                        "refreshToken": tokens["bob_refresh"],
                    }
                ],
            },
        )
    )

    assert oauth.is_spent(tokens["bob_refresh"])
    bob = Account.objects.get(chatgpt_account_id="org-bob")
    assert bob.pk != "acct_taken"
    assert bob.refresh_token == oauth.issued_refresh_tokens[-1]
    assert oauth.is_live(bob.refresh_token)
    assert (report["imported"], report["invalid"]) == (1, 0)
    assert "acct_taken belongs to another ChatGPT account" in report["results"][0]["reason"]
    assert Account.objects.get(pk="acct_taken").chatgpt_account_id == "org-carol"


def test_an_export_of_an_account_is_exchanged_under_its_lease_and_stored_on_it(api, oauth, tokens):
    # The pool holds Bob with the refresh token an old export also carries.
    bob = make_account(
        chatgpt_account_id="org-bob",
        chatgpt_user_id="user-bob",
        access_token=tokens["bob_expired"],
        refresh_token=tokens["bob_refresh"],
        status="expired",
    )
    owner = '"runtime-token-refresh:elsewhere"'
    assert refresh_lease_acquire(account_id=bob.pk, owner=owner, ttl_ms=60_000)
    body = [{"token": tokens["bob_expired"], "refreshToken": tokens["bob_refresh"]}]
    try:
        busy = data_of(api.post_json("/api/admin/accounts/import", body))
    finally:
        refresh_lease_release(account_id=bob.pk, owner=owner)

    # A refresh of Bob holds his lease: the import does not spend the same token alongside it.
    assert busy["invalid"] == 1 and "being refreshed" in busy["results"][0]["reason"]
    assert oauth.token_calls() == []

    report = data_of(api.post_json("/api/admin/accounts/import", body))

    assert report["updated"] == 1
    bob.refresh_from_db()
    assert bob.refresh_token == oauth.issued_refresh_tokens[-1]
    assert oauth.is_live(bob.refresh_token) and bob.status == "active"
    assert len(oauth.token_calls()) == 1


def test_an_entry_naming_an_account_of_another_user_of_the_same_workspace_is_refused(api):
    # One ChatGPT team workspace, two users: the entry's id names the first user's account,
    # its token is the second user's.
    first = make_account(id="acct_team_1", chatgpt_account_id="org-team", chatgpt_user_id="user-1")
    before = first.access_token
    second_users = access_token_for(
        Identity("org-team", "user-2", "team", "two@example.com"), expires_in=3600
    )

    report = data_of(
        api.post_json(
            "/api/admin/accounts/import",
            {"sourceFormat": "cpr", "accounts": [{"id": "acct_team_1", "token": second_users}]},
        )
    )

    assert (report["invalid"], report["imported"], report["updated"]) == (1, 0, 0)
    assert "another ChatGPT account (or user)" in report["results"][0]["reason"]
    first.refresh_from_db()
    assert (first.access_token, first.chatgpt_user_id) == (before, "user-1")
    assert Account.objects.count() == 1


def test_duplicates_within_one_import_and_against_the_pool_are_counted_exactly(api):
    in_pool = make_account(chatgpt_account_id="org-p", chatgpt_user_id="user-p")
    pool_token = access_token_for(Identity("org-p", "user-p", "plus"), expires_in=3600)
    new = Identity("org-n", "user-n", "plus")
    same_workspace = Identity("org-p", "user-q", "team")
    entries = [
        {"token": pool_token},  # the pool's identity: updated
        {"token": access_token_for(new, expires_in=3600)},  # new: imported
        {"token": access_token_for(new, expires_in=7200)},  # the same again: updated
        {"token": access_token_for(same_workspace, expires_in=3600)},  # other user: imported
        {"token": "garbage"},  # invalid
        {},  # no token: skipped
    ]

    report = data_of(
        api.post_json("/api/admin/accounts/import", {"sourceFormat": "cpr", "accounts": entries})
    )

    assert [result["outcome"] for result in report["results"]] == [
        "updated",
        "imported",
        "updated",
        "imported",
        "invalid",
        "skipped",
    ]
    assert (report["imported"], report["updated"], report["skipped"], report["invalid"]) == (
        2,
        2,
        1,
        1,
    )
    assert report["results"][0]["accountId"] == in_pool.pk
    assert report["results"][1]["accountId"] == report["results"][2]["accountId"]
    assert Account.objects.count() == 3
