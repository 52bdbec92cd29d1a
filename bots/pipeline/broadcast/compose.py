"""The announcement of a /broadcast (spec §7.1): parsing the command, the HTML, its length.

``/broadcast <title>`` on the first line, the body on the lines after it. Line breaks are
normalised (CRLF and CR become LF); the title is the first line without the command token,
trimmed; the body is everything after the first line break, trimmed (blank lines inside are
kept). The announcement is HTML (parse_mode HTML): a bold "📣 <title>", a blank line, the body, a
blank line and an italic "— <signature>", where the signature is the bot's live first name (or
"Hodor"). ``&``, ``<`` and ``>`` are escaped, so whatever Markdown or HTML an admin types shows
literally. The visible text may hold at most 4096 UTF-16 code units (Telegram's limit); a longer
one is refused, never truncated or split.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

# Telegram's limit on a message's visible text (after entity parsing), in UTF-16 code units.
MAX_VISIBLE_LENGTH = 4096
DEFAULT_SIGNATURE = "Hodor"


@dataclass(frozen=True)
class Draft:
    title: str
    body: str


@dataclass(frozen=True)
class Announcement:
    html: str  # what is sent (parse_mode HTML), frozen in broadcasts.message_html
    visible_text: str  # what the reader sees

    @property
    def visible_length(self) -> int:
        """UTF-16 code units, as Telegram counts them (an emoji outside the BMP counts 2)."""
        return utf16_length(self.visible_text)

    @property
    def too_long(self) -> bool:
        return self.visible_length > MAX_VISIBLE_LENGTH


def utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def parse_broadcast(text: str) -> Draft | None:
    """The title and body of a ``/broadcast`` message; None when either is empty (usage)."""
    normalised = text.replace("\r\n", "\n").replace("\r", "\n")
    first_line, _, rest = normalised.partition("\n")
    parts = first_line.strip().split(maxsplit=1)
    title = parts[1].strip() if len(parts) > 1 else ""
    body = rest.strip()
    if not title or not body:
        return None
    return Draft(title=title, body=body)


def signature_from(first_name: object) -> str:
    """The bot's first name from getMe, trimmed; "Hodor" when it has none."""
    name = first_name.strip() if isinstance(first_name, str) else ""
    return name or DEFAULT_SIGNATURE


def compose(draft: Draft, *, signature: str) -> Announcement:
    def escape(value: str) -> str:
        return html.escape(value, quote=False)

    return Announcement(
        html=(
            f"<b>📣 {escape(draft.title)}</b>\n\n{escape(draft.body)}\n\n"
            f"<i>— {escape(signature)}</i>"
        ),
        visible_text=f"📣 {draft.title}\n\n{draft.body}\n\n— {signature}",
    )
