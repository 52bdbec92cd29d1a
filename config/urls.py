from django.contrib import admin
from django.urls import include, path

from config.health import healthz
from proxy.admin_api.urls import admin_api_patterns, schema_patterns

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    # Before proxy.urls, whose catch-all answers every other /api path with a JSON 404.
    path("api/admin/", include(admin_api_patterns)),
    path("api/schema/", include(schema_patterns)),
    path("", include("proxy.urls")),
    path("telegram/", include("bots.urls")),
]
