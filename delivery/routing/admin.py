"""Routing rules in the admin: a rule with its legs inline, edited by the `operator` and `admin` roles and
seen by `viewer` (smsgw.console.roles). Every add, change and delete is in the admin's history (Django's
LogEntry, the audit trail of the other admin edits), the legs' changes in their rule's entry. A rule is
checked by delivery.routing.service before it is saved, each error on the field to correct. Imported by
delivery.admin, so it is registered with the other delivery pages."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.db.models import Prefetch

from delivery.providers import PROVIDERS
from delivery.routing.models import RouteLeg, RouteRule
from delivery.routing.service import (
    MAX_LEGS,
    RouteConfigError,
    route_leg_check,
    route_legs_check,
    route_match_check,
)
from smsgw.config.routes import LegSpec
from smsgw.tenancy.senders import tenant_owns_sender


def _put(form: forms.BaseForm, exc: RouteConfigError, fields: tuple[str, ...]) -> None:
    """A service error on the form field it names (``legs[0].sender`` -> ``sender``), else on the form."""
    field = exc.field.rsplit(".", 1)[-1]
    if field in fields:
        form.add_error(field, exc.message)
    else:
        form.add_error(None, str(exc))


def _weight(data: dict) -> int:
    weight = data.get("weight")
    return 1 if weight is None else int(weight)


class RouteRuleForm(forms.ModelForm):
    class Meta:
        model = RouteRule
        fields = ("tenant", "name", "position", "country", "prefix", "priority", "enabled")

    def clean(self):
        super().clean()
        data = self.cleaned_data
        if self.errors:
            return data
        data["name"] = (data.get("name") or "").strip()
        if data.get("tenant") is None:
            # The database refuses the name too (routerule_name_all_tenants), but its error names no field.
            taken = RouteRule.objects.filter(tenant__isnull=True, name=data["name"])
            if taken.exclude(pk=self.instance.pk).exists():
                self.add_error("name", "a rule for all tenants already has this name")
        try:
            data["country"], data["prefix"], data["priority"] = route_match_check(
                country=data.get("country") or "",
                prefix=data.get("prefix") or "",
                priority=data.get("priority") or "",
            )
        except RouteConfigError as exc:
            _put(self, exc, ("country", "prefix", "priority"))
        return data


class RouteLegForm(forms.ModelForm):
    class Meta:
        model = RouteLeg
        fields = ("position", "provider", "account", "sender", "weight")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The registry as it is now (a provider added at run time shows up): a choice, not free text.
        self.fields["provider"] = forms.ChoiceField(choices=[(name, name) for name in sorted(PROVIDERS)])

    def clean(self):
        super().clean()
        data = self.cleaned_data
        if self.errors or not data.get("provider"):
            return data
        try:
            leg = route_leg_check(
                provider=data["provider"],
                account=data.get("account") or "",
                sender=data.get("sender") or "",
                weight=_weight(data),
            )
        except RouteConfigError as exc:
            _put(self, exc, ("provider", "account", "sender", "weight"))
            return data
        data["account"], data["sender"] = leg.account, leg.sender
        return data


class RouteLegFormSet(forms.BaseInlineFormSet):
    def clean(self):
        # The service's check first: its duplicate error names the leg (the model formset's own
        # unique check, in super().clean(), would say only "duplicate data").
        if not any(self.errors):
            kept = [form for form in self.forms if form.cleaned_data and not form.cleaned_data.get("DELETE")]
            # In the order they will be read (position, then as listed): "legs[1]" is the second tried.
            kept.sort(key=lambda form: form.cleaned_data.get("position") or 0)
            legs = [
                LegSpec(
                    form.cleaned_data["provider"],
                    form.cleaned_data.get("account") or "",
                    form.cleaned_data.get("sender") or "",
                    _weight(form.cleaned_data),
                )
                for form in kept
            ]
            try:
                route_legs_check(legs)
            except RouteConfigError as exc:
                raise forms.ValidationError(str(exc)) from None
            self._senders_owned(legs)
        super().clean()

    def _senders_owned(self, legs: list[LegSpec]) -> None:
        """A tenant's own rule sends only from that tenant's senders (smsgw.tenancy.senders); a rule for
        all tenants may name one, and each message skips the leg unless its tenant owns the sender."""
        tenant = getattr(self.instance, "tenant", None)
        if tenant is None:
            return
        for i, leg in enumerate(legs):
            if leg.sender and not tenant_owns_sender(
                tenant, leg.sender, provider=leg.provider, account=leg.account
            ):
                raise forms.ValidationError(
                    f"legs[{i}].sender: {leg.sender} is not one of {tenant.slug}'s senders on {leg.provider}"
                )


class RouteLegInline(admin.TabularInline):
    model = RouteLeg
    form = RouteLegForm
    formset = RouteLegFormSet
    fields = ("position", "provider", "account", "sender", "weight")
    ordering = ("position", "id")
    max_num = MAX_LEGS
    verbose_name = "leg"
    verbose_name_plural = "legs (in failover order; the first tried is drawn among weights above 0)"

    def get_extra(self, request, obj=None, **kwargs):
        return 0 if obj is not None else 1


class ScopeFilter(admin.SimpleListFilter):
    title = "for"
    parameter_name = "for"

    def lookups(self, request, model_admin):
        return (("all", "all tenants"), ("tenant", "one tenant"))

    def queryset(self, request, queryset):
        if self.value() == "all":
            return queryset.filter(tenant__isnull=True)
        if self.value() == "tenant":
            return queryset.filter(tenant__isnull=False)
        return queryset


@admin.register(RouteRule)
class RouteRuleAdmin(admin.ModelAdmin):
    """A tenant's rules are tried before the rules for all tenants, each by position; the settings'
    ``SMSGW_ROUTES`` after both (docs/routing.md)."""

    form = RouteRuleForm
    inlines = (RouteLegInline,)
    list_display = (
        "name",
        "scope",
        "position",
        "country",
        "prefix",
        "priority",
        "enabled",
        "legs_summary",
        "updated_at",
    )
    list_filter = (ScopeFilter, "enabled", "priority")
    list_select_related = ("tenant",)
    search_fields = ("name", "=tenant__slug", "=country", "prefix")
    ordering = ("tenant_id", "position", "id")

    def get_queryset(self, request):
        legs = Prefetch("legs", queryset=RouteLeg.objects.order_by("position", "id"))
        return super().get_queryset(request).prefetch_related(legs)

    @admin.display(description="for")
    def scope(self, obj):
        return obj.tenant.slug if obj.tenant_id else "all tenants"

    @admin.display(description="legs")
    def legs_summary(self, obj):
        return ", ".join(
            f"{leg.provider}{'/' + leg.sender if leg.sender else ''} ({leg.weight})" for leg in obj.legs.all()
        )
