"""Content extraction (spec §2.1): eight types in a fixed order, everything else unsupported."""

from __future__ import annotations

import pytest

from bots.pipeline.content import Content, extract_content


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"text": "hello"}, Content("text", text="hello")),
        ({"text": "", "sticker": {"file_id": "st"}}, Content("sticker", file_id="st")),
        (
            {"video": {"file_id": "v"}, "caption": "look"},
            Content("video", file_id="v", caption="look"),
        ),
        # Telegram sends an animation together with a document: the animation wins.
        (
            {"animation": {"file_id": "a"}, "document": {"file_id": "d"}},
            Content("animation", file_id="a"),
        ),
        ({"document": {"file_id": "d"}, "caption": ""}, Content("document", file_id="d")),
        ({"voice": {"file_id": "vo"}}, Content("voice", file_id="vo")),
        (
            {"audio": {"file_id": "au"}, "caption": "song"},
            Content("audio", file_id="au", caption="song"),
        ),
        ({"sticker": {"file_id": "st"}, "caption": "ignored"}, Content("sticker", file_id="st")),
    ],
)
def test_supported_types(message, expected):
    assert extract_content(message) == expected


def test_photo_takes_the_widest_size_and_the_later_one_on_ties():
    message = {
        "photo": [
            {"file_id": "small", "width": 90},
            {"file_id": "big-first", "width": 800},
            {"file_id": "big-second", "width": 800},
            {"file_id": "medium", "width": 320},
        ],
        "caption": "receipt",
    }

    assert extract_content(message) == Content("photo", file_id="big-second", caption="receipt")


def test_a_photo_whose_widest_size_is_unusable_counts_as_absent():
    message = {
        "photo": [{"file_id": "small", "width": 90}, {"file_id": "", "width": 800}],
        "document": {"file_id": "doc"},
    }

    assert extract_content(message) == Content("document", file_id="doc")


@pytest.mark.parametrize(
    "message",
    [
        {"text": ""},
        {"video_note": {"file_id": "vn"}},
        {"location": {"latitude": 1, "longitude": 2}},
        {"contact": {"phone_number": "1"}},
        {"poll": {"id": "p"}},
        {"dice": {"emoji": "🎲", "value": 3}},
        {"new_chat_members": []},
        {"document": {"file_id": 12}},
        {"voice": {}},
    ],
)
def test_unsupported_content(message):
    assert extract_content(message) is None
