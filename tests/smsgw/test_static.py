"""The admin's CSS, JS and icons are served by the app in every mode, DEBUG off (WhiteNoise): from the
installed apps outside production, from collectstatic's output (content-hashed, compressed, cached for
a year) in production."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from django.test import Client


def test_static_files_are_served_with_debug_off(settings):
    settings.DEBUG = False
    response = Client().get("/static/admin/css/base.css")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/css")
    assert b"--body-bg" in b"".join(response.streaming_content)


@pytest.mark.django_db
def test_admin_login_page_links_styles_that_are_served(settings):
    settings.DEBUG = False
    client = Client()
    page = client.get("/admin/login/").content.decode()
    hrefs = re.findall(r'href="(/static/[^"]+\.css)"', page)
    assert hrefs
    for href in hrefs:
        assert client.get(href).status_code == 200, href


@pytest.mark.django_db
def test_production_serves_collectstatic_output_hashed_and_cached(settings, tmp_path):
    settings.DEBUG = False
    settings.WHITENOISE_USE_FINDERS = False
    settings.STATIC_ROOT = tmp_path
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
    call_command("collectstatic", "--noinput", "-v", "0")
    client = Client()  # a new handler: WhiteNoise indexes STATIC_ROOT when the middleware is built
    page = client.get("/admin/login/").content.decode()
    href = re.search(r'href="(/static/admin/css/base\.[0-9a-f]{12}\.css)"', page).group(1)
    response = client.get(href, HTTP_ACCEPT_ENCODING="gzip")
    assert response.status_code == 200
    assert response["Content-Encoding"] == "gzip"
    assert "max-age=315360000" in response["Cache-Control"]
    assert client.get("/static/admin/css/base.css").status_code == 200  # unhashed name still served
