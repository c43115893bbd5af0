"""Operator actions on messages from the admin, one or many at a time: cancel, reschedule, replay.

Each action is two steps. The first answers a confirmation page that says how many of the selected
messages the action can change and what the others are; the second applies it, message by message,
through the same service the tenant API calls (scheduling.messages.service), so the rules, the compare-and-set
and the timeline entry (with the operator as actor) are the API's. A message whose status moved between
the two steps loses its compare-and-set and is counted with the status it has now; the outcome reads
like "Cancelled 950; 50 were already sending."

Ticked messages (a page at most) are changed in the request. "Select all" (every message the list's
filter matches, any number) becomes an operator job (scheduling.operator_jobs.runner), which applies
each message through ``outcome_of`` below: the one rule for both.
"""

from __future__ import annotations

import zoneinfo
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Count
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from scheduling.messages import edits, final
from scheduling.messages import service as services
from scheduling.models import Message, Status
from smsgw.domain_errors import ConflictError, DomainError, InvalidInput


def operator_actor(request) -> str:
    """The actor written to the timeline for an operator action (the API writes the key's name)."""
    return f"admin:{request.user.get_username()}"[:64]


class RescheduleForm(forms.Form):
    local_time = forms.DateTimeField(
        label="New send time (local wall time)",
        required=False,
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}),
    )
    timezone = forms.ChoiceField(label="Timezone", choices=())
    shift = forms.DurationField(
        label="Or shift each by",
        required=False,
        help_text="Instead of a time: each message's due time moves by this much (2:00:00 two hours "
        "later, -0:30:00 half an hour earlier, 1 00:00:00 a day later).",
    )

    def __init__(self, *args, initial_timezone: str = "UTC", **kwargs):
        super().__init__(*args, **kwargs)
        zone_field = self.fields["timezone"]
        assert isinstance(zone_field, forms.ChoiceField)  # declared above
        zone_field.choices = [(z, z) for z in sorted(zoneinfo.available_timezones())]
        zone_field.initial = initial_timezone

    def clean(self):
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        has_time, shift = cleaned.get("local_time") is not None, cleaned.get("shift")
        if has_time == (shift is not None):
            raise forms.ValidationError("Give either a new send time or a shift, not both.")
        if shift is not None and not shift:
            self.add_error("shift", "A shift of zero changes nothing.")
        return cleaned

    def api_data(self) -> dict[str, Any]:
        """What the API's PATCH would carry: a wall time without offset, in the named zone; or the shift,
        made into each message's own new time when it is applied (message_data)."""
        if self.cleaned_data.get("shift") is not None:
            return {"shift_seconds": int(self.cleaned_data["shift"].total_seconds())}
        local: datetime = self.cleaned_data["local_time"].replace(tzinfo=None)
        return {"send_at": local.isoformat(timespec="seconds"), "timezone": self.cleaned_data["timezone"]}


@dataclass
class Operation:
    name: str  # the admin action's name
    verb: str  # "Cancel"
    done: str  # "Cancelled"
    eligible: frozenset[str]  # statuses the service accepts
    apply: Callable[[Message, str, dict], object]  # (message, actor, data) -> raises a DomainError
    job_kind: str = ""  # its background job's kind (OperatorJobKind)
    # Selected messages already where the action would take them: counted, not touched.
    already: frozenset[str] = field(default_factory=frozenset)
    form: type[RescheduleForm] | None = None
    # How the others read: "50 were already sending" (too late to cancel), "1 was scheduled" (not failed).
    refused_prefix: str = ""


def _cancel(message: Message, actor: str, data: dict) -> object:
    return services.message_cancel(tenant=message.tenant, public_id=message.public_id, actor=actor)


def _reschedule(message: Message, actor: str, data: dict) -> object:
    return edits.message_update(tenant=message.tenant, public_id=message.public_id, actor=actor, data=data)


