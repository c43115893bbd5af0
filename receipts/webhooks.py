"""Tenant webhooks: an outbox row per customer-visible status change, written in the transaction of the
change (via scheduling.lifecycle.transitions' status listeners), delivered by a beat-driven worker loop with
retries, signed in the Standard Webhooks form (webhook-id, webhook-timestamp, webhook-signature)."""

from __future__ import annotations

import base64
import ipaddress
import json
import logging
import secrets
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from urllib.parse import urlencode, urlsplit

import urllib3
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.db.models.expressions import RawSQL
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from standardwebhooks import Webhook

from receipts.models import WebhookDelivery, WebhookStatus
from receipts.webhook_http import request_pinned
from receipts.webhook_retry import next_attempt
from scheduling.facade import resources as facade
from scheduling.models import Message
from smsgw import stages, tracing
from smsgw.models import Tenant
from smsgw.observability import events
from smsgw.runtime.db import PgInts, is_postgres
from smsgw.values.actors import reason_for_tenant
from smsgw.values.timeutil import utc_text

log = logging.getLogger(__name__)

EVENT_TYPE = "message.status_changed"
# A reply from a recipient (inbound.notify enqueues it; the same outbox, signatures and retries).
INBOUND_EVENT = "message.received"
# Deliveries claimed per pass; each is one HTTP POST with a wall-clock deadline (receipts.webhook_http),
# run on a small thread pool, so a pass lasts at most about SMSGW_WEBHOOK_TIMEOUT_SECONDS per 16 of them.
WEBHOOK_BATCH_SIZE = 200
# A claimed delivery is leased for this long; a worker that dies mid-POST leaves it to be retried.
WEBHOOK_LEASE = timedelta(seconds=60)
# The tenant removed its webhook (DELETE /v1/webhook): its queued deliveries are dead at once, not retried
# for the whole window (they hold their messages out of history meanwhile); a replay sends one later.
NO_WEBHOOK = "tenant has no webhook configured"


class WebhookUrlError(ValueError):
    pass


# --- configuration ------------------------------------------------------------------------------------
def webhook_secret_new() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


# IPv6 forms that carry an IPv4 address a packet may end up at: NAT64 (RFC 6052's well-known prefix and
# RFC 8215's local-use one) translate it, and the IPv4-compatible form (RFC 4291, deprecated) embeds it.
# Python's ipaddress calls 64:ff9b::/96 global, so 64:ff9b::7f00:1 (127.0.0.1) would pass a plain
# is_global check; 6to4, Teredo and IPv4-mapped forms are unpacked by ipaddress itself.
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    embedded = [address.ipv4_mapped, address.sixtofour, *(address.teredo or ())]
    if any(address in net for net in (*_NAT64, _IPV4_COMPATIBLE)) and int(address) > 1:
        embedded.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return [a for a in embedded if a is not None]


def address_is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """A public unicast address, and so is every IPv4 address it maps to (SSRF: an IPv6 literal or AAAA
    record must not lead to loopback, private or link-local space through a translation prefix)."""
    if not address.is_global or address.is_multicast:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        return all(v4.is_global and not v4.is_multicast for v4 in _embedded_ipv4(address))
    return True


def _url_parts(url: str):
    if "\x00" in url or any(ord(c) < 32 for c in url):
        raise WebhookUrlError("must not contain control characters")
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port  # port raises for 99999 or "abc"
    except ValueError as exc:  # "https://[/", an invalid IPv6 literal or port
        raise WebhookUrlError(f"is not a valid URL ({exc})") from exc
    if parts.scheme not in ("https", "http") or not host:
        raise WebhookUrlError("must be an absolute https:// URL")
    return parts, host, port or (443 if parts.scheme == "https" else 80)


