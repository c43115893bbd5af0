"""Senders belong to tenants (smsgw.tenancy.senders, docs/senders.md): assigned and released by operators
(the service, `manage.py sender_assign`, `tenant_create`, the admin), another tenant's refused unless
shared, the tenant's default always its own, the migration that gave deployed tenants their defaults, and
what sharing means: both send from it, and a STOP to it suppresses for both."""

from __future__ import annotations

import io
import re
import secrets
from importlib import import_module

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.test import Client
from rest_framework.test import APIClient
from twilio.request_validator import RequestValidator

from delivery.models import Suppression
from delivery.providers import get_adapter
from inbound.process import inbound_process_due
from scheduling.models import Message
from smsgw.models import SenderKind, Tenant, TenantSender
from smsgw.tenancy.senders import (
    SenderError,
    sender_assign,
    sender_parse,
    sender_release,
    tenant_owns_sender,
)
from tests.factories import message, recipient, tenant_with_key
from tests.smsgw.test_admin import _tenant_form, staff

pytestmark = pytest.mark.django_db

A_NUMBER, B_NUMBER, SHARED = "+12025550143", "+12125550199", "+14155550177"
POOL = "MG" + "c" * 32


@pytest.fixture
def a():
    return tenant_with_key("tenant-a", default_from=A_NUMBER)


@pytest.fixture
def b():
    return tenant_with_key("tenant-b", default_from=B_NUMBER)


