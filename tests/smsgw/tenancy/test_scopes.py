"""The scope vocabulary (smsgw.tenancy.scopes): names checked, stored in one order, ``*`` for everything;
keys issued before scopes were read keep full access (migration 0012)."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from smsgw.models import ApiKey, Tenant, api_key_create
from smsgw.tenancy.api_keys import api_key_rotate
from smsgw.tenancy.scopes import (
    FULL_ACCESS,
    SCOPES,
    UnknownScope,
    scopes_clean,
    scopes_grant,
    scopes_parse,
    scopes_within,
)


def test_the_vocabulary_names_the_issues_scopes():
    for scope in ("messages:send", "messages:read", "messages:cancel", "schedules:write", "campaigns:write"):
        assert scope in SCOPES
    for scope in ("webhooks:manage", "suppressions:write", "capacity:write", "keys:manage"):
        assert scope in SCOPES


def test_an_unknown_scope_is_refused_by_name():
    with pytest.raises(UnknownScope, match="'messages:sned'") as err:
        scopes_parse("messages:read,messages:sned")
    assert err.value.scope == "messages:sned"


def test_scopes_are_stored_once_in_the_vocabulary_order_and_star_alone():
    assert scopes_parse(" messages:read , messages:send,messages:read,") == ["messages:send", "messages:read"]
    assert scopes_clean(["routes:read", "*"]) == [FULL_ACCESS]
    assert scopes_clean([]) == []


def test_grant_and_within():
    assert scopes_grant(["*"], "keys:manage") and scopes_grant(["routes:read"], "routes:read")
    assert not scopes_grant([], "routes:read") and not scopes_grant(["messages:read"], "messages:send")
    assert scopes_within(["routes:read"], ["*"]) and scopes_within([], ["routes:read"])
    assert not scopes_within(["*"], ["routes:read"]) and not scopes_within(["messages:send"], ["routes:read"])


@pytest.mark.django_db
def test_api_key_create_defaults_to_full_access_and_checks_what_it_is_given():
    tenant = Tenant.objects.create(name="A", slug="a")
    assert api_key_create(tenant=tenant)[0].scopes == [FULL_ACCESS]
    assert api_key_create(tenant=tenant, scopes=[])[0].scopes == []
    with pytest.raises(UnknownScope):
        api_key_create(tenant=tenant, scopes=["everything"])
    assert ApiKey.objects.count() == 2


@pytest.mark.django_db
def test_rotation_keeps_the_scopes():
    tenant = Tenant.objects.create(name="A", slug="a")
    key, _ = api_key_create(tenant=tenant, name="r", scopes=["routes:read", "capacity:read"])
    new, _ = api_key_rotate(key=key)
    assert new.scopes == ["capacity:read", "routes:read"] and new.name == "r"


@pytest.mark.django_db
def test_the_migration_gives_keys_stored_without_scopes_full_access():
    tenant = Tenant.objects.create(name="A", slug="a")
    old, _ = api_key_create(tenant=tenant, scopes=[])
    narrow, _ = api_key_create(tenant=tenant, scopes=["routes:read"])
    migration = importlib.import_module("smsgw.migrations.0012_api_key_scopes_full_access")
    migration._full_access(apps, None)
    old.refresh_from_db()
    narrow.refresh_from_db()
    assert old.scopes == [FULL_ACCESS] and narrow.scopes == ["routes:read"]