def webhook_target(url: str) -> tuple[str, int, str]:
    """Check the URL and resolve its host once: (host, port, the address to connect to). Refused: non-https
    (outside development), credentials in the URL, and hosts that resolve to any non-public address
    (SSRF). The address returned is the one checked: delivery connects to it (no second resolution, so
    DNS rebinding has no window between the check and the connection)."""
    parts, host, port = _url_parts(url)
    if parts.scheme != "https" and not settings.WEBHOOK_ALLOW_HTTP:
        raise WebhookUrlError("must use https")
    if parts.username or parts.password:
        raise WebhookUrlError("must not contain credentials")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, ValueError) as exc:
        raise WebhookUrlError(f"host {host!r} does not resolve") from exc
    if not infos:
        raise WebhookUrlError(f"host {host!r} does not resolve")
    # An AF_INET/AF_INET6 sockaddr starts with the address text (typeshed's sockaddr also allows other
    # families' ints); str() of it is the same text.
    if not settings.WEBHOOK_ALLOW_PRIVATE:
        for info in infos:
            address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
            if not address_is_public(address):
                raise WebhookUrlError(f"host {host!r} resolves to a non-public address ({address})")
    return host, port, str(infos[0][4][0])


def webhook_url_check(url: str) -> None:
    """Refuse URLs a tenant must not point us at (see webhook_target)."""
    webhook_target(url)


def tenant_webhook_configure(*, tenant: Tenant, url: str, rotate_secret: bool = False) -> str | None:
    """Set (or clear, with an empty url) the tenant's webhook URL. Returns the signing secret when a new
    one was created (first configuration or rotation), else None."""
    if url:
        webhook_url_check(url)
    new_secret = None
    if url and (rotate_secret or not tenant.webhook_secret):
        new_secret = webhook_secret_new()
        tenant.webhook_secret = new_secret
    tenant.webhook_url = url
    tenant.save(update_fields=["webhook_url", "webhook_secret"])
    return new_secret


def tenant_webhook_remove(*, tenant: Tenant) -> None:
    tenant.webhook_url = ""
    tenant.webhook_secret = ""
    tenant.save(update_fields=["webhook_url", "webhook_secret"])


# --- outbox -------------------------------------------------------------------------------------------
_OUTBOX_COLUMNS = (
    "pk",
    "public_id",
    "tenant_id",
    "version",
    "provider_status",
    "error_code",
    "to",
    "metadata",
    "status_reason",
    "reason_code",
    "tenant__webhook_url",
    "status_callback",
)
# A Twilio-compatible API message's StatusCallback (scheduling.facade): the same outbox, retries, SSRF guard
# and audit as the tenant's webhook, in Twilio's form and signature.
STATUS_CALLBACK = facade.CALLBACK_EVENT
# An incoming message forwarded to a number's Twilio-compatible SmsUrl (inbound.facade_forward): Twilio's
# form and signature too, and the only event type whose answer is read (a TwiML reply: stages.webhook_answer).
INCOMING_FORWARD = facade.INCOMING_EVENT
_FACADE_FORMS = (STATUS_CALLBACK, INCOMING_FORWARD)
_CALLBACK_COLUMNS = (
    "pk",
    "public_id",
    "to",
    "from_number",
    "sender_pool",
    "status",
    "error_code",
    "reason_code",
    "requested_send_at",
    "quiet_deferred_from",
    "status_callback",
    "tenant__facade_account_sid",
)


