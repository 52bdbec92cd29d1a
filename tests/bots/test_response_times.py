"""Response-time numbers from the ledger (issue #24): for a seeded ledger the figures equal
those worked out by hand, per day and per conversation; the console page shows them, users by
name, with charts whose bars and axes carry the figures (issue 38). Days are the console's time
zone's: the hand-worked figures below are for a console on UTC, and one test moves it."""

from __future__ import annotations

import re
import statistics
from datetime import UTC, date, datetime, timedelta

import pytest
from django.urls import reverse

from bots.models import BotUser, RelayedMessage, Topic
from bots.response_times import response_times
from proxy.services.admin_users import admin_user_create_default
from tests.bots.conftest import START

DAY_1 = datetime(2026, 10, 1, tzinfo=UTC)
DAY_2 = DAY_1 + timedelta(days=1)
ANN, BEN = 1001, 1002
PAGE = reverse("admin:bots_relayedmessage_response_times")


def _at(day: datetime, clock: str) -> datetime:
    hours, minutes = clock.split(":")
    return day + timedelta(hours=int(hours), minutes=int(minutes))


# (user, direction, when)
LEDGER = [
    (ANN, "in", _at(DAY_1, "10:00")),  # Ann's first wait starts
    (ANN, "in", _at(DAY_1, "10:05")),  # still the same wait
    (ANN, "out", _at(DAY_1, "10:20")),  # answered after 20 min
    (ANN, "in", _at(DAY_1, "11:00")),  # a second wait
    (ANN, "out", _at(DAY_1, "11:30")),  # answered after 30 min
    (BEN, "in", _at(DAY_1, "23:50")),  # Ben's wait starts on day 1 ...
    (BEN, "out", _at(DAY_2, "00:10")),  # ... and is answered on day 2, after 20 min
    (BEN, "out", _at(DAY_2, "00:15")),
    (ANN, "in", _at(DAY_2, "09:00")),  # Ann waits, unanswered
]


@pytest.fixture(autouse=True)
def console_on_utc(settings):
    settings.TIME_ZONE = "UTC"  # what CONSOLE_TIME_ZONE=UTC sets


@pytest.fixture
def ledger(bot_row):
    RelayedMessage.objects.bulk_create(
        RelayedMessage(
            bot_id=bot_row.bot_id,
            user_id=user_id,
            thread_id=500 + user_id,
            direction=direction,
            group_msg_id=index + 1,
            private_msg_id=index + 1,
            created_at=when,
        )
        for index, (user_id, direction, when) in enumerate(LEDGER)
    )
    # Another bot's rows never count.
    RelayedMessage.objects.create(
        bot_id=bot_row.bot_id + 1, user_id=ANN, thread_id=1, direction="in", created_at=DAY_1
    )
    Topic.objects.create(bot_id=bot_row.bot_id, user_id=ANN, thread_id=1501, created_at=DAY_1)
    BotUser.objects.create(  # Ben has no users row any more
        bot_id=bot_row.bot_id, user_id=ANN, first_name="Ann", last_name="Lee", username="ann"
    )
    Topic.objects.create(
        bot_id=bot_row.bot_id, user_id=BEN, thread_id=1502, status="closed", created_at=DAY_1
    )
    return bot_row.bot_id


def test_the_figures_per_day_are_the_hand_computed_ones(ledger):
    figures = response_times(bot_id=ledger, until=_at(DAY_2, "12:00"), days=2)

    first, second = figures.days[date(2026, 10, 1)], figures.days[date(2026, 10, 2)]
    assert list(figures.days) == [date(2026, 10, 1), date(2026, 10, 2)]
    assert (first.messages_in, first.messages_out, first.conversations) == (4, 2, {ANN, BEN})
    assert (first.waits, first.reply_seconds) == (3, [1200.0, 1800.0, 1200.0])
    assert (first.mean_reply_seconds, first.median_reply_seconds) == (1400.0, 1200.0)
    assert (second.messages_in, second.messages_out, second.conversations) == (1, 2, {ANN})
    assert (second.waits, second.answered, second.median_reply_seconds) == (1, 0, None)
    assert figures.open_conversations == 1
    assert figures.total.messages_in == 5 and figures.total.answered == 3


