"""The month of ledger facts of ``tests.telemetry.month_of_facts`` with the proxy's rows the
console names them by: three accounts (one with a label) and three client keys."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from proxy.models import Account, ClientApiKey
from proxy.services.client_api_keys import client_api_key_create
from tests.proxy.factories import make_account
from tests.telemetry.month_of_facts import MonthOfFacts, write_month_of_facts

ACCOUNTS = {
    "acct_alpha": {"label": "Alpha team", "email": "alpha@example.com"},
    "acct_beta": {"label": None, "email": "beta@example.com"},
    "acct_gamma": {"label": None, "email": "gamma@example.com"},
}
KEY_NAMES = ("ci-runner", "alice-laptop", "bob-desktop")


@dataclass(frozen=True)
class SeededMonth:
    facts: MonthOfFacts
    accounts: dict[str, Account]  # by id
    keys: dict[str, ClientApiKey]  # by name


def seed_month(now: datetime) -> SeededMonth:
    accounts = {
        account_id: make_account(id=account_id, now=now, **fields)
        for account_id, fields in ACCOUNTS.items()
    }
    keys = {name: client_api_key_create(name=name, now=now) for name in KEY_NAMES}
    facts = write_month_of_facts(
        now, account_ids=list(ACCOUNTS), key_ids=[keys[name].id for name in KEY_NAMES]
    )
    return SeededMonth(facts=facts, accounts=accounts, keys=keys)
