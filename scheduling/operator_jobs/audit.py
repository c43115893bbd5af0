"""Who opened which message's page in the admin, and when (docs/admin.md, "Who looked"): the page shows
the full number and body, so each opening is recorded; the ``admin`` role reads the record."""

from __future__ import annotations

from django.utils import timezone

from scheduling.models import Message, MessageView


def message_viewed(*, user, message_pk: int) -> MessageView | None:
    """Record that ``user`` opened the page of message ``message_pk`` (None: no such message)."""
    row = Message.objects.filter(pk=message_pk).values("public_id", "tenant_id").first()
    if row is None:
        return None
    return MessageView.objects.create(
        user=user if getattr(user, "pk", None) else None,
        username=user.get_username()[:150],
        message_public_id=row["public_id"],
        tenant_id=row["tenant_id"],
        viewed_at=timezone.now(),
    )


__all__ = ["message_viewed"]
