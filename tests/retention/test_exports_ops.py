"""The operators' side of the exports: `manage.py exports_run` (one pass, its clock from --now) and the
admin's read-only list."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from retention.models import Export
from tests.factories import tenant_with_key
from tests.retention.exporting import DAY, NOW, at, finished

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite, pytest.mark.usefixtures("export_storage")]


def test_the_command_runs_one_pass_at_the_given_clock():
    acme, _ = tenant_with_key("acme")
    finished(acme, at(DAY, 9))
    out = StringIO()

    call_command("exports_run", "--now", NOW.isoformat(), stdout=out)

    assert out.getvalue().splitlines()[-1] == "EXPORTS_DONE " + json.dumps(
        {"written": 1, "rows": 1, "tenants": 1, "failed": 0, "pruned": 0}
    )
    export = Export.objects.get()
    assert (export.tenant_id, export.day, export.created_at) == (acme.pk, DAY, NOW)


@pytest.mark.parametrize("value", ["yesterday", "2026-12-05T06:00:00"])
def test_the_command_refuses_a_clock_that_is_not_an_instant(value):
    with pytest.raises(CommandError, match="--now"):
        call_command("exports_run", "--now", value)
    assert Export.objects.count() == 0


def test_the_admin_lists_exports_and_changes_nothing():
    acme, _ = tenant_with_key("acme")
    finished(acme, at(DAY, 9))
    call_command("exports_run", "--now", NOW.isoformat(), stdout=StringIO())
    export = Export.objects.get()
    User.objects.create_superuser("ops", "ops@example.com", "pw-for-tests-only")
    client = Client()
    client.force_login(User.objects.get(username="ops"))

    listing = client.get("/admin/retention/export/")
    page = client.get(f"/admin/retention/export/{export.pk}/change/")

    assert listing.status_code == 200 and export.public_id in listing.content.decode()
    assert page.status_code == 200 and export.sha256 in page.content.decode()
    assert client.get("/admin/retention/export/add/").status_code == 403
    assert client.post(f"/admin/retention/export/{export.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Export.objects.filter(pk=export.pk).exists()
