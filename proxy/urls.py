from django.urls import path, re_path

from proxy.metrics import views as metrics_views
from proxy.v1 import models, views
from proxy.v1.routes import POST_ROUTES

urlpatterns = [
    path("metrics", metrics_views.metrics, name="metrics"),
    *(path(route.removeprefix("/"), view, name=name) for route, view, name in POST_ROUTES),
    path("v1/models", models.list_models, name="v1-models"),
    path("v1/models/catalog", models.model_catalog, name="v1-models-catalog"),
    path("v1/models/<path:model_id>/info", models.model_info, name="v1-model-info"),
    path("v1/models/<path:model_id>", models.model_detail, name="v1-model"),
    re_path(r"^(?:v1|api)(?:/(?P<path>.*))?$", views.unknown_route, name="api-unknown-route"),
]
