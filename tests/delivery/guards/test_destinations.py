"""Destination permissions (docs/guards.md): a country the tenant may not send to or a premium-rate /
high-risk range is a 400 naming `to` at acceptance with nothing stored, and a destination refused after
acceptance (the tenant's permissions changed) is cancelled at execution, never submitted. Real
database, real sandbox through the real Twilio adapter."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from delivery.guards import destinations as guards
from delivery.models import Attempt
from delivery.sending import worker as sending
from scheduling.lifecycle import transitions
from scheduling.models import Message, Schedule, Status
from smsgw.models import Tenant
from tests.factories import message, recipient, tenant_with_key

pytestmark = pytest.mark.django_db
UK = "+442079460123"  # Ofcom drama range (fictional), valid for libphonenumber
AU = "+61491570156"  # ACMA fictional mobile
JAMAICA = "+18765550123"  # NANP, but not the US: told apart by area code
PREMIUM_US = "+19002001234"  # NPA 900: premium-rate, in the US


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme")


@pytest.fixture
def api(tenant):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant[1]}")
    return client


@pytest.fixture
def deny_cache():
    guards.deny_cache_clear()
    yield
    guards.deny_cache_clear()


def post_message(api, to: str, **extra):
    return api.post("/v1/messages", {"to": to, "body": "hi", **extra}, format="json")


def refused(resp, code: str) -> bool:
    body = resp.json()["error"]
    return resp.status_code == 400 and code in " ".join(body["fields"]["to"])


def queued(tenant: Tenant, to: str) -> Message:
    msg = message(tenant, to=to)
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    return msg


def test_a_country_the_tenant_may_not_send_to_is_a_400_naming_to_and_nothing_is_stored(api):
    for to in (UK, AU, JAMAICA):
        resp = post_message(api, to)
        assert refused(resp, "country_not_allowed"), resp.content
    assert Message.objects.count() == 0
    assert post_message(api, recipient(1)).status_code == 201  # the tenant's own country (US)


def test_a_premium_rate_range_is_refused_even_in_an_allowed_country(api, tenant):
    t, _ = tenant
    t.allowed_countries = ["*"]
    t.save(update_fields=["allowed_countries"])
    resp = post_message(api, PREMIUM_US)
    assert refused(resp, "premium_rate_destination"), resp.content
    assert "+1900" in resp.json()["error"]["fields"]["to"][0]
    assert Message.objects.count() == 0
    assert post_message(api, UK).status_code == 201  # "*": any country


def test_allowed_countries_exemptions_and_extra_denies_are_per_tenant(api, tenant, settings, deny_cache):
    t, _ = tenant
    t.allowed_countries = ["us", "GB"]
    t.deny_exempt_prefixes = ["1900"]
    t.deny_prefixes = ["1415555"]
    t.save()
    assert post_message(api, UK).status_code == 201
    assert post_message(api, PREMIUM_US).status_code == 201  # exempt from the shipped range
    assert refused(post_message(api, AU), "country_not_allowed")
    assert refused(post_message(api, "+14155550177"), "denied_prefix")
    settings.DENY_PREFIXES = ["44207"]
    guards.deny_cache_clear()
    assert refused(post_message(api, UK), "denied_prefix")
    assert Message.objects.filter(tenant=t).count() == 2

    other, _ = tenant_with_key("other")  # another tenant's settings do not leak
    assert guards.destination_refusal(other, PREMIUM_US).code == "premium_rate_destination"
    assert guards.destination_refusal(other, "+14155550177") is None


def test_the_tenants_country_comes_from_its_setting_or_its_sender_or_the_default(settings):
    uk_sender = Tenant(default_from=UK)
    assert guards.tenant_country(uk_sender) == "GB"
    assert guards.destination_refusal(uk_sender, recipient(2)).code == "country_not_allowed"
    assert guards.destination_refusal(uk_sender, UK) is None
    settings.DEFAULT_COUNTRY = "AU"
    assert guards.tenant_country(Tenant(default_from="ACME")) == "AU"  # alphanumeric sender
    assert guards.tenant_country(Tenant(default_from="ACME", country="gb")) == "GB"


def test_bulk_refusals_name_each_refused_number_once(tenant):
    t, _ = tenant
    out = guards.destination_refusals(t, [recipient(3), UK, UK, PREMIUM_US, "+881612345678"])
    assert {n: r.code for n, r in out.items()} == {
        UK: "country_not_allowed",
        PREMIUM_US: "premium_rate_destination",
        "+881612345678": "premium_rate_destination",
    }


def test_guards_off_refuse_nothing(api, settings):
    settings.GUARDS_ENABLED = False
    assert post_message(api, UK).status_code == 201
    assert guards.destination_refusals(Tenant(default_from="+14155550100"), [PREMIUM_US]) == {}


def test_changing_a_scheduled_message_to_a_refused_destination_is_a_400_naming_to(api):
    later = (timezone.now() + timedelta(hours=1)).isoformat()
    mid = post_message(api, recipient(4), send_at=later).json()["id"]
    resp = api.patch(f"/v1/messages/{mid}", {"to": UK}, format="json")
    assert refused(resp, "country_not_allowed"), resp.content
    stored = Message.objects.get(public_id=mid)
    assert (stored.to, stored.status, stored.version) == (recipient(4), Status.SCHEDULED, 1)


def test_a_schedule_to_a_refused_destination_is_a_400_naming_to_and_nothing_is_stored(api):
    start = (timezone.now() + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S")
    body = {"to": PREMIUM_US, "body": "Weekly", "rrule": "FREQ=WEEKLY", "start": start, "timezone": "UTC"}
    resp = api.post("/v1/schedules", body, format="json")
    assert refused(resp, "premium_rate_destination"), resp.content
    assert not Schedule.objects.exists() and not Message.objects.exists()
    made = api.post("/v1/schedules", {**body, "to": recipient(5)}, format="json")
    assert made.status_code == 201
    resp = api.patch(f"/v1/schedules/{made.json()['id']}", {"to": UK}, format="json")
    assert refused(resp, "country_not_allowed"), resp.content
    assert Schedule.objects.get().to == recipient(5)


def test_a_destination_refused_after_acceptance_is_cancelled_at_execution_never_submitted(
    adapter, sandbox, tenant
):
    t, _ = tenant
    t.allowed_countries = ["US", "GB"]
    t.save(update_fields=["allowed_countries"])
    abroad = queued(t, UK)
    premium = queued(t, PREMIUM_US)  # accepted before the deny list had the range (stored directly)
    home = queued(t, recipient(6))
    t.allowed_countries = []  # the operator narrowed the tenant to its own country
    t.save(update_fields=["allowed_countries"])

    report = sending.send_batch([abroad.pk, premium.pk, home.pk])
    assert (report.refused, report.claimed) == (2, 1)
    for msg, code in ((abroad, "country_not_allowed"), (premium, "premium_rate_destination")):
        msg.refresh_from_db()
        assert (msg.status, msg.reason_code, msg.attempt_count) == (
            Status.CANCELLED,
            "destination_refused",
            0,
        )
        assert msg.status_reason.startswith("destination refused:")
        event = msg.events.get(kind="cancelled")
        assert (event.from_status, event.to_status, event.details["refusal"]) == (
            Status.QUEUED,
            Status.CANCELLED,
            code,
        )
        assert not Attempt.objects.filter(message=msg).exists()
    assert Message.objects.get(pk=home.pk).status == Status.SENT
    assert [m.to for m in sandbox.list_messages()] == [recipient(6)]
    assert sandbox.stats()["submissions"] == 1


def test_an_opt_out_and_a_refusal_in_one_batch_are_each_stopped_with_their_reason(adapter, sandbox, tenant):
    from delivery.guards import suppression

    t, _ = tenant
    opted = queued(t, recipient(7))
    abroad = queued(t, UK)
    suppression.suppression_add(tenant_id=t.pk, number=recipient(7), source="api")
    report = sending.send_batch([opted.pk, abroad.pk])
    assert (report.opted_out, report.refused, report.claimed) == (1, 1, 0)
    assert Message.objects.get(pk=opted.pk).reason_code == "opted_out"
    assert Message.objects.get(pk=abroad.pk).reason_code == "destination_refused"
    assert set(Message.objects.values_list("status", flat=True)) == {Status.CANCELLED}
    assert sandbox.stats()["submissions"] == 0


def test_the_upgrade_writes_each_existing_tenants_country_from_its_sender(settings):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("smsgw.migrations.0006_tenant_destination_guards")
    tenant_with_key("uk", default_from=UK)
    tenant_with_key("alpha", default_from="ACME")
    tenant_with_key("set", country="CA")
    settings.DEFAULT_COUNTRY = "AU"
    migration.countries_fill(apps, None)
    got = dict(Tenant.objects.filter(slug__in=["uk", "alpha", "set"]).values_list("slug", "country"))
    assert got == {"uk": "GB", "alpha": "AU", "set": "CA"}


def test_the_tenant_form_in_the_admin_checks_countries_and_prefixes():
    from config.admin import TenantForm

    base = {"name": "X", "slug": "x", "default_from": "+14155550100", "default_timezone": "UTC"}
    base |= {"daily_message_quota": 0, "max_pending_scheduled": 0, "send_rate_per_second": 0}
    base |= {"quota_exceeded_policy": "defer"}
    good = TenantForm(
        data={
            **base,
            "allowed_countries": '["us", "GB"]',
            "deny_prefixes": '["+3737"]',
            "deny_exempt_prefixes": "[]",
        }
    )
    assert good.is_valid(), good.errors
    assert good.cleaned_data["allowed_countries"] == ["US", "GB"]
    assert good.cleaned_data["deny_prefixes"] == ["3737"]
    bad = TenantForm(
        data={
            **base,
            "country": "USA",
            "allowed_countries": '["United States"]',
            "deny_prefixes": '["37a"]',
            "deny_exempt_prefixes": "[]",
        }
    )
    assert not bad.is_valid()
    assert {"country", "allowed_countries", "deny_prefixes"} <= set(bad.errors)


@pytest.mark.parametrize("line", ["+\u0661\u0662", "\uff14\uff14", "44\u00b2", "4_4"])
def test_a_deny_prefix_in_other_digits_than_ascii_is_refused(line):
    # E.164 numbers are ASCII: an Arabic-Indic or full-width prefix would never match one (and "²" passes
    # str.isdigit()), so a typo in the operator's list would silently allow the range.
    with pytest.raises(guards.DenyListError):
        guards.prefixes_parse(f"1\n{line}\n", source="deny.txt")
    assert guards.prefixes_parse("+44\n1 # comment\n", source="deny.txt") == ["44", "1"]
