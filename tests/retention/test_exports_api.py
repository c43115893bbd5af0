"""GET /v1/exports, /v1/exports/{id} and /v1/exports/{id}/download (retention.api): the tenant's own
exports only, newest day first; the file as written (gzip, attachment); another tenant's export, an
expired one and an unknown id are each a 404."""

from __future__ import annotations

import gzip
import hashlib
import json
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from retention.exports import exports_run
from retention.models import Export
from tests.factories import tenant_with_key
from tests.retention.exporting import finished

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite, pytest.mark.usefixtures("export_storage")]


def client_for(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture
def two_tenants():
    """Acme with three days of exports (the last three days), Globex with one."""
    now = timezone.now()
    acme, acme_key = tenant_with_key("acme")
    globex, globex_key = tenant_with_key("globex")
    sent = [finished(acme, now - timedelta(days=back)) for back in (3, 2, 1)]
    finished(globex, now - timedelta(days=1), body="theirs")
    # Two days on, every one of those days is over (whatever the hour now): each has its export.
    exports_run(now=now + timedelta(days=2))
    return {"acme": (acme, acme_key, sent), "globex": (globex, globex_key)}


def test_the_list_is_the_tenants_own_exports_newest_day_first(two_tenants):
    acme, key, _ = two_tenants["acme"]
    mine = list(Export.objects.filter(tenant=acme).order_by("-day"))
    assert len(mine) >= 3

    first = client_for(key).get("/v1/exports", {"page_size": 2})

    assert first.status_code == 200
    page = first.json()
    assert [e["id"] for e in page["results"]] == [e.public_id for e in mine[:2]]
    assert page["results"][0] == {
        "id": mine[0].public_id,
        "day": mine[0].day.isoformat(),
        "rows": mine[0].rows,
        "size": mine[0].size,
        "sha256": mine[0].sha256,
        "created_at": mine[0].created_at.isoformat().replace("+00:00", "Z"),
        "expires_at": mine[0].expires_at.isoformat().replace("+00:00", "Z"),
        "download_url": f"/v1/exports/{mine[0].public_id}/download",
    }
    ids = [e["id"] for e in page["results"]]
    while page["next"]:
        page = client_for(key).get(page["next"]).json()
        ids += [e["id"] for e in page["results"]]
    assert ids == [e.public_id for e in mine]  # every one of Acme's, none of Globex's


def test_a_download_is_the_file_as_written(two_tenants):
    acme, key, sent = two_tenants["acme"]
    export = Export.objects.filter(tenant=acme, rows=1).order_by("day").first()

    resp = client_for(key).get(f"/v1/exports/{export.public_id}/download")

    assert resp.status_code == 200
    assert resp["Content-Type"] == "application/gzip"
    assert resp["Content-Disposition"] == f'attachment; filename="acme-{export.day.isoformat()}.jsonl.gz"'
    raw = b"".join(resp.streaming_content)
    assert len(raw) == export.size and hashlib.sha256(raw).hexdigest() == export.sha256
    (line,) = [json.loads(x) for x in gzip.decompress(raw).splitlines()]
    assert line["id"] == sent[0].public_id and line["body"] == "hello" and line["content"] is True


def test_another_tenants_export_is_not_found(two_tenants):
    _, key, _ = two_tenants["acme"]
    globex, _ = two_tenants["globex"]
    theirs = Export.objects.filter(tenant=globex).first()
    client = client_for(key)

    for path in (f"/v1/exports/{theirs.public_id}", f"/v1/exports/{theirs.public_id}/download"):
        resp = client.get(path)
        assert resp.status_code == 404
        assert resp.json()["error"]["code"] == "not_found"


def test_an_expired_export_is_gone_from_the_api_before_the_prune_removes_it(two_tenants):
    acme, key, _ = two_tenants["acme"]
    export = Export.objects.filter(tenant=acme).first()
    Export.objects.filter(pk=export.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    client = client_for(key)

    assert client.get(f"/v1/exports/{export.public_id}").status_code == 404
    assert client.get(f"/v1/exports/{export.public_id}/download").status_code == 404
    assert export.public_id not in [e["id"] for e in client.get("/v1/exports").json()["results"]]


def test_a_download_whose_file_is_missing_is_not_found(two_tenants):
    from django.core.files.storage import storages

    acme, key, _ = two_tenants["acme"]
    export = Export.objects.filter(tenant=acme).first()
    storages["exports"].delete(export.name)

    resp = client_for(key).get(f"/v1/exports/{export.public_id}/download")

    assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"


def test_an_unknown_query_parameter_is_refused_naming_it(two_tenants):
    _, key, _ = two_tenants["acme"]
    resp = client_for(key).get("/v1/exports", {"day": "2026-12-01"})
    assert resp.status_code == 400 and list(resp.json()["error"]["fields"]) == ["day"]
