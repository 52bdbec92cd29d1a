"""Reading the original's SQLite schema v3 (seed 004 §6): its value encodings and the report.

v3 kept timestamps as RFC 3339 text, booleans as 0/1 integers and JSON as text. The import
(``manage.py import_sqlite``) converts each value here, strictly: a value that is not what v3
wrote stops the whole import (one transaction, nothing written) with an ``ImportDataError``
naming the table, column and row — never quoting a value, which may be a token or a key. The
lenient conversions: a cookie's expiry, which the seed lets degrade to a session cookie, and
text PostgreSQL cannot store (invalid UTF-8, which the source connection reads as bytes, and
NUL), replaced by U+FFFD — both counted in the report.

Shared by the proxy's tables (``proxy.services.sqlite_import``) and the ledger's
(``telemetry.services.legacy_ledger_import``); it imports neither product.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

from django.db import connection

# Rows read from the source per fetch: bounded memory however large the source is.
FETCH_ROWS = 5000
REPLACEMENT_CHARACTER = "\ufffd"

_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})",
    re.ASCII,
)


class ImportDataError(Exception):
    """A source value v3 could not have written, or a row the v1 schema rejects."""


class ImportRefused(Exception):
    """The import must not start (target not empty or not migrated, source not v3)."""


@dataclass
class ImportReport:
    """What the import did, table by table: rows written, values normalised, rows dropped."""

    imported: Counter = field(default_factory=Counter)
    normalized: Counter = field(default_factory=Counter)
    dropped: Counter = field(default_factory=Counter)

    def lines(self) -> list[str]:
        lines = ["rows imported:"]
        lines += [f"  {table}: {count}" for table, count in self.imported.items()]
        lines.append("normalised:")
        lines += [f"  {rule}: {count}" for rule, count in sorted(self.normalized.items())]
        if not self.normalized:
            lines.append("  (nothing)")
        lines.append("dropped (seed 004 §6.3 loss list):")
        lines += [f"  {what}: {count}" for what, count in self.dropped.items()]
        return lines


class Progress(Protocol):
    def update(self, rows: int) -> None: ...

    def close(self) -> None: ...


# (description, total rows) -> a progress bar; the command passes tqdm's, tests none.
ProgressFactory = Callable[[str, int], Progress]


class _NoProgress:
    def update(self, rows: int) -> None:
        pass

    def close(self) -> None:
        pass


def no_progress(description: str, total: int) -> Progress:
    return _NoProgress()


@dataclass(frozen=True)
class SourceRow:
    """One row of a source table: its values by column name, and where it came from."""

    table: str
    values: dict[str, Any]

    @property
    def where(self) -> str:
        """The row by its id (an id, an account id or a bucket's start: never a secret), cut to
        64 characters."""
        key = self.values.get("id", self.values.get("account_id", self.values.get("bucket_start")))
        if isinstance(key, str) and len(key) > 64:
            key = key[:64] + "…"
        return f"{self.table} row {key!r}"

    def text(self, column: str) -> str:
        value = self.values[column]
        if not isinstance(value, str):
            # The value is not quoted: text columns hold tokens and keys.
            raise ImportDataError(f"{self.where}: {column} is {type(value).__name__}, not text")
        return value

    def optional_text(self, column: str) -> str | None:
        return None if self.values[column] is None else self.text(column)

    def integer(self, column: str) -> int:
        value = self.values[column]
        if type(value) is not int:
            raise ImportDataError(
                f"{self.where}: {column} is {type(value).__name__}, not an integer"
            )
        return value

    def optional_integer(self, column: str) -> int | None:
        return None if self.values[column] is None else self.integer(column)

    def boolean(self, column: str) -> bool:
        """v3's ``integer check (x in (0, 1))``."""
        value = self.values[column]
        if value not in (0, 1) or type(value) is not int:
            raise ImportDataError(f"{self.where}: {column} is {_kind(value)}, not 0 or 1")
        return value == 1

    def timestamp(self, column: str) -> datetime:
        try:
            return parse_timestamp(self.values[column])
        except ImportDataError as error:
            raise ImportDataError(f"{self.where}: {column} {error}") from None

    def optional_timestamp(self, column: str) -> datetime | None:
        return None if self.values[column] is None else self.timestamp(column)

    def json(self, column: str) -> Any:
        try:
            return parse_json(self.values[column])
        except ImportDataError as error:
            raise ImportDataError(f"{self.where}: {column} {error}") from None

    def optional_json(self, column: str) -> Any:
        return None if self.values[column] is None else self.json(column)


def parse_timestamp(value: Any) -> datetime:
    """An RFC 3339 timestamp with its offset (what v3 wrote), as an aware UTC datetime.

    Digits past microseconds are dropped (PostgreSQL keeps microseconds). Raises
    ImportDataError ("is …, not …") for anything else, e.g. a timestamp without an offset,
    whose instant is unknown."""
    if not isinstance(value, str) or _RFC3339.fullmatch(value) is None:
        raise ImportDataError(f"is {_kind(value)}, not an RFC 3339 timestamp")
    try:
        return datetime.fromisoformat(value.upper()).astimezone(UTC)
    except ValueError:
        raise ImportDataError(f"is {_kind(value)}, not a valid date and time") from None


def _kind(value: Any) -> str:
    """What a value is, for an error message, without quoting it."""
    if isinstance(value, str):
        return f"a text of {len(value)} characters"
    if value is None:
        return "null"
    return f"a value of type {type(value).__name__}"


def parse_cookie_expiry(value: str) -> datetime | None:
    """A cookie's expiry as v3 captured it: RFC 3339 or RFC 2822 (the Expires attribute's
    form, obsolete RFC 850 dashes included); None when it is neither (seed §6.2: the cookie
    becomes a session cookie)."""
    if _RFC3339.fullmatch(value):
        try:
            return datetime.fromisoformat(value.upper()).astimezone(UTC)
        except ValueError:
            return None
    try:
        moment = parsedate_to_datetime(value)
    except (ValueError, TypeError, IndexError):
        return None
    # RFC 2822's "-0000" (UTC, local offset unknown) comes back without a zone.
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# One decoder for every value (json.loads with options builds a new one per call).
_JSON = json.JSONDecoder(parse_constant=_reject_constant)


def parse_json(value: Any) -> Any:
    """JSON text → the value for a jsonb column. NaN/Infinity (which PostgreSQL's jsonb
    rejects) and anything unparseable raise ImportDataError ("is not …")."""
    if not isinstance(value, str):
        raise ImportDataError(f"is {type(value).__name__}, not JSON text")
    try:
        parsed = _JSON.decode(value)
    except ValueError as error:
        # The decoder's message gives a position, never the text.
        raise ImportDataError(f"is not valid JSON ({error})") from None
    except RecursionError:
        raise ImportDataError("is JSON nested too deep") from None
    if _holds_unstorable_text(parsed):
        # "\u0000" or a lone "\ud800" escape: jsonb refuses both.
        raise ImportDataError("is JSON holding a NUL character or a lone surrogate")
    return parsed


_UNSTORABLE_CHARACTERS = re.compile("[\x00\ud800-\udfff]")


def _holds_unstorable_text(value: Any) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if _UNSTORABLE_CHARACTERS.search(item) is not None:
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def source_rows(
    source, table: str, columns: Iterable[str], where: str = "", *, report: ImportReport
) -> Iterator[SourceRow]:
    """Every row of ``table`` in the source, read ``FETCH_ROWS`` at a time. The source's text
    arrives as bytes (``open_source`` sets ``text_factory``): each is decoded here, invalid
    UTF-8 and NUL replaced by U+FFFD and counted in ``report`` per table and column."""
    names = list(columns)
    cursor = source.execute(f"select {', '.join(names)} from {table} {where}")  # noqa: S608
    while batch := cursor.fetchmany(FETCH_ROWS):
        for values in batch:
            row = {}
            for name, value in zip(names, values, strict=True):
                if isinstance(value, bytes):
                    value = _stored_text(value, table, name, report)
                row[name] = value
            yield SourceRow(table, row)


def _stored_text(raw: bytes, table: str, column: str, report: ImportReport) -> str:
    try:
        text = raw.decode("utf-8")
        replaced = False
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "replace")
        replaced = True
    if "\x00" in text:
        text = text.replace("\x00", REPLACEMENT_CHARACTER)
        replaced = True
    if replaced:
        report.normalized[f"{table}.{column}: invalid UTF-8 or NUL replaced by U+FFFD"] += 1
    return text


def source_count(source, table: str, where: str = "") -> int:
    return source.execute(f"select count(*) from {table} {where}").fetchone()[0]  # noqa: S608


def copy_rows(table: str, columns: tuple[str, ...], rows: Iterable[tuple]) -> int:
    """COPY ``rows`` into ``table`` on Django's connection (inside the caller's transaction);
    returns how many were written. A row the schema rejects (a CHECK, a foreign key) raises
    ImportDataError with PostgreSQL's message, and the transaction must be rolled back."""
    from psycopg import errors as pg_errors

    count = 0
    with connection.cursor() as cursor:
        try:
            with cursor.cursor.copy(f"copy {table} ({', '.join(columns)}) from stdin") as copy:
                for row in rows:
                    copy.write_row(row)
                    count += 1
        except pg_errors.Error as error:
            # Only PostgreSQL's primary message and the row's position: the detail and the
            # context quote the row's values, which may be tokens or keys.
            detail = error.diag.message_primary or type(error).__name__
            line = re.search(r"\bline (\d+)", error.diag.context or "")
            position = f" (row {line.group(1)} of its COPY)" if line else ""
            raise ImportDataError(
                f"PostgreSQL rejected a row of {table}{position}: {detail}"
            ) from None
    return count
