"""The bot's HTTP endpoints under /telegram/ (spec §1.2–§1.5): statuses and exact bodies."""

from __future__ import annotations

import pytest
from django.db import connection

from bots import texts
from bots.models import Bot, Setting
from bots.version import app_version
from tests.bots.conftest import ADMIN_SECRET, START, WEBHOOK_SECRET

WEBHOOK_URL = "https://testserver/telegram/webhook"


def _no_secret_in(response, settings) -> bool:
    body = response.content.decode()
    secrets = (settings.TELEGRAM_BOT_TOKEN, settings.TELEGRAM_WEBHOOK_SECRET, settings.ADMIN_SECRET)
    return all(secret not in body for secret in secrets if secret)


# ------------------------------------------------------------------ health and routing


def test_health_is_byte_exact_and_touches_no_database(client):
    response = client.get("/telegram/health")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.content == f'{{"status":"ok","version":"{app_version()}"}}'.encode()
    assert app_version() == "0.1.0"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("post", "/telegram/health"),
        ("get", "/telegram/webhook"),
        ("put", "/telegram/webhook"),
        ("options", "/telegram/webhook"),
        ("get", "/telegram/nothing-here"),
        ("get", "/telegram/setwebhook"),
        ("get", "/telegram/setwebhook/"),
        ("get", f"/telegram/setwebhook/{ADMIN_SECRET}/extra"),
        ("post", f"/telegram/setwebhook/{ADMIN_SECRET}"),
        ("post", "/telegram/verify"),
        ("get", "/telegram/api/verify/turnstile"),
        ("get", "/telegram/api/verify"),
    ],
)
def test_anything_else_is_a_plain_404(client, bot_settings, telegram, method, path):
    response = getattr(client, method)(path)

    assert response.status_code == 404
    assert response.content == b"Not Found"
    assert telegram.calls() == []


# ------------------------------------------------------------------ setwebhook


@pytest.mark.django_db
@pytest.mark.parametrize("configured", [True, False])
def test_setwebhook_with_a_wrong_or_unconfigured_secret_is_401_and_does_nothing(
    client, bot_settings, telegram, configured
):
    if not configured:
        bot_settings.ADMIN_SECRET = None

    response = client.get("/telegram/setwebhook/guess", secure=True)

    assert response.status_code == 401
    assert response.json() == {"error": texts.invalid_admin_key()}
    assert response.json() == {"error": "无效的管理密钥"}
    assert telegram.calls() == []
    assert Bot.objects.count() == 0


@pytest.mark.django_db
def test_setwebhook_binds_the_webhook_records_the_bot_and_registers_the_menu(
    client, bot_settings, telegram, clock
):
    response = client.get(f"/telegram/setwebhook/{ADMIN_SECRET}", secure=True)

    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "bot": {"id": telegram.bot.id, "username": "hodor_test_bot", "display_name": "Hodor"},
        "webhook": {"url": WEBHOOK_URL},
        "commands": "registered",
    }
    assert telegram.methods() == ["setWebhook", "getMe", "setMyCommands"]
    assert telegram.webhook == {
        "url": WEBHOOK_URL,
        "secret_token": WEBHOOK_SECRET,
        "allowed_updates": ["message", "edited_message", "callback_query"],
    }
    bot = Bot.objects.get()
    assert (bot.bot_id, bot.username, bot.display_name, bot.created_at) == (
        telegram.bot.id,
        "hodor_test_bot",
        "Hodor",
        START,
    )
    menu = telegram.commands[f"chat:{telegram.support_chat_id}"]
    assert [entry["command"] for entry in menu] == [
        "help",
        "ban",
        "unban",
        "note",
        "unnote",
        "risk",
        "unrisk",
        "verifyon",
        "verifyoff",
        "verifymode",
        "verifymode_math",
        "verifymode_button",
        "verifymode_turnstile",
        "archive",
        "deluser",
        "purgemsg",
        "broadcast",
        "wipealldata",
    ]
    assert _no_secret_in(response, bot_settings)


