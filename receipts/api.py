"""Provider callback endpoint and the tenant's webhook configuration."""

from __future__ import annotations

import contextlib
import json
import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    extend_schema,
    extend_schema_field,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from delivery.providers import PROVIDERS, get_adapter
from delivery.providers.base import CallbackInvalid, CallbackKeyUnknown
from receipts import lookup, replay, selectors, spool, webhooks
from receipts.ingest import receipt_ingest
from receipts.models import WebhookDelivery, WebhookStatus
from smsgw.http import schema, strict_input
from smsgw.http.boundary import (
    MAX_JSON_DEPTH,
    NUL_OR_SURROGATE,
    bad_text_removed,
    body_too_large,
    envelope,
    first_bad_field,
    is_bad_text,
    json_too_deep,
)
from smsgw.http.errors import field_error
from smsgw.http.pagination import StrictCursorPagination
from smsgw.observability import events

log = logging.getLogger(__name__)


def callback_url(request: HttpRequest) -> str:
    """The URL the provider signed. Behind a proxy or load balancer Django sees an internal host and
    scheme, so SMSGW_PUBLIC_BASE_URL (the public origin, e.g. https://sms.example.com) is used when set."""
    base = settings.SMSGW_PUBLIC_BASE_URL.rstrip("/")
    if base:
        return base + request.get_full_path()
    return request.build_absolute_uri()


def callback_error(status: int, field: str, message: str, code: str = "invalid") -> JsonResponse:
    """The API's problem details (smsgw.http.problems), as every error under /receipts/ and /inbound/."""
    return envelope(status, f"{field}: {message}", code=code, fields={field: [(code, message)]})


def signed_form(request: HttpRequest, provider: str, *, inbound: bool = False):
    """A provider's signed form POST, checked before anything reads the database: ``(adapter, params,
    None)``, or ``(None, None, error response)``. 404 for an unknown provider, 413 past the size limit,
    415 for a body of a type the provider does not send (``Capabilities.callback_content_types``), 403
    (nothing written) for an unsigned or tampered request, 400 for a signed one that cannot be stored (a
    NUL; PostgreSQL refuses it in jsonb) unless it is only in a free-text field, which is stored without
    it (``adapter.free_text_fields``), never a 500 that the provider would retry. A
    signed callback outside its provider's timestamp window is refused 403 naming ``timestamp``."""
    if provider not in PROVIDERS:
        return None, None, callback_error(404, "provider", "unknown provider")
    if body_too_large(request, settings.RECEIPT_MAX_BODY_BYTES):  # drained first: the 413 is read
        limit = settings.RECEIPT_MAX_BODY_BYTES
        return None, None, callback_error(413, "body", f"callbacks are at most {limit} bytes")
    adapter = get_adapter(provider)
    accepted = adapter.capabilities.callback_content_types
    # A GET (Vonage's inbound webhook may use one) carries its fields in the query and has no body type.
    if accepted and request.method != "GET" and request.content_type not in accepted:
        # Not what the provider sends: refused before the body is read (a 200 to a JSON body before).
        message = f"{provider} callbacks are {' or '.join(accepted)}"
        return None, None, callback_error(415, "Content-Type", message, code="unsupported_media_type")
    params = _fields(request)
    if params is None:
        return (
            None,
            None,
            callback_error(
                400, "body", f"a JSON callback must be one object, nested at most {MAX_JSON_DEPTH} levels"
            ),
        )
    try:
        validate = adapter.validate_inbound if inbound else adapter.validate_callback
        verified = validate(callback_url(request), params, request.headers)
    except CallbackKeyUnknown as exc:
        return None, None, _key_unknown(provider, params, exc)
    except CallbackInvalid as exc:  # signed, but stale or from the future: a replay or a skewed clock
        return None, None, callback_error(403, exc.field, str(exc))
    if not verified:
        return None, None, callback_error(403, adapter.signature_header, "missing or invalid signature")
    # Verified, so it came from the provider: a NUL in a mere description is removed, not refused.
    for key in adapter.free_text_fields & params.keys():
        params[key] = bad_text_removed(params[key])
    bad = first_bad_field(params)
    if bad is not None:
        return None, None, callback_error(400, bad, NUL_OR_SURROGATE)
    return adapter, params, None


