"""Secret comparison for the webhook header and the admin path segment."""

from __future__ import annotations

import hashlib
import hmac


def secret_matches(presented: str | None, expected: str | None) -> bool:
    """True when ``presented`` equals the configured ``expected`` (False when none is set).

    Constant time: the SHA-256 digests are compared, so neither content nor length leaks.
    """
    if not expected or presented is None:
        return False
    return hmac.compare_digest(
        hashlib.sha256(presented.encode()).digest(), hashlib.sha256(expected.encode()).digest()
    )
