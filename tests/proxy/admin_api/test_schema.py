"""The OpenAPI 3 document (/api/schema/) and its docs pages, served offline."""

from __future__ import annotations

import re

import yaml
from django.contrib.staticfiles import finders
from django.test import Client

from proxy.admin_api.urls import admin_api_patterns


def test_the_schema_describes_the_admin_api_and_v1(db):
    response = Client().get("/api/schema/", headers={"accept": "application/vnd.oai.openapi+json"})

    assert response.status_code == 200
    document = yaml.safe_load(response.content)
    assert document["openapi"].startswith("3.")
    paths = document["paths"]
    for pattern in admin_api_patterns:
        route = str(pattern.pattern)
        if route.startswith("^"):
            continue  # the catch-all 404
        assert f"/api/admin/{route}" in paths, route
    assert set(paths["/v1/responses"]) == {"post"}
    assert "text/event-stream" in paths["/v1/responses"]["post"]["responses"]["200"]["content"]
    assert paths["/v1/responses"]["post"]["security"] == [{"clientKey": []}]
    assert paths["/api/admin/accounts"]["get"]["security"] == [
        {"adminSession": []},
        {"adminApiKey": []},
    ]
    assert paths["/api/admin/login"]["post"]["security"] == []
    schemes = document["components"]["securitySchemes"]
    assert schemes["adminSession"] == {
        "type": "apiKey",
        "in": "cookie",
        "name": "cpr_admin_session",
        "description": "Set by POST /api/admin/login (shared with the Django admin)",
    }
    # Only the admin API and /v1: the Telegram webhook's DRF views are not part of it.
    assert not [path for path in paths if path.startswith("/telegram")]


def test_the_docs_pages_use_the_vendored_assets(db):
    for page in ("/api/schema/docs/", "/api/schema/redoc/"):
        response = Client().get(page)
        html = response.content.decode()
        assert response.status_code == 200
        assets = re.findall(r'(?:src|href)="/static/([^"]+)"', html)
        assert assets, html
        # Every script and style the page loads is a file of the installed packages.
        for asset in assets:
            assert finders.find(asset), asset
        # No address on a CDN (looked for in addresses: the page's random CSRF token may
        # spell "cdn" by chance).
        assert not re.findall(r"//[^\s\"'<>]*(?:cdn|unpkg)", html.lower())
