"""Content negotiation for an API that speaks JSON only (REST_FRAMEWORK["DEFAULT_CONTENT_NEGOTIATION_CLASS"]).

DRF answers 406 when no renderer matches the request's ``Accept`` header, before authentication: a
status the contract does not document, for a header a client may send malformed (``Accept: aV91c[4f``,
found by the schema fuzz) or browser-shaped (``text/html``). Like Stripe's and Twilio's APIs, smsgw
answers JSON whatever ``Accept`` says. An explicit format (``?format=`` or a path's ``format``, as the
schema view has) is still honoured, and still a 404 when unknown."""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.negotiation import DefaultContentNegotiation


class JsonWhateverTheAccept(DefaultContentNegotiation):
    def select_renderer(self, request, renderers, format_suffix=None):
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except exceptions.NotAcceptable:
            wanted = format_suffix or request.query_params.get(self.settings.URL_FORMAT_OVERRIDE)
            if wanted:  # an unknown format was a 404 before super() could get here
                renderers = self.filter_renderers(renderers, wanted)
            renderer = renderers[0]
            return renderer, renderer.media_type
