"""Part 3: bad input, against the running web process.

* the webhook: hypothesis-made bodies (bytes, any JSON, update-shaped objects with wrong types)
  with the right secret, and anything with a wrong or missing secret;
* ``/v1``: hypothesis-made bodies and headers on every POST route and the model routes;
* the admin API: hypothesis-made bodies for its write routes, then schemathesis over the OpenAPI
  document (``/api/schema/?format=json``), authenticated with the admin API key;
* everywhere: text no database can store (lone surrogates, NUL), bodies that are not UTF-8 and
  JSON nested as deep as a parser accepts or deeper; and first the connection-level attacks of
  ``drill/edges.py`` (slow headers, a 1 MiB header, cookie bombs, unknown WebSocket paths, a
  frame flood on one client WebSocket, unsent bodies of a key its policy refuses).

No answer may be a 500, or another 5xx that is not the product's own "try again" answer; every
``/v1`` error is an OpenAI error envelope; input that is rejected writes nothing (for ``/v1``: no
usage row — its one ``ops_error_logs`` row is the ledger's rule for a failed request; for the
webhook and the admin API: no row anywhere). Tracebacks in the logs are checked by the caller.
"""

from __future__ import annotations

import json
from collections import Counter
from itertools import count

import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drill import edges
from drill.report import Part
from drill.secrets_scan import Scanner
from drill.system import System

_SETTINGS = {
    "deadline": None,
    "database": None,
    "derandomize": True,
    "suppress_health_check": list(HealthCheck),
}
# Text a client can send in JSON that no UTF-8 (so no database, no upstream) can carry or that
# PostgreSQL refuses: lone surrogates ("\ud800" once json.dumps escapes it) and NUL.
HOSTILE_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=()) | st.sampled_from(["\ud800", "\udfff", "\x00"]),
    max_size=20,
)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | HOSTILE_TEXT,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
ANY = JSON | st.integers(min_value=-(2**70), max_value=2**70) | st.text()
# Bodies that are not JSON a handler expects: invalid UTF-8, and nesting from what every parser
# takes to what none does (Python's recursion limit is 1000).
DEEP = st.integers(min_value=1, max_value=3000).map(lambda depth: b"[" * depth + b"]" * depth)
RAW_BODIES = (
    st.binary(max_size=200)
    | DEEP
    | st.builds(lambda inner: b'{"model": "gpt-5.4", "input": ' + inner + b"}", DEEP)
    | st.sampled_from([b'{"model": "gpt-5.4", "input": "\xff\xfe"}', b"\xed\xa0\x80"])
)
BOT_WRITES = (
    "select (select count(*) from processed_updates), (select count(*) from users),"
    " (select count(*) from topics), (select count(*) from messages)"
)
ADMIN_WRITES = (
    # last_used_at is the /v1 requests' batched touch, written whenever its batch is due.
    "select (select count(*) from client_api_keys),"
    " (select md5(coalesce(string_agg((to_jsonb(k) - 'last_used_at')::text, ','"
    "  order by k.id), '')) from client_api_keys k),"
    " (select md5(string_agg(r::text, ',')) from runtime_settings r),"
    " (select count(*) from accounts), (select count(*) from admin_users)"
)


def update_like():
    """Objects shaped like a Telegram update, with any field of any type."""
    message = st.fixed_dictionaries(
        {},
        optional={
            "message_id": ANY,
            "from": st.fixed_dictionaries({}, optional={"id": ANY, "first_name": ANY}) | ANY,
            "chat": st.fixed_dictionaries({}, optional={"id": ANY, "type": ANY}) | ANY,
            "text": ANY,
            "caption": ANY,
            "photo": ANY,
            "message_thread_id": ANY,
            "reply_to_message": ANY,
            "entities": ANY,
        },
    )
    return st.fixed_dictionaries(
        {"update_id": st.integers(min_value=800_000_000, max_value=2**62) | ANY},
        optional={
            "message": message | ANY,
            "edited_message": message | ANY,
            "callback_query": st.fixed_dictionaries(
                {}, optional={"id": ANY, "from": ANY, "data": ANY, "message": ANY}
            )
            | ANY,
        },
    )