def webhook_outbox_enqueue(
    ids: list[int], from_status: str, to_status: str, kind: str, now: datetime
) -> None:
    """Status listener: runs inside the transaction of the change. One cheap query finds the messages
    whose tenant has a webhook or that have a StatusCallback; nothing else is done for the rest."""
    wanted = ~Q(tenant__webhook_url="") | ~Q(status_callback="")
    if is_postgres():
        # One array parameter: the ORM's IN (%s, ...) made a statement of a thousand placeholders that
        # psycopg parsed anew for every batch (a sixth of a sweep pass).
        qs = Message.objects.filter(pk__in=RawSQL("SELECT unnest(%s::bigint[])", [PgInts(ids)]))
    else:
        qs = Message.objects.filter(pk__in=ids)
    rows = list(qs.filter(wanted).values_list(*_OUTBOX_COLUMNS))
    if not rows:
        return
    deliveries = [
        WebhookDelivery(
            webhook_id=f"whmsg_{secrets.token_hex(12)}",
            tenant_id=tenant_id,
            message_id=pk,
            event_type=EVENT_TYPE,
            payload={
                "type": EVENT_TYPE,
                "timestamp": utc_text(now),
                "data": {
                    "id": public_id,
                    "status": to_status,
                    "previous_status": from_status,
                    "event": kind,
                    # version orders a message's notifications: deliveries may arrive out of order.
                    "version": version,
                    "to": to,
                    "provider_status": provider_status,
                    "error_code": error_code,
                    "reason": reason_for_tenant(reason),  # no operator's or host's name
                    # Machine-readable, as the message's reason_code (docs/api.md): why it failed, was
                    # undelivered, expired or was cancelled; "" when there is none.
                    "reason_code": reason_code,
                    "metadata": metadata,
                },
            },
            next_attempt_at=now,
            created_at=now,
        )
        for (
            pk,
            public_id,
            tenant_id,
            version,
            provider_status,
            error_code,
            to,
            metadata,
            reason,
            reason_code,
            webhook_url,
            _callback,
        ) in rows
        if webhook_url
    ]
    callbacks = [row[0] for row in rows if row[-1]]
    if callbacks:
        deliveries += _status_callbacks(callbacks, from_status, to_status, now)
    WebhookDelivery.objects.bulk_create(deliveries)


def _status_callbacks(
    ids: list[int], from_status: str, to_status: str, now: datetime
) -> list[WebhookDelivery]:
    """The Twilio status callbacks this change owes (scheduling.facade.resources.callback_status)."""
    out = []
    for row in Message.objects.filter(pk__in=ids).values(*_CALLBACK_COLUMNS, "tenant_id"):
        account_sid = row.pop("tenant__facade_account_sid")
        tenant_id = row.pop("tenant_id")
        message = Message(**row)
        status = facade.callback_status(message, from_status, to_status)
        if status is None:
            continue
        out.append(
            WebhookDelivery(
                webhook_id=f"whcb_{secrets.token_hex(12)}",
                tenant_id=tenant_id,
                message_id=message.pk,
                event_type=STATUS_CALLBACK,
                payload={
                    "url": message.status_callback,
                    "params": facade.callback_params(message, account_sid, status),
                },
                next_attempt_at=now,
                created_at=now,
            )
        )
    return out


# --- delivery -----------------------------------------------------------------------------------------
def webhook_sign(secret: str, webhook_id: str, timestamp: datetime, body: str) -> str:
    return Webhook(secret).sign(webhook_id, timestamp, body)


def _claim(now: datetime, limit: int) -> list[WebhookDelivery]:
    lock = " FOR UPDATE SKIP LOCKED" if is_postgres() else ""
    table = WebhookDelivery._meta.db_table
    with connection.cursor() as cur:
        cur.execute(
            f'SELECT "id" FROM "{table}" WHERE "status" = %s AND "next_attempt_at" <= %s '  # noqa: S608
            f'ORDER BY "next_attempt_at" LIMIT %s{lock}',
            [WebhookStatus.PENDING, now, limit],
        )
        ids = [r[0] for r in cur.fetchall()]
    if ids:
        # Lease: if this worker dies mid-POST the row comes due again after the lease.
        WebhookDelivery.objects.filter(pk__in=ids).update(next_attempt_at=now + WEBHOOK_LEASE)
    found = WebhookDelivery.objects.filter(pk__in=ids).select_related("tenant")
    if tracing.enabled():  # each delivery's span links to its message's trace
        traced = F("message__trace_context"), F("message__public_id")
        return list(found.annotate(message_trace=traced[0], message_public_id=traced[1]))
    return list(found)