def _replay(message: Message, actor: str, data: dict) -> object:
    return final.message_replay(tenant=message.tenant, public_id=message.public_id, actor=actor)


CANCEL = Operation(
    "cancel_messages",
    "Cancel",
    "Cancelled",
    frozenset({Status.SCHEDULED, Status.QUEUED}),
    _cancel,
    job_kind="cancel",
    already=frozenset({Status.CANCELLED}),
    refused_prefix="already ",
)
RESCHEDULE = Operation(
    "reschedule_messages",
    "Reschedule",
    "Rescheduled",
    frozenset({Status.SCHEDULED}),
    _reschedule,
    job_kind="reschedule",
    form=RescheduleForm,
)
REPLAY = Operation(
    "replay_messages", "Replay", "Replayed", frozenset({Status.FAILED}), _replay, job_kind="replay"
)
OPERATIONS = {op.job_kind: op for op in (CANCEL, RESCHEDULE, REPLAY)}


def _were(count: int, status: str, prefix: str = "") -> str:
    return f"{count} {'was' if count == 1 else 'were'} {prefix}{status}"


def outcome_text(op: Operation, changed: int, already: Counter, refused: Counter, errors: Counter) -> str:
    """ "Cancelled 950; 50 were already sending; 2 were already cancelled." """
    parts = [f"{op.done} {changed}"]
    parts += [_were(n, status, "already ") for status, n in sorted(already.items())]
    most_first = sorted(refused.items(), key=lambda i: -i[1])
    parts += [_were(n, status, op.refused_prefix) for status, n in most_first]
    parts += [f"{n} refused: {reason}" for reason, n in sorted(errors.items(), key=lambda i: -i[1])]
    return "; ".join(parts) + "."


def _error_text(exc: DomainError) -> str:
    if isinstance(exc, InvalidInput):
        return f"{exc.field}: {exc.message}"
    return exc.message


def run(modeladmin: admin.ModelAdmin, request, queryset, op: Operation):
    """The action body: the confirmation page first, the outcome after "confirm". Ticked messages (a
    page at most) are changed in the request; "select all" (every message the list's filter matches, any
    number) becomes a background job (scheduling.operator_jobs), and the answer links to its page."""
    across = request.POST.get("select_across") == "1"
    form = None
    if op.form is not None:
        first = queryset.select_related("tenant").first()
        zone = first.tenant.default_timezone if first else "UTC"
        form = op.form(request.POST if "confirm" in request.POST else None, initial_timezone=zone)
    if "confirm" in request.POST and (form is None or form.is_valid()):
        data = form.api_data() if form is not None else {}
        if across:
            return _start_job(modeladmin, request, queryset, op, data)
        ids = list(queryset.order_by("id").values_list("id", flat=True))
        text, complete = _apply(modeladmin, request, op, ids, data)
        modeladmin.message_user(request, text, messages.SUCCESS if complete else messages.WARNING)
        return None  # back to the change list
    if across:  # one grouped count over the filter, however many it matches
        by_status = Counter(
            {row["status"]: row["n"] for row in queryset.order_by().values("status").annotate(n=Count("id"))}
        )
        # The admin takes an action's POST only with some box ticked; with select_across it acts on the
        # whole filter whatever was ticked: one id stands for the page's boxes.
        selected_ids: list[int] = list(queryset.order_by("id").values_list("id", flat=True)[:1])
    else:
        selected = list(queryset.order_by("id").values_list("id", "status"))
        by_status = Counter(status for _, status in selected)
        selected_ids = [pk for pk, _ in selected]
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"{op.verb} messages",
        "opts": modeladmin.model._meta,
        "op": op,
        "form": form,
        "across": across,
        "selected_ids": selected_ids,
        "total": sum(by_status.values()),
        "will_change": sum(n for s, n in by_status.items() if s in op.eligible),
        "unchanged": sorted((s, n) for s, n in by_status.items() if s not in op.eligible),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "media": modeladmin.media,
    }
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(request, "admin/scheduling/message/confirm_operation.html", context)