def _fields(request: HttpRequest) -> dict[str, str] | None:
    """The callback's fields: a form (what most providers post), or one flat JSON object (a provider that
    posts JSON receipts, e.g. Vonage's ``POST-JSON`` method), or the query of a GET (Vonage's inbound
    webhook may use GET); None for JSON that is not one object."""
    if request.method == "GET":
        return {key: request.GET.get(key, "") for key in request.GET}
    if request.content_type != "application/json":
        return {key: request.POST.get(key, "") for key in request.POST}
    try:
        data = json.loads(request.body or b"{}")
    except (ValueError, RecursionError):  # deep nesting exhausts json's recursion (a 500 before)
        return None
    if not isinstance(data, dict) or json_too_deep(data):
        return None
    return {
        str(key): "" if value is None else str(value)
        for key, value in data.items()
        if not isinstance(value, dict | list)
    }


def _key_unknown(provider: str, params: dict, exc: CallbackKeyUnknown) -> JsonResponse:
    """Signed with a key this host does not hold: our configuration is missing, and the callback may be
    genuine. A 503, not a 403: Twilio sends a callback again only after a failure its retry policy names
    (``rp``, which can include ``5xx``), never after an answer outside it, and by default it retries
    neither (twilio.com/docs/usage/webhooks/webhooks-connection-overrides). So the message it names is
    also looked up by sid at the next status look-up run (receipts.lookup), not an hour after it was sent.
    Nothing of the callback is stored: it is not verified."""
    sid = get_adapter(provider).callback_message_id(params)[:64]
    events.callback_key_unknown(provider)
    message_id = None
    if sid and not is_bad_text(sid):
        try:
            message_id = lookup.lookup_soon(provider, sid)
        except spool.DB_UNAVAILABLE as db_error:
            spool.connection_drop()
            log.warning("callback key unknown: no look-up scheduled, database unavailable (%s)", db_error)
    capabilities = get_adapter(provider).capabilities
    log.error(
        "callback refused (503): %s; set %s. provider=%s sid=%r looked_up_soon=%s",
        exc,
        capabilities.signing_keys_setting or "the provider's signing keys",
        provider,
        sid,
        message_id is not None,
    )
    return callback_error(
        503, capabilities.signing_key_header or "signature", "signing key not configured here"
    )


@csrf_exempt
@events.callbacks_counted("receipt", providers=PROVIDERS)
@require_POST
def status_callback(request: HttpRequest, provider: str) -> HttpResponse:
    """``POST /receipts/<provider>/``: one endpoint for every provider; its adapter verifies, parses and
    redacts the callback. 403 (nothing written) for a bad signature, a stale one or a replayed one;
    201 stored, 200 a duplicate. Nothing before the INSERT needs the database (the signature is checked
    with settings only; a one-time signature's record, Vonage's, is skipped when the database is away),
    so during a database outage a signed callback is spooled (receipts.spool) and still answered 201."""
    adapter, params, refused = signed_form(request, provider)
    if refused is not None:
        return refused
    try:
        callback = adapter.parse_callback(params, {k: request.GET.get(k, "") for k in request.GET})
    except CallbackInvalid as exc:
        return callback_error(400, exc.field, str(exc))
    once = adapter.callback_replay_key(params)
    if once is not None and not _first_use(provider, once):
        return callback_error(403, adapter.signature_header, "already used: a replayed callback")
    received_at = timezone.now()
    try:
        result = receipt_ingest(provider=provider, callback=callback, received_at=received_at)
    except spool.DB_UNAVAILABLE as exc:
        return _spool(provider, callback, received_at, exc)
    except Exception:
        if once is not None:  # not taken: the provider's retry of this very request must be
            with contextlib.suppress(Exception):
                replay.signed_callback_forget(provider=provider, key=once[0])
        raise
    spool.spool_drain_from_web()
    return HttpResponse(status=200 if result.duplicate else 201)


def _first_use(provider: str, once: tuple[str, float]) -> bool:
    """Is this signed receipt new (receipts.replay)? During a database outage it cannot be told: the
    receipt is spooled as any other, and a copy of one already taken is a duplicate at ingest (its
    dedupe key), never applied twice."""
    key, keep_seconds = once
    try:
        return replay.signed_callback_first_use(provider=provider, key=key, keep_seconds=keep_seconds)
    except spool.DB_UNAVAILABLE:
        return True


