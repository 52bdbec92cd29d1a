"""The outgoing session builders: each app's ``trust_env`` decided in one place, a default
timeout for calls that give none, and no automatic retries."""

from __future__ import annotations

import http.server
import threading

from bots.clients.outgoing import outgoing_session as bot_session
from common.outgoing_http import OutgoingSession
from proxy.clients.outgoing import outgoing_session as proxy_session


def test_each_app_decides_trust_env_once():
    bot = bot_session(timeout=5.0, pool_connections=1, pool_maxsize=1)
    proxy = proxy_session(timeout=5.0, pool_connections=1, pool_maxsize=1)

    assert (bot.trust_env, proxy.trust_env) == (True, False)


def test_a_session_never_retries_by_itself_and_has_a_default_timeout():
    session = OutgoingSession(
        timeout=(1.0, 2.0), trust_env=False, pool_connections=1, pool_maxsize=2
    )
    adapter = session.get_adapter("https://example.invalid/")

    assert adapter.max_retries.total == 0
    assert adapter.timeout == (1.0, 2.0)


def test_a_call_without_a_timeout_is_cut_off_by_the_sessions():
    """A server that accepts and never answers: the call ends after the session's read timeout
    instead of hanging."""
    never_answers = threading.Event()

    class Silent(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            never_answers.wait(5)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Silent)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    session = OutgoingSession(
        timeout=(1.0, 0.2), trust_env=False, pool_connections=1, pool_maxsize=1
    )
    try:
        session.get(f"http://127.0.0.1:{server.server_port}/")
        outcome = "answered"
    except Exception as error:
        outcome = type(error).__name__
    finally:
        never_answers.set()
        server.shutdown()
        session.close()

    assert outcome == "ReadTimeout"
