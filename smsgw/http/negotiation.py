"""Content negotiation for an API that speaks JSON only (REST_FRAMEWORK["DEFAULT_CONTENT_NEGOTIATION_CLASS"]).

DRF answers 406 when no renderer matches the request's ``Accept`` header, before authentication: a
status the contract does not document, for a header a client may send malformed (``Accept: aV91c[4f``,
found by the schema fuzz) or browser-shaped (``text/html``). Like Stripe's and Twilio's APIs, smsgw
answers JSON whatever ``Accept`` says. An explicit format (``?format=`` or a path's ``format``, as the
schema view has) is still honoured, and still a 404 when unknown.

Errors are problem details (RFC 9457, smsgw.http.problems) whose media type is ``application/problem+json``:
that is the answer unless the client's ``Accept`` prefers ``application/json`` to it (``Accept:
application/json`` alone, or with ``*/*`` at a lower ``q``), when the same body is labelled
``application/json``: a client written for the earlier ``application/json`` errors that checks the type it
asked for keeps working. An absent, wildcard or unreadable ``Accept`` gets ``application/problem+json``
(RFC 9457, section 3), as any other one does (no 406 here either)."""

from __future__ import annotations

import contextlib

from rest_framework import exceptions
from rest_framework.negotiation import DefaultContentNegotiation

from smsgw.http.problems import PROBLEM_JSON


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


JSON = "application/json"


def _quality(accept: str, media_type: str) -> float:
    """The ``q`` the Accept header gives ``media_type``: from its most specific matching range, 0 if none."""
    kind = media_type.split("/")[0]
    best: tuple[int, float] = (-1, 0.0)
    for part in accept.split(","):
        name, *params = (p.strip() for p in part.split(";"))
        name = name.lower()
        specificity = {media_type: 2, f"{kind}/*": 1, "*/*": 0}.get(name)
        if specificity is None or specificity < best[0]:
            continue
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                with contextlib.suppress(ValueError):
                    q = min(max(float(value), 0.0), 1.0)
        best = (specificity, q)
    return best[1]


def problem_media_type(accept: str) -> str:
    """The media type of an error answer to a request with this ``Accept`` (the module's docstring)."""
    if not accept.strip():
        return PROBLEM_JSON
    problem, plain = _quality(accept, PROBLEM_JSON), _quality(accept, JSON)
    return JSON if plain > problem else PROBLEM_JSON