def _api(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def _send(key: str, **fields):
    return _api(key).post("/v1/messages", {"to": recipient(1), "body": "hi", **fields}, format="json")


@pytest.mark.parametrize(
    ("raw", "kind", "value"),
    [
        (" +1 212 555 0199 ", SenderKind.NUMBER, B_NUMBER),
        ("12345", SenderKind.SHORT_CODE, "12345"),
        ("ACME Ltd", SenderKind.ALPHANUMERIC, "ACME Ltd"),
        (POOL, SenderKind.POOL, POOL),
    ],
)
def test_a_sender_is_parsed_to_its_kind_and_normal_form(raw, kind, value):
    assert sender_parse(raw) == (kind, value)


@pytest.mark.parametrize("raw", ["", "+1555", "12", "far too long a name", "ACME!"])
def test_a_bad_sender_is_refused(raw):
    with pytest.raises(SenderError):
        sender_parse(raw)


def test_another_tenants_sender_is_refused_unless_shared_and_then_both_rows_are(a, b):
    (ta, _), (tb, _) = a, b
    for taken in (B_NUMBER, "+1 212 555 0199"):
        with pytest.raises(SenderError, match="another tenant"):
            sender_assign(tenant=ta, sender=taken)
    sender_assign(tenant=tb, sender="BrandB")
    with pytest.raises(SenderError):
        sender_assign(tenant=ta, sender="BRANDB")  # the same brand in another case
    assert not tenant_owns_sender(ta, B_NUMBER)
    row = sender_assign(tenant=ta, sender=B_NUMBER, shared=True)
    assert row.shared and tenant_owns_sender(ta, B_NUMBER)
    assert set(TenantSender.objects.filter(value=B_NUMBER).values_list("tenant_id", "shared")) == {
        (ta.pk, True),
        (tb.pk, True),
    }
    # Released by one, the other's is its own again: no longer shared.
    assert sender_release(tenant=ta, sender=B_NUMBER) == 1
    assert list(TenantSender.objects.filter(value=B_NUMBER).values_list("tenant_id", "shared")) == [
        (tb.pk, False)
    ]


def test_the_default_sender_cannot_be_released(a):
    ta, _ = a
    with pytest.raises(SenderError, match="default"):
        sender_release(tenant=ta, sender=A_NUMBER)
    assert tenant_owns_sender(ta, A_NUMBER)


def test_a_sender_valid_on_one_provider_only(a):
    ta, _ = a
    sender_assign(tenant=ta, sender="12345", provider="vonage")
    assert tenant_owns_sender(ta, "12345", provider="vonage")
    assert not tenant_owns_sender(ta, "12345", provider="twilio")
    assert tenant_owns_sender(ta, A_NUMBER, provider="twilio")  # no provider given: any


def test_the_sender_assign_command_assigns_shares_and_releases(a, b):
    (ta, _), (tb, _) = a, b
    out = io.StringIO()
    call_command("sender_assign", "tenant-a", "ACME", stdout=out)
    assert "tenant-a may send from ACME" in out.getvalue() and tenant_owns_sender(ta, "ACME")
    with pytest.raises(CommandError, match="another tenant"):
        call_command("sender_assign", "tenant-b", "ACME", stdout=io.StringIO())
    call_command("sender_assign", "tenant-b", "ACME", "--shared", stdout=io.StringIO())
    assert tenant_owns_sender(tb, "ACME")
    call_command("sender_assign", "tenant-b", "ACME", "--release", stdout=io.StringIO())
    assert not tenant_owns_sender(tb, "ACME")
    with pytest.raises(CommandError, match="default"):
        call_command("sender_assign", "tenant-b", B_NUMBER, "--release", stdout=io.StringIO())
    with pytest.raises(CommandError, match="no tenant"):
        call_command("sender_assign", "nobody", "ACME", stdout=io.StringIO())
    with pytest.raises(CommandError, match="sender"):
        call_command("sender_assign", "tenant-a", "not a sender!", stdout=io.StringIO())


def test_tenant_create_assigns_its_sender_and_refuses_anothers(b):
    quiet = {"stdout": io.StringIO(), "stderr": io.StringIO()}
    call_command(
        "tenant_create", "New", "--from", "+1 202 555 0143", "--messaging-service-sid", POOL, **quiet
    )
    new = Tenant.objects.get(slug="new")
    assert set(new.senders.values_list("value", flat=True)) == {A_NUMBER, POOL}
    with pytest.raises(CommandError, match="another tenant"):
        call_command("tenant_create", "Thief", "--from", B_NUMBER, **quiet)
    assert not Tenant.objects.filter(slug="thief").exists()
    call_command("tenant_create", "Partner", "--from", B_NUMBER, "--shared", **quiet)
    assert TenantSender.objects.filter(value=B_NUMBER, shared=True).count() == 2


# --- the admin ----------------------------------------------------------------------------------------


def _errors(response) -> str:
    return " ".join(
        re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', response.content.decode(), re.S)
    )


def test_the_admin_refuses_another_tenants_sender_as_a_default(b):
    response = staff("admin").post("/admin/smsgw/tenant/add/", _tenant_form(default_from=B_NUMBER))
    assert response.status_code == 200 and "another tenant" in _errors(response)
    assert not Tenant.objects.filter(slug="beta").exists()


def test_a_tenant_added_in_the_admin_owns_its_default_and_gets_senders_inline():
    admin = staff("admin")
    form = _tenant_form(default_from=SHARED)
    form.update({"senders-2-TOTAL_FORMS": "1", "senders-2-0-value": "BETA", "senders-2-0-provider": ""})
    response = admin.post("/admin/smsgw/tenant/add/", form)
    assert response.status_code == 302, _errors(response)
    beta = Tenant.objects.get(slug="beta")
    assert set(beta.senders.values_list("value", "kind")) == {(SHARED, "number"), ("BETA", "alphanumeric")}


def test_the_sender_admin_refuses_another_tenants_sender_unless_shared(a, b):
    (ta, _), (tb, _) = a, b
    admin = staff("admin")
    add = "/admin/smsgw/tenantsender/add/"
    response = admin.post(add, {"tenant": ta.pk, "value": B_NUMBER, "provider": "", "account": ""})
    assert response.status_code == 200 and "another tenant" in _errors(response)
    assert not tenant_owns_sender(ta, B_NUMBER)
    response = admin.post(
        add, {"tenant": ta.pk, "value": B_NUMBER, "provider": "", "account": "", "shared": "on"}
    )
    assert response.status_code == 302
    assert set(TenantSender.objects.filter(value=B_NUMBER).values_list("tenant_id", "shared")) == {
        (ta.pk, True),
        (tb.pk, True),
    }
    # A viewer sees senders and changes none; an operator does not assign them either.
    assert staff("viewer").get("/admin/smsgw/tenantsender/").status_code == 200
    assert staff("operator").post(add, {"tenant": ta.pk, "value": "OPS"}).status_code == 403


# --- the migration ------------------------------------------------------------------------------------


def _models_of_0014():
    """The models as migration 0014 knew them, on today's tables: the tenant's pool was then the field
    ``messaging_service_sid``, which 0017 renamed to ``sender_pool`` (its column kept its name)."""
    return MigrationLoader(connection).project_state(("smsgw", "0014_tenant_senders")).apps


def test_the_migration_gives_each_tenant_its_defaults_and_shares_a_default_two_had(a, b):
    (ta, _), (tb, _) = a, b
    TenantSender.objects.all().delete()
    Tenant.objects.filter(pk=tb.pk).update(default_from=A_NUMBER, sender_pool=POOL)
    import_module("smsgw.migrations.0014_tenant_senders")._own_defaults(_models_of_0014(), None)
    rows = set(TenantSender.objects.values_list("tenant_id", "value", "kind", "shared"))
    assert rows == {
        (ta.pk, A_NUMBER, "number", True),
        (tb.pk, A_NUMBER, "number", True),
        (tb.pk, POOL, "pool", False),
    }


# --- shared senders and opt-outs ----------------------------------------------------------------------

PUBLIC = "https://sms.example.com"


@pytest.fixture
def stop(settings):
    """Post a signed inbound message (Twilio's form) from ``frm`` to ``to``, and process it."""
    settings.SMSGW_PUBLIC_BASE_URL = PUBLIC
    settings.SMSGW_PROVIDER = "twilio"
    settings.TWILIO_AUTH_TOKEN = "inbound-test-token"
    get_adapter.cache_clear()

    def post(body: str, frm: str, to: str):
        params = {
            "MessageSid": "SM" + secrets.token_hex(16),
            "AccountSid": "AC" + "0" * 32,
            "From": frm,
            "To": to,
            "Body": body,
        }
        signature = RequestValidator(settings.TWILIO_AUTH_TOKEN).compute_signature(
            f"{PUBLIC}/inbound/twilio/", params
        )
        response = Client().post("/inbound/twilio/", params, HTTP_X_TWILIO_SIGNATURE=signature)
        assert response.status_code == 200
        inbound_process_due()  # as the inbound tick does
        return response

    yield post
    get_adapter.cache_clear()


def test_a_shared_number_works_for_both_only_once_shared_and_a_stop_on_it_suppresses_for_both(a, b, stop):
    (ta, a_key), (tb, b_key) = a, b
    sender_assign(tenant=tb, sender=SHARED)
    refused = _send(a_key, **{"from": SHARED})
    assert refused.status_code == 400 and "from" in refused.json()["error"]["fields"]
    sender_assign(tenant=ta, sender=SHARED, shared=True)
    assert _send(a_key, **{"from": SHARED}).status_code == 201
    assert _send(b_key, **{"from": SHARED}).status_code == 201
    stop("STOP", recipient(1), SHARED)
    assert set(Suppression.objects.values_list("tenant_id", "number", "sender")) == {
        (ta.pk, recipient(1), SHARED),
        (tb.pk, recipient(1), SHARED),
    }
    for key in (a_key, b_key):
        refused = _send(key, **{"from": SHARED})
        assert refused.status_code == 400 and "suppression" in refused.json()["error"]["message"]
    stop("START", recipient(1), SHARED)
    assert not Suppression.objects.exists()


def test_a_stop_to_bs_number_never_lands_in_as_list(a, b, stop):
    """Even when A has messages from B's number (sent before senders had owners)."""
    (ta, _), (tb, _) = a, b
    legacy = message(ta, to=recipient(2))
    Message.objects.filter(pk=legacy.pk).update(from_number=B_NUMBER)
    stop("STOP", recipient(2), B_NUMBER)
    assert list(Suppression.objects.values_list("tenant_id", flat=True)) == [tb.pk]
    # A STOP to a number nobody owns is nobody's.
    stop("STOP", recipient(3), "+14155550188")
    assert Suppression.objects.count() == 1