class Fuzz:
    def __init__(self, system: System, scanner: Scanner, examples: int) -> None:
        self.system = system
        self.scanner = scanner
        self.examples = examples
        self.http = requests.Session()
        self.statuses: Counter[str] = Counter()
        self.sent = Counter()
        self.unexpected: list[str] = []
        self.request_ids = count(1)
        self.rejected_v1_ids: list[str] = []

    def _record(self, target: str, response: requests.Response, *, admin: bool = False) -> None:
        self.sent[target] += 1
        self.statuses[f"{target} {response.status_code}"] += 1
        if not admin:
            self.scanner.response(target, dict(response.headers), response.content)
        if response.status_code >= 500:
            self.unexpected.append(f"{target} {response.status_code}: {response.text[:160]}")

    def _writes(self, query: str) -> tuple:
        with self.system.postgres() as connection:
            return tuple(connection.execute(query).fetchone())

    # ------------------------------------------------------------------ the webhook

    def webhook(self) -> dict:
        url = f"{self.system.base}/telegram/webhook"
        hook = {"X-Telegram-Bot-Api-Secret-Token": self.system.webhook_secret}
        rejected_wrote = []

        @settings(max_examples=self.examples, **_SETTINGS)
        @given(st.binary(max_size=300) | JSON.map(lambda value: json.dumps(value).encode()))
        def not_updates(body: bytes) -> None:
            # Not an update (no numeric update_id): acknowledged, nothing recorded.
            try:
                if isinstance(json.loads(body), dict) and "update_id" in json.loads(body):
                    return
            except (ValueError, UnicodeDecodeError):
                pass
            before = self._writes(BOT_WRITES)
            response = self.http.post(url, data=body, headers=hook, timeout=30)
            self._record("webhook (not an update)", response)
            if self._writes(BOT_WRITES) != before:
                rejected_wrote.append(f"not an update {body[:60]!r}")

        @settings(max_examples=self.examples, **_SETTINGS)
        @given(update_like(), st.sampled_from([None, "", "wrong-secret", "x" * 300]))
        def wrong_secret(update: dict, secret: str | None) -> None:
            headers = {} if secret is None else {"X-Telegram-Bot-Api-Secret-Token": secret}
            before = self._writes(BOT_WRITES)
            response = self.http.post(url, json=update, headers=headers, timeout=30)
            self._record("webhook (wrong secret)", response)
            if response.status_code != 401:
                self.unexpected.append(f"wrong secret answered {response.status_code}")
            if self._writes(BOT_WRITES) != before:
                rejected_wrote.append("wrong secret")

        @settings(max_examples=self.examples, **_SETTINGS)
        @given(update_like())
        def malformed_updates(update: dict) -> None:
            response = self.http.post(url, json=update, headers=hook, timeout=30)
            self._record("webhook (malformed update)", response)

        @settings(max_examples=max(10, self.examples // 4), **_SETTINGS)
        @given(update_like(), DEEP)
        def deep_inside_message(update: dict, nested: bytes) -> None:
            # A value nested as deep as the parser accepts (or deeper) inside the message:
            # acknowledged, never a 500 that Telegram would redeliver.
            body = json.dumps({**update, "message": {"text": "deep"}}).encode()
            body = body.replace(b'{"text": "deep"}', b'{"text": "deep", "x": ' + nested + b"}")
            response = self.http.post(url, data=body, headers=hook, timeout=30)
            self._record("webhook (nested deep)", response)
            if response.status_code != 200:
                self.unexpected.append(f"webhook nested deep answered {response.status_code}")

        not_updates()
        wrong_secret()
        malformed_updates()
        deep_inside_message()
        return {"rejected input that wrote": rejected_wrote}

    # ------------------------------------------------------------------ /v1

    def v1(self) -> dict:
        key = {"Authorization": f"Bearer {self.system.client_key}"}
        not_envelopes = []
        body_fields = st.fixed_dictionaries(
            {},
            optional={
                "model": ANY | st.sampled_from(["gpt-5.4", "gpt-5.4-mini", "", "x" * 500]),
                "stream": ANY,
                "input": ANY,
                "messages": ANY,
                "instructions": ANY,
                "tools": ANY,
                "max_output_tokens": ANY,
                "previous_response_id": ANY,
                "reasoning": ANY,
            },
        )
        # Printable ASCII without the surrounding spaces HTTP strips anyway (requests refuses to
        # send a value with a leading one: the drill's own client, not the proxy, would fail).
        header_values = st.text(
            alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=200
        ).map(str.strip)

        @settings(max_examples=self.examples, **_SETTINGS)
        @given(
            st.sampled_from(["responses", "chat/completions", "responses/compact"]),
            body_fields | JSON,
            st.dictionaries(
                st.sampled_from(
                    ["x-request-id", "content-type", "session_id", "x-client-request-id"]
                    + ["openai-beta", "accept", "conversation_id", "x-openai-subagent"]
                ),
                header_values,
                max_size=3,
            ),
            st.sampled_from(["good", "none", "malformed", "unknown"]),
        )
        def bodies(route: str, body, headers: dict, auth: str) -> None:
            request_id = f"fuzz-{next(self.request_ids)}"
            sent = {**headers, "x-request-id": request_id}
            if auth == "good":
                sent.update(key)
            elif auth == "malformed":
                sent["Authorization"] = "Bearer"
            elif auth == "unknown":
                sent["Authorization"] = "Bearer sk-not-a-key-of-ours-0123456789"
            response = self.http.post(
                f"{self.system.base}/v1/{route}",
                data=json.dumps(body),
                headers=sent,
                timeout=60,
                stream=False,
            )
            self._record(f"/v1/{route}", response)
            if response.status_code >= 400:
                self.rejected_v1_ids.append(request_id)
                try:
                    envelope = response.json()
                    ok = isinstance(envelope.get("error"), dict) and "message" in envelope["error"]
                except ValueError:
                    ok = False
                if not ok:
                    not_envelopes.append(f"/v1/{route} {response.status_code}")

        @settings(max_examples=max(10, self.examples // 4), **_SETTINGS)
        @given(st.sampled_from(["responses", "chat/completions", "responses/compact"]), RAW_BODIES)
        def raw_bodies(route: str, body: bytes) -> None:
            request_id = f"fuzz-{next(self.request_ids)}"
            response = self.http.post(
                f"{self.system.base}/v1/{route}",
                data=body,
                headers={**key, "x-request-id": request_id, "Content-Type": "application/json"},
                timeout=60,
            )
            self._record(f"/v1/{route} (raw)", response)
            if response.status_code >= 400:
                self.rejected_v1_ids.append(request_id)

        @settings(max_examples=max(10, self.examples // 4), **_SETTINGS)
        @given(st.text(max_size=80), st.booleans())
        def models(model_id: str, info: bool) -> None:
            path = f"/v1/models/{requests.utils.quote(model_id, safe='')}" + (
                "/info" if info else ""
            )
            response = self.http.get(f"{self.system.base}{path}", headers=key, timeout=30)
            self._record("/v1/models/…", response)

        bodies()
        raw_bodies()
        models()
        with self.system.postgres() as connection:
            wrote = connection.execute(
                "select count(*) from usage_records where request_id = any(%s)",
                [self.rejected_v1_ids],
            ).fetchone()[0]
        return {
            "usage rows of rejected /v1 requests": wrote,
            "not an error envelope": not_envelopes,
        }

    # ------------------------------------------------------------------ the admin API

    def admin(self) -> dict:
        headers = {"x-api-key": self.system.admin_api_key}
        rejected_wrote = []
        writes = ["keys", "keys/update", "keys/delete", "settings", "accounts/import"]
        writes += ["accounts/update", "accounts/delete", "keys/config"]

        @settings(max_examples=self.examples, **_SETTINGS)
        @given(st.sampled_from(writes), st.sampled_from(["POST", "PUT", "PATCH"]), JSON)
        def bodies(route: str, method: str, body) -> None:
            before = self._writes(ADMIN_WRITES)
            response = self.http.request(
                method,
                f"{self.system.base}/api/admin/{route}",
                data=json.dumps(body),
                headers={**headers, "Content-Type": "application/json"},
                timeout=60,
            )
            self._record(f"admin {route}", response, admin=True)
            if 400 <= response.status_code < 500 and self._writes(ADMIN_WRITES) != before:
                rejected_wrote.append(f"{method} {route} {response.status_code}")

        @settings(max_examples=max(10, self.examples // 4), **_SETTINGS)
        @given(st.sampled_from(writes), RAW_BODIES)
        def raw_bodies(route: str, body: bytes) -> None:
            before = self._writes(ADMIN_WRITES)
            response = self.http.post(
                f"{self.system.base}/api/admin/{route}",
                data=body,
                headers={**headers, "Content-Type": "application/json"},
                timeout=60,
            )
            self._record(f"admin {route} (raw)", response, admin=True)
            if 400 <= response.status_code < 500 and self._writes(ADMIN_WRITES) != before:
                rejected_wrote.append(f"raw {route} {response.status_code}")

        bodies()
        raw_bodies()
        return {"rejected admin input that wrote": rejected_wrote}

    def schemathesis(self) -> dict:
        import schemathesis

        schema = schemathesis.openapi.from_url(f"{self.system.base}/api/schema/?format=json")
        # Log-in hashes a password and counts towards the lock-out; log-out and the admin API
        # key's own routes would end the credentials the rest of the run uses.
        operations = schema.include(path_regex=r"^/api/admin/").exclude(
            path_regex=r"^/api/admin/(login|logout|settings/admin-api-key.*)$"
        )
        headers = {"x-api-key": self.system.admin_api_key}
        per_operation = max(3, self.examples // 10)
        covered = 0
        for result in operations.get_all_operations():
            self._operation(result.ok(), per_operation, headers)
            covered += 1
        return {"schemathesis operations": covered}

    def _operation(self, operation, examples: int, headers: dict) -> None:
        @settings(max_examples=examples, **_SETTINGS)
        @given(operation.as_strategy())
        def call(case) -> None:
            response = case.call(base_url=self.system.base, headers=headers, timeout=60)
            self.sent["schemathesis"] += 1
            self.statuses[f"schemathesis {response.status_code}"] += 1
            if response.status_code >= 500:
                self.unexpected.append(
                    f"schemathesis {case.method} {case.formatted_path}"
                    f" {response.status_code}: {response.text[:160]}"
                )

        call()


def run(system: System, scanner: Scanner, *, examples: int) -> Part:
    part = Part("bad input")
    edge_figures, edge_problems = edges.run_checks(system)
    for name, value in edge_figures.items():
        part.figure(name, value)
    for problem in edge_problems:
        part.note(problem)
    part.require(
        not edge_problems,
        "slow and oversized headers, cookie bombs, unknown WebSocket paths, frame floods and "
        "policy-refused bodies are refused at once",
    )
    fuzz = Fuzz(system, scanner, examples)
    found = {**fuzz.webhook(), **fuzz.v1(), **fuzz.admin(), **fuzz.schemathesis()}
    part.figure("requests by target", dict(fuzz.sent))
    part.figure(
        "answers ≥ 400", {name: n for name, n in fuzz.statuses.items() if name[-3:] >= "400"}
    )
    part.figure("5xx answers", len(fuzz.unexpected))
    for name, value in found.items():
        part.figure(name, len(value) if isinstance(value, list) else value)
    for problem in fuzz.unexpected[:8]:
        part.note(problem)
    for name in ("rejected input that wrote", "rejected admin input that wrote"):
        for problem in found[name][:5]:
            part.note(f"{name}: {problem}")
    part.require(not fuzz.unexpected, "no 5xx answer to bad input")
    part.require(not found["rejected input that wrote"], "rejected webhook input writes nothing")
    part.require(
        not found["rejected admin input that wrote"], "rejected admin input writes nothing"
    )
    part.require(
        found["usage rows of rejected /v1 requests"] == 0, "rejected /v1 input bills nothing"
    )
    part.require(not found["not an error envelope"], "every /v1 error is an OpenAI error envelope")
    return part
