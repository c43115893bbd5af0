"""Tenants and API keys in the admin (the `admin` role only; see smsgw/migrations/0004_operator_roles).

Tenants are validated as the API and `tenant_create` validate them: an IANA timezone, an E.164 or
alphanumeric default sender, a webhook URL that passes the SSRF guard (receipts.webhooks). Secrets are
never shown stored: a new API key or webhook signing secret is shown once, on its own page that is
not cached, and never put in a flash message (those travel in a cookie)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.cache import add_never_cache_headers

from inbound.keywords_admin import KeywordRuleInline
from retention.admin import TenantRetentionInline
from scheduling import facade
from smsgw.channels import DEFAULT_CHANNEL, AddressError
from smsgw.config.providers import sender_pool_problem
from smsgw.console import beat as admin_beat  # noqa: F401  (guards the built-in periodic tasks)
from smsgw.console import users as admin_users  # noqa: F401  (nobody grants more than they hold)
from smsgw.models import ApiKey, Tenant, TenantSender, api_key_create
from smsgw.tenancy import priority
from smsgw.tenancy.api_keys import api_key_revoke, api_key_rotate
from smsgw.tenancy.scopes import FULL_ACCESS, SCOPES, scopes_clean, scopes_within
from smsgw.tenancy.senders import (
    SENDER_HELP,
    SenderError,
    default_sender_problem,
    default_senders_assign,
    sender_assign,
    sender_parse,
    sender_release,
    sender_taken,
)
from smsgw.values.timeutil import TimeResolutionError, parse_timezone


def secret_page(request, modeladmin, *, title: str, intro: str, secret: str, back_url: str, note: str = ""):
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "intro": intro,
        "secret": secret,
        "note": note,
        "back_url": back_url,
        "opts": modeladmin.model._meta,
    }
    response = TemplateResponse(request, "admin/smsgw/secret_once.html", context)
    add_never_cache_headers(response)
    return response


class TenantForm(forms.ModelForm):
    # Not required: a form sent without it (a script, an older page) keeps today's behaviour, uncapped.
    max_priority = forms.ChoiceField(
        choices=priority.CHOICES,
        required=False,
        help_text="bulk: requests for transactional priority are refused (400 on priority)",
    )

    class Meta:
        model = Tenant
        # webhook_secret is never a form field: it is made (and rotated) by receipts.webhooks, shown once.
        fields = (
            "name",
            "slug",
            "is_active",
            "default_from",
            "sender_pool",
            "default_timezone",
            "daily_message_quota",
            "max_pending_scheduled",
            "send_rate_per_second",
            "quota_exceeded_policy",
            "api_rate_per_second",
            "webhook_url",
            "quiet_hours_start",
            "quiet_hours_end",
            "quiet_hours_exempt_transactional",
            # Destination guards (docs/guards.md): delivery.guards.destinations, delivery.guards.velocity.
            "country",
            "allowed_countries",
            "deny_prefixes",
            "deny_exempt_prefixes",
            "velocity_prefix_max",
            "velocity_prefix_digits",
            "velocity_new_numbers_max",
            # The priority ceiling on the shared account (smsgw.tenancy.priority).
            "max_priority",
            # The Twilio-compatible API (docs/coming-from-twilio.md).
            "facade_strict",
        )
        help_texts = {
            "facade_strict": facade.STRICT_HELP,
            "country": "ISO 3166 alpha-2; empty: from default_from, else SMSGW_DEFAULT_COUNTRY",
            "allowed_countries": 'JSON list of ISO 3166 alpha-2 codes, ["*"] = any; empty: own country',
            "deny_prefixes": 'JSON list of E.164 prefixes (digits) denied for this tenant, e.g. ["3737"]',
            "deny_exempt_prefixes": "JSON list of prefixes this tenant may send to despite the deny list",
            "velocity_prefix_max": "messages per window to one prefix; empty: the default, 0 = off",
            "velocity_prefix_digits": "digits of a prefix (country code included); empty: the default (7)",
            "velocity_new_numbers_max": "messages per window to new numbers; empty: the default, 0 = off",
        }

    def clean_max_priority(self):
        return self.cleaned_data.get("max_priority") or priority.TRANSACTIONAL

    def clean_country(self):
        code = (self.cleaned_data.get("country") or "").strip().upper()
        if code and not (len(code) == 2 and code.isalpha()):
            raise forms.ValidationError("must be an ISO 3166 alpha-2 code such as US")
        return code

    def clean_allowed_countries(self):
        codes = self.cleaned_data.get("allowed_countries") or []
        if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
            raise forms.ValidationError('must be a JSON list of codes, e.g. ["US", "CA"]')
        codes = [c.strip().upper() for c in codes if c.strip()]
        bad = [c for c in codes if c != "*" and not (len(c) == 2 and c.isalpha())]
        if bad:
            raise forms.ValidationError(f"{bad[0]!r} is not an ISO 3166 alpha-2 code")
        return codes

    def _prefixes(self, name: str) -> list[str]:
        from delivery.guards.destinations import DenyListError, prefix_clean

        values = self.cleaned_data.get(name) or []
        if not isinstance(values, list):
            raise forms.ValidationError('must be a JSON list of prefixes, e.g. ["3737"]')
        try:
            return [p for p in (prefix_clean(str(v)) for v in values) if p]
        except DenyListError as exc:
            raise forms.ValidationError("each prefix must be the digits after + (1 to 15)") from exc

    def clean_deny_prefixes(self):
        return self._prefixes("deny_prefixes")

    def clean_deny_exempt_prefixes(self):
        return self._prefixes("deny_exempt_prefixes")

    def clean_default_timezone(self):
        name = self.cleaned_data["default_timezone"]
        try:
            parse_timezone(name)
        except TimeResolutionError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return name

    def clean_default_from(self):
        sender = (self.cleaned_data.get("default_from") or "").strip()
        if not sender:
            return ""
        try:
            return self._owned_default(DEFAULT_CHANNEL.sender(sender))
        except AddressError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean_sender_pool(self):
        sid = (self.cleaned_data.get("sender_pool") or "").strip()
        problem = sender_pool_problem(sid) if sid else None  # as the providers declare their pool ids
        if problem:
            raise forms.ValidationError(problem)
        return self._owned_default(sid)

    def _owned_default(self, sender: str) -> str:
        """The default sender is one the tenant owns, or one nobody owns (saving assigns it to the tenant,
        smsgw.tenancy.senders.default_senders_assign); another tenant's is refused."""
        problem = default_sender_problem(self.instance, sender) if sender else None
        if problem:
            raise forms.ValidationError(problem)
        return sender

    def clean_webhook_url(self):
        from receipts.webhooks import WebhookUrlError, webhook_url_check

        url = (self.cleaned_data.get("webhook_url") or "").strip()
        if url:
            try:
                webhook_url_check(url)
            except WebhookUrlError as exc:
                raise forms.ValidationError(f"webhook URL {exc}") from exc
        return url


