"""The bot's texts in both languages (BOT_LANGUAGE ``zh`` default, ``en``), through Django's i18n
with the committed catalogue ``bots/locale/en/LC_MESSAGES/django.po`` / ``django.mo``."""

from __future__ import annotations

import ast
import gettext
import inspect
import re
from pathlib import Path

import pytest
from django.utils import translation

from bots import texts
from bots.conf import bot_language, parse_bot_language
from bots.selectors import VERIFICATION_MODES
from bots.selfcheck import environment_problems
from tests.bots.conftest import ADMIN_SECRET

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CATALOGUE = PROJECT_ROOT / "bots" / "locale" / "en" / "LC_MESSAGES"
# Han ideographs, CJK punctuation and full-width forms: none may be left in an English text.
CHINESE = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")
PLACEHOLDER = re.compile(r"\{(\w*)\}")

# A value for every parameter name the text functions take.
ARGUMENTS = {
    "question": "3 + 4 = ?",
    "limit": 20,
    "name": "Ann (@ann)",
    "user_id": 42,
    "thread_id": 7,
    "minute": "2026-10-01 12:00",
    "note": "VIP",
    "names": ["TELEGRAM_BOT_TOKEN", "ADMIN_SECRET"],
    "method": "getMe",
    "position": 2,
    "first": "ADMIN_SECRET",
    "second": "TELEGRAM_BOT_TOKEN",
    "default": 20,
    "present": "TURNSTILE_SITE_KEY",
    "missing": "TURNSTILE_SECRET_KEY",
    "url": "https://elsewhere.example/hook",
    "detail": "getWebhookInfo HTTP 500: Internal Server Error",
    "message": "Connection refused",
    "seconds": 12,
    "count": 3,
    "done": 40,
    "total": 3000,
    "length": 4097,
    "sent": 480,
    "failed": 20,
    "remaining": 1500,
    "text": "see you tomorrow",
    "reason": "Forbidden: bot was blocked by the user",
}


def _text_functions() -> list:
    return [
        function
        for name, function in inspect.getmembers(texts, inspect.isfunction)
        if function.__module__ == texts.__name__ and not name.startswith("_")
    ]


def _renderings() -> list[tuple[str, str]]:
    """(function name, text) for every text the texts module can produce, in the bot's language;
    functions with a choice of texts are rendered with every choice."""
    rendered = []
    for function in _text_functions():
        name = function.__name__
        if name == "help_text":
            rendered.extend(
                (name, function(verification_enabled=enabled, mode=mode))
                for enabled in (True, False)
                for mode in VERIFICATION_MODES
            )
        elif name == "verification_mode_current":
            rendered.extend(
                (name, function(mode=mode, enabled=enabled))
                for enabled in (True, False)
                for mode in VERIFICATION_MODES
            )
        elif name == "mode_label":
            rendered.extend((name, function(mode)) for mode in VERIFICATION_MODES)
        elif name == "command_menu":
            rendered.extend((name, description) for _, description in function())
        else:
            parameters = inspect.signature(function).parameters
            rendered.append((name, function(**{key: ARGUMENTS[key] for key in parameters})))
    return rendered


def _source_messages() -> list[str]:
    """Every message id of bots/texts.py: the literal argument of each ``_(...)`` call."""
    tree = ast.parse((PROJECT_ROOT / "bots" / "texts.py").read_text())
    messages = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_":
            [argument] = node.args
            assert isinstance(argument, ast.Constant), "the texts must be literal strings"
            messages.append(argument.value)
    return messages


_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}


def _unquote(line: str) -> str:
    body = line[line.index('"') + 1 : line.rindex('"')]
    return re.sub(r"\\(.)", lambda match: _ESCAPES[match.group(1)], body)


def parse_po(text: str) -> tuple[dict[str, str], list[str]]:
    """The catalogue's entries (msgid → msgstr, header excluded) and their flag comments."""
    entries: dict[str, str] = {}
    flags: list[str] = []
    msgid = msgstr = None
    target = None
    for line in [*text.splitlines(), ""]:
        if line.startswith("#,"):
            flags.append(line)
        elif line.startswith("msgid "):
            msgid, target = _unquote(line), "msgid"
        elif line.startswith("msgstr "):
            msgstr, target = _unquote(line), "msgstr"
        elif line.startswith('"'):
            if target == "msgid":
                msgid += _unquote(line)
            else:
                msgstr += _unquote(line)
        elif not line.strip() and msgid is not None:
            if msgid:
                entries[msgid] = msgstr
            msgid = msgstr = target = None
    return entries, flags


@pytest.fixture
def english(settings):
    settings.BOT_LANGUAGE = "en"


# ------------------------------------------------------------------ the catalogue


def test_the_catalogue_holds_exactly_the_messages_of_the_texts_module():
    entries, flags = parse_po((CATALOGUE / "django.po").read_text())

    assert set(entries) == set(_source_messages())
    assert [msgid for msgid, msgstr in entries.items() if not msgstr] == []
    assert [flag for flag in flags if "fuzzy" in flag] == []


def test_every_translation_keeps_the_placeholders():
    entries, _ = parse_po((CATALOGUE / "django.po").read_text())

    for msgid, msgstr in entries.items():
        assert sorted(PLACEHOLDER.findall(msgstr)) == sorted(PLACEHOLDER.findall(msgid)), msgid
        assert msgstr.count("\n") == msgid.count("\n"), msgid


