"""`manage.py tenant_create`: the tenant it makes and the errors that name the option."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from smsgw.models import Tenant

pytestmark = pytest.mark.django_db


def test_allowed_countries_are_stored_upper_case_and_sorted():
    out = io.StringIO()
    call_command(
        "tenant_create",
        "Demo",
        "--from",
        "+14155550100",
        "--allowed-countries",
        "us, gb",
        stdout=out,
        stderr=io.StringIO(),
    )
    tenant = Tenant.objects.get(slug="demo")
    assert tenant.allowed_countries == ["GB", "US"]
    assert out.getvalue().strip().startswith("sk_")


def test_a_bad_country_is_refused_and_nothing_is_made():
    with pytest.raises(CommandError, match="--allowed-countries"):
        call_command(
            "tenant_create",
            "Demo",
            "--allowed-countries",
            "US,GBR",
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
    assert not Tenant.objects.exists()


def test_it_prints_the_twilio_compatible_credentials():
    err = io.StringIO()
    call_command("tenant_create", "Demo", "--from", "+14155550100", stdout=io.StringIO(), stderr=err)
    tenant = Tenant.objects.get(slug="demo")
    assert tenant.facade_account_sid.startswith("AC") and len(tenant.facade_account_sid) == 34
    text = err.getvalue()
    assert tenant.facade_account_sid in text and tenant.callback_signing_key in text
    assert "API key SID SK" in text
    other = Tenant.objects.create(name="Other", slug="other")
    assert other.facade_account_sid != tenant.facade_account_sid
    assert other.callback_signing_key != tenant.callback_signing_key


def test_scopes_default_to_full_access_and_can_be_chosen():
    from smsgw.models import ApiKey

    call_command("tenant_create", "Full", stdout=io.StringIO(), stderr=io.StringIO())
    assert ApiKey.objects.get(tenant__slug="full").scopes == ["*"]
    out, err = io.StringIO(), io.StringIO()
    call_command("tenant_create", "Narrow", "--scopes", "messages:send,messages:read", stdout=out, stderr=err)
    assert ApiKey.objects.get(tenant__slug="narrow").scopes == ["messages:send", "messages:read"]
    assert "messages:send,messages:read" in err.getvalue()


@pytest.mark.parametrize("scopes", ["messages:send,messages:everything", ""])
def test_an_unknown_or_empty_scope_list_is_refused_and_nothing_is_made(scopes):
    with pytest.raises(CommandError, match="--scopes"):
        call_command("tenant_create", "Demo", "--scopes", scopes, stdout=io.StringIO(), stderr=io.StringIO())
    assert not Tenant.objects.exists()


def test_the_key_answers_within_its_scopes():
    from django.test import Client

    out = io.StringIO()
    call_command("tenant_create", "Demo", "--scopes", "messages:read", stdout=out, stderr=io.StringIO())
    auth = {"HTTP_AUTHORIZATION": f"Bearer {out.getvalue().strip()}"}
    assert Client().get("/v1/messages", **auth).status_code == 200
    refused = Client().get("/v1/schedules", **auth)
    assert refused.status_code == 403 and refused.json()["error"]["required_scope"] == "schedules:read"


def test_a_new_tenant_starts_with_the_finite_default_quotas(settings):
    call_command("tenant_create", "Demo", stdout=io.StringIO(), stderr=io.StringIO())
    tenant = Tenant.objects.get(slug="demo")
    assert tenant.daily_message_quota == settings.TENANT_DEFAULT_DAILY_MESSAGE_QUOTA == 1_000_000
    assert tenant.max_pending_scheduled == settings.TENANT_DEFAULT_MAX_PENDING_SCHEDULED == 0  # see settings
    assert tenant.send_rate_per_second == settings.TENANT_DEFAULT_SEND_RATE_PER_SECOND == 1_000
    assert tenant.api_rate_per_second is None  # SMSGW_API_RATE_PER_SECOND applies (50 by default)


def test_the_defaults_come_from_settings_and_an_operator_raises_them_per_tenant(settings):
    settings.TENANT_DEFAULT_MAX_PENDING_SCHEDULED = 2
    out = io.StringIO()
    call_command("tenant_create", "Demo", "--from", "+14155550100", stdout=out, stderr=io.StringIO())
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {out.getvalue().strip().splitlines()[-1]}")
    later = (timezone.now() + timedelta(days=1)).isoformat()
    body = {"to": "+14155550123", "body": "hi", "send_at": later}
    assert [api.post("/v1/messages", body, format="json").status_code for _ in range(3)] == [201, 201, 429]
    Tenant.objects.filter(slug="demo").update(max_pending_scheduled=10)  # the operator raises it
    assert api.post("/v1/messages", body, format="json").status_code == 201
