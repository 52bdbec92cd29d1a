"""Who may use the admin API (spec §6.1, §6.2): the envelope's 401 for every route without
credentials, log-in through the shared throttle and session store, log-out, the admin API key,
and cookie writes from another origin."""

from __future__ import annotations

import hashlib

import pytest
from django.test import Client
from django.urls import URLPattern
from django.utils import timezone

from proxy.admin_api.urls import admin_api_patterns
from proxy.admin_api.views.base import PublicAPIView
from proxy.models import AdminLoginEvent, ClientApiKey, RuntimeSettings
from proxy.services.admin_api_key import admin_api_key_regenerate
from tests.proxy.admin_api.conftest import COOKIE, PASSWORD, AdminClient, data_of, error_of


def _protected_routes() -> list[tuple[str, str]]:
    routes = []
    for pattern in admin_api_patterns:
        view = getattr(pattern.callback, "view_class", None)
        if not isinstance(pattern, URLPattern) or view is None or issubclass(view, PublicAPIView):
            continue
        for method in ("get", "post", "put", "delete"):
            if hasattr(view, method):
                routes.append((method.upper(), f"/api/admin/{pattern.pattern}"))
    return routes


PROTECTED = _protected_routes()


def test_every_route_but_login_and_status_is_protected():
    # 42 operations behind authentication; log-in, its status and log-out are public.
    assert len(PROTECTED) == 42
    assert ("PUT", "/api/admin/keys/policy") in PROTECTED
    assert ("PUT", "/api/admin/accounts/policy") in PROTECTED
    assert ("GET", "/api/admin/dashboard/runway") in PROTECTED
    assert ("GET", "/api/admin/accounts") in PROTECTED
    assert ("POST", "/api/admin/accounts/import") in PROTECTED
    assert ("DELETE", "/api/admin/settings/admin-api-key") in PROTECTED


@pytest.mark.parametrize(("method", "path"), PROTECTED)
def test_without_credentials_every_route_answers_the_401_envelope(anonymous, method, path):
    response = anonymous.generic(method, path, data="{}", content_type="application/json")

    assert error_of(response, 401, 40101) == "Admin session required"


def test_an_unknown_session_cookie_is_no_session(anonymous):
    anonymous.cookies[COOKIE] = "sess_" + "A" * 43

    assert error_of(anonymous.get("/api/admin/accounts"), 401, 40101) == "Admin session required"
    assert data_of(anonymous.get("/api/admin/auth/status")) == {"authenticated": False}


def test_log_in_sets_the_shared_session_cookie_and_opens_the_django_admin(admin, settings):
    client = AdminClient()
    assert data_of(client.get("/api/admin/auth/status")) == {"authenticated": False}

    response = client.post_json("/api/admin/login", {"username": "admin", "password": PASSWORD})

    data = data_of(response)
    assert data["expiresAt"].endswith("+08:00")
    cookie = response.cookies[COOKIE]
    assert cookie.value.startswith("sess_")
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Lax"
    assert cookie["path"] == "/"
    assert cookie["max-age"] == settings.ADMIN_SESSION_TTL_MINUTES * 60
    assert data_of(client.get("/api/admin/auth/status")) == {"authenticated": True}
    # One identity: the same cookie opens the Django admin.
    assert client.get("/admin/").status_code == 200
    event = AdminLoginEvent.objects.get()
    assert (event.surface, event.outcome) == ("api", "success")


def test_log_in_over_tls_marks_the_cookie_secure(admin):
    response = AdminClient().post_json("/api/admin/login", {"password": PASSWORD}, secure=True)

    assert data_of(response)
    assert response.cookies[COOKIE]["secure"] is True


def test_a_wrong_password_is_40102_and_sets_no_cookie(admin):
    response = AdminClient().post_json("/api/admin/login", {"username": "admin", "password": "x"})

    assert error_of(response, 401, 40102) == "Invalid admin credentials"
    assert COOKIE not in response.cookies
    assert AdminLoginEvent.objects.get().reason == "wrong_password"


def test_log_in_validation_errors(admin):
    client = AdminClient()

    assert error_of(client.post_json("/api/admin/login", {}), 400, 40001) == (
        "password: This field is required."
    )
    malformed = client.post("/api/admin/login", data="{", content_type="application/json")
    assert error_of(malformed, 400, 40000) == "Malformed JSON body"
    assert error_of(client.post_json("/api/admin/login", [1]), 400, 40001) == (
        "The body must be a JSON object"
    )
    assert AdminLoginEvent.objects.count() == 0


@pytest.mark.slow
def test_five_failures_lock_out_both_surfaces(admin, settings):
    client = AdminClient()
    for _ in range(5):
        error_of(client.post_json("/api/admin/login", {"password": "wrong"}), 401, 40102)

    locked = client.post_json("/api/admin/login", {"password": PASSWORD})

    assert error_of(locked, 429, 42901) == "Too many failed log-in attempts; try again later"
    assert int(locked["Retry-After"]) > 800
    assert COOKIE not in locked.cookies
    # The Django admin's form shares the limiter.
    page = Client().post("/admin/login/?next=/admin/", {"username": "admin", "password": PASSWORD})
    assert page.status_code == 429


