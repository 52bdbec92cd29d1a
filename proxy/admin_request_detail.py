"""A request's page in the console (issue 38 item 4): a usage record or an ops error as
sections of labelled values — never a JSON blob — with the links between an error, its request
(the other rows of the same ``request_id``: the success it ended in, the failed attempts before
it), its account and its key; and the names those lists show (``FactNames``).

The upstream's answer to a failed attempt is its ``upstream_status_code`` column and the
``upstreamBody`` excerpt the ledger keeps in ``metadata_json`` (the seed has no column for it;
secrets masked when written, ``proxy.ledger.attempt_facts``). Every text of the metadata is
masked again when shown, rows written before the ledger masked them included.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.admin.utils import quote
from django.db.models import Model
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from common.secret_masking import mask_secrets
from proxy.admin_api.display import milliseconds, usd
from proxy.models import Account, ClientApiKey
from telemetry.billing import Cost, request_cost
from telemetry.models import OpsErrorLog, UsageRecord

NOTHING = "—"
MOST_RELATED_ROWS = 20


@dataclass
class FactNames:
    """Names of the accounts and keys a page of facts refers to."""

    accounts: dict[str, str] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, *, account_ids: Iterable[str | None], key_ids: Iterable[str | None]):
        """Two queries (none for an empty set)."""
        accounts = {pk for pk in account_ids if pk}
        keys = {pk for pk in key_ids if pk}
        names = cls()
        if accounts:
            rows = Account.objects.filter(pk__in=accounts).values_list("id", "label", "email")
            names.accounts = {pk: label or email or pk for pk, label, email in rows}
        if keys:
            names.keys = dict(ClientApiKey.objects.filter(pk__in=keys).values_list("id", "name"))
        return names

    def account(self, account_id: str | None) -> SafeString:
        """The account's name linking to its page; its id marked deleted when it is gone."""
        if not account_id:
            return format_html("{}", NOTHING)
        name = self.accounts.get(account_id)
        if name is None:
            return format_html('<span class="fact-quiet">{} (deleted)</span>', account_id)
        url = reverse("admin:proxy_account_change", args=[quote(account_id)])
        return format_html('<a class="fact-name" href="{}">{}</a>', url, name)

    def key(self, key_id: str | None) -> SafeString:
        if not key_id:
            return format_html('<span class="fact-quiet">{}</span>', "no key")
        name = self.keys.get(key_id)
        if name is None:
            return format_html('<span class="fact-quiet">{} (deleted)</span>', key_id)
        url = reverse("admin:proxy_clientapikey_change", args=[quote(key_id)])
        return format_html('<a class="fact-name" href="{}">{}</a>', url, name)


def local_moment(moment) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S")


def record_cost(record: UsageRecord) -> Cost | None:
    """The success's cost at list prices (``telemetry.billing``); None without any tokens."""
    if record.input_tokens is None and record.output_tokens is None:
        return None
    return request_cost(
        model=record.model,
        service_tier=record.service_tier,
        input_tokens=record.input_tokens,
        output_tokens=record.output_tokens,
        cached_tokens=record.cached_tokens,
    )


Row = tuple[str, Any]


@dataclass
class Section:
    title: str
    rows: list[Row]
    # A section of one long text (the upstream body): shown preformatted.
    text: str | None = None


def _value(value: Any) -> Any:
    """What a cell shows: ``—`` for nothing; text masked."""
    if value is None or value == "":
        return NOTHING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return f"{value:,}" if isinstance(value, int) else f"{value:g}"
    if isinstance(value, SafeString):
        return value
    if isinstance(value, dict | list):
        return mask_secrets(json.dumps(value, ensure_ascii=False, sort_keys=True))
    return mask_secrets(str(value))


def _identifier(value: str | None) -> SafeString | None:
    """An id the proxy wrote or checked (``req_…``, ``resp_…``): shown whole, escaped — the
    masking's long-run rule would otherwise hide the very id a client reports."""
    return format_html("{}", value) if value else None


def _rows(pairs: Iterable[Row]) -> list[Row]:
    return [(label, _value(value)) for label, value in pairs]


def _list_link(model: type[Model], text: str, **filters: str) -> SafeString:
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    return format_html('<a href="{}?{}">{}</a>', url, urlencode(filters), text)


def _fact_link(fact: UsageRecord | OpsErrorLog, text: str) -> SafeString:
    url = reverse(
        f"admin:{fact._meta.app_label}_{fact._meta.model_name}_change", args=[quote(fact.pk)]
    )
    return format_html('<a href="{}">{}</a>', url, text)


