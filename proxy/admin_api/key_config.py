"""What an operator pastes to use a client key (spec §9, "Use key"): the Codex CLI's
``~/.codex/config.toml`` and ``auth.json``, and the CC Switch import link."""

from __future__ import annotations

import json
from urllib.parse import urlencode

from proxy.models import ClientApiKey

DEFAULT_MODEL = "gpt-5.5"


def codex_config_toml(*, base_url: str) -> str:
    return (
        'model_provider = "OpenAI"\n'
        f'model = "{DEFAULT_MODEL}"\n'
        f'review_model = "{DEFAULT_MODEL}"\n'
        'model_reasoning_effort = "xhigh"\n'
        "\n"
        "[model_providers.OpenAI]\n"
        'name = "OpenAI"\n'
        f"base_url = {json.dumps(base_url)}\n"
        'wire_api = "responses"\n'
        "requires_openai_auth = true\n"
    )


def cc_switch_url(*, key: ClientApiKey, base_url: str) -> str:
    query = {
        "resource": "provider",
        "app": "codex",
        "model": DEFAULT_MODEL,
        "name": key.name or key.prefix or "codex-proxy-rs",
        "homepage": base_url,
        "endpoint": base_url,
        "apiKey": key.key,
        "configFormat": "json",
        "usageEnabled": "false",
    }
    return "ccswitch://v1/import?" + urlencode(query)


def client_config(*, key: ClientApiKey, origin: str) -> dict:
    base_url = f"{origin}/v1"
    return {
        "baseUrl": base_url,
        "configToml": codex_config_toml(base_url=base_url),
        "authJson": json.dumps({"OPENAI_API_KEY": key.key}, indent=2) + "\n",
        "paths": {
            "unix": {"config": "~/.codex/config.toml", "auth": "~/.codex/auth.json"},
            "windows": {
                "config": "%USERPROFILE%\\.codex\\config.toml",
                "auth": "%USERPROFILE%\\.codex\\auth.json",
            },
        },
        "ccSwitchUrl": cc_switch_url(key=key, base_url=base_url),
    }
