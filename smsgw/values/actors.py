"""What a tenant is shown of who acted on its messages, and of the gateway's insides (docs/api.md,
"Who did it: actors").

The database keeps the full actor: an operator's ``admin:<username>`` (the admin shows it and audits by
it), ``system:materializer``, ``probe``, a host name in a parked message's details. None of that is the
tenant's business, and some of it (staff usernames, internal host names) helps an attacker. So every
tenant-facing output (the API's timeline and messages, schedule versions, campaigns, webhook payloads,
the Twilio-compatible API) maps it here:

* the tenant's own API keys stay as they are (``apikey:<prefix>``), and so do ``recipient`` (a reply
  from the recipient: a STOP, a keyword action), ``keyword`` (a reply a keyword sent, e.g. the STOP
  confirmation) and ``twiml`` (a reply the tenant's own program answered with TwiML);
* any person of the gateway's staff becomes ``operator``;
* everything else (workers, the sweep, the reconciler, probes, the materializer) becomes ``system``.

Reason texts and event details are scrubbed of what would name the same things: an operator's
``admin:<username>`` inside a text, and a host's name (``this host (web-3)`` becomes ``this host``;
a ``host`` detail is dropped)."""

from __future__ import annotations

import re
from typing import Any

OPERATOR = "operator"
SYSTEM = "system"
_SHOWN_AS_IS = ("apikey:",)
_AS_IS = frozenset({"recipient", "keyword", "twiml"})
_STAFF = ("admin:", "operator:")
_INTERNAL_DETAILS = frozenset({"host"})

_STAFF_NAME = re.compile(r"\b(?:admin|operator):[^\s,;()]+")
_HOST_NAME = re.compile(r"\bthis host \([^)]*\)")


def actor_for_tenant(actor: str | None) -> str:
    """``apikey:<prefix>``, ``recipient``, ``keyword`` and ``twiml`` as they are; staff as ``operator``;
    the rest ``system``."""
    text = actor or ""
    if text.startswith(_SHOWN_AS_IS) or text in _AS_IS:
        return text
    if text.startswith(_STAFF) or text == OPERATOR:
        return OPERATOR
    return SYSTEM


def reason_for_tenant(text: str | None) -> str | None:
    """A status reason without an operator's username or a host's name."""
    if not text:
        return text
    return _HOST_NAME.sub("this host", _STAFF_NAME.sub(OPERATOR, text))


def details_for_tenant(details: dict[str, Any] | None) -> dict[str, Any] | None:
    """An event's details without the internal ones (a host's name), its texts scrubbed as reasons."""
    if not details:
        return details
    return {
        key: reason_for_tenant(value) if isinstance(value, str) else value
        for key, value in details.items()
        if key not in _INTERNAL_DETAILS
    }
