from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from proxy.v1.errors import request_id_for


@csrf_exempt
async def unknown_route(request: HttpRequest, path: str = "") -> HttpResponse:
    """Unknown paths under /v1 and /api answer JSON, not an HTML page (spec §1.1), with the
    request id every answer echoes (spec §1.3)."""
    response = JsonResponse(
        {"code": 40401, "message": "API route not found", "data": None}, status=404
    )
    response["x-request-id"] = request_id_for(request)
    return response
