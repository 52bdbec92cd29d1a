"""Account-scoped identity (spec §2.5): stable HMAC pseudonyms per upstream account.

A 32-byte secret, created once in CPR_DATA_DIR/identity_hmac_secret (hex, mode 0600) and never
regenerated, keys every pseudonym: losing it would change every installation id at once and
break prompt-cache and affinity continuity (pitfall §11.5). The same client value gets a
different pseudonym on each account and for each client key, and the same one on the same
account for the same key every time; the installation id is the account's alone.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import hmac
import os
import secrets
import tempfile
import uuid
from pathlib import Path

from django.conf import settings

SECRET_FILE_NAME = "identity_hmac_secret"


@functools.cache
def _secret_for(directory: str) -> bytes:
    path = Path(directory) / SECRET_FILE_NAME
    try:
        return bytes.fromhex(path.read_text().strip())
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".identity-")
    try:
        with os.fdopen(descriptor, "w") as secret_file:
            secret_file.write(secrets.token_hex(32) + "\n")
        os.chmod(temporary, 0o600)
        # Atomic: of processes racing here exactly one wins; the others read its secret.
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    finally:
        os.unlink(temporary)
    return bytes.fromhex(path.read_text().strip())


def identity_secret() -> bytes:
    """The 32-byte secret of this installation (created on first use)."""
    return _secret_for(str(settings.CPR_DATA_DIR))


def _digest(domain: str, account_id: str, value: str) -> bytes:
    message = f"{domain}\0{account_id}\0{value}".encode()
    return hmac.new(identity_secret(), message, hashlib.sha256).digest()


def pseudonym(domain: str, account_id: str, value: str) -> str:
    """base64url (no padding) of HMAC-SHA256(secret, domain \\0 account \\0 value)."""
    return base64.urlsafe_b64encode(_digest(domain, account_id, value)).rstrip(b"=").decode()


def installation_id(account_id: str) -> str:
    """A UUIDv4-shaped id, stable per account: the first 16 bytes of the HMAC."""
    return str(uuid.UUID(bytes=_digest("installation-id", account_id, "")[:16], version=4))


def _account_and_key(account_id: str, client_key_id: str | None) -> str:
    # The spec's "account" part, widened to "account \0 client key" (a departure from §2.5):
    # two client keys sending the same value to one account must not send the same pseudonym,
    # or they would share the upstream's prompt cache and session (a side channel between
    # keys). No key (an admin's connection test) is the empty key.
    return f"{account_id}\0{client_key_id or ''}"


def scoped_id(domain: str, account_id: str, value: str, *, client_key_id: str | None) -> str:
    """``wi_`` pseudonyms of a client value on one account for one client key: base64url of
    HMAC(secret, ``domain \0 account \0 client key \0 value``). Domains: prompt-cache-key,
    session-id, thread-id, turn-id, window-id, parent-thread-id, user, safety-identifier."""
    return "wi_" + pseudonym(domain, _account_and_key(account_id, client_key_id), value)


def client_request_id(account_id: str, value: str, *, client_key_id: str | None) -> str:
    """``cr_`` + the pseudonym of the client's request id (or the proxy's request id), scoped
    like ``scoped_id``."""
    return "cr_" + pseudonym(
        "client-request-id", _account_and_key(account_id, client_key_id), value
    )