def _callback_request(delivery: WebhookDelivery) -> tuple[str, bytes, dict[str, str]]:
    """A status callback's (or a forwarded incoming message's) URL, form body and headers, signed with the
    tenant's callback signing key. With ``"method": "GET"`` (a number's SmsMethod) the form goes in the
    URL, which is what is signed then (Twilio signs the full URL and no parameters for a GET)."""
    url, params = delivery.payload["url"], delivery.payload["params"]
    key = delivery.tenant.callback_signing_key
    if delivery.payload.get("method") == "GET":
        url = f"{url}{'&' if urlsplit(url).query else '?'}{urlencode(params)}"
        headers = facade.callback_headers(key, url, {}, delivery.webhook_id)
        del headers["Content-Type"]
        return url, b"", headers
    return url, urlencode(params).encode(), facade.callback_headers(key, url, params, delivery.webhook_id)


def _post(delivery: WebhookDelivery) -> tuple[int | None, str, float, bytes]:
    """One delivery's POST in a span of its own, linked to its message's trace (smsgw.tracing): the
    event, the webhook id, the receiver's host (never its path or query) and the answer's status."""
    with tracing.span(
        "tenant webhook",
        kind=tracing.SpanKind.CLIENT,
        links=[getattr(delivery, "message_trace", "")],
        attributes={
            "smsgw.webhook.event": delivery.event_type,
            "smsgw.webhook.id": delivery.webhook_id,
            "smsgw.webhook.attempt": delivery.attempts + 1,
            "smsgw.message.id": getattr(delivery, "message_public_id", None) or "",
        },
    ) as span:
        code, error, ms, answer = _post_request(delivery)
        if span.is_recording():
            if code is not None:
                span.set_attribute("http.response.status_code", code)
            if error:
                span.set_status(tracing.StatusCode.ERROR, error.split(":")[0][:60])
        return code, error, ms, answer


def _post_request(delivery: WebhookDelivery) -> tuple[int | None, str, float, bytes]:
    """One delivery's POST: (status code or None, the error, ms, the answer's first bytes, kept only for a
    forwarded incoming message: its TwiML)."""
    tenant = delivery.tenant
    started = time.perf_counter()
    if delivery.event_type in _FACADE_FORMS:
        url, payload, headers = _callback_request(delivery)
    else:
        url = tenant.webhook_url
        if not url or not tenant.webhook_secret:
            return None, NO_WEBHOOK, 0.0, b""
    try:
        # Again at send time (DNS may have changed since configuration), and the connection goes to the
        # address just checked.
        host, port, address = webhook_target(url)
    except WebhookUrlError as exc:
        return None, f"refused: {exc}", 0.0, b""
    tracing.current_attribute("server.address", host)
    if delivery.event_type not in _FACADE_FORMS:
        body = json.dumps(delivery.payload, separators=(",", ":"), sort_keys=True)
        sent_at = timezone.now()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "smsgw-webhooks/1",
            "webhook-id": delivery.webhook_id,
            "webhook-timestamp": str(int(sent_at.timestamp())),
            "webhook-signature": webhook_sign(tenant.webhook_secret, delivery.webhook_id, sent_at, body),
        }
        payload = body.encode()
    try:
        code, answer = request_pinned(
            url,
            host,
            port,
            address,
            payload,
            headers,
            deadline_seconds=settings.WEBHOOK_TIMEOUT_SECONDS,
            max_body=settings.WEBHOOK_MAX_RESPONSE_BYTES,
            method="GET" if delivery.payload.get("method") == "GET" else "POST",
        )
    except urllib3.exceptions.HTTPError as exc:
        return None, type(exc).__name__, (time.perf_counter() - started) * 1000, b""
    ok = 200 <= code < 300
    kept = answer if delivery.event_type == INCOMING_FORWARD else b""
    return code, "" if ok else f"HTTP {code}", (time.perf_counter() - started) * 1000, kept


