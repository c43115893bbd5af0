"""Routing rules in the admin: an operator adds, changes and deletes a rule with its legs, each recorded in
the admin log; a viewer sees them and changes nothing; a rule the service refuses is not saved, the error on
the field to correct; a save is routed by at once (the process's cache is cleared)."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Group, User
from django.test import Client

from delivery.routing.models import RouteLeg, RouteRule
from delivery.routing.rules import plan
from smsgw.console.roles import roles_sync
from tests.delivery.routing.helpers import route_rule
from tests.factories import sender_for, tenant_with_key

pytestmark = pytest.mark.django_db
ADD = "/admin/delivery/routerule/add/"
GB = "+447700900123"


def staff(role: str) -> tuple[Client, User]:
    roles_sync(apps)
    user = User.objects.create_user(role, f"{role}@example.com", "pw-for-tests-only-1", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return client, user


@pytest.fixture
def tenant():
    tenant = tenant_with_key("acme")[0]
    sender_for(tenant, "ACME")  # a tenant's rule sends only from the tenant's senders
    return tenant


def form(tenant=None, legs=(), *, existing=(), **fields) -> dict:
    """The add/change form's POST: the rule's fields and the legs inline (``existing``: leg ids)."""
    data = {
        "tenant": tenant.pk if tenant else "",
        "name": "gb",
        "position": "0",
        "country": "GB",
        "prefix": "",
        "priority": "",
        "enabled": "on",
        "legs-TOTAL_FORMS": str(len(legs)),
        "legs-INITIAL_FORMS": str(len(existing)),
        "legs-MIN_NUM_FORMS": "0",
        "legs-MAX_NUM_FORMS": "8",
    }
    data.update(fields)
    for i, leg in enumerate(legs):
        row = {"position": str(i), "account": "", "sender": "", "weight": "1", **leg}
        if i < len(existing):
            row["id"] = str(existing[i])
        data.update({f"legs-{i}-{key}": value for key, value in row.items()})
    return data


def test_operator_adds_changes_and_deletes_a_rule_audited(tenant, settings):
    settings.ROUTES_CACHE_SECONDS = 3600
    operator, user = staff("operator")
    assert plan(tenant.pk, GB, "bulk", seed="m").route == "default"  # now cached for an hour

    legs = [{"provider": "vonage", "sender": "ACME", "weight": "1"}, {"provider": "twilio", "weight": "0"}]
    response = operator.post(ADD, form(tenant, legs))
    assert response.status_code == 302, response.content.decode()[:3000]
    rule = RouteRule.objects.get()
    assert (rule.tenant_id, rule.name, rule.country) == (tenant.pk, "gb", "GB")
    assert list(rule.legs.order_by("position").values_list("provider", "sender", "weight")) == [
        ("vonage", "ACME", 1),
        ("twilio", "", 0),
    ]
    # The save cleared this process's cache: the next message is routed by the new rule.
    assert plan(tenant.pk, GB, "bulk", seed="m").route == "tenant:gb"
    added = LogEntry.objects.get(object_id=str(rule.pk), action_flag=ADDITION)
    assert added.user_id == user.pk and "leg" in added.change_message

    leg_ids = list(rule.legs.order_by("position").values_list("id", flat=True))
    changed = form(
        tenant,
        [{"provider": "vonage", "sender": "ACME", "weight": "1"}, {"provider": "twilio", "weight": "2"}],
        existing=leg_ids,
        prefix="+4477",
    )
    response = operator.post(f"/admin/delivery/routerule/{rule.pk}/change/", changed)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert RouteLeg.objects.get(pk=leg_ids[1]).weight == 2
    entry = LogEntry.objects.get(object_id=str(rule.pk), action_flag=CHANGE)
    assert entry.user_id == user.pk and "Prefix" in entry.get_change_message()
    assert "Weight" in entry.get_change_message()  # the leg's change is in the rule's entry
    assert plan(tenant.pk, "+442079460000", "bulk", seed="m").route == "default"

    response = operator.post(f"/admin/delivery/routerule/{rule.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not RouteRule.objects.exists() and not RouteLeg.objects.exists()
    assert LogEntry.objects.filter(object_id=str(rule.pk), action_flag=DELETION, user=user).exists()
    assert plan(tenant.pk, GB, "bulk", seed="m").route == "default"


def test_a_rule_for_all_tenants_is_added_without_a_tenant(tenant):
    operator, _ = staff("operator")
    response = operator.post(ADD, form(None, [{"provider": "twilio"}], name="everyone", country=""))
    assert response.status_code == 302
    assert plan(tenant.pk, GB, "transactional", seed="m").route == "all:everyone"
    page = operator.get("/admin/delivery/routerule/").content.decode()
    assert "everyone" in page and "all tenants" in page


def test_names_are_unique_per_tenant_and_among_the_rules_for_all_tenants(tenant):
    operator, _ = staff("operator")
    route_rule(None, "everyone", [("twilio", "", "", 1)])
    route_rule(tenant, "gb", [("twilio", "", "", 1)])
    for owner, name in ((None, "everyone"), (tenant, "gb")):
        response = operator.post(ADD, form(owner, [{"provider": "twilio"}], name=name))
        assert response.status_code == 200
        errors = response.context["adminform"].form.errors
        assert "already" in " ".join(errors.get("name", errors.get("__all__", []))), errors
        if owner is None:
            assert "name" in errors
    # The same name for another owner is fine.
    assert operator.post(ADD, form(tenant, [{"provider": "twilio"}], name="everyone")).status_code == 302
    assert RouteRule.objects.count() == 3


def test_a_viewer_sees_rules_and_cannot_add_change_or_delete(tenant):
    rule = route_rule(tenant, "gb", [("vonage", "", "ACME", 1)], country="GB")
    viewer, _ = staff("viewer")
    assert "gb" in viewer.get("/admin/delivery/routerule/").content.decode()
    assert viewer.get(ADD).status_code == 403
    assert viewer.post(ADD, form(tenant, [{"provider": "twilio"}], name="mine")).status_code == 403
    page = viewer.get(f"/admin/delivery/routerule/{rule.pk}/change/").content.decode()
    assert 'name="name"' not in page  # view only
    viewer.post(f"/admin/delivery/routerule/{rule.pk}/change/", form(tenant, [], country="FR"))
    assert viewer.post(f"/admin/delivery/routerule/{rule.pk}/delete/", {"post": "yes"}).status_code == 403
    rule.refresh_from_db()
    assert rule.country == "GB" and RouteRule.objects.count() == 1
    assert not LogEntry.objects.exists()


def test_a_user_without_a_role_is_refused(tenant):
    User.objects.create_user("nobody", "n@example.com", "pw-for-tests-only-1", is_staff=True)
    client = Client()
    client.force_login(User.objects.get(username="nobody"))
    assert client.get("/admin/delivery/routerule/").status_code == 403
    assert client.post(ADD, form(tenant, [{"provider": "twilio"}])).status_code == 403
    assert not RouteRule.objects.exists()


@pytest.mark.parametrize(
    ("fields", "legs", "field", "text"),
    [
        ({"country": "G1"}, [{"provider": "twilio"}], "country", "alpha-2"),
        ({"prefix": "44"}, [{"provider": "twilio"}], "prefix", "E.164"),
        ({}, [{"provider": "vonage", "sender": "MG" + "0" * 32}], "sender", "no sender pools"),
        ({}, [{"provider": "twilio", "account": "AC" + "9" * 32}], "account", "configured with"),
        ({}, [{"provider": "twilio", "weight": "1001"}], "weight", "1000"),
        ({}, [{"provider": "nope"}], "provider", "valid choice"),
    ],
)
def test_a_refused_rule_is_not_saved_and_the_error_is_on_its_field(tenant, fields, legs, field, text):
    operator, _ = staff("operator")
    response = operator.post(ADD, form(tenant, legs, **fields))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    for formset in response.context["inline_admin_formsets"]:
        for leg_form in formset.formset.forms:
            errors = {**errors, **leg_form.errors}
    assert field in errors and text in " ".join(errors[field]), errors
    assert not RouteRule.objects.exists() and not LogEntry.objects.exists()


@pytest.mark.parametrize(
    ("legs", "text"),
    [
        ([], "legs: at least one leg"),
        ([{"provider": "twilio", "weight": "0"}], "legs: at least one leg needs a weight above 0"),
        ([{"provider": "vonage", "sender": "ACME"}] * 2, "legs[1]: the same provider, account and sender"),
    ],
)
def test_the_legs_together_are_checked(tenant, legs, text):
    operator, _ = staff("operator")
    response = operator.post(ADD, form(tenant, legs))
    assert response.status_code == 200
    (formset,) = response.context["inline_admin_formsets"]
    assert text in " ".join(formset.formset.non_form_errors())
    assert not RouteRule.objects.exists()


def test_a_provider_slower_than_the_sending_lease_is_refused_on_its_field(tenant, settings):
    from delivery.providers import get_adapter

    get_adapter.cache_clear()
    settings.SENDING_LEASE_SECONDS = 8
    settings.TWILIO_TIMEOUT_SECONDS = 10.0
    operator, _ = staff("operator")
    response = operator.post(ADD, form(tenant, [{"provider": "twilio"}]))
    (formset,) = response.context["inline_admin_formsets"]
    assert "SMSGW_SENDING_LEASE_SECONDS" in " ".join(formset.formset.forms[0].errors["provider"])
    assert not RouteRule.objects.exists()


def test_a_tenants_rule_may_name_only_that_tenants_senders(tenant):
    """Another tenant's sender (or nobody's) on a leg of a tenant's rule is refused, nothing saved."""
    other = tenant_with_key("other", default_from="+12025550143")[0]
    operator, _ = staff("operator")
    for sender in (other.default_from, "NOBODYS"):
        legs = [{"provider": "twilio", "sender": sender, "weight": "1"}]
        response = operator.post(ADD, form(tenant, legs))
        assert (
            response.status_code == 200 and "is not one of acme&#x27;s senders" in response.content.decode()
        )
    assert not RouteRule.objects.exists()
