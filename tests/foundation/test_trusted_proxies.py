"""Forwarded headers are believed only from the reverse proxies listed in TRUSTED_PROXIES."""

from __future__ import annotations

import ipaddress

from config.middleware import resolve_forwarded_request

TRUSTED = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("127.0.0.1/32"))


def test_headers_from_an_untrusted_peer_are_dropped():
    meta = {
        "REMOTE_ADDR": "203.0.113.9",
        "HTTP_X_FORWARDED_FOR": "1.2.3.4",
        "HTTP_X_FORWARDED_PROTO": "https",
        "HTTP_X_FORWARDED_HOST": "evil.example",
        "HTTP_CF_CONNECTING_IP": "5.6.7.8",
    }

    resolve_forwarded_request(meta, TRUSTED)

    assert meta == {"REMOTE_ADDR": "203.0.113.9"}


def test_nothing_is_trusted_by_default():
    meta = {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "1.2.3.4"}

    resolve_forwarded_request(meta, ())

    assert meta == {"REMOTE_ADDR": "127.0.0.1"}


def test_rightmost_untrusted_forwarded_address_is_the_client():
    meta = {
        "REMOTE_ADDR": "10.0.0.2",
        # spoofed-by-client, real client, an inner trusted hop
        "HTTP_X_FORWARDED_FOR": "9.9.9.9, 198.51.100.7, 10.0.0.5",
        "HTTP_X_FORWARDED_PROTO": "https",
    }

    resolve_forwarded_request(meta, TRUSTED)

    assert meta["REMOTE_ADDR"] == "198.51.100.7"
    assert meta["HTTP_X_FORWARDED_PROTO"] == "https"


def test_cf_connecting_ip_wins_from_a_trusted_peer_when_cloudflare_is_trusted():
    meta = {
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_X_FORWARDED_FOR": "198.51.100.7",
        "HTTP_CF_CONNECTING_IP": "2001:db8::1",
    }

    resolve_forwarded_request(meta, TRUSTED, trust_cf_connecting_ip=True)

    assert meta["REMOTE_ADDR"] == "2001:db8::1"


def test_a_spoofed_cf_connecting_ip_through_a_trusted_proxy_is_dropped_by_default(settings):
    """Finding 8: any client could send CF-Connecting-IP through a proxy that passes it on."""
    assert settings.TRUST_CF_CONNECTING_IP is False
    meta = {
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_X_FORWARDED_FOR": "198.51.100.7",
        "HTTP_CF_CONNECTING_IP": "203.0.113.66",
    }

    resolve_forwarded_request(meta, TRUSTED)

    assert meta == {"REMOTE_ADDR": "198.51.100.7", "HTTP_X_FORWARDED_FOR": "198.51.100.7"}


def test_garbage_forwarded_values_leave_the_peer_address():
    meta = {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "unknown, not-an-ip"}

    resolve_forwarded_request(meta, TRUSTED)

    assert meta["REMOTE_ADDR"] == "127.0.0.1"


def test_django_sees_https_and_the_client_through_a_trusted_proxy(client, settings):
    from django.http import JsonResponse
    from django.test import override_settings
    from django.urls import path

    def echo(request):
        return JsonResponse(
            {
                "ip": request.META["REMOTE_ADDR"],
                "secure": request.is_secure(),
                "host": request.get_host(),
            }
        )

    class urls:  # noqa: N801 - a throwaway URLconf
        urlpatterns = [path("echo", echo)]

    headers = {
        "HTTP_X_FORWARDED_FOR": "198.51.100.7",
        "HTTP_X_FORWARDED_PROTO": "https",
        "HTTP_X_FORWARDED_HOST": "support.example",
    }
    with override_settings(ROOT_URLCONF=urls, ALLOWED_HOSTS=["support.example", "testserver"]):
        with override_settings(TRUSTED_PROXIES=[ipaddress.ip_network("127.0.0.1/32")]):
            trusted = client.get("/echo", REMOTE_ADDR="127.0.0.1", **headers).json()
        untrusted = client.get("/echo", REMOTE_ADDR="127.0.0.1", **headers).json()

    assert trusted == {"ip": "198.51.100.7", "secure": True, "host": "support.example"}
    assert untrusted == {"ip": "127.0.0.1", "secure": False, "host": "testserver"}
