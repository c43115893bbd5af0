"""The console's guard rails: the three roles, tenants validated as the API validates them with secrets
hidden, API keys issued/revoked/rotated with the secret shown once, the built-in periodic tasks
protected, login attempts limited and idle sessions ended."""

from __future__ import annotations

import re

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations import RunPython
from django.test import Client
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from scheduling.models import Message, Status
from smsgw.console.roles import roles_sync
from smsgw.models import ApiKey, Tenant
from tests.factories import message, tenant_with_key

pytestmark = pytest.mark.django_db
PASSWORD = "pw-for-tests-only-1"


def staff(role: str) -> Client:
    roles_sync(apps)  # the migration made them; a flushed database (live_server tests) lost them
    user = User.objects.create_user(role, f"{role}@example.com", PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return client


def _latest_roles_migration():
    """The newest smsgw migration that sets the roles (each runs smsgw.console.roles.roles_sync)."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    (leaf,) = loader.graph.leaf_nodes("smsgw")
    for key in reversed(loader.graph.forwards_plan(leaf)):
        migration = loader.graph.nodes[key]
        if key[0] == "smsgw" and "roles" in key[1]:
            return next(op for op in migration.operations if isinstance(op, RunPython))
    raise AssertionError("no roles migration")


def test_the_migration_made_three_groups():
    """The roles migration run as `migrate` runs it, on a database without the groups: an earlier
    transactional test (the suite runs in any order, on several workers) may have flushed what the test
    database's own migrations made."""
    Group.objects.filter(name__in=["viewer", "operator", "admin"]).delete()
    _latest_roles_migration().code(apps, None)
    assert set(
        Group.objects.filter(name__in=["viewer", "operator", "admin"]).values_list("name", flat=True)
    ) == {
        "viewer",
        "operator",
        "admin",
    }
    viewer = set(Group.objects.get(name="viewer").permissions.values_list("codename", flat=True))
    assert "view_message" in viewer and not any(c.startswith(("change_", "add_", "delete_")) for c in viewer)
    operator = set(Group.objects.get(name="operator").permissions.values_list("codename", flat=True))
    assert "change_message" in operator and "change_tenant" not in operator and "view_apikey" not in operator
    admin = set(Group.objects.get(name="admin").permissions.values_list("codename", flat=True))
    assert {"add_apikey", "change_tenant", "change_periodictask"} <= admin
    assert not {"delete_message", "delete_messageevent", "delete_tenant"} & admin


def test_a_viewer_sees_messages_but_cannot_act():
    tenant = tenant_with_key("acme")[0]
    msg = message(tenant, due_in=3600)
    viewer = staff("viewer")
    page = viewer.get("/admin/scheduling/message/").content.decode()
    assert msg.public_id in page and "cancel_messages" not in page
    viewer.post(
        "/admin/scheduling/message/",
        {"action": "cancel_messages", "_selected_action": [msg.pk], "confirm": "yes"},
    )
    assert Message.objects.get(pk=msg.pk).status == Status.SCHEDULED
    assert viewer.get("/admin/smsgw/apikey/").status_code == 403


def test_an_operator_acts_on_messages_but_cannot_manage_tenants_or_keys():
    tenant = tenant_with_key("acme")[0]
    msg = message(tenant, due_in=3600)
    operator = staff("operator")
    operator.post(
        "/admin/scheduling/message/",
        {"action": "cancel_messages", "_selected_action": [msg.pk], "confirm": "yes"},
    )
    assert Message.objects.get(pk=msg.pk).status == Status.CANCELLED
    assert operator.get("/admin/smsgw/tenant/add/").status_code == 403
    assert operator.get("/admin/smsgw/apikey/").status_code == 403
    assert operator.get("/admin/smsgw/apikey/add/").status_code == 403
    page = operator.get(f"/admin/smsgw/tenant/{tenant.pk}/change/").content.decode()
    assert 'name="name"' not in page  # view only


def _tenant_form(**overrides) -> dict:
    data = {
        "name": "Beta",
        "slug": "beta",
        "is_active": "on",
        "default_from": "+14155550100",
        "sender_pool": "",
        "default_timezone": "Europe/Paris",
        "daily_message_quota": 0,
        "max_pending_scheduled": 0,
        "send_rate_per_second": 0,
        "quota_exceeded_policy": "defer",
        "api_rate_per_second": "",
        "webhook_url": "",
        "quiet_hours_start": "",
        "quiet_hours_end": "",
    }
    # The tenant's senders inline (config.admin): those it has, and those to assign; its keyword rules
    # (inbound.keywords_admin); none here.
    for prefix in ("senders", "senders-2", "keyword_rules"):
        data.update(
            {f"{prefix}-TOTAL_FORMS": "0", f"{prefix}-INITIAL_FORMS": "0", f"{prefix}-MIN_NUM_FORMS": "0"}
        )
    return {**data, **overrides}


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("default_timezone", "Mars/Olympus", "timezone"),
        ("default_from", "not a number!", "alphanumeric sender"),
        ("default_from", "+1555", "phone number"),
        ("webhook_url", "http://127.0.0.1:9/hook", "webhook URL"),
        ("webhook_url", "https://10.0.0.1/hook", "non-public address"),
    ],
)
def test_the_tenant_form_refuses_what_the_api_refuses(settings, field, value, error):
    settings.WEBHOOK_ALLOW_HTTP = False
    settings.WEBHOOK_ALLOW_PRIVATE = False
    response = staff("admin").post("/admin/smsgw/tenant/add/", _tenant_form(**{field: value}))
    errors = " ".join(
        re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', response.content.decode(), re.S)
    )
    assert response.status_code == 200 and error in errors
    assert not Tenant.objects.filter(slug="beta").exists()


