"""The Redis contract of seed 004 §4B against a real Redis: sessions, leases, affinity, models."""

from __future__ import annotations

import hashlib
import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings

from proxy.runtime_state.admin_sessions import (
    admin_session_create,
    admin_session_delete,
    admin_session_get,
)
from proxy.runtime_state.affinity import (
    affinity_forget,
    affinity_get,
    affinity_latest_for_conversation,
    affinity_purge_account,
    affinity_record,
)
from proxy.runtime_state.model_snapshots import model_snapshots_get_all, model_snapshots_replace
from proxy.runtime_state.refresh_leases import (
    refresh_lease_acquire,
    refresh_lease_release,
    refresh_lease_renew,
    refresh_leases_held,
)


def key(suffix: str) -> str:
    return f"{settings.REDIS_KEY_PREFIX}{suffix}"


@pytest.fixture
def unique():
    """A fresh id per test so tests never see each other's keys."""
    return f"{time.monotonic_ns()}"


# ----------------------------------------------------------------------------- admin sessions


def test_admin_session_is_stored_under_the_token_hash_with_a_ttl(redis_client, unique, settings):
    settings.ADMIN_SESSION_TTL_MINUTES = 30
    now = datetime.now(UTC)
    token, expires_at = admin_session_create(
        user_id=f"admin_{unique}", auth_hash="hash-of-the-password", now=now
    )

    token_key = key(f"admin:session:{hashlib.sha256(token.encode()).hexdigest()}")
    assert token.startswith("sess_") and len(token) == len("sess_") + 43
    assert json.loads(redis_client.get(token_key)) == {
        "userId": f"admin_{unique}",
        "createdAt": now.isoformat(),
        "lastSeenAt": now.isoformat(),
        "authHash": "hash-of-the-password",
    }
    assert 1790 <= redis_client.ttl(token_key) <= 1800
    assert expires_at == now + timedelta(minutes=30)
    assert not list(redis_client.scan_iter(match=f"*{token}*"))  # the token itself is nowhere
    assert admin_session_get(token, now=now).user_id == f"admin_{unique}"

    assert admin_session_delete(token) is True
    assert admin_session_get(token, now=now) is None
    assert admin_session_delete(token) is False


def test_unknown_session_token_is_not_a_session():
    assert admin_session_get("sess_forged", now=datetime.now(UTC)) is None


# ----------------------------------------------------------------------------- refresh leases


def test_lease_contention_between_two_owners(redis_client, unique):
    account = f"acct_{unique}"
    lease_key = key(f"lease:refresh:{account}")

    assert refresh_lease_acquire(account_id=account, owner="worker-a", ttl_ms=60_000) is True
    assert refresh_lease_acquire(account_id=account, owner="worker-b", ttl_ms=60_000) is False
    assert redis_client.get(lease_key) == b"worker-a"

    # Re-entrant: the holder may take it again (renewing the TTL), the other may not renew it.
    redis_client.pexpire(lease_key, 1_000)
    assert refresh_lease_acquire(account_id=account, owner="worker-a", ttl_ms=60_000) is True
    assert redis_client.pttl(lease_key) > 50_000
    assert refresh_lease_renew(account_id=account, owner="worker-b", ttl_ms=60_000) is False

    # Only the holder releases it.
    assert refresh_lease_release(account_id=account, owner="worker-b") is False
    assert redis_client.get(lease_key) == b"worker-a"
    assert refresh_lease_release(account_id=account, owner="worker-a") is True
    assert redis_client.exists(lease_key) == 0
    assert refresh_lease_acquire(account_id=account, owner="worker-b", ttl_ms=60_000) is True


def test_a_crashed_holders_lease_expires_by_itself(unique):
    account = f"acct_{unique}"
    assert refresh_lease_acquire(account_id=account, owner="crashed", ttl_ms=50) is True
    time.sleep(0.12)  # Redis' own clock expires it; nothing to move in our code
    assert refresh_lease_acquire(account_id=account, owner="next", ttl_ms=60_000) is True


def test_held_leases_are_read_in_one_batch(unique):
    held, free = f"acct_held_{unique}", f"acct_free_{unique}"
    refresh_lease_acquire(account_id=held, owner="x", ttl_ms=60_000)

    assert refresh_leases_held([held, free]) == {held}
    assert refresh_leases_held([]) == set()


# ----------------------------------------------------------------------------- affinity


