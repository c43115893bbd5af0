"""The headers that tell a client it used a deprecated name (docs/compatibility.md): RFC 9745
``Deprecation`` (a structured-field date, ``@<unix seconds>``: since when), RFC 8594 ``Sunset`` (an HTTP-date:
after when it may stop working) and ``Link: <policy>; rel="deprecation"``. Only on answers to requests that
used one, so a client that moved on sees none; the schema marks the names ``deprecated`` as well."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.utils.http import http_date
from drf_spectacular.utils import OpenApiParameter


@dataclass(frozen=True)
class Deprecated:
    """A deprecated request name: what replaces it, since when it is deprecated, and its sunset."""

    name: str
    instead: str
    since: datetime
    sunset: datetime


# Every deprecated name of /v1 (docs/compatibility.md, "Deprecated aliases"). The recipient became `to`
# everywhere on 2 December 2026; the policy keeps a deprecated name working for at least 12 months.
ALIASES = {
    d.name: d
    for d in (
        Deprecated("phone", "to", datetime(2026, 12, 2, tzinfo=UTC), datetime(2027, 12, 2, tzinfo=UTC)),
        Deprecated("number", "to", datetime(2026, 12, 2, tzinfo=UTC), datetime(2027, 12, 2, tzinfo=UTC)),
    )
}
HEADERS = ("Deprecation", "Sunset", "Link")


def deprecation_headers(response, names: Iterable[str]):
    """Mark ``response`` for a request that used the deprecated ``names`` (none: left as it is). With more
    than one, the earliest dates count."""
    used = [ALIASES[n] for n in names]
    if not used:
        return response
    response["Deprecation"] = f"@{int(min(d.since for d in used).timestamp())}"
    response["Sunset"] = http_date(min(d.sunset for d in used).timestamp())
    link = f'<{settings.DEPRECATION_DOCS_URL}>; rel="deprecation"; type="text/html"'
    response["Link"] = f"{response['Link']}, {link}" if response.has_header("Link") else link
    return response


def header_parameters(codes: list[int]) -> list[OpenApiParameter]:
    """The three headers, declared on the answers (``codes``) of an operation that reads a deprecated name."""
    when = "Only when the request used a deprecated name (docs/compatibility.md)."
    return [
        OpenApiParameter(
            "Deprecation",
            str,
            OpenApiParameter.HEADER,
            response=codes,
            description=f"RFC 9745: since when the name is deprecated, `@<unix seconds>`. {when}",
        ),
        OpenApiParameter(
            "Sunset",
            str,
            OpenApiParameter.HEADER,
            response=codes,
            description=f"RFC 8594: an HTTP-date after which the name may stop working. {when}",
        ),
        OpenApiParameter(
            "Link",
            str,
            OpenApiParameter.HEADER,
            response=codes,
            description=f'`<policy URL>; rel="deprecation"`: the compatibility policy. {when}',
        ),
    ]
