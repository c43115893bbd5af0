"""``/inbound/<provider>/``: the provider's incoming-message webhook (Twilio's "A message comes in",
Vonage's inbound SMS webhook), verified as its provider signs it (receipts.api.signed_form: 403 and
nothing written for an unsigned, tampered or stale one), stored once (inbound.intake) and answered.
Nothing is worked out here: keywords, the tenant, the replied-to message and the tenant's webhook are
inbound.process's, on the ``inbound`` queue, so a burst of replies never holds the web process and a
slow database costs the provider nothing but the INSERT.

The answer is the adapter's empty reply (``inbound_reply``: an empty TwiML ``<Response/>`` for Twilio,
so Twilio sends nothing back on its own; any reply is sent by smsgw as a message of its own, with its
timeline). Vonage resends an inbound message not answered 200 or 204 for 24 hours
(developer.vonage.com/messaging/sms/guides/inbound-sms), and Twilio retries one whose connection failed
(twilio.com/docs/usage/webhooks/webhooks-connection-overrides): both repeat the provider's message id,
so a retry is a duplicate (answered 200 too, stored once)."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from delivery.providers import PROVIDERS, get_adapter
from delivery.providers.base import CallbackInvalid
from inbound import spool
from inbound.intake import inbound_store
from receipts.api import callback_error, signed_form
from smsgw.http import unavailable
from smsgw.observability import events
from smsgw.runtime.file_spool import SpoolUnavailable
from smsgw.values.phone import mask

log = logging.getLogger(__name__)


@csrf_exempt
@events.callbacks_counted("inbound", providers=PROVIDERS)
@require_http_methods(["GET", "POST"])
def inbound_message(request: HttpRequest, provider: str) -> HttpResponse:
    """200 with the provider's empty reply once stored (or spooled), a duplicate included; 403 unsigned;
    400 naming the field for a signed message that cannot be parsed (no id, no number); 503 only when
    neither the database nor the spool can keep it (the provider retries)."""
    if provider in PROVIDERS and not get_adapter(provider).capabilities.inbound:
        return callback_error(404, "provider", f"{provider} posts no inbound messages here")
    if provider in PROVIDERS and request.method not in get_adapter(provider).inbound_methods:
        refused = callback_error(405, "method", f"{provider} posts its inbound messages")
        refused["Allow"] = ", ".join(get_adapter(provider).inbound_methods)
        return refused
    adapter, params, refused = signed_form(request, provider, inbound=True)
    if refused is not None:
        return refused
    try:
        inbound = adapter.parse_inbound(params)
    except CallbackInvalid as exc:
        return callback_error(400, exc.field, str(exc))
    received_at = timezone.now()
    try:
        inbound_store(provider=provider, inbound=inbound, received_at=received_at)
    except unavailable.DB_UNAVAILABLE as exc:
        unavailable.connection_drop()
        try:
            spool.inbound_spool(provider=provider, inbound=inbound, received_at=received_at)
        except SpoolUnavailable as spool_error:
            log.error(
                "inbound lost unless the provider retries: database unavailable (%s) and spool not "
                "writable (%s); provider=%s id=%s from=%s",
                type(exc).__name__,
                spool_error,
                provider,
                inbound.message_id,
                mask(inbound.from_number),
            )
            return callback_error(503, "inbound", "temporarily unable to store the message")
        log.warning(
            "inbound spooled, database unavailable (%s): provider=%s id=%s",
            type(exc).__name__,
            provider,
            inbound.message_id,
        )
    else:
        spool.spool_drain_from_web()
    content, content_type = adapter.inbound_reply()
    return HttpResponse(content, content_type=content_type)