def _spool(provider: str, callback, received_at, db_error: Exception) -> HttpResponse:
    """The database did not answer: keep the callback on local disk and answer as if stored (Twilio would
    not send it again after a 5xx). Only if that fails too is the answer a 503."""
    spool.connection_drop()
    try:
        spool.receipt_spool(provider=provider, callback=callback, received_at=received_at)
    except spool.SpoolUnavailable as exc:
        log.error(
            "receipt lost unless the provider retries: database unavailable (%s) and spool not writable "
            "(%s); provider=%s sid=%s status=%s",
            type(db_error).__name__,
            exc,
            provider,
            callback.provider_message_id,
            callback.raw_status,
        )
        return callback_error(503, "receipt", "temporarily unable to store the callback")
    log.warning(
        "receipt spooled, database unavailable (%s): provider=%s sid=%s status=%s",
        type(db_error).__name__,
        provider,
        callback.provider_message_id,
        callback.raw_status,
    )
    return HttpResponse(status=201)


class WebhookConfigApi(APIView):
    """GET/PUT/DELETE the tenant's status webhook. The signing secret is shown only when created or
    rotated."""

    required_scopes = {"GET": "webhooks:manage", "PUT": "webhooks:manage", "DELETE": "webhooks:manage"}

    @extend_schema(
        responses=inline_serializer(
            "WebhookConfig",
            {
                "url": serializers.CharField(help_text="Empty: no webhook."),
                "has_secret": serializers.BooleanField(),
            },
        ),
        description=(
            "The URL the tenant's notifications are sent to (see `webhooks`: `message.status_changed`, "
            "`message.received`), and whether a signing secret exists. The secret itself is never shown "
            "again."
        ),
        summary="The status webhook",
    )
    def get(self, request):
        tenant = request.user.tenant
        return Response({"url": tenant.webhook_url, "has_secret": bool(tenant.webhook_secret)})

    @extend_schema(
        request=inline_serializer(
            "WebhookConfigInput",
            {
                "url": serializers.CharField(allow_blank=True),
                "rotate_secret": serializers.BooleanField(required=False),
            },
        ),
        responses=inline_serializer(
            "WebhookConfigOutput",
            {
                "url": serializers.CharField(),
                "secret": serializers.CharField(
                    required=False, help_text="Only when created or rotated: keep it, it is not shown again."
                ),
            },
        ),
        description=(
            "Sets the URL notifications are POSTed to (https, a public address). The first time, or with "
            "`rotate_secret`, answers the new signing secret (`whsec_...`) once: keep it to check "
            "`webhook-signature`. An empty `url` disables notifications."
        ),
        summary="Set (or, with an empty url, disable) the status webhook",
    )
    def put(self, request):
        if not isinstance(request.data, dict):
            raise field_error("body", "must be a JSON object")
        data = request.data
        url = data.get("url")
        if not isinstance(url, str) or len(url) > 500:
            raise field_error("url", "required: an https URL (or an empty string to disable)")
        if not isinstance(data.get("rotate_secret", False), bool):
            raise field_error("rotate_secret", "must be true or false")
        try:
            secret = webhooks.tenant_webhook_configure(
                tenant=request.user.tenant, url=url.strip(), rotate_secret=bool(data.get("rotate_secret"))
            )
        except webhooks.WebhookUrlError as exc:
            raise field_error("url", str(exc)) from exc
        body = {"url": request.user.tenant.webhook_url}
        if secret:
            body["secret"] = secret
        return Response(body)

    @extend_schema(
        request=None,
        responses={204: None},
        description=(
            "Stops notifications: the URL and the signing secret are removed (a new PUT creates a new "
            "secret). Notifications already queued are not attempted any more."
        ),
        summary="Remove the status webhook",
    )
    def delete(self, request):
        """Stop notifications: the URL and the signing secret are removed (a new PUT creates a new secret).
        Deliveries already queued are dead-lettered without a request when due (replayable later)."""
        webhooks.tenant_webhook_remove(tenant=request.user.tenant)
        return Response(status=204)


class WebhookReplayApi(APIView):
    required_scopes = {"POST": "webhooks:manage"}

    @extend_schema(
        request=None,
        responses=inline_serializer(
            "WebhookReplay",
            {
                "id": serializers.CharField(help_text="The notification's `webhook-id`, unchanged."),
                "status": serializers.ChoiceField(
                    choices=WebhookStatus.choices, help_text="pending: queued to be delivered again."
                ),
            },
        ),
        description=(
            "Queues a notification (delivered or dead-lettered) to be delivered again, with the same "
            "`webhook-id` and payload, so a receiver that de-duplicates sees it once."
        ),
        summary="Deliver a webhook again",
    )
    def post(self, request, webhook_id: str):
        try:
            delivery = webhooks.webhook_replay(tenant=request.user.tenant, webhook_id=webhook_id)
        except WebhookDelivery.DoesNotExist:
            from rest_framework.exceptions import NotFound

            raise NotFound("No webhook delivery with this id.") from None
        return Response({"id": delivery.webhook_id, "status": delivery.status})


