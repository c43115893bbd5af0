"""Signed provider callbacks are taken once (Vonage's ``sig`` over a ``nonce`` and a ``timestamp``;
``ProviderAdapter.callback_replay_key``): a captured receipt or STOP/START posted again, even inside the
timestamp window, is refused.

The store is the database, shared by every web process on every host (the cache is per process). A
row per signed callback lives for twice the provider's window; expired rows are deleted by whichever
process records one, at most once a minute, so the table holds about two windows of callbacks.
"""

from __future__ import annotations

import hashlib
import threading
import time
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from receipts.models import SignedCallbackSeen

PRUNE_EVERY_SECONDS = 60.0  # one DELETE per process per minute, over an index on expires_at
_pruned_at = 0.0
_prune_lock = threading.Lock()


def _digest(provider: str, key: str) -> str:
    return hashlib.sha256(f"{provider}:{key}".encode()).hexdigest()


def _prune_due() -> bool:
    global _pruned_at
    with _prune_lock:
        now = time.monotonic()
        if _pruned_at and now - _pruned_at < PRUNE_EVERY_SECONDS:
            return False
        _pruned_at = now
        return True


def signed_callback_first_use(*, provider: str, key: str, keep_seconds: float) -> bool:
    """Record a verified callback's signature; False when it was taken before (a replay). A row that
    expired and was not yet pruned counts as unused (the timestamp window refuses such a callback
    anyway). Inside the caller's transaction, if any: rolled back with it, the callback can come again."""
    now = timezone.now()
    if _prune_due():
        SignedCallbackSeen.objects.filter(expires_at__lt=now).delete()
    digest = _digest(provider, key)
    expires_at = now + timedelta(seconds=keep_seconds)
    try:
        with transaction.atomic():
            SignedCallbackSeen.objects.create(key=digest, expires_at=expires_at)
    except IntegrityError:
        return (
            SignedCallbackSeen.objects.filter(key=digest, expires_at__lt=now).update(expires_at=expires_at)
            == 1
        )
    return True


def signed_callback_forget(*, provider: str, key: str) -> None:
    """Forget a recorded signature whose callback was then not taken (its processing failed), so the
    provider's retry of the same request is not refused as a replay."""
    SignedCallbackSeen.objects.filter(key=_digest(provider, key)).delete()