def _who(fact: UsageRecord | OpsErrorLog, names: FactNames, metadata: dict) -> Section:
    model = type(fact)
    key = names.key(fact.client_api_key_id)
    if fact.client_api_key_id:
        key = format_html("{} · {}", key, _list_link(model, "its rows", key=fact.client_api_key_id))
    account = names.account(fact.account_id)
    if fact.account_id:
        account = format_html(
            "{} · {}", account, _list_link(model, "its rows", account=fact.account_id)
        )
    return Section(
        "Who",
        _rows(
            [
                ("client key", key),
                ("account", account),
                ("client IP", metadata.get("clientIp")),
                ("user agent", metadata.get("userAgent")),
            ]
        ),
    )


def _attempts(metadata: dict, names: FactNames) -> Section | None:
    attempts = [item for item in metadata.get("attempts") or [] if isinstance(item, dict)]
    if not attempts:
        return None
    rows = [
        (f"attempt {item.get('index', '?')}", names.account(item.get("accountId")))
        for item in attempts
    ]
    return Section("Attempts (accounts tried, in order)", rows)


def _same_request(fact: UsageRecord | OpsErrorLog) -> Section | None:
    """The other rows of the fact's request (one index probe per table)."""
    if not fact.request_id:
        return None
    rows: list[Row] = []
    served = UsageRecord.objects.filter(request_id=fact.request_id).exclude(pk=fact.pk)
    for record in served.order_by("created_at")[:MOST_RELATED_ROWS]:
        rows.append(
            (
                "served",
                _fact_link(
                    record,
                    f"{local_moment(record.created_at)} · {record.status_code} · {record.model}",
                ),
            )
        )
    failed = OpsErrorLog.objects.filter(request_id=fact.request_id).exclude(pk=fact.pk)
    for error in failed.order_by("created_at", "id")[:MOST_RELATED_ROWS]:
        text = (
            f"{local_moment(error.created_at)} · {error.status_code or NOTHING} · "
            f"{error.failure_class or error.message}"
        )
        rows.append(("failed", _fact_link(error, text)))
    if not rows:
        rows = [("", "no other row of this request")]
    return Section(f"This request's other rows ({fact.request_id})", rows)


def _details(metadata: dict, shown: set[str]) -> Section | None:
    """The metadata not shown elsewhere, one row per value (a nested object's values as
    ``name · field`` rows)."""
    rows: list[Row] = []
    for name, value in sorted(metadata.items()):
        if name in shown:
            continue
        if isinstance(value, dict) and value:
            rows += [(f"{name} · {inner}", item) for inner, item in sorted(value.items())]
        else:
            rows.append((name, value))
    return Section("Other details", _rows(rows)) if rows else None


def _usage_sections(record: UsageRecord, names: FactNames) -> tuple[str, list[Section]]:
    metadata = record.metadata_json if isinstance(record.metadata_json, dict) else {}
    cost = record_cost(record)
    summary = f"{record.route or record.kind} · {record.model} · {record.status_code}" + (
        f" · {usd(cost.total)}" if cost else ""
    )
    sections = [
        Section(
            "Request",
            _rows(
                [
                    ("time", full_moment(record.created_at)),
                    ("message", record.message),
                    ("status", record.status_code),
                    ("route", record.route),
                    ("kind", record.kind),
                    ("transport", record.transport),
                    ("served on attempt", record.attempt_index),
                    ("request id", _identifier(record.request_id)),
                    ("response id", _identifier(record.response_id)),
                    ("upstream request id", _identifier(record.upstream_request_id)),
                    ("stream", metadata.get("stream")),
                ]
            ),
        ),
        _who(record, names, metadata),
        Section(
            "Model",
            _rows(
                [
                    ("model", record.model),
                    ("requested model", record.requested_model),
                    ("upstream model", record.upstream_model),
                    ("service tier", record.service_tier),
                    ("reasoning effort", metadata.get("reasoningEffort")),
                ]
            ),
        ),
        Section(
            "Tokens and cost",
            _rows(
                [
                    ("input tokens", record.input_tokens),
                    ("cached input tokens", record.cached_tokens),
                    ("output tokens", record.output_tokens),
                    ("reasoning tokens", record.reasoning_tokens),
                    ("cost (list prices)", usd(cost.total) if cost else None),
                    (
                        "cost of input · cache reads · output",
                        f"{usd(cost.input_cost)} · {usd(cost.cache_read_cost)} · "
                        f"{usd(cost.output_cost)}"
                        if cost
                        else None,
                    ),
                    (
                        "priced as",
                        f"{cost.priced_as}, ${cost.rates.input:g} in / ${cost.rates.output:g} "
                        f"out per 1M, {cost.service_tier} tier ×{cost.multiplier:g}"
                        if cost
                        else None,
                    ),
                ]
            ),
        ),
        Section(
            "Timing",
            _rows(
                [
                    ("first token", milliseconds(record.first_token_ms)),
                    ("whole request", milliseconds(record.latency_ms)),
                ]
            ),
        ),
    ]
    shown = {"stream", "clientIp", "userAgent", "reasoningEffort", "attempts"}
    extra = [_attempts(metadata, names), _same_request(record), _details(metadata, shown)]
    return summary, sections + [section for section in extra if section is not None]


