"""The typed contract between the proxy and its ledger: one ``UsageFact`` per successful
request (a ``usage_records`` row), one ``ErrorFact`` per failure (an ``ops_error_logs`` row).

Keyword-only and frozen: a misspelt field is a TypeError where the fact is built, not a NULL
column found weeks later. ``metadata`` is the row's ``metadata_json``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# What a success is when its caller does not say (every /v1 success is one of OpenAI's, 200).
DEFAULT_PROVIDER = "openai"
DEFAULT_SUCCESS_STATUS = 200


@dataclass(frozen=True, kw_only=True, slots=True)
class UsageFact:
    created_at: datetime
    model: str
    message: str
    account_id: str | None = None
    provider: str = DEFAULT_PROVIDER
    status_code: int = DEFAULT_SUCCESS_STATUS
    route: str | None = None
    request_id: str | None = None
    client_api_key_id: str | None = None
    requested_model: str | None = None
    upstream_model: str | None = None
    service_tier: str | None = None
    transport: str | None = None
    attempt_index: int | None = None
    response_id: str | None = None
    upstream_request_id: str | None = None
    latency_ms: int | None = None
    first_token_ms: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorFact:
    created_at: datetime
    message: str
    route: str | None = None
    provider: str | None = None
    account_id: str | None = None
    model: str | None = None
    request_id: str | None = None
    client_api_key_id: str | None = None
    status_code: int | None = None
    client_status_code: int | None = None
    upstream_status_code: int | None = None
    transport: str | None = None
    attempt_index: int | None = None
    failure_class: str | None = None
    response_id: str | None = None
    upstream_request_id: str | None = None
    latency_ms: int | None = None
    metadata: dict[str, Any] | None = None


Fact = UsageFact | ErrorFact


def fact_values(fact: Fact) -> dict[str, Any]:
    """The fact's fields as a dict (shallow: metadata is the same object)."""
    return {field.name: getattr(fact, field.name) for field in dataclasses.fields(fact)}
