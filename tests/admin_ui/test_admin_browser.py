"""The operator console in a real browser: Debian's Chromium driven by Playwright against the live test server
(pytest-django's live_server; it serves /static/ with Django's own handler, so the WhiteNoise path is proven
by tests/smsgw/http/test_static.py and the embedded smoke test). Each role logs in through the login form; an
operator finds a message by a national-format number, cancels one, bulk-cancels a mix, reschedules and replays
a dead letter; a viewer is refused. Playwright's own browser download is never used (it cannot work offline):
deploy/test.sh installs Debian's chromium when it is missing, and these tests are skipped, saying so, only
when /usr/bin/chromium is absent."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.db import connections
from django.utils import timezone

from scheduling.models import Message, MessageEvent, Status
from smsgw.console.roles import roles_sync
from tests.factories import message, recipient, tenant_with_key

CHROMIUM = Path("/usr/bin/chromium")
PASSWORD = "browser-test-password-1"

pytestmark = [
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def _orm_beside_playwright(monkeypatch):
    # Playwright's sync API keeps an asyncio loop on this thread while a browser is open, which makes
    # Django refuse ORM calls ("async-unsafe"); the test's ORM calls between browser steps are plain
    # synchronous ones. Only while the browser is open: it closes before the database is flushed.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture
def browser(transactional_db, _orm_beside_playwright):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield launched
        launched.close()
        # ORM calls made while the loop ran may have opened a connection of their own (Django keys
        # connections by async context): close it here, or the test database cannot be dropped.
        connections.close_all()


@pytest.fixture
def people(db):
    roles_sync(apps)  # a flushed database (live_server) lost what the migration made
    for role in ("viewer", "operator", "admin"):
        user = User.objects.create_user(role, f"{role}@example.com", PASSWORD, is_staff=True)
        user.groups.add(Group.objects.get(name=role))


@pytest.fixture
def tenant(db):
    return tenant_with_key("acme", default_timezone="America/New_York")[0]


def _login(browser, live_server, role: str):
    page = browser.new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", role)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/admin/")
    return page


def _messages_page(page, live_server, query: str = ""):
    page.goto(f"{live_server.url}/admin/scheduling/message/{query}")


def _select_and_run(page, public_ids: list[str], action: str):
    for public_id in public_ids:
        row = page.locator("#result_list tbody tr", has_text=public_id)
        row.locator("input.action-select").check()
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")
    page.wait_for_selector("#operation-summary")


def _status(msg: Message) -> str:
    return Message.objects.values_list("status", flat=True).get(pk=msg.pk)


def test_every_role_logs_in_to_a_styled_console(browser, live_server, people):
    for role in ("viewer", "operator", "admin"):
        page = _login(browser, live_server, role)
        assert page.locator("#user-tools").inner_text().upper().startswith(f"WELCOME, {role.upper()}")
        # The stylesheet arrived: Django's header colour, not an unstyled page's transparent one.
        header_bg = page.eval_on_selector("#header", "e => getComputedStyle(e).backgroundColor")
        assert header_bg not in ("rgba(0, 0, 0, 0)", "transparent")
        icon = page.eval_on_selector("#header", "e => getComputedStyle(e).display")
        assert icon == "flex"  # base.css lays the header out as a flex row
        page.close()


def test_viewer_is_refused(browser, live_server, people, tenant):
    msg = message(tenant, due_in=3600)
    page = _login(browser, live_server, "viewer")
    _messages_page(page, live_server)
    assert page.locator("#result_list", has_text=msg.public_id).count() == 1
    options = (
        page.locator("select[name=action] option").all_inner_texts()
        if page.locator("select[name=action]").count()
        else []
    )
    assert not any("Cancel" in o for o in options)
    response = page.goto(f"{live_server.url}/admin/smsgw/apikey/")
    assert response.status == 403
    response = page.goto(f"{live_server.url}/admin/scheduling/message/{msg.pk}/change/")
    assert response.status == 200 and page.locator("input[name=_save]").count() == 0
    assert _status(msg) == Status.SCHEDULED
    page.close()


def test_operator_finds_by_national_number_and_cancels_one(browser, live_server, people, tenant):
    wanted = message(tenant, to="+14155550123", due_in=3600)
    other = message(tenant, to="+14155550199", due_in=3600)
    page = _login(browser, live_server, "operator")
    _messages_page(page, live_server)
    page.fill("#searchbar", "(415) 555-0123")
    page.press("#searchbar", "Enter")
    page.wait_for_url(re.compile(r".*\?q=.*"))
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1 and wanted.public_id in rows.first.inner_text()
    assert "+1415*****23" in rows.first.inner_text()

    _select_and_run(page, [wanted.public_id], "cancel_messages")
    assert "1 selected" in page.inner_text("#operation-summary")
    page.click("#confirm-operation")
    page.wait_for_selector(".messagelist")
    assert "Cancelled 1." in page.inner_text(".messagelist")
    assert _status(wanted) == Status.CANCELLED and _status(other) == Status.SCHEDULED
    event = MessageEvent.objects.get(message=wanted, kind="cancelled")
    assert event.actor == "admin:operator"

    page.goto(f"{live_server.url}/admin/scheduling/message/{wanted.pk}/change/")
    timeline = page.locator("#events-group").inner_text()
    assert "cancelled" in timeline and "admin:operator" in timeline
    page.close()


def test_operator_bulk_cancels_a_mix(browser, live_server, people, tenant):
    scheduled = [message(tenant, to=recipient(i), due_in=3600) for i in range(3)]
    sending = [message(tenant, to=recipient(10 + i)) for i in range(2)]
    delivered = message(tenant, to=recipient(20))
    Message.objects.filter(pk__in=[m.pk for m in sending]).update(status=Status.SENDING)
    Message.objects.filter(pk=delivered.pk).update(status=Status.DELIVERED, run_after=None)
    page = _login(browser, live_server, "operator")
    _messages_page(page, live_server)
    page.check("#action-toggle")  # select every row on the page
    page.select_option("select[name=action]", "cancel_messages")
    page.click("button[name=index]")
    summary = page.inner_text("#operation-summary")
    assert summary.startswith("6 selected: 3 will be cancelled")
    assert "2 sending" in summary and "1 delivered" in summary
    page.click("#confirm-operation")
    page.wait_for_selector(".messagelist")
    assert "Cancelled 3; 2 were already sending; 1 was already delivered." in page.inner_text(".messagelist")
    for m in scheduled:
        assert _status(m) == Status.CANCELLED
    for m in sending:
        assert _status(m) == Status.SENDING
    assert _status(delivered) == Status.DELIVERED
    page.close()


def test_operator_reschedules_to_a_local_time(browser, live_server, people, tenant):
    msg = message(tenant, due_in=3600)
    day = (timezone.now() + timedelta(days=2)).date()
    page = _login(browser, live_server, "operator")
    _messages_page(page, live_server)
    _select_and_run(page, [msg.public_id], "reschedule_messages")
    assert page.input_value("select[name=timezone]") == "America/New_York"  # the tenant's zone
    page.fill("input[name=local_time]", f"{day}T08:15:00")
    page.select_option("select[name=timezone]", "Asia/Tokyo")
    page.click("#confirm-operation")
    page.wait_for_selector(".messagelist")
    assert "Rescheduled 1." in page.inner_text(".messagelist")
    msg.refresh_from_db()
    tokyo = msg.due_at.astimezone(ZoneInfo("Asia/Tokyo"))
    assert (tokyo.date(), tokyo.hour, tokyo.minute) == (day, 8, 15)
    row = page.locator("#result_list tbody tr", has_text=msg.public_id).inner_text()
    assert "JST (Asia/Tokyo)" in row and "UTC" in row
    page.close()


def test_operator_replays_a_dead_letter(browser, live_server, people, tenant):
    dead = message(tenant)
    Message.objects.filter(pk=dead.pk).update(
        status=Status.FAILED, run_after=None, attempt_count=4, failed_at=timezone.now()
    )
    page = _login(browser, live_server, "operator")
    _messages_page(page, live_server, "?status__exact=failed")
    _select_and_run(page, [dead.public_id], "replay_messages")
    assert "1 will be replayed" in page.inner_text("#operation-summary")
    page.click("#confirm-operation")
    page.wait_for_selector(".messagelist")
    assert "Replayed 1." in page.inner_text(".messagelist")
    dead.refresh_from_db()
    assert dead.status == Status.QUEUED and dead.attempt_count == 0
    assert MessageEvent.objects.get(message=dead, kind="replayed").actor == "admin:operator"
    page.close()


def test_the_landing_page_shows_health_at_a_glance(browser, live_server, people, tenant):
    """The page an operator opens first (reporting.console): titled smsgw, its figures the database's,
    each with a chart drawn on the server, and a figure's link leading to the list behind it."""
    from reporting.minutes import console_minutes_record

    for seconds in (120, 60):
        message(tenant, due_in=-seconds)
    sent = message(tenant, status=Status.SENDING)
    at = timezone.now() - timedelta(minutes=2)
    Message.objects.filter(pk=sent.pk).update(status=Status.SENT, sent_at=at, due_at=at, provider="sandbox")
    console_minutes_record()
    page = _login(browser, live_server, "viewer")
    assert page.title() == "Health at a glance | smsgw"
    assert page.locator("#site-name").inner_text() == "smsgw"
    due = page.locator('tr[data-figure="due"]')
    assert due.locator("td.now").inner_text() == str(
        Message.objects.filter(status=Status.SCHEDULED, run_after__lte=timezone.now()).count()
    )
    assert page.locator('tr[data-figure="sent:sandbox"] td.hour').inner_text() == "1"
    assert page.locator("svg.spark").count() >= 5  # drawn on the server: the page loads no script for it
    due.locator("a").click()
    page.wait_for_url(re.compile(r".*/admin/scheduling/message/\?due=now$"))
    assert page.locator("#result_list tbody tr").count() == 2
    page.close()
