"""Keywords and actions (issue 41 point 5, docs/inbound.md): exact single-word keywords in several languages,
a near miss left for review, the confirmation sent past the suppression it confirms and really submitted,
a tenant's cancel and confirm keywords acting on exactly the replied-to schedule, campaign or message.
Signed Twilio inbound webhooks, the inbound processor, the real send worker against the Twilio sandbox."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from delivery.models import Suppression, SuppressionChange
from delivery.sending import worker as sending
from inbound.keywords import keyword_match
from inbound.models import KeywordRule
from receipts.models import WebhookDelivery
from scheduling.lifecycle import transitions
from scheduling.models import Message, Schedule, Status
from tests.factories import SENDER, campaign_with_messages, message, recipient, sender_for, tenant_with_key
from tests.inbound.keywords.driving import PUBLIC, reply

pytestmark = pytest.mark.django_db


@pytest.fixture
def tenant(db, settings):
    settings.SMSGW_PUBLIC_BASE_URL = PUBLIC
    settings.WEBHOOK_ALLOW_HTTP = True
    return tenant_with_key("acme")


@pytest.fixture
def api(tenant):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant[1]}")
    return client


def sent(tenant, to: str) -> Message:
    """A message the tenant sent to ``to`` from SENDER, through the send worker (the sandbox takes it)."""
    msg = message(tenant, to=to)
    return send(msg)


def send(msg: Message) -> Message:
    transitions.transition(msg.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    sending.send_batch([msg.pk])
    msg.refresh_from_db()
    assert msg.status == Status.SENT and msg.sent_at is not None, (msg.status, msg.status_reason)
    return msg


# --- matching --------------------------------------------------------------------------------------------


@pytest.mark.sqlite
@pytest.mark.parametrize(
    ("body", "keyword", "action", "near_miss"),
    [
        ("STOP", "STOP", "opt_out", False),
        ("  sToP \n", "STOP", "opt_out", False),
        ("Stop!", "STOP", "opt_out", False),
        ("arrêt", "ARRET", "opt_out", False),
        ("Arret.", "ARRET", "opt_out", False),
        ("alto", "ALTO", "opt_out", False),
        ("START", "START", "opt_in", False),
        ("démarrer", "DEMARRER", "opt_in", False),
        ("aide", "AIDE", "help", False),
        ("stop please", "STOP", "", True),
        ("Stop texting me", "STOP", "", True),
        ("arrêtez de m'écrire", "ARRETEZ", "", False),
        ("Arret svp", "ARRET", "", True),
        # Only an opt-out's near miss is flagged: these are ordinary replies.
        ("Yes, see you Tuesday", "YES,", "", False),
        ("Yes see you Tuesday", "YES", "", False),
        ("help me find the address", "HELP", "", False),
        ("STOPPING", "STOPPING", "", False),
        ("hello", "HELLO", "", False),
        ("", "", "", False),
    ],
)
def test_a_keyword_is_the_whole_message_trimmed_case_and_accent_insensitive(
    tenant, body, keyword, action, near_miss
):
    match = keyword_match(body=body, tenant_id=tenant[0].pk, numbers=(SENDER, ""))
    assert (match.keyword, match.action, match.near_miss) == (keyword, action, near_miss)


@pytest.mark.sqlite
def test_a_tenant_rule_wins_and_a_rule_for_the_number_wins_over_the_tenant_wide_one(tenant):
    t, _ = tenant
    other_number = "+14155550199"
    sender_for(t, other_number)
    KeywordRule.objects.create(tenant=t, keyword="CANCEL", action="cancel", reply="Cancelled.")
    KeywordRule.objects.create(tenant=t, keyword="CANCEL", action="confirm", number=other_number)
    assert keyword_match(body="cancel", tenant_id=t.pk, numbers=(SENDER, "")).action == "cancel"
    assert keyword_match(body="cancel", tenant_id=t.pk, numbers=(other_number, "")).action == "confirm"
    other, _ = tenant_with_key("other")
    assert keyword_match(body="cancel", tenant_id=other.pk, numbers=(SENDER, "")).action == "opt_out"


def test_a_near_miss_is_flagged_for_review_and_not_applied(adapter, tenant):
    for body in ("stop please", "Stop texting me"):
        inbound = reply(body, recipient(1))
        assert (inbound.keyword, inbound.action, inbound.needs_review) == ("STOP", "", True)
    assert not Suppression.objects.exists() and not SuppressionChange.objects.exists()
    assert not Message.objects.exists()  # nothing answered either


# --- opt-out, opt-in, help and their confirmations ----------------------------------------------------


def test_french_stop_opts_out_and_its_french_confirmation_is_exempt_and_submitted(
    adapter, sandbox, tenant, api
):
    t, _ = tenant
    contact = recipient(2)
    earlier = message(t, to=contact)  # accepted before the opt-out: stopped at execution
    inbound = reply("Arrêt", contact)
    assert (inbound.keyword, inbound.action, inbound.action_result["changed"]) == ("ARRET", "opt_out", True)
    assert Suppression.objects.filter(tenant=t, number=contact, sender=SENDER).exists()

    confirmation = Message.objects.get(public_id=inbound.action_result["reply"])
    assert confirmation.exempt_suppression and (confirmation.to, confirmation.from_number) == (
        contact,
        SENDER,
    )
    assert confirmation.body.startswith("Acme : vous êtes désinscrit")
    assert confirmation.events.get(kind="created").actor == "keyword"
    # A normal message to the contact is refused at acceptance ...
    refused = api.post("/v1/messages", {"to": contact, "body": "promo"}, format="json")
    assert refused.status_code == 400 and "to" in refused.json()["error"]["fields"]
    # ... and the one accepted before is cancelled at execution, in the same batch the confirmation goes.
    for m in (confirmation, earlier):
        transitions.transition(m.pk, from_statuses=[Status.SCHEDULED], to_status=Status.QUEUED, kind="queued")
    report = sending.send_batch([confirmation.pk, earlier.pk])
    assert (report.opted_out, report.claimed) == (1, 1)
    confirmation.refresh_from_db()
    earlier.refresh_from_db()
    assert confirmation.status == Status.SENT and confirmation.provider_message_id
    assert earlier.status == Status.CANCELLED and earlier.reason_code == "opted_out"
    # A tenant cannot turn the confirmation into something else.
    edit = api.patch(f"/v1/messages/{confirmation.public_id}", {"body": "promo"}, format="json")
    assert edit.status_code == 409


def test_start_and_help_answer_in_english_by_default_and_with_the_tenants_text(adapter, tenant):
    t, _ = tenant
    contact = recipient(3)
    reply("STOP", contact)
    started = reply("start", contact)
    assert started.action == "opt_in" and not Suppression.objects.exists()
    assert Message.objects.get(public_id=started.action_result["reply"]).body.startswith(
        "Acme: you are subscribed again"
    )
    KeywordRule.objects.create(tenant=t, keyword="HELP", action="help", reply="Acme care: 0800 000 000.")
    helped = reply("Help", contact)
    answer = Message.objects.get(public_id=helped.action_result["reply"])
    assert answer.body == "Acme care: 0800 000 000." and answer.exempt_suppression
    changes = list(SuppressionChange.objects.order_by("id").values_list("action", "keyword"))
    assert changes == [("added", "STOP"), ("removed", "START"), ("help", "HELP")]


# --- cancel ---------------------------------------------------------------------------------------------


def _schedule(api, to: str, body: str) -> Schedule:
    start = (timezone.now() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    resp = api.post(
        "/v1/schedules",
        {"to": to, "body": body, "rrule": "FREQ=DAILY", "start": start, "timezone": "UTC"},
        format="json",
    )
    assert resp.status_code == 201, resp.content
    return Schedule.objects.get(public_id=resp.json()["id"])


def test_c_cancels_the_rest_of_the_replied_schedule_for_that_contact_and_nothing_else(
    adapter, tenant, api, settings
):
    settings.SCHEDULE_HORIZON_SECONDS = 4 * 24 * 3600  # a few daily occurrences made ahead
    t, _ = tenant
    contact, someone_else = recipient(4), recipient(5)
    KeywordRule.objects.create(tenant=t, keyword="C", action="cancel", reply="Your reminders are cancelled.")
    reminders = _schedule(api, contact, "Appointment tomorrow 10:00. Reply C to cancel.")
    pills = _schedule(api, contact, "Take your pills")
    theirs = _schedule(api, someone_else, "Appointment tomorrow. Reply C to cancel.")
    occurrences = list(reminders.occurrences.order_by("due_at"))
    assert len(occurrences) >= 2
    answered = send(occurrences[0])
    before = dict(Message.objects.values_list("id", "status"))

    inbound = reply(" c ", contact)

    assert inbound.action == "cancel" and inbound.in_reply_to == answered.public_id
    result = inbound.action_result
    rest = {m.public_id for m in occurrences[1:]}
    assert set(result["cancelled"]) == rest and result["count"] == len(rest)
    assert (result["schedule"], result["schedule_cancelled"]) == (reminders.public_id, True)
    reminders.refresh_from_db()
    assert reminders.status == "cancelled"
    answer = Message.objects.get(public_id=result["reply"])
    assert answer.body == "Your reminders are cancelled." and not answer.exempt_suppression
    # Every message's final state: the rest of the reminders cancelled, the one answered still sent,
    # everything else (the other schedule to the same contact, another contact's) as it was.
    for msg in Message.objects.exclude(pk=answer.pk):
        if msg.public_id in rest:
            assert msg.status == Status.CANCELLED and msg.reason_code in ("", "cancelled_by_reply")
            assert msg.events.filter(kind="cancelled", actor="keyword").exists()
        else:
            assert msg.status == before[msg.pk], msg
    assert Message.objects.filter(schedule=pills, status=Status.SCHEDULED).exists()
    assert Message.objects.filter(schedule=theirs, status=Status.SCHEDULED).exists()
    for s in (pills, theirs):
        s.refresh_from_db()
        assert s.status == "active"
    assert answered.events.filter(kind="reply_received").exists()


def test_c_to_a_campaign_message_cancels_that_contacts_pending_ones_of_that_campaign_only(adapter, tenant):
    t, _ = tenant
    KeywordRule.objects.create(tenant=t, keyword="C", action="cancel")
    campaign, ids = campaign_with_messages(t, 3, priority="transactional")
    _, other_ids = campaign_with_messages(t, 2, priority="transactional")
    first = Message.objects.get(pk=ids[0])
    contact = first.to
    send(first)
    # The other campaign goes to the same numbers. A second message of the same campaign to the same
    # contact (allow_duplicates) is still pending.
    later = message(t, to=contact)
    Message.objects.filter(pk=later.pk).update(campaign=campaign, campaign_key="line:9")
    inbound = reply("C", contact)
    assert inbound.action_result["cancelled"] == [later.public_id]
    assert inbound.action_result["campaign"] == campaign.public_id and "reply" not in inbound.action_result
    assert Message.objects.get(pk=later.pk).reason_code == "cancelled_by_reply"
    untouched = [*ids[1:], *other_ids]
    assert set(Message.objects.filter(pk__in=untouched).values_list("status", flat=True)) == {"scheduled"}
    assert not Message.objects.filter(pk__in=[*ids, *other_ids], status=Status.CANCELLED).exists()


# --- confirm --------------------------------------------------------------------------------------------


def test_y_confirms_the_replied_message_on_its_timeline_and_by_webhook(adapter, tenant):
    t, _ = tenant
    t.webhook_url = "http://hooks.example.com/sms"
    t.save(update_fields=["webhook_url"])
    KeywordRule.objects.create(tenant=t, keyword="Y", action="confirm", reply="Thank you, see you then.")
    contact = recipient(6)
    answered = sent(t, contact)
    inbound = reply("y", contact)
    assert inbound.action == "confirm" and inbound.action_result["confirmed"] == answered.public_id
    entry = answered.events.get(kind="reply_confirmed")
    assert entry.details == {"inbound": inbound.public_id, "keyword": "Y"}
    hook = WebhookDelivery.objects.get(event_type="message.confirmed")
    assert hook.webhook_id == inbound.action_result["webhook"] and hook.message_id == answered.pk
    assert hook.payload["data"]["id"] == answered.public_id
    assert hook.payload["data"]["confirmed_by"] == inbound.public_id
    answer = Message.objects.get(public_id=inbound.action_result["reply"])
    assert answer.body == "Thank you, see you then." and answer.to == contact


def test_yes_from_a_contact_who_never_opted_out_gets_no_default_answer(adapter, tenant):
    answered = sent(tenant[0], recipient(8))
    inbound = reply("Yes", recipient(8))
    assert inbound.action == "opt_in" and inbound.action_result == {"changed": False, "sender": SENDER}
    assert list(Message.objects.values_list("pk", flat=True)) == [answered.pk]


def test_confirm_without_a_reply_text_answers_nothing(adapter, tenant):
    t, _ = tenant
    KeywordRule.objects.create(tenant=t, keyword="OK", action="confirm")
    answered = sent(t, recipient(7))
    inbound = reply("ok", recipient(7))
    assert "reply" not in inbound.action_result
    assert list(Message.objects.values_list("pk", flat=True)) == [answered.pk]


# --- the API --------------------------------------------------------------------------------------------


@pytest.mark.sqlite
def test_put_replaces_the_whole_list_and_get_shows_it_with_the_built_in_lists(tenant, api):
    t, _ = tenant
    rules = [
        {"keyword": " c ", "action": "cancel", "reply": "Cancelled."},
        {"keyword": "y", "action": "confirm"},
        {"keyword": "Arret", "action": "opt_out", "number": "+1 415 555 0100"},
    ]
    resp = api.put("/v1/keywords", {"rules": rules}, format="json")
    assert resp.status_code == 200, resp.content
    got = api.get("/v1/keywords").json()
    assert got == resp.json()
    assert {(r["keyword"], r["action"], r["reply"], r["number"]) for r in got["rules"]} == {
        ("C", "cancel", "Cancelled.", ""),
        ("Y", "confirm", "", ""),
        ("ARRET", "opt_out", "", SENDER),
    }
    assert "ARRET" in got["built_in"]["opt_out"] and "HELP" in got["built_in"]["help"]
    assert api.put("/v1/keywords", {"rules": [rules[1]]}, format="json").status_code == 200
    assert list(KeywordRule.objects.filter(tenant=t).values_list("keyword", flat=True)) == ["Y"]


@pytest.mark.sqlite
@pytest.mark.parametrize(
    ("rule", "field"),
    [
        ({"keyword": "two words", "action": "cancel"}, "rules[1].keyword"),
        ({"keyword": "ÉTÉ", "action": "cancel"}, "rules[1].keyword"),
        ({"keyword": "X" * 33, "action": "cancel"}, "rules[1].keyword"),
        ({"keyword": "C", "action": "cancel"}, "rules[1].keyword"),  # twice for one number
        ({"keyword": "D", "action": "delete_everything"}, "rules[1].action"),
        ({"keyword": "D", "action": "cancel", "reply": "x" * 641}, "rules[1].reply"),
        ({"keyword": "D", "action": "cancel", "number": "+14155550188"}, "rules[1].number"),
        ({"keyword": "D", "action": "cancel", "extra": 1}, "rules[1].extra"),
        ({"keyword": 7, "action": "cancel"}, "rules[1].keyword"),
    ],
)
def test_a_refused_list_names_the_field_and_changes_nothing(tenant, api, rule, field):
    t, _ = tenant
    KeywordRule.objects.create(tenant=t, keyword="KEEP", action="confirm")
    resp = api.put("/v1/keywords", {"rules": [{"keyword": "C", "action": "cancel"}, rule]}, format="json")
    assert resp.status_code == 400 and field in resp.json()["error"]["fields"], resp.content
    assert list(KeywordRule.objects.filter(tenant=t).values_list("keyword", flat=True)) == ["KEEP"]


@pytest.mark.sqlite
def test_the_body_must_be_an_object_with_rules_only(tenant, api):
    assert api.put("/v1/keywords", [], format="json").status_code == 400
    resp = api.put("/v1/keywords", {"rules": [], "more": 1}, format="json")
    assert resp.status_code == 400 and "more" in resp.json()["error"]["fields"]
    assert api.put("/v1/keywords", {}, format="json").json()["error"]["fields"].keys() == {"rules"}


@pytest.mark.sqlite
def test_the_admin_shows_and_checks_keyword_rules_on_the_tenants_page(tenant):
    from django.apps import apps
    from django.contrib.auth.models import User
    from django.test import Client

    from smsgw.console.roles import roles_sync
    from tests.smsgw.test_admin import _tenant_form

    t, _ = tenant
    roles_sync(apps)
    admin = User.objects.create_superuser("root", "root@example.com", "pw-for-tests-only-1")
    client = Client()
    client.force_login(admin)
    KeywordRule.objects.create(tenant=t, keyword="C", action="cancel", reply="Cancelled.")
    url = f"/admin/smsgw/tenant/{t.pk}/change/"
    page = client.get(url).content.decode()
    assert "keyword rules" in page.lower() and 'value="C"' in page

    def post(*rows: dict):
        # The page's own management forms (every inline it shows), the tenant as it is, the rules given.
        shown = dict(
            re.findall(r'name="([\w-]+-(?:TOTAL|INITIAL|MIN_NUM|MAX_NUM)_FORMS)"[^>]*value="(\d*)"', page)
        )
        data = {**shown, **_tenant_form(name=t.name, slug=t.slug, default_from=t.default_from)}
        data["keyword_rules-INITIAL_FORMS"] = shown["keyword_rules-INITIAL_FORMS"]  # the rule it has
        rule = KeywordRule.objects.get(tenant=t)
        rows = ({"id": rule.pk, "keyword": "C", "action": "cancel", "reply": "Cancelled."}, *rows)
        data["keyword_rules-TOTAL_FORMS"] = str(len(rows))
        for i, row in enumerate(rows):
            data.update({f"keyword_rules-{i}-{k}": v for k, v in row.items()})
            data[f"keyword_rules-{i}-tenant"] = t.pk
        return client.post(url, data)

    refused = post(
        {"keyword": "two words", "action": "confirm"},
        {"keyword": "Y", "action": "confirm", "number": "+14155550188"},
    )
    assert refused.status_code == 200 and "One word of letters" in refused.content.decode()
    assert "Not one of this tenant" in refused.content.decode()
    assert list(KeywordRule.objects.filter(tenant=t).values_list("keyword", flat=True)) == ["C"]
    done = post({"keyword": "y", "action": "confirm", "reply": "Thanks.", "number": "+1 415 555 0100"})
    assert done.status_code == 302, done.content.decode()[-3000:]
    rules = set(KeywordRule.objects.filter(tenant=t).values_list("keyword", "action", "number"))
    assert rules == {("C", "cancel", ""), ("Y", "confirm", SENDER)}
