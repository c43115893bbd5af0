"""Inbound in the operator console (docs/inbound.md, "Operators"; docs/admin.md): what recipients sent
back, the ones no tenant owns the number of (their own page, "Unrouted inbound messages"), the tenants'
keyword rules, and a conversation page for a number pair (the tenant's messages to the contact from that
number and the contact's replies to it, in time order).

Everything is read-only: a received message is evidence, written by inbound.intake and inbound.process
only; nobody adds, edits or deletes one here (as the history admins, retention.admin.ReadOnlyAdmin,
which this app may not import). Numbers and bodies follow the message console (scheduling.admin): the
contact masked in lists, a body preview; the whole of both on a message's own page and in its
conversation, for whoever may view messages (every operator role, smsgw.console.roles). Pages are
addressed by row id, never by a number: a URL ends up in access logs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404, HttpResponseNotAllowed
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from inbound.models import InboundMessage, InboundPart, InboundState, KeywordRule, UnroutedInbound
from scheduling.admin import BODY_PREVIEW_CHARS, HistoryInline, MessageAdmin, when
from scheduling.console.filters import DateRangeFilter
from scheduling.models import Message
from smsgw.values.phone import mask, search_forms

# A conversation page shows this many entries (outbound and inbound together), newest page first; older
# ones page back, up to CONVERSATION_PAGES pages (each page reads at most (page + 1) * SIZE rows of
# each side through the pair's indexes: msg_tenant_recipient and inbound_tenant_contact).
CONVERSATION_PAGE_SIZE = 50
CONVERSATION_PAGES = 20


def _preview(body: str) -> str:
    text = " ".join(body.split())
    return text if len(text) <= BODY_PREVIEW_CHARS else text[: BODY_PREVIEW_CHARS - 1] + "…"


class ReadOnly:
    """Written by the inbound services only; operators read."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class PartInline(ReadOnly, HistoryInline):
    model = InboundPart
    verbose_name = "part"
    verbose_name_plural = "parts it was joined from (in part order)"
    fields = ("part", "total", "provider_message_id", "received")
    readonly_fields = fields
    ordering = ("part", "id")

    @admin.display(description="received (UTC)")
    def received(self, obj):
        return when(obj.received_at)


class InboundSearch:
    """Search by inbound id (``in_…``), the provider's id, or the contact's number in any common format."""

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        condition = Q(public_id=term) | Q(provider_message_id=term)
        numbers = search_forms(term, settings.ADMIN_PHONE_REGION)
        if numbers:
            condition |= Q(from_number__in=numbers)
        return queryset.filter(condition), False


