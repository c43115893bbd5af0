"""The API reference, served by the app itself: Redoc at /v1/docs, Swagger UI at /v1/docs/swagger, both
reading /v1/openapi.json. Their scripts and styles (drf-spectacular-sidecar's builds) are served by
``docs_asset`` from the installed package, so the pages need no CDN, no ``collectstatic`` and no static
file server: they work the same with DEBUG off, in embedded mode and in production."""

from __future__ import annotations

import mimetypes
from pathlib import Path

import drf_spectacular_sidecar
from django.http import FileResponse, HttpRequest
from django.urls import path, reverse
from django.views.decorators.http import require_safe
from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerView

ASSETS_DIR = Path(drf_spectacular_sidecar.__file__).parent / "static" / "drf_spectacular_sidecar"
# Only the package's own files are served: one fixed route each (no path parameter to climb out with);
# any other name under /v1/docs/assets/ is an ordinary 404.
ASSETS = frozenset(p.relative_to(ASSETS_DIR).as_posix() for p in ASSETS_DIR.rglob("*") if p.is_file())
# The file names do not change within a sidecar version, and the version is in the URL.
ASSET_MAX_AGE = 7 * 86400
VERSION = drf_spectacular_sidecar.__version__


def asset_url(name: str) -> str:
    return reverse(f"docs-asset-{name}")


def asset_urlpatterns() -> list:
    return [
        path(f"v1/docs/assets/{VERSION}/{name}", docs_asset, {"name": name}, name=f"docs-asset-{name}")
        for name in sorted(ASSETS)
    ]


class RedocView(SpectacularRedocView):
    authentication_classes = []
    permission_classes = []
    url_name = "openapi"
    template_name = "smsgw/redoc.html"

    @staticmethod
    def _redoc_standalone():
        return asset_url("redoc/bundles/redoc.standalone.js")


class SwaggerView(SpectacularSwaggerView):
    authentication_classes = []
    permission_classes = []
    url_name = "openapi"

    @staticmethod
    def _swagger_ui_resource(filename):
        return asset_url(f"swagger-ui-dist/{filename}")

    @staticmethod
    def _swagger_ui_favicon():
        return asset_url("swagger-ui-dist/favicon-32x32.png")


@require_safe
def docs_asset(request: HttpRequest, name: str) -> FileResponse:
    content_type, _ = mimetypes.guess_type(name)
    response = FileResponse((ASSETS_DIR / name).open("rb"), content_type=content_type or "text/plain")
    response["Cache-Control"] = f"public, max-age={ASSET_MAX_AGE}"
    return response
