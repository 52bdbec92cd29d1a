from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt


@csrf_exempt
async def unknown_route(request: HttpRequest, path: str = "") -> HttpResponse:
    """Unknown paths under /v1 and /api answer JSON, not an HTML page (spec §1.1)."""
    return JsonResponse({"code": 40401, "message": "API route not found", "data": None}, status=404)
