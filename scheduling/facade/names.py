"""The tenant APIs' public name for a sender pool.

The core calls it ``sender_pool`` (the models, the services, the providers' ``Submission``): the pool a
provider picks a sender from. The /v1 API names it as Twilio's Messages API does, ``messaging_service_sid``:
that is the field the clients written against Twilio's schema already send and read, and the /v1 schema
has carried it from its first version. So the name belongs to this package, the Twilio-compatible dialect,
and the /v1 requests, answers and schedule versions spell it only through ``SENDER_POOL_FIELD``.

No Django REST framework here: the services import this module too (only the HTTP edge imports DRF).
"""

from __future__ import annotations

from typing import Any

SENDER_POOL_FIELD = "messaging_service_sid"
# A Messaging Service SID is MG and 32 hex digits: the /v1 request field's limit.
SENDER_POOL_MAX_LENGTH = 34


def public_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """A /v1 output serializer's fields (its ``get_fields()``) with the one declared as ``sender_pool``
    under ``SENDER_POOL_FIELD``, in the same place: the answers and the schema keep their order."""
    out = {}
    for name, field in fields.items():
        if name == "sender_pool":
            field.source = field.source or name
            name = SENDER_POOL_FIELD
        out[name] = field
    return out