def _start_job(modeladmin, request, queryset, op: Operation, data: dict):
    from scheduling.operator_jobs import runner

    # The list's query string (filters, search, date ranges), not its page or order.
    query = {k: request.GET.getlist(k) for k in request.GET if k not in ("p", "o", "_changelist_filters")}
    job = runner.job_start(
        kind=op.job_kind,
        actor=operator_actor(request),
        user=request.user,
        query=query,
        data=data,
        queryset=queryset,
    )
    modeladmin.log_addition(request, job, f"{op.verb.lower()} job over {runner.describe(query)}")
    url = reverse("admin:scheduling_operatorjob_change", args=[job.pk])
    modeladmin.message_user(
        request,
        format_html(
            '{} {} messages in the background: <a href="{}">job {}</a> shows its progress.',
            op.verb,
            job.total,
            url,
            job.pk,
        ),
        messages.SUCCESS,
    )
    return HttpResponseRedirect(url)


def message_data(message: Message, data: dict) -> dict:
    """The service's input for this message: a shift ("2 hours later") becomes that message's own new
    local wall time in its zone, as the API's PATCH would carry it."""
    if "shift_seconds" not in data:
        return data
    from scheduling.admin import _message_zone  # the zone the list shows the message in

    zone = _message_zone(message)
    local = (message.due_at + timedelta(seconds=int(data["shift_seconds"]))).astimezone(zone)
    return {"send_at": local.replace(tzinfo=None).isoformat(timespec="seconds"), "timezone": zone.key}


def outcome_of(op: Operation, message: Message, actor: str, data: dict) -> str:
    """Apply ``op`` to one message through its service; what came of it, as a key of the outcome counts:
    "changed", "already:<status>", "refused:<status>" (it is, or moved meanwhile to, a status the action
    does not apply to) or "error:<the service's refusal>"."""
    if message.status in op.already:
        return f"already:{message.status}"
    if message.status not in op.eligible:
        return f"refused:{message.status}"
    try:
        op.apply(message, actor, message_data(message, data))
    except ConflictError as exc:
        if exc.current_status and exc.current_status not in op.eligible:
            return f"refused:{exc.current_status}"  # lost a race: it moved on since it was read
        return f"error:{_error_text(exc)}"  # refused for another reason (a quota failure, an edit race)
    except DomainError as exc:  # the API's refusals: a time in the past or too far ahead, a quota
        return f"error:{_error_text(exc)}"
    return "changed"


def counts_text(op: Operation, counts: dict[str, int]) -> str:
    """The outcome counts ("changed", "already:<status>", ...) as the sentence an operator reads."""
    already: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for key, n in counts.items():
        kind, _, what = key.partition(":")
        {"already": already, "refused": refused, "error": errors}.get(kind, Counter())[what] += n
    return outcome_text(op, counts.get("changed", 0), already, refused, errors)


def _apply(modeladmin, request, op: Operation, ids: list[int], data: dict) -> tuple[str, bool]:
    """Apply ``op`` to each message; (the outcome, whether every selected message was changed)."""
    actor = operator_actor(request)
    counts: Counter[str] = Counter()
    for message in Message.objects.filter(id__in=ids).select_related("tenant").order_by("id").iterator():
        outcome = outcome_of(op, message, actor, data)
        counts[outcome] += 1
        if outcome == "changed":
            modeladmin.log_change(request, message, f"{op.done.lower()} ({actor})")
    complete = all(key == "changed" or key.startswith("already:") for key in counts)
    return counts_text(op, counts), complete


__all__ = [
    "CANCEL",
    "OPERATIONS",
    "REPLAY",
    "RESCHEDULE",
    "Operation",
    "counts_text",
    "message_data",
    "operator_actor",
    "outcome_of",
    "outcome_text",
    "run",
]
