"""Django's session engine over the hashed admin session store (``SESSION_ENGINE``).

The Django admin's sessions are the admin API's sessions: the same ``cpr_admin_session`` cookie,
the same ``<prefix>admin:session:<sha256 hex>`` keys (``proxy.runtime_state.admin_sessions``).
Django's session dictionary maps onto the stored value: ``_auth_user_id`` is ``userId``,
``_auth_user_hash`` is ``authHash``, the backend is the project's only one, the rest is ``data``.
The raw session key exists only in the cookie.

``admin_session_login`` / ``admin_session_user`` are the same store for a caller without
Django's session middleware (the admin API).
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.base import CreateError, SessionBase, UpdateError
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from proxy.models import AdminUser
from proxy.runtime_state.admin_sessions import (
    AdminSession,
    admin_session_create,
    admin_session_delete,
    admin_session_exists,
    admin_session_get,
    admin_session_rewrite,
    admin_session_store_new,
    admin_session_touch,
    admin_session_touch_due,
    new_session_token,
)

_LONGEST_TOKEN = 128


class SessionStore(SessionBase):
    def __init__(self, session_key: str | None = None) -> None:
        super().__init__(session_key)
        # What load() read, and for which key: createdAt survives rewrites of that session.
        self._stored: AdminSession | None = None
        self._stored_key: str | None = None

    def _validate_session_key(self, key: str | None) -> bool:
        # Only our own token shape is looked up (a forged giant cookie never reaches Redis).
        return key is not None and key.startswith("sess_") and 8 <= len(key) <= _LONGEST_TOKEN

    def _get_new_session_key(self) -> str:
        while True:
            token = new_session_token()
            if not self.exists(token):
                return token

    def load(self) -> dict:
        now = timezone.now()
        session = admin_session_get(self.session_key, now=now) if self.session_key else None
        if session is None:
            self._session_key = None
            self._stored = self._stored_key = None
            return {}
        self._stored, self._stored_key = session, self.session_key
        data = dict(session.data)
        if session.user_id is not None:
            data[SESSION_KEY] = session.user_id
            data[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
            if session.auth_hash is not None:
                data[HASH_SESSION_KEY] = session.auth_hash
        if admin_session_touch_due(session, now=now):
            # Saved at the end of the request with the new lastSeenAt (the idle timeout).
            self.modified = True
        return data

    def exists(self, session_key: str) -> bool:
        return admin_session_exists(session_key)

    def create(self) -> None:
        while True:
            self._session_key = self._get_new_session_key()
            try:
                self.save(must_create=True)
            except CreateError:
                continue
            self.modified = True
            return

    def save(self, must_create: bool = False) -> None:
        if self.session_key is None:
            return self.create()
        # SessionBase._get_session: Django's own, left out of django-stubs (private).
        loaded = self._get_session(no_load=must_create)  # type: ignore[attr-defined]
        session = self._stored_form(loaded, timezone.now())
        if must_create:
            if not admin_session_store_new(token=self.session_key, session=session):
                raise CreateError
        elif not admin_session_rewrite(token=self.session_key, session=session):
            raise UpdateError
        self._stored, self._stored_key = session, self.session_key

    def _stored_form(self, data: dict, now: datetime) -> AdminSession:
        data = dict(data)
        user_id = data.pop(SESSION_KEY, None)
        data.pop(BACKEND_SESSION_KEY, None)
        auth_hash = data.pop(HASH_SESSION_KEY, None)
        stored = self._stored if self._stored_key == self.session_key else None
        created_at = stored.created_at if stored is not None else now.isoformat()
        return AdminSession(
            user_id=user_id,
            created_at=created_at,
            last_seen_at=now.isoformat(),
            auth_hash=auth_hash,
            data=data,
        )

    def delete(self, session_key: str | None = None) -> None:
        if session_key is None:
            if self.session_key is None:
                return
            session_key = self.session_key
        user_id = self._stored.user_id if self._stored_key == session_key and self._stored else None
        admin_session_delete(session_key, user_id=user_id)

    @classmethod
    def clear_expired(cls) -> None:
        """Nothing to do: expiry is each key's TTL (seed §4B.1, no cleanup job)."""


def admin_session_login(*, user: AdminUser, now: datetime) -> tuple[str, datetime]:
    """A new session for ``user`` (after the log-in throttle and the password check); returns
    the token for the ``cpr_admin_session`` cookie and its expiry."""
    return admin_session_create(user_id=user.pk, auth_hash=user.get_session_auth_hash(), now=now)


def admin_session_user(token: str | None, *, now: datetime) -> AdminUser | None:
    """The admin whose live session ``token`` is, or None: unknown, expired, idle too long, or
    from before the password last changed. Records the use for the idle timeout."""
    if not token or len(token) > _LONGEST_TOKEN:
        return None
    session = admin_session_get(token, now=now)
    if session is None or session.user_id is None or session.auth_hash is None:
        return None
    user = AdminUser.objects.filter(pk=session.user_id).first()
    if user is None or not constant_time_compare(session.auth_hash, user.get_session_auth_hash()):
        return None
    if admin_session_touch_due(session, now=now):
        admin_session_touch(token=token, session=session, now=now)
    return user
