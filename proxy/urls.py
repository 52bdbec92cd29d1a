from django.urls import path, re_path

from proxy.v1 import views

urlpatterns = [
    path("v1/responses", views.responses, name="v1-responses"),
    path("v1/responses/review", views.responses_review, name="v1-responses-review"),
    re_path(r"^(?:v1|api)(?:/(?P<path>.*))?$", views.unknown_route, name="api-unknown-route"),
]