@pytest.mark.django_db
def test_setwebhook_again_refreshes_names_and_keeps_created_at(
    client, bot_settings, telegram, clock
):
    Bot.objects.create(bot_id=telegram.bot.id, username="old", display_name="Old", created_at=START)
    telegram.bot.first_name = "Hodor 2"
    clock.advance(days=3)

    response = client.get(f"/telegram/setwebhook/{ADMIN_SECRET}", secure=True)

    assert response.status_code == 200
    assert list(Bot.objects.values_list("username", "display_name", "created_at")) == [
        ("hodor_test_bot", "Hodor 2", START)
    ]


@pytest.mark.django_db
def test_setwebhook_names_missing_configuration_without_values(client, bot_settings, telegram):
    bot_settings.TELEGRAM_BOT_TOKEN = None
    bot_settings.TELEGRAM_WEBHOOK_SECRET = None

    response = client.get(f"/telegram/setwebhook/{ADMIN_SECRET}", secure=True)

    assert response.status_code == 500
    assert response.json() == {"error": "配置缺失：TELEGRAM_BOT_TOKEN、TELEGRAM_WEBHOOK_SECRET"}
    assert telegram.calls() == []


@pytest.mark.django_db
def test_setwebhook_points_telegram_at_public_base_url_in_its_one_spelling(
    client, bot_settings, telegram
):
    # The operator opened the page through another name (plain http, inside the network).
    bot_settings.PUBLIC_BASE_URL = "HTTPS://Support.Example.com:443/"

    response = client.get(f"/telegram/setwebhook/{ADMIN_SECRET}")  # http://testserver

    assert response.status_code == 200
    assert response.json()["webhook"] == {"url": "https://support.example.com/telegram/webhook"}
    assert telegram.webhook["url"] == "https://support.example.com/telegram/webhook"


@pytest.mark.django_db
def test_setwebhook_relays_a_permanent_telegram_refusal_as_502(client, bot_settings, telegram):
    # Telegram only delivers to https: a plain-http origin is refused.
    response = client.get(f"/telegram/setwebhook/{ADMIN_SECRET}")

    assert response.status_code == 502
    assert response.json() == {
        "status": "error",
        "detail": "setWebhook HTTP 400: Bad Request: bad webhook: An HTTPS URL must be "
        "provided for webhook",
    }
    assert Bot.objects.count() == 0
    assert telegram.methods() == ["setWebhook"]


@pytest.mark.django_db
def test_setwebhook_marks_a_retryable_failure(client, bot_settings, telegram):
    telegram.fail("getMe", status=500)

    response = client.get(f"/telegram/setwebhook/{ADMIN_SECRET}", secure=True)

    assert response.status_code == 502
    assert response.json() == {
        "status": "error",
        "detail": "getMe HTTP 500: Internal Server Error",
        "retryable": True,
    }
    assert Bot.objects.count() == 0
    assert _no_secret_in(response, bot_settings)


@pytest.mark.django_db
def test_a_failed_menu_registration_does_not_fail_setwebhook(client, bot_settings, telegram):
    telegram.fail("setMyCommands", status=500)

    response = client.get(f"/telegram/setwebhook/{ADMIN_SECRET}", secure=True)

    assert response.status_code == 200
    assert response.json()["commands"] == "failed:setMyCommands HTTP 500: Internal Server Error"
    assert Bot.objects.count() == 1


@pytest.mark.django_db
def test_setwebhook_skips_the_menu_without_a_valid_support_chat(client, bot_settings, telegram):
    bot_settings.SUPPORT_CHAT_ID = "12345"

    response = client.get(f"/telegram/setwebhook/{ADMIN_SECRET}", secure=True)

    assert response.status_code == 200
    assert response.json()["commands"] == "skipped"
    assert telegram.methods() == ["setWebhook", "getMe"]


# ------------------------------------------------------------------ deletewebhook


@pytest.mark.django_db
def test_deletewebhook_unbinds_and_removes_the_menu_but_keeps_the_bot(
    client, bot_settings, telegram, bot_row
):
    client.get(f"/telegram/setwebhook/{ADMIN_SECRET}", secure=True)
    telegram.forget_calls()

    response = client.get(f"/telegram/deletewebhook/{ADMIN_SECRET}")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert telegram.methods() == ["deleteWebhook", "deleteMyCommands"]
    assert telegram.webhook == {"url": ""}
    assert telegram.commands == {}
    assert Bot.objects.count() == 1