def webhooks_deliver_due(*, limit: int = WEBHOOK_BATCH_SIZE) -> int:
    now = timezone.now()
    with transaction.atomic():
        deliveries = _claim(now, limit)
    if not deliveries:
        return 0
    with ThreadPoolExecutor(max_workers=min(16, len(deliveries))) as pool:
        results = list(pool.map(_post, deliveries))
    finished = timezone.now()
    for delivery, (code, error, ms, answer) in zip(deliveries, results, strict=True):
        delivery.attempts += 1
        delivery.last_status_code = code
        delivery.last_error = error[:255]
        entry = {"at": finished.isoformat(), "code": code, "error": error, "ms": round(ms, 1)}
        ok = code is not None and 200 <= code < 300
        if ok and delivery.event_type == INCOMING_FORWARD:
            entry["answer"] = _answer_take(delivery, answer)
        delivery.history = [*delivery.history, entry][-20:]
        if ok:
            delivery.status = WebhookStatus.DELIVERED
            delivery.delivered_at = finished
            events.webhook_attempt("delivered")
            _inbound_delay(delivery, finished)
        else:
            _failed(delivery, started=now, finished=finished)
    WebhookDelivery.objects.bulk_update(
        deliveries,
        [
            "attempts",
            "last_status_code",
            "last_error",
            "history",
            "status",
            "delivered_at",
            "next_attempt_at",
            "retrying_since",
        ],
    )
    return len(deliveries)


def _failed(delivery: WebhookDelivery, *, started: datetime, finished: datetime) -> None:
    """A failed attempt: the next one inside the retry window (receipts.webhook_retry), or dead."""
    if delivery.retrying_since is None:  # the first attempt of this window (the first ever, or a replay's)
        delivery.retrying_since = started
    at = (
        None
        if delivery.last_error == NO_WEBHOOK
        else next_attempt(since=delivery.retrying_since, failed_at=finished)
    )
    if at is not None:
        delivery.next_attempt_at = at
        events.webhook_attempt("retry")
        return
    delivery.status = WebhookStatus.DEAD
    events.webhook_attempt("dead")
    log.warning(
        "webhook %s dead-lettered after %d attempts since %s",
        delivery.webhook_id,
        delivery.attempts,
        delivery.retrying_since.isoformat(),
        extra=tracing.log_fields(
            delivery.payload.get("data", {}).get("id", ""), getattr(delivery, "message_trace", "")
        ),
    )


def _answer_take(delivery: WebhookDelivery, answer: bytes) -> str:
    """A forwarded incoming message's answer, acted on (its TwiML replies sent) before the delivery is
    marked delivered: a crash between the two leaves it to be delivered again, and the replies are made
    idempotently, so they are sent once. What it did, for the history; a failure is noted, never raised
    (the program was reached: the delivery is done)."""
    try:
        return stages.webhook_answer()(delivery, answer)
    except Exception as exc:
        log.exception("webhook %s: its answer could not be acted on", delivery.webhook_id)
        return f"not acted on: {type(exc).__name__}"


def _inbound_delay(delivery: WebhookDelivery, finished: datetime) -> None:
    """A reply's provider-to-tenant delay: from its webhook reaching us to the tenant's 2xx (its first
    delivery only; a replay is an operator's, not the pipeline's)."""
    if delivery.event_type != INBOUND_EVENT or delivery.attempts != 1:
        return
    received_at = parse_datetime(str(delivery.payload.get("data", {}).get("received_at") or ""))
    if received_at is not None:
        events.inbound_delivered((finished - received_at).total_seconds())


def webhook_replay(*, tenant: Tenant | None, webhook_id: str) -> WebhookDelivery:
    """Put a delivered or dead-lettered notification back in the queue with the same webhook-id."""
    qs = WebhookDelivery.objects.filter(webhook_id=webhook_id)
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    delivery = qs.get()
    delivery.status = WebhookStatus.PENDING
    delivery.next_attempt_at = timezone.now()
    delivery.retrying_since = None  # a whole retry window again, from the replay's first attempt
    delivery.history = [*delivery.history, {"at": timezone.now().isoformat(), "replayed": True}][-20:]
    delivery.save(update_fields=["status", "next_attempt_at", "retrying_since", "history"])
    return delivery


def webhooks_deliver_for(seconds: float, *, idle_sleep: float = 0.1) -> int:
    deadline = time.monotonic() + seconds
    total = 0
    while time.monotonic() < deadline:
        done = webhooks_deliver_due()
        total += done
        if not done:
            time.sleep(idle_sleep)
    return total