class TenantSenderForm(forms.ModelForm):
    """A new sender of a tenant (smsgw.tenancy.senders): the value normalised, and refused when another
    tenant owns it unless ``shared`` is ticked. Saved through ``sender_assign`` (``_sender_save``)."""

    class Meta:
        model = TenantSender
        fields = ("tenant", "value", "provider", "account", "shared")
        help_texts = {"value": SENDER_HELP}

    def clean(self):
        data = super().clean() or {}
        if self.errors or self.instance.pk is not None:
            return data
        try:
            self.instance.kind, data["value"] = sender_parse(data.get("value") or "")
        except SenderError as exc:
            self.add_error("value", str(exc))
            return data
        tenant = data.get("tenant") or getattr(self.instance, "tenant", None)
        if not data.get("shared") and sender_taken(tenant, data["value"]):
            self.add_error("value", f"{data['value']} is another tenant's sender: tick shared to share it")
        return data


def _sender_save(obj: TenantSender) -> TenantSender:
    row = sender_assign(
        tenant=obj.tenant, sender=obj.value, provider=obj.provider, account=obj.account, shared=obj.shared
    )
    obj.pk, obj.kind, obj.shared, obj.created_at = row.pk, row.kind, row.shared, row.created_at
    obj._state.adding = False
    return row


