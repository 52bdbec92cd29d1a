"""``x-cpr-overhead-ms`` (issue 25 item 7): every ``/v1`` answer says what the proxy itself added
before its first byte — the time from the request's arrival not spent waiting for the client's
body or for the upstream calls that answer it."""

from __future__ import annotations

import pytest
import requests

from tests.fakes.codex import Reply
from tests.proxy.conftest import make_pool_account, post_responses

pytestmark = pytest.mark.django_db(transaction=True)

HEADER = "x-cpr-overhead-ms"
# The upstream is slow on purpose; the header must not count that wait.
UPSTREAM_DELAY = 1.5


def _overhead(response) -> float:
    return float(response.headers[HEADER])


def test_a_stream_waits_for_a_slow_upstream_without_counting_it(proxy, upstream, client_key):
    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(first_byte_delay=UPSTREAM_DELAY))

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "input": []})

    assert response.status_code == 200
    assert response.elapsed.total_seconds() >= UPSTREAM_DELAY
    assert 0 < _overhead(response) < UPSTREAM_DELAY * 1000 / 2


def test_a_non_stream_answer_does_not_count_the_upstreams_deltas(proxy, upstream, client_key):
    make_pool_account("tok-a")
    upstream.program("tok-a", Reply(deltas=6, delta_delay=0.25))

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "input": [], "stream": False})

    assert response.status_code == 200
    assert response.elapsed.total_seconds() >= 1.25
    assert 0 < _overhead(response) < 625


@pytest.mark.slow
def test_failed_attempts_count_as_upstream_wait_too(proxy, upstream, client_key):
    make_pool_account("tok-a")
    make_pool_account("tok-b")
    slow_failure = Reply(kind="status", status=429, body="{}", first_byte_delay=UPSTREAM_DELAY)
    upstream.program("tok-a", slow_failure)
    upstream.program("tok-b", slow_failure)

    response = post_responses(proxy, client_key, {"model": "gpt-5.4", "input": []})

    assert response.status_code == 429
    assert 0 < _overhead(response) < UPSTREAM_DELAY * 1000 / 2


def test_answers_that_never_reach_the_upstream_carry_it(proxy, upstream, client_key):
    no_key = requests.post(f"{proxy.url}/v1/responses", data="{}", timeout=30)
    unknown_model = post_responses(proxy, client_key, {"model": "no-such-model", "input": []})
    models = requests.get(
        f"{proxy.url}/v1/models", headers={"Authorization": f"Bearer {client_key.key}"}, timeout=30
    )

    for response in (no_key, unknown_model, models):
        assert response.headers[HEADER] and _overhead(response) >= 0
    assert (no_key.status_code, unknown_model.status_code, models.status_code) == (401, 404, 200)