@pytest.mark.django_db
def test_deletewebhook_checks_the_secret_and_the_token(client, bot_settings, telegram):
    assert client.get("/telegram/deletewebhook/nope").status_code == 401
    bot_settings.TELEGRAM_BOT_TOKEN = None
    response = client.get(f"/telegram/deletewebhook/{ADMIN_SECRET}")

    assert response.status_code == 500
    assert response.json() == {"error": "配置缺失：TELEGRAM_BOT_TOKEN"}
    assert telegram.calls() == []


@pytest.mark.django_db
def test_deletewebhook_failure_is_502(client, bot_settings, telegram):
    telegram.fail("deleteWebhook", status=429, retry_after=10)

    response = client.get(f"/telegram/deletewebhook/{ADMIN_SECRET}")

    assert response.status_code == 502
    assert response.json() == {
        "status": "error",
        "detail": "deleteWebhook HTTP 429: Too Many Requests: retry after 10",
        "retryable": True,
    }


# ------------------------------------------------------------------ selfcheck


@pytest.fixture
def bound(client, bot_settings, telegram):
    """A correctly configured deployment whose webhook points at us."""
    assert client.get(f"/telegram/setwebhook/{ADMIN_SECRET}", secure=True).status_code == 200
    telegram.forget_calls()
    return bot_settings


def _selfcheck(client):
    return client.get("/telegram/selfcheck", secure=True)


@pytest.mark.django_db
def test_selfcheck_ok_has_the_same_version_as_health(client, bound, telegram):
    response = _selfcheck(client)

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": app_version()}
    assert response.json()["version"] == client.get("/telegram/health").json()["version"]
    assert telegram.methods() == ["getWebhookInfo"]


@pytest.mark.django_db
def test_selfcheck_environment_section(client, bound):
    bound.ADMIN_SECRET = None
    bound.ADMIN_IDS = "111, abc, 222, 0"
    bound.TELEGRAM_WEBHOOK_SECRET = bound.TELEGRAM_BOT_TOKEN
    bound.MAX_ATTEMPTS = "lots"
    bound.VERIFY_TTL_HOURS = "-1"

    response = _selfcheck(client)

    assert response.status_code == 503
    assert response.json()["failed"] == [
        "缺少必填环境变量：ADMIN_SECRET",
        "ADMIN_IDS 第 2 项不是有效的用户 ID，已忽略",
        "ADMIN_IDS 第 4 项不是有效的用户 ID，已忽略",
        "TELEGRAM_BOT_TOKEN 与 TELEGRAM_WEBHOOK_SECRET 不能相同",
        "VERIFY_TTL_HOURS 的值无效，运行时按默认值 0 处理",
        "MAX_ATTEMPTS 的值无效，运行时按默认值 3 处理",
    ]
    assert _no_secret_in(response, bound)


@pytest.mark.django_db
def test_selfcheck_flags_an_invalid_support_chat_and_no_valid_admin(client, bound):
    bound.SUPPORT_CHAT_ID = "-42"
    bound.ADMIN_IDS = "x,y"

    failed = _selfcheck(client).json()["failed"]

    assert failed == [texts.check_support_chat_id_invalid(), texts.check_admin_ids_none_valid()]


@pytest.mark.django_db
def test_selfcheck_verification_section(client, bound):
    bound.TURNSTILE_SITE_KEY = "1x00000000000000000000AA"
    bound.PUBLIC_BASE_URL = "http://support.example.com"
    Setting.objects.create(key="verify_mode", value="turnstile")

    failed = _selfcheck(client).json()["failed"]

    assert failed == [
        "Turnstile 配置不完整：已设置 TURNSTILE_SITE_KEY，缺少 TURNSTILE_SECRET_KEY",
        texts.check_turnstile_mode_without_keys(),
        "TURNSTILE_SITE_KEY 是 Cloudflare 官方测试密钥，任何人都能通过验证",
        texts.check_public_base_url_invalid(),
    ]


@pytest.mark.django_db
def test_selfcheck_flags_turnstile_mode_without_an_https_origin(client, bound):
    """No PUBLIC_BASE_URL and the request arrived over plain http (a TLS proxy not listed in
    TRUSTED_PROXIES, say): the Mini App button would have no https URL."""
    bound.TURNSTILE_SITE_KEY = "0x4AAAAAAArealsitekey"
    bound.TURNSTILE_SECRET_KEY = "0x4AAAAAAArealsecretkey"
    Setting.objects.create(key="verify_mode", value="turnstile")

    over_http = client.get("/telegram/selfcheck").json()["failed"]
    over_https = _selfcheck(client)

    assert over_http[0] == texts.check_turnstile_no_https_origin()
    assert over_https.status_code == 200
    bound.PUBLIC_BASE_URL = "https://support.example.com"
    assert (
        texts.check_turnstile_no_https_origin()
        not in client.get("/telegram/selfcheck").json()["failed"]
    )