def _upstream_answer(error: OpsErrorLog, metadata: dict) -> Section | None:
    body = metadata.get("upstreamBody")
    if error.upstream_status_code is None and not body and not metadata.get("error"):
        return None
    rows = _rows(
        [
            ("upstream status", error.upstream_status_code),
            ("upstream request id", error.upstream_request_id),
            ("upstream error code", metadata.get("upstreamCode")),
            ("upstream text", metadata.get("error")),
            ("Cloudflare ray", metadata.get("cfRay")),
        ]
    )
    if body:
        rows.append(
            (
                "body (excerpt, secrets masked)",
                "the first 1,000 characters" if metadata.get("upstreamBodyTruncated") else "whole",
            )
        )
    return Section("Upstream answer", rows, text=mask_secrets(body) if body else None)


def _error_sections(error: OpsErrorLog, names: FactNames) -> tuple[str, list[Section]]:
    metadata = error.metadata_json if isinstance(error.metadata_json, dict) else {}
    summary = " · ".join(
        str(part)
        for part in (error.status_code, error.failure_class, error.route or error.kind)
        if part
    )
    sections = [
        Section(
            "Failure",
            _rows(
                [
                    ("time", full_moment(error.created_at)),
                    ("message", error.message),
                    ("failure class", error.failure_class),
                    ("where it failed", metadata.get("failureSource")),
                    ("status (event)", error.status_code),
                    ("status the client got", error.client_status_code),
                    ("upstream event", metadata.get("failureEvent")),
                    ("upstream message", metadata.get("failureMessage")),
                    ("accounts exhausted", metadata.get("exhaustedCount")),
                ]
            ),
        ),
        Section(
            "Request",
            _rows(
                [
                    ("route", error.route),
                    ("kind", error.kind),
                    ("transport", error.transport),
                    ("model", error.model),
                    ("model it ran as", metadata.get("effectiveModel")),
                    ("attempt", error.attempt_index),
                    ("request id", _identifier(error.request_id)),
                    ("response id", _identifier(error.response_id)),
                    ("time until it failed", milliseconds(error.latency_ms)),
                ]
            ),
        ),
        _who(error, names, metadata),
    ]
    shown = {
        "failureSource",
        "failureEvent",
        "failureMessage",
        "exhaustedCount",
        "effectiveModel",
        "upstreamCode",
        "error",
        "cfRay",
        "upstreamBody",
        "upstreamBodyTruncated",
        "clientIp",
        "userAgent",
        "attempts",
    }
    extra = [
        _upstream_answer(error, metadata),
        _attempts(metadata, names),
        _same_request(error),
        _details(metadata, shown),
    ]
    return summary, sections + [section for section in extra if section is not None]


def detail_sections(fact: UsageRecord | OpsErrorLog) -> tuple[str, list[Section]]:
    """(The page's title, its sections) for a usage record or an ops error."""
    metadata = fact.metadata_json if isinstance(fact.metadata_json, dict) else {}
    attempt_accounts = [
        item.get("accountId") for item in metadata.get("attempts") or [] if isinstance(item, dict)
    ]
    names = FactNames.read(
        account_ids=[fact.account_id, *attempt_accounts], key_ids=[fact.client_api_key_id]
    )
    if isinstance(fact, UsageRecord):
        return _usage_sections(fact, names)
    return _error_sections(fact, names)


def full_moment(moment) -> str:
    local = timezone.localtime(moment)
    return f"{local:%Y-%m-%d %H:%M:%S.%f}"[:-3] + f" {local.tzname()}"
