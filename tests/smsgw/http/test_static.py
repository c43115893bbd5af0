"""The admin's CSS, JS and icons are served by the app in every mode, DEBUG off (WhiteNoise): from the
installed apps, and in production from collectstatic's output (content-hashed, compressed, cached for
a year) with the plain files as the fallback where collectstatic did not run."""

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


PRODUCTION_STORAGE = {"BACKEND": "smsgw.http.static.ForgivingManifestStorage"}


@pytest.fixture
def production_storage(settings, tmp_path):
    settings.DEBUG = False
    settings.STATIC_ROOT = tmp_path
    settings.STORAGES = {**settings.STORAGES, "staticfiles": PRODUCTION_STORAGE}


@pytest.mark.django_db
def test_production_serves_collectstatic_output_hashed_compressed_and_cached(production_storage):
    call_command("collectstatic", "--noinput", "-v", "0")
    client = Client()  # a new handler: WhiteNoise indexes STATIC_ROOT when the middleware is built
    page = client.get("/admin/login/").content.decode()
    href = re.search(r'href="(/static/admin/css/base\.[0-9a-f]{12}\.css)"', page).group(1)
    response = client.get(href, HTTP_ACCEPT_ENCODING="gzip")
    assert response.status_code == 200
    assert response["Content-Encoding"] == "gzip"
    assert "max-age=315360000" in response["Cache-Control"] and "immutable" in response["Cache-Control"]


@pytest.mark.django_db
def test_production_without_collectstatic_still_renders_a_styled_admin(production_storage):
    client = Client()
    response = client.get("/admin/login/")
    assert response.status_code == 200  # Django's strict manifest storage answers 500 here
    hrefs = re.findall(r'href="(/static/[^"]+\.css)"', response.content.decode())
    assert "/static/admin/css/base.css" in hrefs
    for href in hrefs:
        assert client.get(href).status_code == 200, href
