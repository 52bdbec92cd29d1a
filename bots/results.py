"""What an endpoint's function hands back to its view: an HTTP status and a JSON body."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EndpointResult:
    status: int
    body: dict