def test_affinity_record_sets_expiry_and_both_indexes(redis_client, unique):
    created = datetime.now(UTC).replace(microsecond=0)
    affinity_record(
        response_id=f"resp_{unique}",
        account_id=f"acct_{unique}",
        conversation_id=f"conv_{unique}",
        created_at=created,
        fields={"variantHash": "abc123abc123", "turnState": "ts"},
        client_key_id=f"key_{unique}",
    )

    record = affinity_get(f"resp_{unique}")
    assert record == {
        "variantHash": "abc123abc123",
        "turnState": "ts",
        "accountId": f"acct_{unique}",
        "clientKeyId": f"key_{unique}",  # our extension (issue 34)
        "conversationId": f"conv_{unique}",
        "createdAt": created.isoformat(),
        "replay": None,  # always present (seed §4B.3), last
    }
    # EXAT createdAt + 4 h (EXPIRETIME needs Redis 7; the TTL tells the same on 6.2).
    remaining = redis_client.ttl(key(f"affinity:v2:resp:resp_{unique}"))
    assert abs((int(created.timestamp()) + 4 * 3600 - time.time()) - remaining) <= 2
    score = int(created.timestamp() * 1000)
    assert redis_client.zscore(key(f"affinity:v2:conv:conv_{unique}"), f"resp_{unique}") == score
    assert redis_client.zscore(key(f"affinity:v2:account:acct_{unique}"), f"resp_{unique}") == score
    assert 0 < redis_client.ttl(key(f"affinity:v2:conv:conv_{unique}")) <= 4 * 3600


def test_latest_for_conversation_skips_and_cleans_dangling_members(redis_client, unique):
    now = datetime.now(UTC)
    conversation = f"conv_{unique}"
    for index, variant in enumerate(["v1", "v2", "v1"]):
        affinity_record(
            response_id=f"resp_{unique}_{index}",
            account_id="acct_x",
            conversation_id=conversation,
            created_at=now - timedelta(minutes=10 - index),
            fields={"variantHash": variant},
        )
    # The newest record vanished (expired): its index member now dangles.
    redis_client.delete(key(f"affinity:v2:resp:resp_{unique}_2"))

    entry = affinity_latest_for_conversation(conversation, now=now, variant_hash="v1")

    assert entry.response_id == f"resp_{unique}_0"
    members = redis_client.zrange(key(f"affinity:v2:conv:{conversation}"), 0, -1)
    assert sorted(members) == [f"resp_{unique}_0".encode(), f"resp_{unique}_1".encode()]
    assert affinity_latest_for_conversation(conversation, now=now, max_age_seconds=60) is None


def test_affinity_writes_prune_index_members_older_than_the_ttl(redis_client, unique):
    now = datetime.now(UTC)
    conversation = f"conv_{unique}"
    affinity_record(
        response_id="old",
        account_id="acct_y",
        conversation_id=conversation,
        created_at=now - timedelta(hours=5),
    )
    affinity_record(
        response_id="new", account_id="acct_y", conversation_id=conversation, created_at=now
    )

    assert redis_client.zrange(key(f"affinity:v2:conv:{conversation}"), 0, -1) == [b"new"]
    assert affinity_get("old") is None  # EXAT already in the past


def test_forget_removes_the_record_and_its_index_members(redis_client, unique):
    affinity_record(
        response_id=f"resp_{unique}",
        account_id=f"acct_{unique}",
        conversation_id=f"conv_{unique}",
        created_at=datetime.now(UTC),
    )

    assert affinity_forget(f"resp_{unique}") is True
    assert affinity_get(f"resp_{unique}") is None
    assert redis_client.zcard(key(f"affinity:v2:conv:conv_{unique}")) == 0
    assert redis_client.zcard(key(f"affinity:v2:account:acct_{unique}")) == 0
    assert affinity_forget(f"resp_{unique}") is False


def test_purging_an_account_leaves_no_dangling_members(redis_client, unique):
    now = datetime.now(UTC)
    doomed, kept = f"acct_doomed_{unique}", f"acct_kept_{unique}"
    for index in range(30):
        affinity_record(
            response_id=f"resp_{unique}_{index}",
            account_id=doomed if index % 3 else kept,
            conversation_id=f"conv_{unique}_{index % 4}",
            created_at=now - timedelta(seconds=index),
        )

    assert affinity_purge_account(doomed) == 20

    assert redis_client.exists(key(f"affinity:v2:account:{doomed}")) == 0
    conversation_keys = [key(f"affinity:v2:conv:conv_{unique}_{index}") for index in range(4)]
    # The kept account's 10 records are still indexed (so the loop below checks something).
    assert sum(redis_client.zcard(conversation) for conversation in conversation_keys) == 10
    for conversation in conversation_keys:
        for member in redis_client.zrange(conversation, 0, -1):
            record = affinity_get(member.decode())
            assert record is not None and record["accountId"] == kept
    assert redis_client.zcard(key(f"affinity:v2:account:{kept}")) == 10
    assert affinity_purge_account(doomed) == 0


# ----------------------------------------------------------------------------- model snapshots


def test_model_snapshots_are_replaced_as_a_whole(redis_client):
    model_snapshots_replace(
        {
            "plus": {"models": ["gpt-5.4"], "fetchedAt": "2026-11-29T00:00:00Z"},
            "team": {"models": ["gpt-5.5"], "fetchedAt": "2026-11-29T00:00:00Z"},
        }
    )
    model_snapshots_replace({"plus": {"models": ["gpt-5.4", "gpt-5.5"], "fetchedAt": "later"}})

    assert model_snapshots_get_all() == {
        "plus": {"models": ["gpt-5.4", "gpt-5.5"], "fetchedAt": "later"}
    }
    assert redis_client.ttl(key("models:plan_snapshots")) == -1  # overwritten, never expiring
    model_snapshots_replace({})
    assert model_snapshots_get_all() == {}
