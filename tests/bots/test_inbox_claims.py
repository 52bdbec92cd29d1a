"""The inbox's claims (issue 36; spec §6, §12): storing an update with its processed_updates
claim, leasing the next row a worker may work on, giving it back, finishing it — each one
conditional statement (or one transaction) comparing against the ``now`` it is given."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bots.conf import load_config
from bots.models import AlbumItem, InboxUpdate, ProcessedUpdate
from bots.services.inbox import (
    LEASE_RENEW_SECONDS,
    LEASE_SECONDS,
    Stored,
    StoreState,
    inbox_claim_next,
    inbox_finish,
    inbox_leased_by_store,
    inbox_release,
    inbox_renew,
    inbox_store,
)
from bots.services.inbox_lease import InboxLease, LeaseLost
from tests.bots.conftest import START

pytestmark = pytest.mark.django_db
BOT = 4242


def _store(
    update_id: int,
    *,
    user: int | None = 7,
    seconds: float = 0,
    album: str | None = None,
    token: str = "t",
) -> Stored:
    return inbox_store(
        bot_id=BOT,
        update_id=update_id,
        payload={"update_id": update_id},
        conversation_user_id=user,
        media_group_id=album,
        origin="https://example.org",
        now=START + timedelta(seconds=seconds),
        token=token,
    )


def _claim(*, seconds: float = 0, token: str = "w"):
    return inbox_claim_next(bot_id=BOT, now=START + timedelta(seconds=seconds), token=token)


def _leased(update_id: int, *, token: str = "t", attempts: int = 0):
    return inbox_leased_by_store(
        bot_id=BOT,
        update_id=update_id,
        payload={},
        conversation_user_id=7,
        origin=None,
        attempts=attempts,
        token=token,
    )


def _claim_row(update_id: int) -> tuple[str, int]:
    row = ProcessedUpdate.objects.get(bot_id=BOT, update_id=update_id)
    return row.status, row.attempts


# ------------------------------------------------------------------ storing


def test_the_first_delivery_stores_the_update_with_its_claim_and_holds_its_lease():
    assert _store(1) == Stored(StoreState.OWNED, attempts=0)

    assert _claim_row(1) == ("processing", 0)
    row = InboxUpdate.objects.get()
    assert (row.lease_token, row.lease_expires_at, row.not_before, row.conversation_user_id) == (
        "t",
        START + timedelta(seconds=LEASE_SECONDS),
        START,
        7,
    )
    assert row.payload == {"update_id": 1}


def test_a_stored_update_is_never_stored_or_claimed_twice_however_late_it_comes_again():
    _store(1)

    # Even past the 60 s after which a claim without a row would be taken over.
    assert _store(1, seconds=3600, token="other") == Stored(StoreState.WAITING)
    assert _claim_row(1) == ("processing", 0)
    assert InboxUpdate.objects.get().lease_token == "t"


def test_a_claim_written_before_the_inbox_existed_keeps_the_60_s_take_over():
    ProcessedUpdate.objects.create(bot_id=BOT, update_id=1, status="processing", created_at=START)

    assert _store(1, seconds=60) == Stored(StoreState.IN_FLIGHT)
    assert _store(1, seconds=60.5) == Stored(StoreState.OWNED, attempts=1)
    assert _claim_row(1) == ("processing", 1)
    assert InboxUpdate.objects.get().attempts == 1


@pytest.mark.parametrize("status", ["processed", "failed"])
def test_a_settled_update_is_a_duplicate_forever(status):
    _store(1)
    inbox_finish(leased=_leased(1), status=status)

    assert _store(1, seconds=3600) == Stored(StoreState.DUPLICATE)
    assert InboxUpdate.objects.count() == 0
    assert _claim_row(1) == (status, 0)


def test_updates_of_two_bots_are_independent():
    _store(1)
    assert inbox_store(
        bot_id=BOT + 1,
        update_id=1,
        payload={},
        conversation_user_id=7,
        media_group_id=None,
        origin=None,
        now=START,
        token="t",
    ) == Stored(StoreState.OWNED)


def test_an_update_queues_behind_its_conversations_waiting_ones_and_no_other():
    assert _store(1, user=7).state == StoreState.OWNED  # worked on by its webhook now
    assert _store(2, user=7).state == StoreState.QUEUED  # behind it
    assert _store(3, user=8).state == StoreState.OWNED  # another user: at once
    assert _store(4, user=None).state == StoreState.OWNED  # no conversation: at once

    assert InboxUpdate.objects.get(update_id=2).lease_token is None


def test_an_update_queues_behind_an_album_being_collected_but_its_own_items_do_not():
    AlbumItem.objects.create(
        bot_id=BOT,
        direction="in",
        media_group_id="g1",
        user_id=7,
        thread_id=100,
        source_msg_id=10,
        kind="photo",
        file_id="f",
    )

    assert _store(1, user=7, album="g1").state == StoreState.OWNED  # the album's next item
    inbox_finish(leased=_leased(1), status="processed")
    assert _store(2, user=7).state == StoreState.QUEUED  # a text after the album waits
    assert _store(3, user=7, album="g2").state == StoreState.QUEUED  # so does the next album


# ------------------------------------------------------------------ leasing


def test_a_worker_leases_the_oldest_due_row_first_of_its_conversation():
    _store(1, user=7)  # held by its webhook
    _store(2, user=7)  # queued behind
    _store(3, user=8, token="x")
    inbox_release(leased=_leased(3, token="x"), not_before=START, counted=False)

    # 1 is held, 2 is behind it: 3 is the one.
    assert _claim().update_id == 3
    assert _claim() is None  # 1 held, 2 behind it, 3 held now

    inbox_finish(leased=_leased(1), status="processed")
    assert _claim(token="v").update_id == 2


def test_a_row_given_back_is_due_only_from_its_not_before():
    _store(1)
    assert inbox_release(
        leased=_leased(1),
        not_before=START + timedelta(seconds=10),
        counted=True,
        settled=["counted"],
        error="sendMessage HTTP 502: Bad Gateway",
    )

    assert _claim(seconds=9.9) is None
    leased = _claim(seconds=10)
    assert (leased.attempts, leased.waits, leased.settled, leased.taken_over) == (
        1,
        0,
        frozenset({"counted"}),
        False,
    )
    assert _claim_row(1) == ("processing", 1)
    assert InboxUpdate.objects.get().last_error == "sendMessage HTTP 502: Bad Gateway"


def test_a_wait_is_not_counted_toward_poison():
    _store(1)
    inbox_release(leased=_leased(1), not_before=START, counted=False)

    leased = _claim()
    assert (leased.attempts, leased.waits) == (0, 1)
    assert _claim_row(1) == ("processing", 0)


def test_a_dead_holders_row_is_taken_over_when_its_lease_expires_and_that_attempt_counts():
    _store(1)  # its webhook died while working on it

    assert _claim(seconds=LEASE_SECONDS) is None  # not expired yet
    leased = _claim(seconds=LEASE_SECONDS + 1)

    assert (leased.update_id, leased.attempts, leased.taken_over) == (1, 1, True)
    assert _claim_row(1) == ("processing", 1)
    # The dead holder, were it alive after all, can neither renew, give back nor finish it.
    stale = _leased(1)
    at = START + timedelta(seconds=LEASE_SECONDS + 2)
    assert inbox_renew(leased=stale, now=at) is False
    assert inbox_release(leased=stale, not_before=at, counted=True) is False
    assert inbox_finish(leased=stale, status="processed").owned is False
    assert _claim_row(1) == ("processing", 1)


def test_a_renewed_lease_is_not_taken_over():
    _store(1)
    assert inbox_renew(leased=_leased(1), now=START + timedelta(seconds=50)) is True

    assert _claim(seconds=LEASE_SECONDS + 1) is None
    assert _claim(seconds=50 + LEASE_SECONDS + 1).update_id == 1


def test_finishing_tells_whether_the_conversation_has_rows_behind():
    _store(1, user=7)
    _store(2, user=7)
    _store(3, user=8, token="x")

    assert inbox_finish(leased=_leased(1), status="processed").more_in_conversation is True
    assert inbox_finish(leased=_leased(3, token="x"), status="processed").more_in_conversation is (
        False
    )
    assert _claim_row(1) == ("processed", 0)
    assert list(InboxUpdate.objects.values_list("update_id", flat=True)) == [2]


# ------------------------------------------------------------------ the holder's lease


def test_a_holder_taken_for_dead_makes_no_further_call(bot_settings, telegram):
    """The webhook's attempt stalled past its lease (taken for dead); a worker took the row
    over. When the stalled holder goes on, its next Bot API call is not made: the lease, kept
    before every call, is found another's."""
    _store(1, token="stalled")
    assert _claim(seconds=LEASE_SECONDS + 1, token="worker").update_id == 1
    elapsed = [0.0]
    lease = InboxLease(
        _leased(1, token="stalled"),
        clock=lambda: START + timedelta(seconds=LEASE_SECONDS + 2),
        monotonic=lambda: elapsed[0],
    )
    client = load_config().telegram_client(budget_seconds=5, guard=lease.keep)
    telegram.met(telegram.user(6601, "Una"))

    client.send_message(chat_id=6601, text="still mine")  # renewed less than 10 s ago: made
    elapsed[0] = LEASE_RENEW_SECONDS
    with pytest.raises(LeaseLost):
        client.send_message(chat_id=6601, text="not mine any more")

    assert [call.params["text"] for call in telegram.calls("sendMessage")] == ["still mine"]
    assert InboxUpdate.objects.get().lease_token == "worker"


