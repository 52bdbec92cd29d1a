"""Headers of an upstream ``/codex/responses`` request (spec §2.3)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from proxy.dispatch.accounts import AccountView
    from proxy.dispatch.dispatcher import DispatchRequest

ORIGINATOR = "Codex Desktop"
USER_AGENT = "Codex Desktop/26.519.81530 (darwin; arm64)"


def upstream_headers(*, account: AccountView, request: DispatchRequest) -> list[tuple[str, str]]:
    """The request headers, in the order they go on the wire."""
    headers = [("authorization", f"Bearer {account.access_token}")]
    if account.chatgpt_account_id:
        headers.append(("chatgpt-account-id", account.chatgpt_account_id))
    headers += [
        ("originator", ORIGINATOR),
        ("x-openai-internal-codex-residency", "us"),
        ("x-client-request-id", request.request_id),
        ("openai-beta", "responses_websockets=2026-02-06"),
        ("user-agent", USER_AGENT),
        ("content-type", "application/json"),
        ("accept", "text/event-stream"),
    ]
    if request.subagent:
        headers.append(("x-openai-subagent", request.subagent))
    return headers
