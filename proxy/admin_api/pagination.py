"""List paging of the admin API (spec §6.1, seed 004 §2.8).

Numbered pages as 2.0.0 has them (``page`` ≥ 1, ``pageSize`` clamped to 1–200, default 50,
newest first), and a keyset ``cursor`` for deep pages: ``base64url(<time>|<id>)`` of the last
row of the previous page, compared as ``(time, id) < (…)`` so that PostgreSQL walks the
``(time desc, id desc)`` index instead of skipping ``OFFSET`` rows. Every page answers its
``nextCursor`` (null on the last page); a cursor page has no ``total`` (counting is what it
avoids).
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from proxy.admin_api.envelope import bad_request

DEFAULT_PAGE_SIZE = 50
LARGEST_PAGE_SIZE = 200
LONGEST_CURSOR = 512


@dataclass(frozen=True)
class Keyset:
    moment: datetime
    id: str


@dataclass(frozen=True)
class PageRequest:
    page: int
    page_size: int
    cursor: Keyset | None = None

    @property
    def offset(self) -> int:
        return 0 if self.cursor else (self.page - 1) * self.page_size


def _integer(raw: str | None, name: str, default: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise bad_request(f"{name} must be an integer") from None


def encode_cursor(moment: datetime, row_id: str) -> str:
    raw = f"{moment.isoformat()}|{row_id}".encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(cursor: str) -> Keyset:
    if len(cursor) > LONGEST_CURSOR:
        raise bad_request("cursor is not valid")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        moment_text, row_id = raw.split("|", 1)
        moment = datetime.fromisoformat(moment_text)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise bad_request("cursor is not valid") from None
    if moment.tzinfo is None or not row_id:
        raise bad_request("cursor is not valid")
    return Keyset(moment=moment, id=row_id)


def page_request(query: Any) -> PageRequest:
    """The paging of a list request; 40001 for values that are not numbers or a bad cursor."""
    page = max(1, _integer(query.get("page"), "page", 1))
    # Deep offsets are what the cursor is for; a page number this large is a mistake.
    page = min(page, 10_000_000)
    size = _integer(query.get("pageSize"), "pageSize", DEFAULT_PAGE_SIZE)
    size = min(LARGEST_PAGE_SIZE, max(1, size))
    cursor = query.get("cursor") or None
    return PageRequest(page=page, page_size=size, cursor=decode_cursor(cursor) if cursor else None)


def paginate(
    queryset: QuerySet,
    *,
    time_column: str,
    request: PageRequest,
    present: Callable[[list], list[dict]],
) -> dict:
    """One page of ``queryset`` newest first by ``(time_column, id)``: ``{items, page}``.

    ``present`` turns the page's rows into items (one call, so it can batch look-ups).
    """
    ordered = queryset.order_by(f"-{time_column}", "-id")
    total = None
    if request.cursor is None:
        total = ordered.count()
    else:
        table = queryset.model._meta.db_table
        ordered = ordered.extra(  # noqa: S610 - constant column names, parameters bound
            where=[f'("{table}"."{time_column}", "{table}"."id") < (%s, %s)'],
            params=[request.cursor.moment, request.cursor.id],
        )
    rows = list(ordered[request.offset : request.offset + request.page_size + 1])
    has_more = len(rows) > request.page_size
    rows = rows[: request.page_size]
    last = rows[-1] if rows else None
    next_cursor = (
        encode_cursor(getattr(last, time_column), last.id)
        if has_more and last is not None
        else None
    )
    page: dict[str, Any] = {
        "page": request.page if request.cursor is None else None,
        "pageSize": request.page_size,
        "total": total,
        "totalPages": math.ceil(total / request.page_size) if total is not None else None,
        "nextCursor": next_cursor,
        "hasMore": has_more,
    }
    return {"items": present(rows), "page": page}