def test_a_live_holder_keeps_its_lease_past_the_first_minute(bot_settings, telegram):
    _store(1)
    elapsed = [0.0]
    lease = InboxLease(
        _leased(1), clock=lambda: START + timedelta(seconds=50), monotonic=lambda: elapsed[0]
    )
    elapsed[0] = LEASE_RENEW_SECONDS  # 50 s into the attempt, 10 s after the last renewal

    lease.keep()

    assert _claim(seconds=LEASE_SECONDS + 1) is None  # not taken for dead
    assert InboxUpdate.objects.get().lease_expires_at == START + timedelta(
        seconds=50 + LEASE_SECONDS
    )


def test_a_long_drains_nudge_comes_when_its_rows_are_due_not_when_they_first_were():
    """A drain of tens of seconds gave a row back early (due in 1 s), took it again and gave it
    back late (due in 10 s). Its nudge used to come 1 s after the first giving-back — long
    past at the drain's end, so at once: the next drain found nothing due and the rows waited
    for the beat sweep (a CI run of the 25-user burst, which has no beat, left them there)."""
    from bots.pipeline.inbox_work import DueAgain

    due = DueAgain()
    due.given_back(700_000_001, due_in=1.0, at=0.0)
    due.given_back(700_000_002, due_in=1.0, at=0.5)
    due.settled(700_000_002)  # finished on its next attempt
    due.given_back(700_000_001, due_in=10.0, at=38.0)  # taken again, given back late

    assert due.countdown(at=39.0) == 9.0
    due.settled(700_000_001)
    assert due.countdown(at=39.0) is None
