"""People by name on the bot's screens (issue 38 item 6): the audit trail's console actor is
the log-in name — also for rows written when it recorded the admin row's id — and every list
that names a Telegram user shows them as their card does, linked to their page, the id beside
the name; a user whose row is gone keeps their id, marked."""

from __future__ import annotations

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse

from bots.models import AdminAuditEntry, BotUser, RelayedMessage, Topic
from proxy.services.admin_users import admin_user_create_default
from tests.bots.conftest import START

AUDIT = reverse("admin:bots_adminauditentry_changelist")
USERS = reverse("admin:bots_botuserlisting_changelist")
TOPICS = reverse("admin:bots_topiclisting_changelist")
LEDGER = reverse("admin:bots_relayedmessage_changelist")
ANN, BEN, GONE = 7801, 7802, 7803


@pytest.fixture
def admin_row(db):
    return admin_user_create_default(password="a long operator passphrase 8", now=START)


@pytest.fixture
def operator(client, admin_row):
    client.force_login(admin_row)
    return client


@pytest.fixture
def people(bot_row):
    """Ann (names and @username), Ben (only an @username), and a user whose row is gone; each
    with a topic and a message in the ledger."""
    bot_id = bot_row.bot_id
    BotUser.objects.create(
        bot_id=bot_id, user_id=ANN, first_name="Ann", last_name="Lee", username="ann_l"
    )
    BotUser.objects.create(bot_id=bot_id, user_id=BEN, username="ben_b")
    for user_id in (ANN, BEN, GONE):
        Topic.objects.create(
            bot_id=bot_id, user_id=user_id, thread_id=100 + user_id, created_at=START
        )
        RelayedMessage.objects.create(
            bot_id=bot_id,
            user_id=user_id,
            thread_id=100 + user_id,
            direction="in",
            created_at=START,
        )
    return bot_id


def _user_link(user_id: int, name: str) -> str:
    url = reverse("admin:bots_botuserlisting_change", args=[quote(user_id)])
    return f'<a href="{url}">{name}</a> <span class="quiet">{user_id}</span>'


GONE_USER = f'{GONE} <span class="quiet">(no profile)</span>'


def test_the_audit_trail_names_the_console_operator_and_the_user(
    operator, admin_row, people, settings
):
    # given: a console row as written before (the admin row's id), one written now by an
    # action, and a Telegram admin's
    AdminAuditEntry.objects.create(
        bot_id=people,
        surface="console",
        actor_name=admin_row.get_username(),
        action="ban",
        target_user_id=ANN,
        outcome="done",
    )
    operator.post(USERS, {"action": "mark_risk", "_selected_action": [str(BEN)]})
    AdminAuditEntry.objects.create(
        bot_id=people,
        surface="telegram",
        actor_id=4242,
        actor_name="@moderator",
        action="unban",
        target_user_id=GONE,
        outcome="done",
    )

    page = operator.get(AUDIT).content.decode()

    assert admin_row.get_username() not in page
    assert page.count('<td class="field-actor">admin</td>') == 2
    assert '<td class="field-actor">@moderator (4242)</td>' in page
    assert _user_link(ANN, "Ann Lee (@ann_l)") in page
    assert _user_link(BEN, "@ben_b") in page
    assert GONE_USER in page
    assert AdminAuditEntry.objects.filter(actor_name=settings.CPR_ADMIN_USERNAME).count() == 1


def test_users_topics_and_the_ledger_name_the_user(operator, people):
    users = operator.get(USERS).content.decode()
    topics = operator.get(TOPICS).content.decode()
    ledger = operator.get(LEDGER).content.decode()

    ann_page = reverse("admin:bots_botuserlisting_change", args=[quote(ANN)])
    assert f'<a href="{ann_page}">Ann Lee (@ann_l)</a>' in users
    assert '<td class="field-user_id">7802</td>' in users
    for page in (topics, ledger):
        assert _user_link(ANN, "Ann Lee (@ann_l)") in page
        assert _user_link(BEN, "@ben_b") in page
        assert GONE_USER in page