def test_the_figures_per_conversation_are_the_hand_computed_ones(ledger):
    figures = response_times(bot_id=ledger, until=_at(DAY_2, "12:00"), days=2)

    ann, ben = figures.conversations[ANN], figures.conversations[BEN]
    assert (ann.messages_in, ann.messages_out, ann.waits) == (4, 2, 3)
    assert (ann.reply_seconds, ann.waiting_since) == ([1200.0, 1800.0], _at(DAY_2, "09:00"))
    assert (ben.messages_in, ben.messages_out, ben.waits) == (1, 2, 1)
    assert (ben.reply_seconds, ben.waiting_since) == ([1200.0], None)


def test_only_the_periods_messages_count(ledger):
    figures = response_times(bot_id=ledger, until=_at(DAY_2, "12:00"), days=1)

    assert list(figures.days) == [date(2026, 10, 2)]
    # Ben's answers on day 2 follow no message of the period: no wait; Ann's 09:00 is one.
    assert figures.total.waits == 1
    assert figures.conversations[BEN].messages_out == 2


def test_the_days_are_the_console_time_zones(ledger, settings):
    settings.TIME_ZONE = "Asia/Shanghai"  # UTC+8: Ben's 23:50 UTC is 07:50 the next day

    figures = response_times(bot_id=ledger, until=_at(DAY_2, "12:00"), days=2)

    first, second = figures.days[date(2026, 10, 1)], figures.days[date(2026, 10, 2)]
    assert (first.messages_in, first.messages_out, first.conversations) == (3, 2, {ANN})
    assert (second.messages_in, second.messages_out, second.conversations) == (2, 2, {ANN, BEN})
    assert second.reply_seconds == [1200.0]  # Ben's wait, started on his day 2
    assert figures.since == datetime(2026, 9, 30, 16, tzinfo=UTC)


def test_the_console_page_shows_the_figures_and_a_chart(client, ledger, clock):
    clock.now = _at(DAY_2, "12:00")
    client.force_login(
        admin_user_create_default(password="a long operator passphrase 7", now=START)
    )

    response = client.get(PAGE, {"days": "7"})

    assert response.status_code == 200
    page = response.content.decode()
    assert "(days in UTC)" in page
    assert page.count('<rect class="bar"') == 4 * 7  # two charts of two series, a bar a day
    rows = response.context["rows"]
    assert [row["day"] for row in rows[:2]] == ["2026-10-02", "2026-10-01"]
    assert rows[1] | {} == {
        "day": "2026-10-01",
        "messages_in": 4,
        "messages_out": 2,
        "conversations": 2,
        "waits": 3,
        "answered": 3,
        "mean": "23.3",
        "median": "20.0",
    }
    assert [row["user_id"] for row in response.context["conversations"]] == [ANN, BEN]
    # Ann has a profile, Ben's row is gone: a name where there is one, the id where not.
    assert 'Ann Lee (@ann)</a> <span class="quiet">1001</span>' in page
    assert '1002 <span class="quiet">(no profile)</span>' in page
    assert "<td>1</td>" in page  # one open conversation
    assert client.get(reverse("admin:bots_relayedmessage_changelist")).status_code == 200
    assert PAGE in client.get(reverse("admin:bots_relayedmessage_changelist")).content.decode()


def test_the_page_needs_a_console_login(client, ledger):
    response = client.get(PAGE)

    assert response.status_code == 302
    assert "login" in response["Location"]


CAL = 1003
# Cal's conversation on two more days of the week, for a chart with bars of different heights.
CAL_LEDGER = [
    ("in", _at(DAY_1 - timedelta(days=3), "08:00")),
    ("out", _at(DAY_1 - timedelta(days=3), "08:10")),  # 10 min
    ("in", _at(DAY_1 - timedelta(days=3), "09:00")),
    ("out", _at(DAY_1 - timedelta(days=3), "09:20")),  # 20 min
    ("in", _at(DAY_1 - timedelta(days=3), "10:00")),
    ("out", _at(DAY_1 - timedelta(days=3), "11:00")),  # 60 min
    ("in", _at(DAY_1 - timedelta(days=1), "12:00")),
    ("out", _at(DAY_1 - timedelta(days=1), "12:40")),  # 40 min
]
# The times to first reply of the week ending on day 2, by the day each wait started, worked
# out by hand from LEDGER and CAL_LEDGER (minutes; a day without an answered wait has none).
WEEK_REPLY_MINUTES = {
    date(2026, 9, 26): [],
    date(2026, 9, 27): [],
    date(2026, 9, 28): [10, 20, 60],  # median 20 (its mean, 30, would draw another bar)
    date(2026, 9, 29): [],
    date(2026, 9, 30): [40],
    date(2026, 10, 1): [20, 30, 20],  # Ann's two, and Ben's that was answered after midnight
    date(2026, 10, 2): [],  # Ann's 09:00 is unanswered
}
_BAR = re.compile(
    r'<rect class="bar" x="(?P<x>[\d.]+)" y="(?P<y>[\d.]+)" width="[\d.]+" '
    r'height="(?P<height>[\d.]+)"\s+fill="[^"]+" data-series="(?P<series>[^"]+)" '
    r'data-label="(?P<label>[^"]+)"\s+data-value="(?P<value>[^"]*)"><title>(?P<title>[^<]*)</title>'
)
_TEXT = re.compile(r'<text class="(?P<kind>[\w-]+)"[^>]*>(?P<text>[^<]*)</text>')


