"""Secrets taken out of text that is kept or shown: an upstream's error body before it is
recorded in the ledger, and any such text again when a console page shows it (rows written
before the ledger masked them included).

What counts as a secret here: bearer credentials, JWTs (access and ID tokens), the project's
own key shapes (``sk_…`` client keys, ``admin-…`` admin API keys, ``sess_…`` session tokens,
``rt_…`` refresh tokens), the values of fields and cookies named like credentials, and any run
of 40 or more token characters (an opaque token of a shape not listed; a 32-hex request id or
a model name stays readable). Each is replaced by ``[masked]``: no prefix of it is kept.
"""

from __future__ import annotations

import re

MASK = "[masked]"

# Field and cookie names whose value is a credential (JSON keys, form fields, headers, cookies).
_SECRET_NAMES = (
    r"(?:access|refresh|id|session|auth|bearer|api|client)[_-]?(?:token|key|secret)"
    r"|authorization|cookie|set-cookie|password|passwd|secret|api[_-]?key|apikey|token"
    r"|cf_clearance|__cf_bm|_cfuvid|__Secure-next-auth\.session-token|oai-[a-z0-9-]+"
)
_NAMED_VALUE = re.compile(
    r"""(?P<name>["']?\b(?:"""
    + _SECRET_NAMES
    + r""")\b["']?\s*[:=]\s*)"""
    # The value: quoted, or up to a separator; a Bearer/Basic scheme is left to _BEARER.
    + r"""(?!(?:Bearer|Basic)\s)(?P<value>"(?:[^"\\]|\\.)*"|'[^']*'|[^\s,;&}\]]+)""",
    re.IGNORECASE,
)
_BEARER = re.compile(r"\b(?P<scheme>Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE)
_KNOWN_SHAPES = re.compile(
    r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]*)?"  # a JWT
    r"|\b(?:sk|rt|sess)[_-][A-Za-z0-9_-]{16,}"  # client keys, refresh and session tokens
    r"|\badmin-[0-9a-f]{32,}"  # the admin API key
)
# Dots are left out: a host name or a dotted model name is not a token (a JWT, which has dots,
# is matched above).
_LONG_RUN = re.compile(r"[A-Za-z0-9_\-+/=]{40,}")
# Token characters at the end of a text: what a cut through the middle of a token leaves.
_TRAILING_TOKEN = re.compile(r"[A-Za-z0-9_\-+/=.~]+$")


def _masked_value(match: re.Match[str]) -> str:
    value = match.group("value")
    quote = value[0] if value[:1] in ('"', "'") else ""
    return f"{match.group('name')}{quote}{MASK}{quote}"


def mask_secrets(text: str) -> str:
    """``text`` with every secret it carries replaced by ``[masked]``."""
    if not text:
        return text
    text = _BEARER.sub(lambda match: f"{match.group('scheme')} {MASK}", text)
    text = _NAMED_VALUE.sub(_masked_value, text)
    text = _KNOWN_SHAPES.sub(MASK, text)
    return _LONG_RUN.sub(MASK, text)


def masked_excerpt(text: str, *, limit: int) -> tuple[str, bool]:
    """The start of ``text``, secrets masked, at most ``limit`` characters; and whether
    anything was left out.

    Masking runs before the cut (a cut first could leave a token too short to be recognised);
    of a long text only the first ``4 × limit`` characters are read, their last partial token
    dropped, so the read's own cut cannot expose part of a secret either.
    """
    window = text[: 4 * limit]
    cut = len(window) < len(text)
    if cut:
        window = _TRAILING_TOKEN.sub("", window)
    masked = mask_secrets(window)
    if len(masked) > limit:
        return masked[:limit], True
    return masked, cut