@admin.register(InboundMessage)
class InboundMessageAdmin(ReadOnly, InboundSearch, admin.ModelAdmin):
    list_display = (
        "public_id",
        "tenant",
        "contact",
        "to_number",
        "body_preview",
        "state",
        "keyword",
        "action",
        "needs_review",
        "received",
    )
    list_filter = (
        "state",
        "needs_review",
        "provider",
        "action",
        ("received_at", DateRangeFilter),
    )
    list_select_related = ("tenant",)
    search_fields = ("=public_id",)  # shows the box; get_search_results decides what matches
    search_help_text = "Inbound id (in_…), the provider's id, or the contact's number in any format"
    ordering = ("-id",)
    show_full_result_count = False
    list_per_page = 100
    inlines = (PartInline,)
    fieldsets = (
        (
            "Message",
            {
                "fields": (
                    "public_id",
                    "tenant",
                    "from_number",
                    "to_number",
                    "sender_pool",
                    "body",
                    "segments",
                    "conversation_link",
                )
            },
        ),
        (
            "Processing",
            {
                "fields": (
                    "state",
                    "keyword",
                    "action",
                    "action_result",
                    "needs_review",
                    "replied_to",
                    "tries",
                    "next_try",
                )
            },
        ),
        (
            "Provider",
            {
                "fields": (
                    "provider",
                    "provider_message_id",
                    "provider_sent",
                    "received",
                    "processed",
                    "parts",
                    "parts_missing",
                    "payload",
                )
            },
        ),
    )

    def get_readonly_fields(self, request, obj=None):
        return [f for fields in (fs[1]["fields"] for fs in self.fieldsets) for f in fields]

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        if request.method == "POST":
            return HttpResponseNotAllowed(["GET"])
        return super().changeform_view(request, object_id, form_url, extra_context)

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("<int:pk>/conversation/", view(self.conversation_view), name="inbound_conversation"),
            path(
                "conversation/message/<int:message_pk>/",
                view(self.message_conversation_view),
                name="inbound_conversation_of_message",
            ),
            *super().get_urls(),
        ]

    # --- columns ---
    @admin.display(description="contact", ordering="from_number")
    def contact(self, obj):
        return mask(obj.from_number)

    @admin.display(description="body")
    def body_preview(self, obj):
        return _preview(obj.body)

    @admin.display(description="received (UTC)", ordering="received_at")
    def received(self, obj):
        return when(obj.received_at)

    @admin.display(description="processed (UTC)")
    def processed(self, obj):
        return when(obj.processed_at)

    @admin.display(description="provider's time (UTC)")
    def provider_sent(self, obj):
        return when(obj.provider_sent_at)

    @admin.display(description="next try (UTC)")
    def next_try(self, obj):
        return when(obj.next_try_at) if obj.state == InboundState.PENDING else "-"

    @admin.display(description="in reply to")
    def replied_to(self, obj):
        if not obj.in_reply_to:
            return "-"
        pk = Message.objects.filter(public_id=obj.in_reply_to).values_list("pk", flat=True).first()
        if pk is None:
            return obj.in_reply_to  # moved to history (its page is "Message history")
        url = reverse("admin:scheduling_message_change", args=[pk])
        return format_html('<a href="{}">{}</a>', url, obj.in_reply_to)

    @admin.display(description="conversation")
    def conversation_link(self, obj):
        if obj.pk is None or obj.state == InboundState.PENDING:
            return "-"
        url = reverse("admin:inbound_conversation", args=[obj.pk])
        text = "The conversation of this number pair"
        return format_html('<a href="{}" id="conversation-link">{}</a>', url, text)

    # --- the conversation page ---
    def conversation_view(self, request, pk: int):
        inbound = InboundMessage.objects.filter(pk=pk).select_related("tenant").first()
        if inbound is None:
            raise Http404
        pair = Pair(
            tenant_id=inbound.tenant_id,
            ours=inbound.to_number,
            pool=inbound.sender_pool,
            contact=inbound.from_number,
        )
        return self._conversation(request, pair, inbound.tenant)

    def message_conversation_view(self, request, message_pk: int):
        msg = Message.objects.filter(pk=message_pk).select_related("tenant").first()
        if msg is None:
            raise Http404
        pair = Pair(tenant_id=msg.tenant_id, ours=msg.from_number, pool=msg.sender_pool, contact=msg.to)
        return self._conversation(request, pair, msg.tenant)

    def _conversation(self, request, pair: Pair, tenant):
        if not (self.has_view_permission(request) and request.user.has_perm("scheduling.view_message")):
            raise PermissionDenied
        try:
            page = min(max(int(request.GET.get("page", "0")), 0), CONVERSATION_PAGES - 1)
        except ValueError:
            page = 0
        entries, more = conversation_entries(pair, page=page)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Conversation: {mask(pair.contact)} and {pair.pool or pair.ours}",
            "opts": self.model._meta,
            "tenant": tenant,
            "pair": pair,
            "contact": mask(pair.contact),
            "entries": entries,
            "page": page,
            "newer": page - 1 if page > 0 else None,
            "older": page + 1 if more and page + 1 < CONVERSATION_PAGES else None,
            "page_size": CONVERSATION_PAGE_SIZE,
        }
        return TemplateResponse(request, "admin/inbound/conversation.html", context)


@dataclass(frozen=True)
class Pair:
    """A number pair: the tenant's number (or pool) and the contact (tenant None: an unrouted message's
    pair, which only inbound messages have)."""

    tenant_id: int | None
    ours: str
    pool: str
    contact: str


@dataclass(frozen=True)
class Entry:
    at: datetime
    direction: str  # "out" or "in"
    public_id: str
    url: str
    status: str
    body: str
    detail: str


def _tenant(pair: Pair) -> Q:
    return Q(tenant__isnull=True) if pair.tenant_id is None else Q(tenant_id=pair.tenant_id)


