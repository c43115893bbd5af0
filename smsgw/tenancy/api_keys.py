"""API key lifecycle beyond creation (smsgw.models.api_key_create): revoke and rotate. A key is never
deleted: its row keeps the prefix that old logs and audit entries name."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from smsgw.models import ApiKey, Tenant, api_key_create, new_callback_signing_key


def api_key_revoke(*, key: ApiKey) -> bool:
    """Revoke now; False when it already was (the first revocation time is kept)."""
    # Compare-and-set: two operators revoking at once both succeed, one timestamp stays.
    return ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()) == 1


@transaction.atomic
def api_key_rotate(*, key: ApiKey) -> tuple[ApiKey, str]:
    """A new key for the same tenant, name and scopes, and the old one revoked, in one transaction.
    Returns the new key and its raw string (shown once). Requests with the old key are refused from the
    commit on."""
    api_key_revoke(key=key)
    return api_key_create(tenant=key.tenant, name=key.name, scopes=list(key.scopes))


def callback_signing_key_rotate(*, tenant: Tenant) -> str:
    """A new key for the tenant's Twilio-shaped status callbacks (``X-Twilio-Signature``); callbacks
    signed from now on use it, including retries of ones already queued. Returns it (shown once)."""
    tenant.callback_signing_key = new_callback_signing_key()
    tenant.save(update_fields=["callback_signing_key"])
    return tenant.callback_signing_key
