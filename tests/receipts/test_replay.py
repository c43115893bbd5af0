"""receipts.replay: a signed callback's signature is taken once while it is remembered."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from receipts import replay
from receipts.models import SignedCallbackSeen

pytestmark = pytest.mark.django_db


def test_a_signature_is_taken_once_per_provider():
    assert replay.signed_callback_first_use(provider="vonage", key="abc", keep_seconds=600)
    assert not replay.signed_callback_first_use(provider="vonage", key="abc", keep_seconds=600)
    assert replay.signed_callback_first_use(provider="other", key="abc", keep_seconds=600)
    assert SignedCallbackSeen.objects.count() == 2


def test_a_forgotten_signature_can_be_taken_again():
    assert replay.signed_callback_first_use(provider="vonage", key="abc", keep_seconds=600)
    replay.signed_callback_forget(provider="vonage", key="abc")
    assert replay.signed_callback_first_use(provider="vonage", key="abc", keep_seconds=600)


def test_an_expired_row_does_not_count_and_expired_rows_are_pruned(monkeypatch):
    assert replay.signed_callback_first_use(provider="vonage", key="old", keep_seconds=600)
    assert replay.signed_callback_first_use(provider="vonage", key="older", keep_seconds=600)
    SignedCallbackSeen.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    monkeypatch.setattr(replay, "_pruned_at", 0.0)  # a prune is due
    assert replay.signed_callback_first_use(provider="vonage", key="old", keep_seconds=600)
    assert SignedCallbackSeen.objects.count() == 1  # "older" pruned, "old" recorded anew
    assert SignedCallbackSeen.objects.get().expires_at > timezone.now()


def test_an_expired_row_not_yet_pruned_is_taken_anew(monkeypatch):
    import time

    assert replay.signed_callback_first_use(provider="vonage", key="old", keep_seconds=600)
    SignedCallbackSeen.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    monkeypatch.setattr(replay, "_pruned_at", time.monotonic())  # no prune due
    assert replay.signed_callback_first_use(provider="vonage", key="old", keep_seconds=600)
    assert not replay.signed_callback_first_use(provider="vonage", key="old", keep_seconds=600)
