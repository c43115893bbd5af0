"""The tenant's keyword rules in the admin: an inline on the tenant's page (config.admin.TenantAdmin), checked
as ``PUT /v1/keywords`` checks them (one word of letters and digits, stored upper case; a number that is
one of the tenant's senders, or empty for all of them)."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from inbound.keywords_api import KEYWORD, owned_sender
from inbound.models import KeywordRule
from smsgw.tenancy.senders import tenant_owns_sender


class KeywordRuleForm(forms.ModelForm):
    class Meta:
        model = KeywordRule
        fields = ("keyword", "action", "reply", "number")

    def clean_keyword(self) -> str:
        keyword = (self.cleaned_data.get("keyword") or "").strip()
        if not KEYWORD.match(keyword):
            raise forms.ValidationError("One word of letters A-Z and digits, up to 32.")
        return keyword.upper()

    def clean(self):
        cleaned = super().clean() or {}
        raw = (cleaned.get("number") or "").strip()
        tenant = self.instance.tenant if self.instance.tenant_id else getattr(self, "parent_tenant", None)
        if raw and tenant is not None and tenant.pk is not None:
            owned = owned_sender(raw, lambda value: tenant_owns_sender(tenant, value))
            if owned is None:
                self.add_error("number", "Not one of this tenant's senders.")
            else:
                cleaned["number"] = owned
        return cleaned


class KeywordRuleFormSet(forms.BaseInlineFormSet):
    def add_fields(self, form, index):
        super().add_fields(form, index)
        form.parent_tenant = self.instance  # a new rule's form has no tenant yet: the page's


class KeywordRuleInline(admin.TabularInline):
    """What a recipient's reply does for this tenant, beside the built-in STOP/START/HELP lists (which
    these win over); docs/inbound.md, "Keywords and actions"."""

    model = KeywordRule
    form = KeywordRuleForm
    formset = KeywordRuleFormSet
    extra = 0
    fields = ("keyword", "action", "reply", "number")
    verbose_name = "keyword rule"
    verbose_name_plural = "keyword rules (replies: opt-out, opt-in, help, cancel, confirm)"