def conversation_entries(pair: Pair, *, page: int) -> tuple[list[Entry], bool]:
    """One page of the pair's messages, oldest first within it (page 0: the newest), and whether older
    ones exist."""
    take = (page + 1) * CONVERSATION_PAGE_SIZE + 1
    inbound_ours = Q(to_number=pair.ours) if pair.ours else Q(pk__in=[])
    if pair.pool:
        inbound_ours |= Q(sender_pool=pair.pool)
    entries: list[Entry] = []
    for row in (
        InboundMessage.objects.filter(inbound_ours, _tenant(pair), from_number=pair.contact)
        .order_by("-id")
        .only("pk", "public_id", "received_at", "state", "body", "keyword", "action", "needs_review")[:take]
    ):
        detail = " ".join(
            x
            for x in (
                row.keyword and f"keyword {row.keyword}",
                row.action and f"action {row.action}",
                "needs review" if row.needs_review else "",
            )
            if x
        )
        url = reverse("admin:inbound_inboundmessage_change", args=[row.pk])
        entries.append(Entry(row.received_at, "in", row.public_id, url, row.state, row.body, detail))
    if pair.tenant_id is not None:
        outbound_ours = Q(from_number=pair.ours) if pair.ours else Q(pk__in=[])
        if pair.pool:
            outbound_ours |= Q(sender_pool=pair.pool)
        for msg in (
            Message.objects.filter(outbound_ours, tenant_id=pair.tenant_id, to=pair.contact)
            .order_by("-id")
            .only("pk", "public_id", "sent_at", "due_at", "created_at", "status", "body")[:take]
        ):
            at = msg.sent_at or msg.due_at or msg.created_at
            url = reverse("admin:scheduling_message_change", args=[msg.pk])
            sent = "sent" if msg.sent_at else "due"
            entries.append(Entry(at, "out", msg.public_id, url, msg.status, msg.body, sent))
    entries.sort(key=lambda e: (e.at, e.direction), reverse=True)
    start = page * CONVERSATION_PAGE_SIZE
    shown = entries[start : start + CONVERSATION_PAGE_SIZE]
    shown.reverse()
    return shown, len(entries) > start + CONVERSATION_PAGE_SIZE


@admin.register(UnroutedInbound)
class UnroutedInboundAdmin(InboundMessageAdmin):
    """Inbound messages for a number no tenant owns (inbound_unrouted): kept, never dropped. Assign the
    number to its tenant (Tenant senders) for the next ones; these stay as they are."""

    list_display = (  # type: ignore[assignment]
        "public_id",
        "contact",
        "to_number",
        "sender_pool",
        "body_preview",
        "provider",
        "received",
    )
    list_filter = ("provider", ("received_at", DateRangeFilter))  # type: ignore[assignment]

    def get_queryset(self, request):
        return super().get_queryset(request).filter(state=InboundState.UNROUTED)

    def get_urls(self):
        return admin.ModelAdmin.get_urls(self)  # the conversation pages are the inbound list's


@admin.register(KeywordRule)
class KeywordRuleAdmin(ReadOnly, admin.ModelAdmin):
    """The tenants' own keywords (set through the API; docs/inbound.md, "Keywords and actions")."""

    list_display = ("tenant", "keyword", "number", "action", "reply", "updated_at")
    list_filter = ("action",)
    list_select_related = ("tenant",)
    search_fields = ("=keyword", "tenant__slug")
    ordering = ("tenant_id", "keyword")


# The outbound message's page links its conversation (scheduling imports no inbound: added from here, as
# delivery adds the attempts).
@admin.display(description="conversation")
def _message_conversation(self, obj):
    if obj.pk is None:
        return "-"
    url = reverse("admin:inbound_conversation_of_message", args=[obj.pk])
    return format_html('<a href="{}" id="conversation-link">Replies and the conversation</a>', url)


MessageAdmin.conversation_link = _message_conversation  # type: ignore[attr-defined]
# (One group more than scheduling declared: a longer tuple type.)
MessageAdmin.fieldsets = (  # type: ignore[assignment]
    *MessageAdmin.fieldsets,
    ("Conversation", {"fields": ("conversation_link",)}),
)