def test_log_out_ends_the_session_everywhere(api, redis_client, settings):
    token = api.cookies[COOKIE].value
    key = f"{settings.REDIS_KEY_PREFIX}admin:session:{hashlib.sha256(token.encode()).hexdigest()}"
    assert redis_client.exists(key) == 1

    response = api.post_json("/api/admin/logout")

    assert data_of(response) == {"message": "Logged out successfully"}
    assert response.cookies[COOKIE]["max-age"] == 0
    assert redis_client.exists(key) == 0
    leftover = AdminClient()
    leftover.cookies[COOKIE] = token
    assert error_of(leftover.get("/api/admin/keys"), 401, 40101)
    assert leftover.get("/admin/").status_code == 302  # the Django admin's session ended too


def test_a_django_admin_log_in_opens_the_api(admin):
    client = Client()
    client.post("/admin/login/?next=/admin/", {"username": "admin", "password": PASSWORD})

    response = client.get("/api/admin/settings")

    assert data_of(response)["rotationStrategy"] == "smart"


def test_the_admin_api_key_authenticates_and_is_stored_as_its_sha256(admin, anonymous):
    key = admin_api_key_regenerate(now=timezone.now())
    stored = RuntimeSettings.objects.get().admin_api_key_hash

    assert key.startswith("admin-") and len(key) == 6 + 64
    assert stored == hashlib.sha256(key.encode()).hexdigest()
    assert data_of(anonymous.get("/api/admin/settings", headers={"x-api-key": key}))


def test_a_wrong_admin_api_key_is_40103_even_with_a_valid_cookie(api):
    response = api.get("/api/admin/settings", headers={"x-api-key": "admin-" + "0" * 64})

    assert error_of(response, 401, 40103) == "Invalid admin API key"


def test_regenerate_shows_the_key_once_exists_and_delete(api):
    assert data_of(api.get("/api/admin/settings/admin-api-key")) == {"exists": False}

    key = data_of(api.post_json("/api/admin/settings/admin-api-key/regenerate"))["key"]

    assert data_of(api.get("/api/admin/settings/admin-api-key")) == {"exists": True}
    assert key not in str(data_of(api.get("/api/admin/settings")))
    replaced = data_of(api.post_json("/api/admin/settings/admin-api-key/regenerate"))["key"]
    stale = AdminClient(headers={"x-api-key": key})
    assert error_of(stale.get("/api/admin/settings"), 401, 40103)
    assert data_of(AdminClient(headers={"x-api-key": replaced}).get("/api/admin/settings"))
    assert data_of(api.delete("/api/admin/settings/admin-api-key")) == {"deleted": True}
    assert data_of(api.get("/api/admin/settings/admin-api-key")) == {"exists": False}
    gone = AdminClient(headers={"x-api-key": replaced})
    assert error_of(gone.get("/api/admin/settings"), 401, 40103)


def test_a_cookie_write_from_another_origin_is_refused(api):
    response = api.post_json(
        "/api/admin/keys", {"name": "from evil"}, headers={"origin": "https://evil.example"}
    )

    assert error_of(response, 403, 40301).startswith("Cross-origin write refused")
    assert ClientApiKey.objects.count() == 0
    same = api.post_json(
        "/api/admin/keys", {"name": "mine"}, headers={"origin": "http://testserver"}
    )
    assert data_of(same)["name"] == "mine"
    # Reads from anywhere are harmless (the browser keeps the answer from the other origin).
    assert data_of(api.get("/api/admin/keys", headers={"origin": "https://evil.example"}))


@pytest.mark.parametrize("path", ["/api/admin/accounts/quota", "/api/admin/accounts/test"])
def test_a_cross_site_link_cannot_start_an_acting_get_with_the_cookie(api, path):
    # SameSite=Lax sends the cookie on a top-level navigation from another site; the browser
    # marks it cross-site, and the route must not run (it would call the upstream).
    cross = api.get(path, {"id": "acc_any"}, headers={"sec-fetch-site": "cross-site"})

    assert error_of(cross, 403, 40301).startswith("Cross-site request refused")
    # The console's own fetches are same-origin and reach the route (here: an unknown account).
    own = api.get(path, {"id": "acc_any"}, headers={"sec-fetch-site": "same-origin"})
    assert own.status_code != 403


def test_unknown_admin_routes_and_methods_answer_the_envelope(api):
    assert error_of(api.get("/api/admin/nothing/here"), 404, 40401) == "API route not found"
    assert error_of(api.delete("/api/admin/accounts"), 405, 40501) == "Method not allowed"
