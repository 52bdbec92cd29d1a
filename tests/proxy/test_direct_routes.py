"""The /v1 handler serves the POST routes by exact path, without Django's URL resolver
(proxy/v1/handler.py), from the one table both it and proxy/urls.py are built from
(proxy/v1/routes.py): each path must resolve to its view under its name, or a route added or
moved would be answered by the wrong view or checked for its key differently."""

from __future__ import annotations

from django.urls import resolve

from proxy.v1.routes import POST_ROUTES, POST_VIEWS


def test_every_direct_path_is_the_urlconfs_own_view():
    for path, view in POST_VIEWS.items():
        assert resolve(path).func is view, path


def test_the_key_is_checked_before_the_body_on_exactly_the_post_routes():
    post_routes = {
        "v1-responses",
        "v1-responses-review",
        "v1-responses-compact",
        "v1-chat-completions",
    }

    assert {resolve(path).url_name for path in POST_VIEWS} == post_routes
    assert {name for _, _, name in POST_ROUTES} == post_routes