@pytest.mark.django_db
def test_selfcheck_flags_test_secret_keys_without_echoing_them(client, bound):
    bound.TURNSTILE_SITE_KEY = "0x4AAAAAAArealsitekey"
    bound.TURNSTILE_SECRET_KEY = "2x0000000000000000000000000000000AA"

    response = _selfcheck(client)

    assert response.json()["failed"] == [texts.check_turnstile_test_key("TURNSTILE_SECRET_KEY")]
    assert "2x0000000000000000000000000000000AA" not in response.content.decode()


@pytest.mark.django_db
def test_selfcheck_names_missing_tables(client, bound):
    with connection.cursor() as cursor:  # rolled back with the test's transaction
        cursor.execute("alter table broadcasts rename to broadcasts_elsewhere")
        cursor.execute("alter table settings rename to settings_elsewhere")

    failed = _selfcheck(client).json()["failed"]

    assert texts.check_settings_unreadable() in failed
    assert "缺少数据表：settings, broadcasts（请运行 migrate）" in failed


@pytest.mark.django_db
def test_selfcheck_webhook_not_bound_elsewhere_or_failing(client, bound, telegram):
    telegram.webhook = {"url": ""}
    assert _selfcheck(client).json()["failed"] == [texts.check_webhook_not_bound()]

    telegram.webhook = {"url": "https://old.example.com/webhook"}
    telegram.set_webhook_error("Connection timed out")
    assert _selfcheck(client).json()["failed"] == [
        "webhook 指向其他地址：https://old.example.com/webhook",
        "Telegram 最近一次投递失败：Connection timed out",
    ]

    telegram.fail("getWebhookInfo", status=502, mode="html")
    assert _selfcheck(client).json()["failed"] == [
        "getWebhookInfo 失败：getWebhookInfo HTTP 502: response is not JSON"
    ]


@pytest.mark.django_db
def test_selfcheck_behind_public_base_url_accepts_the_webhook_setwebhook_registered(
    client, bot_settings, telegram
):
    """Issue 36: setwebhook registers PUBLIC_BASE_URL's origin; the selfcheck compared the
    binding with the origin its own request came in at, so behind a proxy (the check opened as
    http://testserver here) a correct binding read as "points elsewhere"."""
    bot_settings.PUBLIC_BASE_URL = "https://support.example.com/"
    assert client.get(f"/telegram/setwebhook/{ADMIN_SECRET}").status_code == 200
    assert telegram.webhook["url"] == "https://support.example.com/telegram/webhook"

    assert client.get("/telegram/selfcheck").json() == {"status": "ok", "version": app_version()}

    # And a binding elsewhere is still named, whatever the request's origin.
    telegram.webhook = {"url": "http://testserver/telegram/webhook"}
    assert client.get("/telegram/selfcheck").json()["failed"] == [
        "webhook 指向其他地址：http://testserver/telegram/webhook"
    ]


@pytest.mark.django_db
def test_selfcheck_without_a_token_makes_no_telegram_call(client, bound, telegram):
    bound.TELEGRAM_BOT_TOKEN = None

    failed = _selfcheck(client).json()["failed"]

    assert failed == [
        "缺少必填环境变量：TELEGRAM_BOT_TOKEN",
        texts.check_webhook_cannot_check(),
    ]
    assert telegram.calls() == []


@pytest.mark.django_db
def test_the_admin_secret_never_reaches_the_request_log(client, bot_settings, telegram, caplog):
    telegram.fail("setWebhook", status=500)

    response = client.get(f"/telegram/setwebhook/{ADMIN_SECRET}", secure=True)

    assert response.status_code == 502
    messages = [record.getMessage() for record in caplog.records]
    assert "Bad Gateway: /telegram/setwebhook/<redacted>" in messages
    assert all(ADMIN_SECRET not in message for message in messages)