def test_the_compiled_catalogue_is_the_po_file():
    entries, _ = parse_po((CATALOGUE / "django.po").read_text())
    with (CATALOGUE / "django.mo").open("rb") as compiled:
        catalogue = gettext.GNUTranslations(compiled)

    assert {key: value for key, value in catalogue._catalog.items() if key} == entries


# ------------------------------------------------------------------ rendering


def test_the_renderings_reach_every_function_and_every_message(english, monkeypatch):
    """The other rendering tests judge ``_renderings()``: it must show every message. (The
    names half only says each function got a branch; the observable check is the next test.)"""
    looked_up = []
    original = translation.gettext
    monkeypatch.setattr(
        translation, "gettext", lambda message: looked_up.append(message) or original(message)
    )

    renderings = _renderings()
    names = {name for name, _ in renderings}

    assert names == {function.__name__ for function in _text_functions()}
    assert set(looked_up) == set(_source_messages())
    assert [name for name, text in renderings if not text.strip()] == []


def test_every_english_translation_shows_up_in_some_english_rendering(english):
    """Every msgstr of the catalogue, its placeholders filled in any way, is part of a text the
    bot says in English: no translation is dead, and no rendering skips one."""
    entries, _ = parse_po((CATALOGUE / "django.po").read_text())
    rendered = [text for _, text in _renderings()]

    def shown(translation_text: str) -> bool:
        fragments = [piece for piece in re.split(r"\{\w*\}", translation_text) if piece]
        return any(all(piece in text for piece in fragments) for text in rendered)

    assert [msgstr for msgstr in entries.values() if not shown(msgstr)] == []


def test_chinese_is_the_default_and_renders_every_message(settings):
    settings.BOT_LANGUAGE = None

    rendered = _renderings()

    assert [name for name, text in rendered if not CHINESE.search(text)] == []
    assert texts.ban_notice() == "你已被禁言，发送的消息不会送达客服。"


def test_english_renders_every_message_without_a_chinese_character(english):
    english_texts = _renderings()

    untranslated = [label for label, text in english_texts if CHINESE.search(text)]
    assert untranslated == []
    assert texts.ban_notice() == "You have been muted: your messages will not reach support."
    assert texts.config_missing(["A", "B"]) == "config missing: A, B"


def test_both_languages_differ_for_every_message(settings):
    settings.BOT_LANGUAGE = "zh"
    chinese = _renderings()
    settings.BOT_LANGUAGE = "en"
    english = _renderings()

    assert [label for label, _ in chinese] == [label for label, _ in english]
    assert [label for (label, zh), (_, en) in zip(chinese, english, strict=True) if zh == en] == []


def test_the_bot_language_does_not_follow_the_active_request_language(settings):
    settings.BOT_LANGUAGE = "zh"
    with translation.override("en"):
        assert texts.note_cleared() == "备注已清除。"
    settings.BOT_LANGUAGE = "en"
    with translation.override("zh-hans"):
        assert texts.note_cleared() == "Note cleared."
    assert translation.get_language() == "en-us"  # nothing left activated


# ------------------------------------------------------------------ BOT_LANGUAGE


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [(None, "zh"), ("zh", "zh"), ("en", "en"), ("EN", "en"), ("fr", None), ("zh-hans", None)],
)
def test_bot_language_parsing(raw, parsed):
    assert parse_bot_language(raw) == parsed


@pytest.mark.parametrize("raw", ["fr", " english ", "zh_CN"])
def test_an_unknown_bot_language_falls_back_to_chinese_and_selfcheck_names_it(settings, raw):
    settings.BOT_LANGUAGE = raw

    assert bot_language() == "zh"
    assert texts.note_cleared() == "备注已清除。"
    assert texts.check_bot_language_invalid() in environment_problems()


def test_a_valid_bot_language_is_no_selfcheck_item(settings):
    settings.BOT_LANGUAGE = " en "
    assert bot_language() == "en"
    assert not any("BOT_LANGUAGE" in problem for problem in environment_problems())


# ------------------------------------------------------------------ end to end, in English


def test_an_english_bot_speaks_english_to_users_and_admins(webhook, english, telegram, admin):
    user = telegram.user(7301, "Ivy")
    webhook.deliver_ok(telegram.private_message(user, text="hello"))
    webhook.deliver_ok(telegram.group_message(admin, thread_id=None, text="/help"))

    welcome, challenge = telegram.bot_messages(user.id)
    assert welcome.text == (
        "Hello, this is the hodor private support bot.\n"
        "Just send your message, no commands needed; support's replies will appear here.\n"
        "Project: https://github.com/huaiminyetnotsleep/hodor"
    )
    assert challenge.text.startswith("To confirm that you are human, answer this question:\n")
    [help_message] = [
        message
        for message in telegram.bot_messages(telegram.support_chat_id)
        if message.thread_id is None
    ]
    assert help_message.text.startswith("Admin commands (use them in the user's topic):\n")
    assert not CHINESE.search(help_message.text)


def test_an_english_bot_registers_an_english_menu(client, bot_settings, english, telegram, db):
    response = client.get(f"/telegram/setwebhook/{ADMIN_SECRET}", secure=True)

    assert response.status_code == 200
    [commands] = telegram.commands.values()
    assert commands[0] == {"command": "help", "description": "Show all commands"}
    assert not any(CHINESE.search(entry["description"]) for entry in commands)