def _chart(page: str, chart_id: str) -> str:
    start = page.index(f'<svg id="{chart_id}"')
    return page[start : page.index("</svg>", start)]


def test_the_chart_draws_each_days_median_and_mean_time_to_first_reply(client, ledger, clock):
    RelayedMessage.objects.bulk_create(
        RelayedMessage(
            bot_id=ledger, user_id=CAL, thread_id=1503, direction=direction, created_at=when
        )
        for direction, when in CAL_LEDGER
    )
    clock.now = _at(DAY_2, "12:00")
    client.force_login(
        admin_user_create_default(password="a long operator passphrase 7", now=START)
    )

    page = client.get(PAGE, {"days": "7"}).content.decode()

    chart = _chart(page, "response-chart")
    bars = [bar.groupdict() for bar in _BAR.finditer(chart)]
    texts = [(text["kind"], text["text"]) for text in _TEXT.finditer(chart)]
    medians = {
        day: statistics.median(minutes) if minutes else None
        for day, minutes in WEEK_REPLY_MINUTES.items()
    }
    means = {
        day: statistics.fmean(minutes) if minutes else None
        for day, minutes in WEEK_REPLY_MINUTES.items()
    }
    labels = [day.strftime("%m-%d") for day in WEEK_REPLY_MINUTES]
    # Every day is labelled on the x axis; the y axis counts minutes in round steps up to the
    # week's highest (40 min: Cal's one wait on 09-30); a legend names the two series.
    assert [text for kind, text in texts if kind == "x-label"] == labels
    assert [text for kind, text in texts if kind == "y-tick"] == ["0", "10", "20", "30", "40"]
    assert [text for kind, text in texts if kind == "legend"] == ["median", "mean"]
    assert ">min</text>" in chart
    # One median and one mean bar a day, oldest on the left, carrying the day's figure.
    for series, expected in (("median", medians), ("mean", means)):
        drawn = [bar for bar in bars if bar["series"] == series]
        assert [bar["label"] for bar in drawn] == labels
        assert [float(bar["value"]) if bar["value"] else None for bar in drawn] == [
            None if value is None else round(value, 3) for value in expected.values()
        ]
        # Heights against the axis' top (40 min = the plot's 202 px), standing on the baseline.
        assert [float(bar["height"]) for bar in drawn] == [
            0.0 if value is None else round(value / 40 * 202, 1) for value in expected.values()
        ]
        assert {round(float(bar["y"]) + float(bar["height"]), 1) for bar in drawn} == {216.0}
    median_titles = [bar["title"] for bar in bars if bar["series"] == "median"]
    assert median_titles[2] == "09-28 · median: 20 min"
    assert median_titles[0] == "09-26 · median: none"


def test_the_messages_chart_draws_the_messages_in_and_out_of_each_day(client, ledger, clock):
    clock.now = _at(DAY_2, "12:00")
    client.force_login(
        admin_user_create_default(password="a long operator passphrase 7", now=START)
    )

    page = client.get(PAGE, {"days": "7"}).content.decode()

    bars = [bar.groupdict() for bar in _BAR.finditer(_chart(page, "messages-chart"))]
    by_series = {
        series: [bar["value"] for bar in bars if bar["series"] == series]
        for series in ("in (users)", "out (admins)")
    }
    # LEDGER: day 1 has 4 in and 2 out, day 2 1 in and 2 out; the week's other days none.
    assert by_series == {
        "in (users)": ["0.0"] * 5 + ["4.0", "1.0"],
        "out (admins)": ["0.0"] * 5 + ["2.0", "2.0"],
    }