def test_a_webhook_url_gets_a_signing_secret_shown_once_and_rotated(settings):
    settings.WEBHOOK_ALLOW_PRIVATE = True  # the test host has no public resolver; the URL is never called
    admin = staff("admin")
    response = admin.post("/admin/smsgw/tenant/add/", _tenant_form(webhook_url="https://localhost/hook"))
    tenant = Tenant.objects.get(slug="beta")
    assert tenant.webhook_secret and tenant.webhook_secret in response.content.decode()
    assert "no-store" in response["Cache-Control"] or "no-cache" in response["Cache-Control"]
    page = admin.get(f"/admin/smsgw/tenant/{tenant.pk}/change/").content.decode()
    assert tenant.webhook_secret not in page and 'name="webhook_secret"' not in page
    old = tenant.webhook_secret
    rotated = admin.post(
        "/admin/smsgw/tenant/", {"action": "rotate_webhook_secret", "_selected_action": [tenant.pk]}
    ).content.decode()
    tenant.refresh_from_db()
    assert tenant.webhook_secret != old and tenant.webhook_secret in rotated


def test_issuing_a_key_shows_its_secret_once_and_it_authenticates(settings):
    tenant = tenant_with_key("acme")[0]
    admin = staff("admin")
    page = admin.post(
        "/admin/smsgw/apikey/add/", {"tenant": tenant.pk, "name": "billing", "scopes": ["*"]}
    ).content.decode()
    raw = re.search(r'id="secret-once"[^>]*>(sk_[0-9a-f]{12}_[^<]+)<', page).group(1)
    key = ApiKey.objects.get(prefix=raw.split("_")[1])
    assert key.tenant == tenant and key.name == "billing" and key.matches(raw.split("_")[2])
    second = admin.post("/admin/smsgw/apikey/add/", {"tenant": tenant.pk, "name": "other", "scopes": ["*"]})
    assert second.status_code == 200 and "sk_" in second.content.decode()  # not a 500
    assert Client().get("/v1/messages", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
    change = admin.get(f"/admin/smsgw/apikey/{key.pk}/change/").content.decode()
    assert 'name="tenant"' not in change and key.secret_hash not in change


def test_the_admin_issues_a_key_with_chosen_scopes_and_only_narrows_them():
    tenant = tenant_with_key("acme")[0]
    admin = staff("admin")
    form = {"tenant": tenant.pk, "name": "reports", "scopes": ["messages:read", "schedules:read"]}
    page = admin.post("/admin/smsgw/apikey/add/", form).content.decode()
    raw = re.search(r'id="secret-once"[^>]*>(sk_[0-9a-f]{12}_[^<]+)<', page).group(1)
    key = ApiKey.objects.get(prefix=raw.split("_")[1])
    assert key.scopes == ["messages:read", "schedules:read"]
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert Client().get("/v1/messages", **bearer).status_code == 200
    refused = Client().post("/v1/messages", {"to": "+14155550123"}, content_type="application/json", **bearer)
    assert refused.status_code == 403 and refused.json()["error"]["required_scope"] == "messages:send"
    assert "reports" in admin.get("/admin/smsgw/apikey/").content.decode()

    change = f"/admin/smsgw/apikey/{key.pk}/change/"
    widened = admin.post(change, {"name": "reports", "scopes": ["messages:read", "messages:send"]})
    assert widened.status_code == 200 and "scopes" in widened.context["adminform"].form.errors
    widened = admin.post(change, {"name": "reports", "scopes": ["*"]})
    assert widened.status_code == 200 and "scopes" in widened.context["adminform"].form.errors
    key.refresh_from_db()
    assert key.scopes == ["messages:read", "schedules:read"]
    assert admin.post(change, {"name": "reports", "scopes": ["schedules:read"]}).status_code == 302
    key.refresh_from_db()
    assert key.scopes == ["schedules:read"]
    assert Client().get("/v1/messages", **bearer).status_code == 403


def test_the_admin_refuses_a_key_without_scopes():
    tenant = tenant_with_key("acme")[0]
    response = staff("admin").post("/admin/smsgw/apikey/add/", {"tenant": tenant.pk, "name": "none"})
    assert response.status_code == 200 and "scopes" in response.context["adminform"].form.errors
    assert ApiKey.objects.filter(tenant=tenant).count() == 1


def test_rotating_a_key_keeps_its_scopes():
    tenant = tenant_with_key("acme")[0]
    admin = staff("admin")
    admin.post("/admin/smsgw/apikey/add/", {"tenant": tenant.pk, "name": "r", "scopes": ["routes:read"]})
    key = ApiKey.objects.get(name="r")
    admin.post("/admin/smsgw/apikey/", {"action": "rotate_key", "_selected_action": [key.pk]})
    assert ApiKey.objects.get(name="r", revoked_at__isnull=True).scopes == ["routes:read"]


def test_revoke_and_rotate_keys():
    tenant, raw = tenant_with_key("acme")
    key = ApiKey.objects.get(tenant=tenant)
    admin = staff("admin")
    page = admin.post(
        "/admin/smsgw/apikey/", {"action": "rotate_key", "_selected_action": [key.pk]}
    ).content.decode()
    new_raw = re.search(r'id="secret-once"[^>]*>(sk_[^<]+)<', page).group(1)
    assert Client().get("/v1/messages", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401
    assert Client().get("/v1/messages", HTTP_AUTHORIZATION=f"Bearer {new_raw}").status_code == 200
    new = ApiKey.objects.get(prefix=new_raw.split("_")[1])
    admin.post("/admin/smsgw/apikey/", {"action": "revoke_keys", "_selected_action": [new.pk]})
    assert Client().get("/v1/messages", HTTP_AUTHORIZATION=f"Bearer {new_raw}").status_code == 401


def _builtin_sweep() -> PeriodicTask:
    every, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.SECONDS)
    return PeriodicTask.objects.update_or_create(
        name="smsgw-sweep", defaults={"task": "scheduling.sweep", "interval": every, "enabled": True}
    )[0]


def test_the_sweep_cannot_be_disabled_or_deleted_even_by_an_admin():
    sweep = _builtin_sweep()
    every, _ = IntervalSchedule.objects.get_or_create(every=7, period=IntervalSchedule.DAYS)
    own = PeriodicTask.objects.create(name="nightly-report", task="scheduling.sweep", interval=every)
    admin = staff("admin")
    url = "/admin/django_celery_beat/periodictask/"
    response = admin.post(
        url, {"action": "disable_tasks", "_selected_action": [sweep.pk, own.pk]}, follow=True
    ).content.decode()
    assert "smsgw-sweep" in response and "built in" in response
    sweep.refresh_from_db()
    own.refresh_from_db()
    assert sweep.enabled and not own.enabled
    admin.post(url, {"action": "toggle_tasks", "_selected_action": [sweep.pk]})
    assert PeriodicTask.objects.get(pk=sweep.pk).enabled
    admin.post(url, {"action": "delete_selected", "_selected_action": [sweep.pk], "post": "yes"})
    assert PeriodicTask.objects.filter(pk=sweep.pk).exists()
    assert admin.post(f"{url}{sweep.pk}/delete/", {"post": "yes"}).status_code == 403
    admin.post(f"{url}{sweep.pk}/change/", {"name": "smsgw-sweep", "task": "scheduling.sweep", "enabled": ""})
    assert PeriodicTask.objects.get(pk=sweep.pk).enabled
    interval_url = f"/admin/django_celery_beat/intervalschedule/{sweep.interval_id}/delete/"
    assert admin.post(interval_url, {"post": "yes"}).status_code == 403
    assert PeriodicTask.objects.filter(pk=sweep.pk).exists()


def test_login_is_locked_after_repeated_failures_for_that_user_and_address(settings):
    settings.AXES_FAILURE_LIMIT = 3
    User.objects.create_user("ops", "ops@example.com", PASSWORD, is_staff=True, is_superuser=True)
    client = Client(REMOTE_ADDR="203.0.113.7")
    for _ in range(3):
        client.post("/admin/login/", {"username": "ops", "password": "wrong"})
    locked = client.post("/admin/login/?next=/admin/", {"username": "ops", "password": PASSWORD})
    assert locked.status_code == 429
    assert "_auth_user_id" not in client.session
    # Another address is not locked out by these failures (no denial of service by name alone).
    other = Client(REMOTE_ADDR="198.51.100.9")
    assert (
        other.post("/admin/login/?next=/admin/", {"username": "ops", "password": PASSWORD}).status_code == 302
    )
    assert "_auth_user_id" in other.session


def test_sessions_expire_after_inactivity_and_each_request_extends_them(settings):
    assert settings.SESSION_SAVE_EVERY_REQUEST is True
    client = staff("viewer")
    first = client.get("/admin/")
    cookie = first.cookies[settings.SESSION_COOKIE_NAME]
    assert int(cookie["max-age"]) == settings.SESSION_COOKIE_AGE == 1800


def test_behind_the_tls_proxy_failures_count_against_the_forwarded_client_address(settings):
    settings.AXES_FAILURE_LIMIT = 2
    settings.SMSGW_TLS = "proxy"
    User.objects.create_user("ops", "ops@example.com", PASSWORD, is_staff=True, is_superuser=True)
    proxy = "10.0.0.2"  # every request reaches the web process from the proxy
    attacker = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="198.51.100.1, 203.0.113.66")
    for _ in range(2):
        attacker.post("/admin/login/", {"username": "ops", "password": "wrong"})
    assert attacker.post("/admin/login/", {"username": "ops", "password": PASSWORD}).status_code == 429
    colleague = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="192.0.2.10")
    assert (
        colleague.post("/admin/login/?next=/admin/", {"username": "ops", "password": PASSWORD}).status_code
        == 302
    )


def test_facade_account_sid_shown_strict_mode_set_and_callback_key_rotated():
    tenant = tenant_with_key("acme")[0]
    admin = staff("admin")
    page = admin.get(f"/admin/smsgw/tenant/{tenant.pk}/change/").content.decode()
    assert tenant.facade_account_sid in page and 'name="facade_strict"' in page
    assert tenant.callback_signing_key not in page and 'name="facade_account_sid"' not in page
    old = tenant.callback_signing_key
    rotated = admin.post(
        "/admin/smsgw/tenant/", {"action": "rotate_callback_signing_key", "_selected_action": [tenant.pk]}
    ).content.decode()
    tenant.refresh_from_db()
    assert tenant.callback_signing_key != old and tenant.callback_signing_key in rotated