class WebhookDeliveryOutput(serializers.Serializer):
    id = serializers.CharField(source="webhook_id", help_text="The `webhook-id` header of every attempt.")
    event_type = serializers.ChoiceField(choices=selectors.EVENT_TYPES)
    status = serializers.ChoiceField(
        choices=WebhookStatus.choices,
        help_text="`pending` (to be tried, or tried again), `delivered` (a 2xx came back), `dead` (the "
        "retry window passed: replay it with `POST /v1/webhook-deliveries/{id}/replay`).",
    )
    message = serializers.SerializerMethodField(help_text="The message it is about (`msg_…`), if any.")
    attempts = serializers.IntegerField()
    last_status_code = serializers.IntegerField(allow_null=True, help_text="The last attempt's HTTP status.")
    last_error = serializers.CharField(
        help_text='Why the last attempt failed ("HTTP 503", a timeout), or "".'
    )
    created_at = serializers.DateTimeField()
    next_attempt_at = serializers.SerializerMethodField(
        help_text="When a pending one is tried next; else null."
    )
    retry_until = serializers.SerializerMethodField(
        help_text="The end of a pending one's retry window, once an attempt failed (docs/webhooks.md); "
        "else null."
    )
    delivered_at = serializers.DateTimeField(allow_null=True)
    payload = serializers.DictField(
        help_text="What is sent: the event's JSON body (`type`, `timestamp`, `data`); for a callback of the "
        "compatible Messages API, its `url` and form `params`. Content retention empties its content keys "
        "(body, metadata) and masks its numbers."
    )

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_message(self, d: WebhookDelivery) -> str | None:
        return selectors.delivery_message_id(d)

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_next_attempt_at(self, d: WebhookDelivery) -> datetime | None:
        # A datetime, not text: the renderer writes it as every /v1 timestamp (UTC, "Z").
        return d.next_attempt_at if d.status == WebhookStatus.PENDING else None

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_retry_until(self, d: WebhookDelivery) -> datetime | None:
        if d.status != WebhookStatus.PENDING or d.retrying_since is None:
            return None
        return d.retrying_since + timedelta(seconds=settings.WEBHOOK_RETRY_WINDOW_SECONDS)


class _Newest(StrictCursorPagination):
    ordering = "-id"


class WebhookDeliveriesApi(APIView):
    # The scope that replays a delivery reads the list it is chosen from.
    required_scopes = {"GET": "webhooks:manage"}

    @extend_schema(
        responses=schema.paginated(WebhookDeliveryOutput, "WebhookDeliveryPage"),
        parameters=[
            OpenApiParameter(
                "status",
                str,
                description="Comma-separated: `pending`, `delivered`, `dead`. Else 400 naming `status`.",
                examples=[OpenApiExample("Dead letters", value="dead")],
            ),
            OpenApiParameter(
                "event_type",
                str,
                description="Comma-separated: " + ", ".join(f"`{t}`" for t in selectors.EVENT_TYPES) + ".",
                examples=[OpenApiExample("Status changes", value="message.status_changed")],
            ),
            OpenApiParameter("message", str, description="A message id (`msg_…`): its deliveries."),
            OpenApiParameter("created_after", str, description="ISO 8601 instant (inclusive)."),
            OpenApiParameter("created_before", str, description="ISO 8601 instant (exclusive)."),
            *schema.PAGE_PARAMETERS,
        ],
        description=(
            "The notifications sent or to be sent to the tenant's webhook, newest first: each with its "
            "status (`pending`, `delivered`, `dead`), attempts, last error and payload. Filter by status, "
            "event type, message and creation time; a `dead` one (its 3-day retry window passed) is "
            "replayed with `POST /v1/webhook-deliveries/{webhook_id}/replay`."
        ),
        summary="List webhook deliveries (newest first, cursor pages), e.g. the dead ones to replay",
    )
    def get(self, request):
        strict_input.query_params_check(request.query_params, selectors.LIST_PARAMS)
        qs = selectors.webhook_delivery_list(tenant=request.user.tenant, params=request.query_params)
        paginator = _Newest()
        page = paginator.paginate_queryset(qs, request, view=self)
        assert page is not None  # None only without a page size; StrictCursorPagination always has one
        return paginator.get_paginated_response(WebhookDeliveryOutput(page, many=True).data)
