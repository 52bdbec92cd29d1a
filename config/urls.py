from django.contrib import admin
from django.urls import include, path
from django.views import defaults

from config.health import healthz
from proxy.admin_api.envelope import admin_bad_request
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


def bad_request(request, exception):
    """A 400 from Django itself (e.g. a Host not in ALLOWED_HOSTS): the admin API's envelope
    under /api/admin/, Django's page elsewhere."""
    return admin_bad_request(request, exception) or defaults.bad_request(request, exception)


handler400 = bad_request
