"""Telegram initData validation (spec §5.5): the official bot-token HMAC rule, the strict parser,
the age limits. The fixed vector's hash was computed independently with ``openssl dgst -mac
HMAC`` (secret = HMAC-SHA256 of the token under the key "WebAppData", kept binary)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import quote, quote_plus

import pytest

from bots.verification.init_data import parse_init_data, validate_init_data

TOKEN = "7342037359:AAHI25ES9xCOMPLEXTOKENfor-vectors_42"
AUTH_DATE = 1790000000
SIGNED_AT = datetime.fromtimestamp(AUTH_DATE, tz=UTC)
USER = (
    '{"id":279058397,"first_name":"Vlad ü","last_name":"","username":"vdkfrost",'
    '"language_code":"ru","allows_write_to_pm":true}'
)
SIGNATURE = "6fbdaab833d39f54518bd5c3eb3f511d035e68cb"
# openssl over "auth_date=…\nquery_id=…\nsignature=…\nuser=…" (sorted, hash left out).
VECTOR_HASH = "4fd5108a2eed195d9876739e0cb906b0c4d4f4a7b71837e3731eab7463a1ba6c"


def _raw(**fields: str) -> str:
    values = {
        "query_id": "AAHdF6IQAAAAAN0XohDhrOrc",
        # Form encoding as Telegram's clients may send it: a space as "+".
        "user": quote_plus(USER),
        "auth_date": str(AUTH_DATE),
        "signature": SIGNATURE,
        "hash": VECTOR_HASH,
    }
    values.update(fields)
    return "&".join(f"{key}={value}" for key, value in values.items() if value is not None)


def _valid(raw: str, *, at: datetime = SIGNED_AT, token: str = TOKEN):
    return validate_init_data(raw, bot_token=token, now=at)


def test_the_fixed_vector_is_valid_and_names_the_user():
    identity = _valid(_raw())

    assert identity is not None
    assert (identity.user_id, identity.auth_date) == (279058397, SIGNED_AT)


def test_percent_encoded_spaces_are_the_same_data():
    assert _valid(_raw(user=quote(USER, safe=""))) is not None


def test_the_wrong_bot_token_fails():
    assert _valid(_raw(), token="7342037359:AAHI25ES9xCOMPLEXTOKENfor-vectors_43") is None


@pytest.mark.parametrize(
    "fields",
    [
        {"user": quote_plus(USER.replace("279058397", "279058398"))},
        {"auth_date": str(AUTH_DATE + 1)},
        {"signature": None},  # signature is part of the check string: dropping it breaks it
        {"query_id": "AAHdF6IQAAAAAN0XohDhrOrd"},
        {"hash": VECTOR_HASH.upper()},
        {"hash": VECTOR_HASH[:-1]},
        {"hash": None},
        {"extra": "1"},
    ],
)
def test_any_change_to_the_signed_data_fails(fields):
    assert _valid(_raw(**fields)) is None


@pytest.mark.parametrize(
    ("offset", "valid"),
    [(300, True), (301, False), (0, True), (-30, True), (-31, False)],
)
def test_age_and_future_skew_boundaries(offset, valid):
    at = SIGNED_AT + timedelta(seconds=offset)

    assert (_valid(_raw(), at=at) is not None) is valid


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "a=1&&b=2",
        "a=1&b",
        "a=%zz",
        "a=%4",
        "a=1&a=2",
        "=1",
        "a=%ff%fe",  # not UTF-8
        "&".join(f"k{number}=v" for number in range(65)),
        "a=" + "x" * (8 * 1024),
    ],
    ids=[
        "empty",
        "empty part",
        "no equals",
        "bad escape",
        "short escape",
        "duplicate key",
        "empty key",
        "not utf-8",
        "65 fields",
        "over 8 KiB",
    ],
)
def test_the_parser_rejects_malformed_strings(raw):
    assert parse_init_data(raw) is None


def test_the_parser_keeps_64_fields_and_decodes_values():
    fields = parse_init_data("&".join(f"k{n}=v+{n}%21" for n in range(64)))

    assert len(fields) == 64
    assert fields["k7"] == "v 7!"


@pytest.mark.parametrize(
    "user",
    ['{"id":0}', '{"id":-5}', '{"id":"42"}', '{"id":true}', '{"id":9007199254740992}', "[1]", "x"],
)
def test_a_user_without_a_positive_safe_id_fails_even_when_signed(user):
    from tests.fakes.telegram_webapp import sign_init_data

    raw = sign_init_data(TOKEN, {"id": 1}, auth_date=AUTH_DATE)
    fields = dict(part.split("=", 1) for part in raw.split("&"))
    fields.pop("hash")
    # Re-sign with the odd user value, so that only the user check can refuse it.
    from bots.verification.init_data import init_data_hash

    decoded = parse_init_data("&".join(f"{k}={v}" for k, v in fields.items()))
    decoded["user"] = user
    encoded = "&".join(f"{k}={quote(v, safe='')}" for k, v in decoded.items())
    signed = f"{encoded}&hash={init_data_hash(decoded, bot_token=TOKEN)}"

    assert parse_init_data(signed) is not None
    assert _valid(signed) is None


def test_the_test_suites_signer_agrees_with_the_vector():
    """tests/fakes/telegram_webapp.sign_init_data (used by the API and browser tests) signs the
    way the independent vector was computed."""
    from tests.fakes.telegram_webapp import sign_init_data

    raw = sign_init_data(TOKEN, {"id": 279058397, "first_name": "Vlad ü"}, auth_date=AUTH_DATE)

    assert _valid(raw).user_id == 279058397
