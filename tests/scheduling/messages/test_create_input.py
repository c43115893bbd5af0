"""``message_create_input``: the shortcut that validates a create request field by field (no serializer,
which deep-copies its declared fields per request) must be on for the fields as declared, and must give
exactly what ``MessageCreateInput`` gives: the same validated data for a valid request, the same errors
for an invalid one."""

from __future__ import annotations

import pytest
from rest_framework import serializers

from scheduling.messages import api

VALID = [
    {"to": "+14155550123", "body": "hi"},
    {"to": "+14155550123", "body": "  spaces kept  ", "from": "ACME"},
    {
        "to": "+14155550123",
        "body": "all of it",
        "from": "+14155550100",
        "messaging_service_sid": "MG" + "a" * 32,
        "send_at": "2027-03-10T09:00:00",
        "timezone": "Europe/London",
        "dst_policy": "later",
        "priority": "bulk",
        "validity_seconds": 3600,
        "metadata": {"order": "A-1", "n": [1, 2]},
        "uncertain_wait_seconds": None,
        "quiet_hours": {"start": "21:00", "end": "08:00"},
        "recipient_timezone": "America/New_York",
    },
    {"to": "+14155550123", "body": "x", "send_at": None, "timezone": None},
]
INVALID = [
    {"body": "no to"},
    {"to": "+14155550123"},
    {"to": "+14155550123", "body": "x", "sendAt": "tomorrow"},
    {"to": "+14155550123", "body": 0},
    {"to": "+14155550123", "body": "x", "validity_seconds": "3600"},
    {"to": "+14155550123", "body": "x", "validity_seconds": 59},
    {"to": "+14155550123", "body": "x", "priority": "urgent"},
    {"to": "+14155550123", "body": "x", "metadata": {"k": "v" * 5000}},
    {"to": "+14155550123", "body": "x", "metadata": []},
    {"to": "+14155550123", "body": ""},
    {"to": None, "body": "x"},
    {"to": "+14155550123", "body": "x", "quiet_hours": None},
    [],
    "text",
]


def test_the_shortcut_is_on_for_the_fields_as_declared():
    assert api._FAST_INPUT


@pytest.mark.parametrize("data", VALID)
def test_a_valid_request_gives_the_serializers_validated_data(data, monkeypatch):
    fast = api.message_create_input(data)
    serializer = api.MessageCreateInput(data=data)
    assert serializer.is_valid(), serializer.errors
    assert fast == dict(serializer.validated_data)

    # and it was the shortcut that answered: no serializer was built
    def no_serializer(*args, **kwargs):
        raise AssertionError("the serializer was built")

    monkeypatch.setattr(api, "MessageCreateInput", no_serializer)
    assert api.message_create_input(data) == fast


@pytest.mark.parametrize("data", INVALID)
def test_an_invalid_request_gives_the_serializers_errors(data):
    serializer = api.MessageCreateInput(data=data)
    assert not serializer.is_valid()
    with pytest.raises(serializers.ValidationError) as err:
        api.message_create_input(data)
    assert err.value.detail == serializer.errors


def test_one_serializer_reused_across_a_batchs_items_gives_each_items_own_answer():
    # A batch validates its items with one MessageCreateInput (as DRF's ListSerializer reuses its child):
    # no item's errors or data may leak into the next one's.
    shared = api.MessageCreateInput()
    for data in [*INVALID, *VALID, *reversed(INVALID)]:
        single = api.MessageCreateInput(data=data)
        if single.is_valid():
            assert api.message_create_input(data, shared) == dict(single.validated_data)
            continue
        with pytest.raises(serializers.ValidationError) as err:
            api.message_create_input(data, shared)
        assert err.value.detail == single.errors
