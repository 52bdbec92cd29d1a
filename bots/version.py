"""The version reported by ``/telegram/health`` and ``/telegram/selfcheck``."""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "cpr-monolith"


def app_version() -> str:
    """The installed project's version (pyproject.toml), or "unknown" when not installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"
