"""Wait-instead-of-fail (issue 25 item 3, peers.md B.4): when no account may serve a request
now but one will by the clock within ``SCHEDULER_ELIGIBILITY_WAIT_SECONDS`` (a quota cooldown
or a usage window ending, a Cloudflare cooldown passing), the request waits for it instead of
failing with 503 ``no_available_accounts``. The client sees nothing until the answer commits,
as for any request. 0 (the default) keeps failing at once.
"""

from __future__ import annotations

import asyncio

from django.conf import settings
from django.utils import timezone

from proxy.accounts import AccountView, eligible_again_at
from proxy.selectors import still_eligible
from proxy.services import account_state

# Past the moment itself, so that the account's own clock check agrees it has come.
_MARGIN_SECONDS = 0.05


async def wait_for_an_account(accounts: list[AccountView]) -> list[AccountView]:
    """The accounts that may serve once the soonest of ``accounts`` is back within the wait
    (their state re-read and the clock's transitions applied); [] when none comes back in
    time."""
    limit = settings.SCHEDULER_ELIGIBILITY_WAIT_SECONDS
    if limit <= 0 or not accounts:
        return []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while True:
        now = timezone.now()
        moments = [at for account in accounts if (at := eligible_again_at(account, now=now))]
        if not moments:
            return []
        wait = (min(moments) - now).total_seconds() + _MARGIN_SECONDS
        if loop.time() + wait > deadline:
            return []
        await asyncio.sleep(max(0.0, wait))
        await still_eligible(accounts, now=timezone.now())  # refreshes the views in place
        eligible = await account_state.accounts_apply_time_transitions(accounts, now=timezone.now())
        if eligible:
            return eligible
