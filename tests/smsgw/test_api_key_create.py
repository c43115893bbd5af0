"""`manage.py api_key_create`: another key for an existing tenant, with the scopes it is given."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from smsgw.models import ApiKey
from tests.factories import tenant_with_key

pytestmark = pytest.mark.django_db


def test_it_issues_a_key_with_the_chosen_scopes():
    tenant, _ = tenant_with_key("acme")
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "api_key_create", "acme", "--name", "reports", "--scopes", "messages:read", stdout=out, stderr=err
    )
    raw = out.getvalue().strip()
    key = ApiKey.objects.get(prefix=raw.split("_")[1])
    assert key.tenant == tenant and key.name == "reports" and key.scopes == ["messages:read"]
    assert key.matches(raw.split("_")[2]) and "messages:read" in err.getvalue()


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["acme", "--scopes", "messages:read,keys:everything"], "keys:everything"),
        (["acme", "--scopes", ","], "--scopes"),
        (["nobody", "--scopes", "messages:read"], "nobody"),
        (["acme", "--name", " ", "--scopes", "messages:read"], "--name"),
    ],
)
def test_bad_arguments_are_refused_by_name_and_nothing_is_made(args, match):
    tenant_with_key("acme")
    with pytest.raises(CommandError, match=match):
        call_command("api_key_create", *args, stdout=io.StringIO(), stderr=io.StringIO())
    assert ApiKey.objects.count() == 1


def test_scopes_are_required():
    tenant_with_key("acme")
    with pytest.raises(CommandError):
        call_command("api_key_create", "acme", stdout=io.StringIO(), stderr=io.StringIO())
    assert ApiKey.objects.count() == 1
