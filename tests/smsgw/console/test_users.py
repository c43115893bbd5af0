"""The admin's user pages (smsgw.console.users): the `admin` role manages admin users but can hand out
no more than it holds: not superuser, not direct permissions, not a group with more than its own, and it
cannot take over the account of someone who outranks it. Through the admin, with the test client."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from smsgw.console.roles import roles_sync

pytestmark = pytest.mark.django_db
PASSWORD = "pw-for-tests-only-1"


def _person(name: str, role: str | None = None, **flags) -> User:
    user = User.objects.create_user(name, f"{name}@example.com", PASSWORD, is_staff=True, **flags)
    if role:
        user.groups.add(Group.objects.get(name=role))
    return user


@pytest.fixture
def admin_role() -> tuple[User, Client]:
    roles_sync(apps)
    user = _person("alice", "admin")
    client = Client()
    client.force_login(user)
    return user, client


def _change_form(user: User, **overrides) -> dict:
    form = {
        "username": user.username,
        "email": user.email,
        "first_name": "",
        "last_name": "",
        "is_active": "on",
        "is_staff": "on",
        "groups": [g.pk for g in user.groups.all()],
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
        "initial-date_joined_0": "2026-01-01",
        "initial-date_joined_1": "00:00:00",
    }
    form.update(overrides)
    return form


def test_the_admin_role_cannot_make_itself_superuser_or_give_itself_permissions(admin_role):
    alice, client = admin_role
    everything = [p.pk for p in Permission.objects.all()]
    resp = client.post(
        f"/admin/auth/user/{alice.pk}/change/",
        _change_form(alice, is_superuser="on", user_permissions=everything),
    )
    assert resp.status_code == 302, resp.content.decode()[:2000]
    alice.refresh_from_db()
    assert not alice.is_superuser and not alice.user_permissions.exists()
    page = client.get(f"/admin/auth/user/{alice.pk}/change/").content.decode()
    assert 'name="is_superuser"' not in page and 'name="user_permissions"' not in page


def test_the_admin_role_gives_roles_up_to_its_own_and_no_group_with_more(admin_role):
    alice, client = admin_role
    bob = _person("bob")
    root_like = Group.objects.create(name="everything")
    root_like.permissions.set(Permission.objects.all())
    page = client.get(f"/admin/auth/user/{bob.pk}/change/").content.decode()
    assert ">admin<" in page and ">operator<" in page and ">everything<" not in page

    refused = client.post(f"/admin/auth/user/{bob.pk}/change/", _change_form(bob, groups=[root_like.pk]))
    assert refused.status_code == 200 and "Select a valid choice" in refused.content.decode()
    assert not bob.groups.exists()
    given = client.post(
        f"/admin/auth/user/{bob.pk}/change/",
        _change_form(bob, groups=[Group.objects.get(name="operator").pk]),
    )
    assert given.status_code == 302
    assert list(bob.groups.values_list("name", flat=True)) == ["operator"]
    # Its own account too: no group beyond what it already holds.
    client.post(f"/admin/auth/user/{alice.pk}/change/", _change_form(alice, groups=[root_like.pk]))
    assert list(alice.groups.values_list("name", flat=True)) == ["admin"]


def test_the_admin_role_cannot_take_over_a_superuser_or_someone_holding_more(admin_role):
    _, client = admin_role
    root = _person("root", is_superuser=True)
    special = _person("special")
    special.user_permissions.add(Permission.objects.get(codename="delete_message"))
    for person in (root, special):
        assert client.get(f"/admin/auth/user/{person.pk}/change/").status_code in (200, 403)
        change = client.post(
            f"/admin/auth/user/{person.pk}/change/", _change_form(person, email="x@evil.test")
        )
        assert change.status_code == 403
        password = client.post(
            f"/admin/auth/user/{person.pk}/password/",
            {"password1": "a-new-password-for-me", "password2": "a-new-password-for-me"},
        )
        assert password.status_code == 403
        person.refresh_from_db()
        assert person.email == f"{person.username}@example.com" and person.check_password(PASSWORD)
    client.post(
        "/admin/auth/user/",
        {"action": "delete_selected", "_selected_action": [root.pk, special.pk], "post": "yes"},
    )
    assert User.objects.filter(pk__in=[root.pk, special.pk]).count() == 2


def test_a_superuser_still_grants_anything():
    roles_sync(apps)
    root = _person("root", is_superuser=True)
    bob = _person("bob")
    client = Client()
    client.force_login(root)
    resp = client.post(f"/admin/auth/user/{bob.pk}/change/", _change_form(bob, is_superuser="on"))
    assert resp.status_code == 302
    bob.refresh_from_db()
    assert bob.is_superuser
