"""Typed readers for environment variables.

Every setting of the project comes from the environment through these helpers. A value that is
present but malformed stops start-up with a message naming the variable, instead of silently
falling back to a default (a typo in production must not turn a feature off).
"""

from __future__ import annotations

import ipaddress
import os
import zoneinfo
from collections.abc import Mapping
from urllib.parse import quote, urlsplit, urlunsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
_FALSE_WORDS = frozenset({"0", "false", "no", "off"})


class InvalidEnvironmentValue(ImproperlyConfigured):
    """A variable is present but its value cannot be used."""


def _raw(name: str, environ: Mapping[str, str] | None) -> str | None:
    source = os.environ if environ is None else environ
    value = source.get(name)
    if value is None:
        return None
    value = value.strip()
    return value if value != "" else None


def env_str(name: str, default: str | None = None, *, environ: Mapping[str, str] | None = None):
    """Return the trimmed value of ``name``; an unset or empty variable gives ``default``."""
    value = _raw(name, environ)
    return default if value is None else value


def env_int(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Return ``name`` as an integer within [minimum, maximum].

    Raises InvalidEnvironmentValue naming the variable when the value is not a base-10 integer or is
    out of range.
    """
    value = _raw(name, environ)
    if value is None:
        return default
    try:
        number = int(value, 10)
    except ValueError:
        raise InvalidEnvironmentValue(f"{name} must be an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise InvalidEnvironmentValue(f"{name} must be >= {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise InvalidEnvironmentValue(f"{name} must be <= {maximum}, got {number}")
    return number


def env_bool(name: str, default: bool, *, environ: Mapping[str, str] | None = None) -> bool:
    """Return ``name`` as a boolean (1/0, true/false, yes/no, on/off, any case).

    Raises InvalidEnvironmentValue naming the variable for any other word.
    """
    value = _raw(name, environ)
    if value is None:
        return default
    word = value.lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise InvalidEnvironmentValue(
        f"{name} must be a boolean (true/false, 1/0, yes/no), got {value!r}"
    )


def env_list(
    name: str, default: list[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> list[str]:
    """Return ``name`` split on commas, items trimmed, empty items dropped."""
    value = _raw(name, environ)
    if value is None:
        return list(default or [])
    return [item.strip() for item in value.split(",") if item.strip()]


def env_choice(
    name: str, default: str, choices: tuple[str, ...], *, environ: Mapping[str, str] | None = None
) -> str:
    """Return ``name`` if it is one of ``choices`` (case-insensitive), else raise naming it."""
    value = _raw(name, environ)
    if value is None:
        return default
    lowered = value.lower()
    if lowered not in choices:
        raise InvalidEnvironmentValue(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return lowered


def env_time_zone(name: str, default: str, *, environ: Mapping[str, str] | None = None) -> str:
    """Return ``name`` if it is an IANA time zone this machine knows (``Asia/Shanghai``,
    ``UTC``, ``Europe/Berlin``…), else raise naming it."""
    value = _raw(name, environ)
    if value is None:
        return default
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise InvalidEnvironmentValue(
            f"{name} must be an IANA time zone such as Asia/Shanghai or UTC, got {value!r}"
        ) from None
    return value


def env_networks(
    name: str, *, environ: Mapping[str, str] | None = None
) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Return ``name`` as a comma-separated list of IP addresses or CIDR networks."""
    networks = []
    for item in env_list(name, environ=environ):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise InvalidEnvironmentValue(
                f"{name} must list IP addresses or CIDR networks, got {item!r}"
            ) from None
    return networks


def redis_url_with_password(url: str, password: str | None) -> str:
    """``url`` with ``password`` (percent-encoded) as its password; ``url`` itself without one.

    Raises InvalidEnvironmentValue when REDIS_URL carries a password already and REDIS_PASSWORD
    is set too (which one is meant cannot be guessed).
    """
    if password is None:
        return url
    parts = urlsplit(url)
    if parts.password is not None:
        raise InvalidEnvironmentValue(
            "REDIS_URL already holds a password: set REDIS_PASSWORD or the URL's password, not both"
        )
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{user}:{quote(password, safe='')}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
