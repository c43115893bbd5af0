"""API key lifecycle beyond creation (smsgw.models.api_key_create): revoke and rotate. A key is never
deleted: its row keeps the prefix that old logs and audit entries name."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from smsgw.models import ApiKey, api_key_create


def api_key_revoke(*, key: ApiKey) -> bool:
    """Revoke now; False when it already was (the first revocation time is kept)."""
    # Compare-and-set: two operators revoking at once both succeed, one timestamp stays.
    return ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()) == 1


@transaction.atomic
def api_key_rotate(*, key: ApiKey) -> tuple[ApiKey, str]:
    """A new key for the same tenant and name, and the old one revoked, in one transaction. Returns the
    new key and its raw string (shown once). Requests with the old key are refused from the commit on."""
    api_key_revoke(key=key)
    return api_key_create(tenant=key.tenant, name=key.name)