class TenantSenderInline(admin.TabularInline):
    """A tenant's senders, on its page. A saved sender is fixed: delete it (release) and assign another."""

    model = TenantSender
    # sms_url/sms_method: set by the tenant (the Twilio-compatible IncomingPhoneNumbers), shown here.
    fields = ("value", "kind", "provider", "account", "shared", "sms_url", "sms_method", "created_at")
    readonly_fields = fields
    extra = 0
    verbose_name_plural = "senders (assigned by operators; the tenant can send only from these)"

    def has_add_permission(self, request, obj=None):
        return False  # in the next inline, through the service


class TenantSenderAddInline(admin.TabularInline):
    """New senders for the tenant: another tenant's sender is refused unless shared is ticked."""

    model = TenantSender
    form = TenantSenderForm
    fields = ("value", "provider", "account", "shared")
    extra = 0
    can_delete = False
    verbose_name = "sender to assign"
    verbose_name_plural = "assign senders"

    def get_queryset(self, request):
        return super().get_queryset(request).none()


@admin.register(TenantSender)
class TenantSenderAdmin(admin.ModelAdmin):
    """Every tenant's senders: which tenant may send from which number, short code, alphanumeric id or
    sender pool, and whether an operator shares it between tenants."""

    form = TenantSenderForm
    list_display = ("value", "kind", "tenant", "provider", "account", "shared", "created_at")
    list_filter = ("kind", "shared", "provider")
    list_select_related = ("tenant",)
    search_fields = ("=value", "tenant__slug")

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ("kind",)
        return (
            "tenant",
            "value",
            "kind",
            "provider",
            "account",
            "shared",
            "sms_url",
            "sms_method",
            "created_at",
        )

    def save_model(self, request, obj, form, change):
        if not change:
            _sender_save(obj)

    def delete_model(self, request, obj):
        try:
            sender_release(tenant=obj.tenant, sender=obj.value, provider=obj.provider)
        except SenderError as exc:
            self.message_user(request, str(exc), messages.ERROR)

    def delete_queryset(self, request, queryset):
        for obj in queryset.select_related("tenant"):
            self.delete_model(request, obj)


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    form = TenantForm
    inlines = (TenantSenderInline, TenantSenderAddInline, TenantRetentionInline, KeywordRuleInline)
    list_display = (
        "slug",
        "name",
        "is_active",
        "default_from",
        "default_timezone",
        "daily_message_quota",
        "max_pending_scheduled",
        "quota_exceeded_policy",
        "has_webhook_secret",
        "created_at",
    )
    search_fields = ("slug", "name")
    readonly_fields = ("facade_account_sid", "has_webhook_secret", "created_at")
    actions = ("rotate_webhook_secret", "rotate_callback_signing_key")

    @admin.action(
        description=f"Rotate the status-callback signing key ({facade.LABEL})", permissions=["change"]
    )
    def rotate_callback_signing_key(self, request, queryset):
        from smsgw.tenancy.api_keys import callback_signing_key_rotate

        tenants = list(queryset)
        if len(tenants) != 1:
            self.message_user(request, "Select one tenant.", messages.ERROR)
            return None
        tenant = tenants[0]
        key = callback_signing_key_rotate(tenant=tenant)
        self.log_change(request, tenant, "rotated the status-callback signing key")
        return secret_page(
            request,
            self,
            title=f"New status-callback signing key for {tenant.slug}",
            intro=f"StatusCallback requests of the {facade.LABEL} are signed with this key from now on: "
            "the tenant's RequestValidator needs it.",
            secret=key,
            back_url=reverse("admin:smsgw_tenant_changelist"),
        )

    @admin.display(boolean=True, description="webhook signing secret")
    def has_webhook_secret(self, obj):
        return bool(obj.webhook_secret)

    def has_delete_permission(self, request, obj=None):
        return False  # messages hang on a tenant (PROTECT); deactivate it instead (is_active)

    def save_model(self, request, obj, form, change):
        from receipts.webhooks import tenant_webhook_configure, tenant_webhook_remove

        url = obj.webhook_url
        super().save_model(request, obj, form, change)
        default_senders_assign(tenant=obj)  # the form checked that no other tenant owns them
        if "webhook_url" in form.changed_data or (url and not obj.webhook_secret):
            if url:
                request._smsgw_new_secret = tenant_webhook_configure(tenant=obj, url=url)
            else:
                tenant_webhook_remove(tenant=obj)

    def save_formset(self, request, form, formset, change):
        if formset.model is not TenantSender:
            return super().save_formset(request, form, formset, change)
        # Senders through the service (smsgw.tenancy.senders): a new one assigned, a deleted one released
        # (refused for the tenant's default sender); a saved one is never edited in place. The lists are
        # what the admin's history entry names.
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
        for sub in formset.forms:
            if not sub.has_changed() or not sub.cleaned_data:
                continue
            if sub.cleaned_data.get("DELETE") and sub.instance.pk is not None:
                try:
                    sender_release(
                        tenant=form.instance, sender=sub.instance.value, provider=sub.instance.provider
                    )
                except SenderError as exc:
                    self.message_user(request, str(exc), messages.ERROR)
                else:
                    formset.deleted_objects.append(sub.instance)
            elif sub.instance.pk is None and not sub.cleaned_data.get("DELETE"):
                sub.instance.tenant = form.instance
                formset.new_objects.append(_sender_save(sub.instance))
        return None

    def _secret_response(self, request, obj, default):
        secret = getattr(request, "_smsgw_new_secret", None)
        if not secret:
            return default
        return secret_page(
            request,
            self,
            title=f"Webhook signing secret for {obj.slug}",
            intro=f"Webhooks to {obj.webhook_url} are signed with this secret (Standard Webhooks).",
            secret=secret,
            back_url=reverse("admin:smsgw_tenant_change", args=[obj.pk]),
        )

    def response_add(self, request, obj, post_url_continue=None):
        return self._secret_response(request, obj, super().response_add(request, obj, post_url_continue))

    def response_change(self, request, obj):
        return self._secret_response(request, obj, super().response_change(request, obj))

    @admin.action(description="Rotate the webhook signing secret", permissions=["change"])
    def rotate_webhook_secret(self, request, queryset):
        from receipts.webhooks import tenant_webhook_configure

        tenants = list(queryset.exclude(webhook_url=""))
        if len(tenants) != 1:
            self.message_user(request, "Select one tenant that has a webhook URL.", messages.ERROR)
            return None
        tenant = tenants[0]
        secret = tenant_webhook_configure(tenant=tenant, url=tenant.webhook_url, rotate_secret=True)
        assert secret is not None  # a non-empty URL with rotate_secret always gets a new secret
        self.log_change(request, tenant, "rotated the webhook signing secret")
        return secret_page(
            request,
            self,
            title=f"New webhook signing secret for {tenant.slug}",
            intro="The old secret no longer signs anything: give the tenant this one.",
            secret=secret,
            back_url=reverse("admin:smsgw_tenant_changelist"),
        )


