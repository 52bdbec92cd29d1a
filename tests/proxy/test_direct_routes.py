"""The /v1 handler serves the POST routes by exact path, without Django's URL resolver
(config/v1_handler.py): its table must say what proxy/urls.py says, or a route added or moved
there would be answered by the wrong view or checked for its key differently."""

from __future__ import annotations

from django.urls import resolve

from config.v1_handler import DIRECT_VIEWS
from proxy.v1.common import BODY_ROUTE_PATHS


def test_every_direct_path_is_the_urlconfs_own_view():
    for path, view in DIRECT_VIEWS.items():
        assert resolve(path).func is view, path


def test_the_key_is_checked_before_the_body_on_exactly_the_post_routes():
    post_routes = {
        "v1-responses",
        "v1-responses-review",
        "v1-responses-compact",
        "v1-chat-completions",
    }

    assert {resolve(path).url_name for path in BODY_ROUTE_PATHS} == post_routes
    assert set(DIRECT_VIEWS) == set(BODY_ROUTE_PATHS)
