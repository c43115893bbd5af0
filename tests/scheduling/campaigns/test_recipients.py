"""The recipient's field in a campaign's list (docs/campaigns.md): `to`, as in every request of the API,
with `phone` as a deprecated alias that still works (the other campaign tests write `phone` and prove it).
`to` is never a template variable; both names with different values are a 400 naming `recipients`;
error rows carry the recipient under `to` and, deprecated, under `phone`, and name the field the list
used."""

from __future__ import annotations

import pytest

from delivery.guards import suppression
from scheduling.models import Campaign, CampaignUpload, Message
from tests.factories import recipient
from tests.scheduling.campaigns.test_campaigns import errors_of, fields_of, make, post, upload

pytestmark = pytest.mark.django_db


def bodies(campaign: Campaign) -> list[tuple[str, str]]:
    return sorted(Message.objects.filter(campaign=campaign).values_list("to", "body"))


def test_json_recipients_with_to_make_their_messages_and_to_is_not_a_variable(api):
    people = [{"to": recipient(i), "first_name": f"N{i}", "code": str(i)} for i in range(1, 4)]
    resp = post(api, recipients=people)
    assert resp.json()["variables"] == ["first_name", "code"]
    # The stored list has one recipient column, `to`, and no variable column of that name.
    stored = bytes(CampaignUpload.objects.get().data)
    assert stored.startswith(b"to,timezone,first_name,code\n"), stored[:60]
    campaign = make(resp)
    assert (campaign.messages_made, campaign.rows_rejected) == (3, 0)
    assert bodies(campaign) == [(recipient(i), f"Hello N{i}, your code is {i}") for i in range(1, 4)]


def test_a_list_mixing_to_and_phone_items_reads_each(api):
    people = [
        {"to": recipient(1), "first_name": "A", "code": "1"},
        {"phone": recipient(2), "first_name": "B", "code": "2"},
        {"to": recipient(3), "phone": recipient(3), "first_name": "C", "code": "3"},  # the same: fine
        {"to": recipient(4), "phone": f" {recipient(4)} ", "first_name": "D", "code": "4"},  # spaces only
    ]
    campaign = make(post(api, recipients=people))
    assert bodies(campaign) == [
        (recipient(i), f"Hello {n}, your code is {i}") for i, n in enumerate("ABCD", start=1)
    ]


@pytest.mark.parametrize("item", [{"to": "+14155550101", "phone": "+14155550102"}, {"to": 1, "phone": 2}])
def test_to_and_phone_with_different_values_is_400_and_stores_nothing(api, item):
    people = [{"to": recipient(1), "first_name": "A", "code": "1"}, {**item, "first_name": "B", "code": "2"}]
    resp = post(api, recipients=people)
    assert resp.status_code == 400, resp.content
    why = fields_of(resp)["recipients"][0]
    assert "item 2" in why and "'to'" in why and "'phone'" in why
    assert not Campaign.objects.exists() and not CampaignUpload.objects.exists()


def test_a_wrong_type_names_the_key_the_client_wrote(api):
    resp = post(api, recipients=[{"to": True, "first_name": "A", "code": "1"}])
    assert resp.status_code == 400 and "'to' must be a string or a number" in fields_of(resp)["recipients"][0]


def test_a_csv_with_a_to_column_makes_its_messages_and_its_errors_name_to(api):
    suppression.suppression_add(tenant_id=api.tenant.pk, number=recipient(4), source="api")
    csv_text = (
        "to,first_name,code\n"
        f"{recipient(1)},Ann,1\n"  # line 2: good
        "+1415,Bob,2\n"  # line 3: bad number
        f"{recipient(1)},Ann again,3\n"  # line 4: duplicate of line 2
        f"{recipient(4)},Dee,4\n"  # line 5: opted out
        f"{recipient(5)},,5\n"  # line 6: missing first_name
    )
    campaign = make(upload(api, csv_text))
    assert errors_of(campaign) == [
        (3, "to", "invalid_number"),
        (4, "to", "duplicate"),
        (5, "to", "opted_out"),
        (6, "first_name", "missing_variable"),
    ]
    assert bodies(campaign) == [(recipient(1), "Hello Ann, your code is 1")]


def test_json_errors_name_to_for_a_to_list_and_phone_for_a_phone_list(api):
    to_list = make(post(api, recipients=[{"to": "+1415", "first_name": "A", "code": "1"}]))
    phone_list = make(post(api, recipients=[{"phone": "+1415", "first_name": "A", "code": "1"}]))
    assert errors_of(to_list) == [(1, "to", "invalid_number")]
    assert errors_of(phone_list) == [(1, "phone", "invalid_number")]


def test_error_rows_carry_the_recipient_under_to_and_the_deprecated_phone(api):
    campaign = make(upload(api, "to,first_name,code\n+1 415,Bob,2\n"))
    [row] = api.get(f"/v1/campaigns/{campaign.public_id}/errors").json()["results"]
    assert row == {
        "line": 2,
        "to": "+1 415",
        "phone": "+1 415",
        "field": "to",
        "code": "invalid_number",
        "message": row["message"],
    }


@pytest.mark.parametrize(
    ("csv_text", "why"),
    [
        ("to,phone,first_name,code\n+14155550123,+14155550123,A,1\n", "both 'to' and 'phone'"),
        ("first_name,code\nA,1\n", "no 'to' column"),
    ],
)
def test_a_csv_header_with_both_names_or_neither_is_400_and_stores_nothing(api, csv_text, why):
    resp = upload(api, csv_text)
    assert resp.status_code == 400, resp.content
    assert why in fields_of(resp)["recipients"][0]
    assert not Campaign.objects.exists() and not CampaignUpload.objects.exists()