SCOPE_FORM_CHOICES = [
    (FULL_ACCESS, f"{FULL_ACCESS}: full access"),
    *((s, f"{s}: {d}") for s, d in SCOPES.items()),
]


class ApiKeyForm(forms.ModelForm):
    """A new key's scopes are chosen (no default); an existing key's can only be narrowed: widening one
    would silently give more to whoever holds it (issue a new key instead)."""

    scopes = forms.MultipleChoiceField(
        choices=SCOPE_FORM_CHOICES,
        widget=forms.CheckboxSelectMultiple,
        help_text="What the key may do (docs/api.md#scopes). An existing key's scopes can only be narrowed.",
    )

    class Meta:
        model = ApiKey
        fields = ("tenant", "name", "scopes")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        held = list(self.instance.scopes) if self.instance.pk else []
        if self.instance.pk and FULL_ACCESS not in held:
            field = self.fields["scopes"]
            assert isinstance(field, forms.MultipleChoiceField)
            field.choices = [(value, label) for value, label in SCOPE_FORM_CHOICES if value in held]

    def clean_scopes(self):
        scopes = scopes_clean(self.cleaned_data.get("scopes") or [])
        if self.instance.pk and not scopes_within(scopes, self.instance.scopes):
            raise forms.ValidationError("an existing key's scopes can only be narrowed; issue a new key")
        return scopes


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = ApiKeyForm
    list_display = ("prefix", "tenant", "name", "scope_list", "revoked_at", "last_used_at", "created_at")
    list_filter = ("revoked_at",)
    list_select_related = ("tenant",)
    search_fields = ("prefix", "tenant__slug")
    actions = ("revoke_keys", "rotate_key")

    @admin.display(description="scopes")
    def scope_list(self, obj):
        return ", ".join(obj.scopes) or "(none)"

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("tenant", "name", "scopes")
        return ("prefix", "tenant", "name", "scopes", "revoked_at", "last_used_at", "created_at")

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        # The tenant is fixed once a key exists: moving a key would hand one tenant's client another's data.
        return ("prefix", "tenant", "revoked_at", "last_used_at", "created_at")

    def has_delete_permission(self, request, obj=None):
        return False  # revoke instead: the row keeps the prefix that logs and audit entries name

    def save_model(self, request, obj, form, change):
        if change:
            obj.save(update_fields=["name", "scopes"])
            return
        key, raw = api_key_create(tenant=obj.tenant, name=obj.name, scopes=obj.scopes)
        obj.pk, obj.prefix, obj.secret_hash, obj.created_at = (
            key.pk,
            key.prefix,
            key.secret_hash,
            key.created_at,
        )
        obj._state.adding = False
        request._smsgw_raw_key = raw

    def response_add(self, request, obj, post_url_continue=None):
        return secret_page(
            request,
            self,
            title=f"API key for {obj.tenant}",
            intro=f"API key {obj.prefix}… for tenant {obj.tenant} ({obj.name}), scopes "
            f"{', '.join(obj.scopes)}. Clients send it as 'Authorization: Bearer <key>'.",
            secret=request._smsgw_raw_key,
            back_url=reverse("admin:smsgw_apikey_changelist"),
        )

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke_keys(self, request, queryset):
        revoked = 0
        for key in queryset:
            if api_key_revoke(key=key):
                revoked += 1
                self.log_change(request, key, "revoked")
        self.message_user(request, f"Revoked {revoked} keys.", messages.SUCCESS)

    @admin.action(description="Rotate: issue a new key and revoke this one", permissions=["add", "change"])
    def rotate_key(self, request, queryset):
        keys = list(queryset.filter(revoked_at__isnull=True).select_related("tenant"))
        if len(keys) != 1:
            self.message_user(request, "Select one key that is not revoked.", messages.ERROR)
            return None
        new, raw = api_key_rotate(key=keys[0])
        self.log_change(request, keys[0], f"rotated to {new.prefix}")
        return secret_page(
            request,
            self,
            title=f"New API key for {new.tenant}",
            intro=f"Key {keys[0].prefix}… is revoked; its replacement is {new.prefix}….",
            secret=raw,
            back_url=reverse("admin:smsgw_apikey_changelist"),
        )
