"""Candidate order. Round robin over the eligible accounts (insertion order, ``added_at``)."""

from __future__ import annotations

import itertools

from proxy.dispatch.accounts import AccountView

_cursor = itertools.count()


def order_candidates(eligible: list[AccountView]) -> list[AccountView]:
    """The eligible accounts rotated left by a cursor that advances once per request."""
    if not eligible:
        return []
    shift = next(_cursor) % len(eligible)
    return eligible[shift:] + eligible[:shift]


def reset_rotation() -> None:
    """Start the rotation from the first account again (tests)."""
    global _cursor
    _cursor = itertools.count()
