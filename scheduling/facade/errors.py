"""The Twilio-compatible API's answers for what Django answers itself (an unknown path under
``/2010-04-01/``, a method no view takes, a 500): Twilio's error body, as the SDKs parse it, not Django's
HTML page. The views answer their own errors (``resources.TwilioError``); this middleware, right inside
smsgw.http.boundary's, covers the rest."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from scheduling.facade.resources import API_VERSION, TwilioError
from smsgw.http.boundary import is_json, logged_as

PREFIX = f"/{API_VERSION}/"
# Twilio's codes for the statuses Django answers: 20404 not found, 20004 method not allowed, 20001 any
# other bad request, 20500 an internal error (twilio.com/docs/api/errors/<code>).
_CODES = {404: 20404, 405: 20004, 500: 20500}
_MESSAGES = {404: "The requested resource was not found", 405: "Method not allowed", 500: "Internal error"}


def twilio_shaped(response: HttpResponse) -> HttpResponse:
    status = response.status_code
    if status < 400 or is_json(response):
        return response
    code = _CODES.get(status, 20001 if status < 500 else 20500)
    error = TwilioError(status, code, _MESSAGES.get(status, "Request failed"))
    return logged_as(response, JsonResponse(error.body(), status=status))


class FacadeErrorsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        return twilio_shaped(response) if request.path_info.startswith(PREFIX) else response
