"""The Codex Desktop appcast (spec §2.1, §2.2): the newest release's version and build.

``GET CODEX_APPCAST_URL`` (30 s timeout, at most 1 MiB), a Sparkle RSS feed parsed without
entity expansion (defusedxml). The first ``<item>`` is the newest release: its
``sparkle:shortVersionString`` is the app version, ``sparkle:version`` the build number (as
elements of the item or, in older feeds, attributes of its ``<enclosure>``), and the
enclosure's ``url`` the download. Raises ``AppcastError`` (safe to log) for any failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import requests
from defusedxml import ElementTree
from django.conf import settings

from proxy.clients.outgoing import outgoing_session

if TYPE_CHECKING:
    # The type of what defusedxml parses (its functions return the standard library's).
    from xml.etree.ElementTree import Element

TIMEOUT_SECONDS = 30
MAX_BYTES = 1024 * 1024
SPARKLE = "{http://www.andymatuschak.org/xml-namespaces/sparkle}"


class AppcastError(Exception):
    """The appcast could not be read or has no usable release."""


@dataclass(frozen=True)
class Release:
    version: str
    build: str
    url: str | None
    title: str | None
    published: str | None

    def manifest(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "build": self.build,
            "url": self.url,
            "title": self.title,
            "pubDate": self.published,
        }


def fetch_latest_release(session: requests.Session | None = None) -> Release:
    """The newest release the appcast announces."""
    http = session or outgoing_session(timeout=TIMEOUT_SECONDS, pool_connections=1, pool_maxsize=1)
    try:
        with http.get(
            settings.CODEX_APPCAST_URL, timeout=TIMEOUT_SECONDS, stream=True, allow_redirects=True
        ) as response:
            if response.status_code != 200:
                raise AppcastError(f"appcast answered {response.status_code}")
            body = bytearray()
            for chunk in response.iter_content(64 * 1024):
                body += chunk
                if len(body) > MAX_BYTES:
                    raise AppcastError("appcast larger than 1 MiB")
    except requests.RequestException as error:
        raise AppcastError(f"appcast unreachable ({type(error).__name__})") from None
    finally:
        if session is None:
            http.close()
    return parse_latest_release(bytes(body))


def _text(element: Element, name: str) -> str | None:
    found = element.find(name)
    if found is None or found.text is None:
        return None
    return found.text.strip() or None


def parse_latest_release(document: bytes) -> Release:
    try:
        root = ElementTree.fromstring(document)
    except Exception as error:  # ParseError and defusedxml's forbidden-construct errors
        raise AppcastError(f"appcast is not valid XML ({type(error).__name__})") from None
    item = root.find("./channel/item")
    if item is None:
        raise AppcastError("appcast has no <item>")
    enclosure = item.find("enclosure")
    attributes = enclosure.attrib if enclosure is not None else {}
    version = _text(item, f"{SPARKLE}shortVersionString") or attributes.get(
        f"{SPARKLE}shortVersionString"
    )
    build = _text(item, f"{SPARKLE}version") or attributes.get(f"{SPARKLE}version")
    if not version or not build:
        raise AppcastError("appcast item without version and build")
    return Release(
        version=version.strip(),
        build=build.strip(),
        url=attributes.get("url"),
        title=_text(item, "title"),
        published=_text(item, "pubDate"),
    )
