"""A NUL character (PostgreSQL refuses it in text) in any query parameter or JSON body string
of the admin API is a 400 in the envelope (40001), never a 500 from the database."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.proxy.admin_api.conftest import error_of

NUL = "a\x00b"


def _operations() -> list[tuple[str, str, list[str], list[str]]]:
    """(method, path, query parameter names, JSON body property names) of every admin route
    the OpenAPI document describes."""
    document = (
        Client().get("/api/schema/", headers={"accept": "application/vnd.oai.openapi+json"}).json()
    )
    schemas = document["components"]["schemas"]
    found = []
    for path, operations in document["paths"].items():
        if not path.startswith("/api/admin/") or path.endswith(("/login", "/logout")):
            continue
        for method, operation in operations.items():
            names = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
            body = (
                operation.get("requestBody", {})
                .get("content", {})
                .get("application/json", {})
                .get("schema", {})
            )
            if "$ref" in body:
                body = schemas[body["$ref"].rsplit("/", 1)[1]]
            properties = sorted(body.get("properties", {}))
            found.append((method.upper(), path, names, properties))
    return found


@pytest.fixture(scope="module")
def operations(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        return _operations()


def test_every_query_parameter_with_a_nul_is_a_400(api, operations):
    checked = 0
    for method, path, names, _ in operations:
        for name in names:
            response = api.generic(method, path, QUERY_STRING=f"{name}=a%00b")
            message = error_of(response, 400, 40001)
            assert message == f"{name} contains a NUL character", (method, path, name)
            checked += 1
    # the filters and searches of every list are among them
    assert checked >= 20


def test_every_json_body_string_with_a_nul_is_a_400(api, operations):
    checked = 0
    for method, path, _, properties in operations:
        if method != "POST" or not properties or path.endswith("/accounts/import"):
            continue
        for name in properties:
            response = api.post_json(path, {name: NUL})
            assert error_of(response, 400, 40001), (path, name)
            checked += 1
        response = api.post_json(path, {"nested": [{"deep": NUL}]})
        assert error_of(response, 400, 40001), path
    assert checked >= 10


@pytest.mark.parametrize(
    "query",
    [
        "search=a%00b",
        "page=1%00",
        "cursor=%00",
        "%00=1",
    ],
)
def test_lists_refuse_a_nul_in_their_parameters(api, query):
    for path in ("/api/admin/accounts", "/api/admin/keys", "/api/admin/usage/records"):
        assert "NUL" in error_of(api.get(f"{path}?{query}"), 400, 40001)


def test_a_nul_in_an_imported_entry_makes_only_that_entry_invalid(api):
    from tests.fakes.oauth import Identity, access_token_for

    good = access_token_for(Identity("org-a", "user-a", "plus", "a@example.com"), expires_in=600)
    response = api.post_json(
        "/api/admin/accounts/import",
        [{"token": good, "label": "fine"}, {"token": good, "email": NUL}],
    )

    assert response.status_code == 200
    report = response.json()["data"]
    assert (report["imported"], report["invalid"]) == (1, 1)
    assert "NUL" in report["results"][1]["reason"]
