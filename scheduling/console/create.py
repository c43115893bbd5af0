"""Creating a message (or a recurring schedule) from the console, in three steps: the form, a preview
of what it would be (the resolved UTC time, segments, sender and route), and the confirmation, which
stores it through the API's own create (scheduling.messages.service.message_create, or
scheduling.schedules.service.schedule_create with a recurrence) with the operator as actor. The
confirmation carries an idempotency key made at the preview, so a double submit makes one message."""

from __future__ import annotations

import secrets
import zoneinfo
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from scheduling.console.bulk import operator_actor
from scheduling.messages import preview as previews
from scheduling.messages import service as message_service
from scheduling.schedules import service as schedule_service
from smsgw.domain_errors import DomainError, InvalidInput
from smsgw.models import Tenant

# The form's fields and the API field each one becomes (an error the API names is shown on its field).
API_FIELDS = {"to": "to", "body": "body", "sender": "from", "rrule": "rrule", "timezone": "timezone"}
TIME_FIELDS = ("send_at", "start")


class CreateForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.filter(is_active=True).order_by("name"))
    to = forms.CharField(label="Recipient", max_length=32, help_text="E.164, e.g. +14155550123")
    # As the API takes it: leading and trailing spaces are part of the body.
    body = forms.CharField(widget=forms.Textarea(attrs={"rows": 4, "cols": 60}), max_length=1600, strip=False)
    sender = forms.CharField(
        label="Sender", max_length=32, required=False, help_text="Blank: the tenant's default sender"
    )
    local_time = forms.DateTimeField(
        label="Send at (local wall time)",
        required=False,
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}),
        help_text="Blank: now (a recurrence needs its first local time)",
    )
    timezone = forms.ChoiceField(label="Timezone", choices=(), required=False)
    rrule = forms.CharField(
        label="Recurrence (optional)",
        max_length=500,
        required=False,
        help_text="An RFC 5545 rule, e.g. FREQ=WEEKLY;BYDAY=MO;COUNT=10 (makes a schedule)",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        zone_field = self.fields["timezone"]
        assert isinstance(zone_field, forms.ChoiceField)  # declared above
        zone_field.choices = [("", "the tenant's"), *((z, z) for z in sorted(zoneinfo.available_timezones()))]

    def clean(self):
        cleaned = super().clean() or {}
        if cleaned.get("rrule") and cleaned.get("local_time") is None:
            self.add_error("local_time", "A recurrence starts at a local time: give one.")
        return cleaned

    def api_data(self) -> dict[str, Any]:
        """The request the API's create would get."""
        c = self.cleaned_data
        data: dict[str, Any] = {"to": c["to"], "body": c["body"]}
        if c.get("sender"):
            data["from"] = c["sender"]
        if c.get("timezone"):
            data["timezone"] = c["timezone"]
        local = (
            c["local_time"].replace(tzinfo=None).isoformat(timespec="seconds")
            if c.get("local_time")
            else None
        )
        if c.get("rrule"):
            data.update(rrule=c["rrule"], start=local)
            data.setdefault("timezone", c["tenant"].default_timezone or "UTC")
        elif local:
            data["send_at"] = local
        return data


def _field_error(form: CreateForm, exc: DomainError) -> None:
    """The API's refusal on the form field it names (the whole form's error otherwise)."""
    if isinstance(exc, InvalidInput):
        name = {api: own for own, api in API_FIELDS.items()}.get(exc.field)
        if exc.field in TIME_FIELDS:
            name = "local_time"
        form.add_error(name if name in form.fields else None, f"{exc.field}: {exc.message}")
    else:
        form.add_error(None, exc.message)


def create_view(modeladmin, request):
    """The three steps; each POST carries the whole form (the preview's fields are hidden)."""
    if not modeladmin.has_change_permission(request):
        raise PermissionDenied
    form = CreateForm(request.POST or None)
    step, preview = "edit", None
    if request.method == "POST" and "edit" not in request.POST and form.is_valid():
        tenant = form.cleaned_data["tenant"]
        data = form.api_data()
        try:
            if "confirm" in request.POST:
                return _confirm(modeladmin, request, tenant, data)
            preview = previews.message_preview(tenant=tenant, data=data)
            step = "preview"
        except DomainError as exc:
            _field_error(form, exc)
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Create a message" if step == "edit" else "Check and confirm",
        "opts": modeladmin.model._meta,
        "form": form,
        "step": step,
        "preview": preview,
        "token": request.POST.get("token") or secrets.token_hex(12),
        "media": modeladmin.media + form.media,
    }
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(request, "admin/scheduling/message/create.html", context)


def _confirm(modeladmin, request, tenant: Tenant, data: dict[str, Any]):
    actor = operator_actor(request)
    key = f"admin-{request.POST.get('token', '')}"[:64] if request.POST.get("token") else None
    if data.get("rrule"):
        change = schedule_service.schedule_create(tenant=tenant, actor=actor, data=data, idempotency_key=key)
        schedule = change.schedule
        modeladmin.log_addition(request, schedule, f"created by {actor}")
        modeladmin.message_user(request, f"Schedule {schedule.public_id} created.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:scheduling_schedule_change", args=[schedule.pk]))
    message, created = message_service.message_create(
        tenant=tenant, actor=actor, data=data, idempotency_key=key
    )
    if created:
        modeladmin.log_addition(request, message, f"created by {actor}")
    text = f"Message {message.public_id} {'created' if created else 'was already created'}."
    modeladmin.message_user(request, text, messages.SUCCESS)
    return HttpResponseRedirect(reverse("admin:scheduling_message_change", args=[message.pk]))


__all__ = ["CreateForm", "create_view"]
