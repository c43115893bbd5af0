"""The API reference pages: served by the app without a key, with DEBUG off, and everything they load
(scripts, styles, icon, the schema) comes from this app, never from a CDN."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from smsgw.http.docs import VERSION

pytestmark = pytest.mark.django_db

REFERENCE = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url\(\s*["']?([^"')]+)""")


def references(html: str) -> list[str]:
    return [a or b for a, b in REFERENCE.findall(html)]


@pytest.mark.parametrize(
    ("page", "assets"),
    [
        ("/v1/docs", {"redoc.standalone.js"}),
        ("/v1/docs/swagger", {"swagger-ui.css", "swagger-ui-bundle.js", "swagger-ui-standalone-preset.js"}),
    ],
)
def test_reference_page_and_its_assets_load_from_this_app(settings, page, assets):
    settings.DEBUG = False
    client = Client()
    resp = client.get(page)
    assert resp.status_code == 200 and resp["Content-Type"].startswith("text/html")
    html = resp.content.decode()
    assert "/v1/openapi.json" in html
    # Nothing the page loads lives on another host (no CDN, no web fonts).
    assert not re.search(r"""(?:src|href)\s*=\s*["'](?:https?:)?//""", html), html
    refs = references(html)
    assert {r.rsplit("/", 1)[-1] for r in refs} >= assets, refs
    for ref in refs:
        assert ref.startswith("/v1/docs/assets/"), ref
        asset = client.get(ref)
        assert asset.status_code == 200, ref
        body = b"".join(asset.streaming_content)
        assert body and asset["Content-Type"].split(";")[0] in (
            "text/javascript",
            "application/javascript",
            "text/css",
            "image/png",
        ), (ref, asset["Content-Type"])
        assert "max-age" in asset["Cache-Control"]
    assert client.get("/v1/openapi.json").status_code == 200


@pytest.mark.parametrize(
    "name",
    ["nope.js", "../__init__.py", "..%2F..%2F__init__.py", "redoc/../../apps.py", "%00.js", "redoc/bundles"],
)
def test_only_the_packaged_assets_are_served(name):
    for version in ("1", VERSION):
        resp = Client().get(f"/v1/docs/assets/{version}/{name}")
        # 404, or a 400 where the API's edge refuses the path itself (a NUL).
        assert resp.status_code in (400, 404), (version, name)
        assert b"import" not in resp.content


def test_the_reference_needs_no_key_and_ignores_a_bad_one():
    resp = Client().get("/v1/docs", HTTP_AUTHORIZATION="Bearer sk_bad_bad")
    assert resp.status_code == 200
