"""The base of every admin API view: admin authentication, JSON in and out, the envelope's
error handler, ``Cache-Control: no-store``."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import JSONParser
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from proxy.admin_api.authentication import (
    AdminApiKeyAuthentication,
    AdminSessionAuthentication,
    IsAdmin,
)
from proxy.admin_api.envelope import admin_exception_handler, bad_request
from proxy.admin_api.fields import refuse_nul


class JsonWhateverAccept(DefaultContentNegotiation):
    """Every answer is JSON (or, for the connection test, an event stream the view builds
    itself), whatever the client's Accept says: an EventSource asks for text/event-stream and
    must still get the envelope when it is refused."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class DepthSafeJSONParser(JSONParser):
    """DRF's JSON parser, with JSON nested too deep for the decoder (``RecursionError``) a
    malformed body (40000) like any other, not a 500: the log-in route takes it anonymously."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON nested too deep") from None


class AdminAPIView(APIView):
    authentication_classes = [AdminApiKeyAuthentication, AdminSessionAuthentication]
    permission_classes = [IsAdmin]
    parser_classes = [DepthSafeJSONParser]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JsonWhateverAccept
    # OPTIONS is not part of the API: 405 in the envelope, not DRF's self-description.
    metadata_class = None

    def get_exception_handler(self):
        return admin_exception_handler

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication first: 401 before 400
        for name, values in request.query_params.lists():
            refuse_nul(name, "a query parameter's name")
            refuse_nul(values, name)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        response["Cache-Control"] = "no-store"
        return response

    def json_object(self, request) -> dict[str, Any]:
        """The body as a JSON object (an empty body is ``{}``); 40001 for any other JSON."""
        data = request.data
        if data is None or (not data and not isinstance(data, list | dict)):
            return {}
        if not isinstance(data, dict):
            raise bad_request("The body must be a JSON object")
        refuse_nul(data, "the body")
        return data


class PublicAPIView(AdminAPIView):
    """Routes that answer without an admin (log-in and its status)."""

    authentication_classes: list = []
    permission_classes: list = []
