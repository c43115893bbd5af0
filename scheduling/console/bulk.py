"""Operator actions on messages from the admin, one or many at a time: cancel, reschedule, replay.

Each action is two steps. The first answers a confirmation page that says how many of the selected
messages the action can change and what the others are; the second applies it, message by message,
through the same service the tenant API calls (scheduling.messages.service), so the rules, the compare-and-set
and the timeline entry (with the operator as actor) are the API's. A message whose status moved between
the two steps loses its compare-and-set and is counted with the status it has now; the outcome reads
like "Cancelled 950; 50 were already sending."
"""

from __future__ import annotations

import zoneinfo
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse

from scheduling.messages import edits, final
from scheduling.messages import service as services
from scheduling.models import Message, Status
from smsgw.domain_errors import ConflictError, DomainError, InvalidInput

# One confirmation page lists every selected id as a hidden field and the apply step runs one short
# transaction per message (about 1 ms each on PostgreSQL): 5,000 stays a few seconds of request time.
BULK_LIMIT = 5000


def operator_actor(request) -> str:
    """The actor written to the timeline for an operator action (the API writes the key's name)."""
    return f"admin:{request.user.get_username()}"[:64]


class RescheduleForm(forms.Form):
    local_time = forms.DateTimeField(
        label="New send time (local wall time)",
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}),
    )
    timezone = forms.ChoiceField(label="Timezone", choices=())

    def __init__(self, *args, initial_timezone: str = "UTC", **kwargs):
        super().__init__(*args, **kwargs)
        zone_field = self.fields["timezone"]
        assert isinstance(zone_field, forms.ChoiceField)  # declared above
        zone_field.choices = [(z, z) for z in sorted(zoneinfo.available_timezones())]
        zone_field.initial = initial_timezone

    def api_data(self) -> dict[str, str]:
        """What the API's PATCH would carry: a wall time without offset, in the named zone."""
        local: datetime = self.cleaned_data["local_time"].replace(tzinfo=None)
        return {"send_at": local.isoformat(timespec="seconds"), "timezone": self.cleaned_data["timezone"]}


@dataclass
class Operation:
    name: str  # the admin action's name
    verb: str  # "Cancel"
    done: str  # "Cancelled"
    eligible: frozenset[str]  # statuses the service accepts
    apply: Callable[[Message, str, dict], object]  # (message, actor, data) -> raises a DomainError
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
    already=frozenset({Status.CANCELLED}),
    refused_prefix="already ",
)
RESCHEDULE = Operation(
    "reschedule_messages",
    "Reschedule",
    "Rescheduled",
    frozenset({Status.SCHEDULED}),
    _reschedule,
    form=RescheduleForm,
)
REPLAY = Operation("replay_messages", "Replay", "Replayed", frozenset({Status.FAILED}), _replay)


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
    """The action body: the confirmation page first, the outcome after "confirm"."""
    selected = list(queryset.order_by("id").values_list("id", "status")[: BULK_LIMIT + 1])
    if len(selected) > BULK_LIMIT:
        modeladmin.message_user(
            request, f"At most {BULK_LIMIT} messages at a time; narrow the selection.", messages.ERROR
        )
        return None
    form = None
    if op.form is not None:
        first = queryset.select_related("tenant").first()
        zone = first.tenant.default_timezone if first else "UTC"
        form = op.form(request.POST if "confirm" in request.POST else None, initial_timezone=zone)
    if "confirm" in request.POST and (form is None or form.is_valid()):
        text, complete = _apply(modeladmin, request, op, [pk for pk, _ in selected], form)
        modeladmin.message_user(request, text, messages.SUCCESS if complete else messages.WARNING)
        return None  # back to the change list
    by_status = Counter(status for _, status in selected)
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"{op.verb} messages",
        "opts": modeladmin.model._meta,
        "op": op,
        "form": form,
        "selected_ids": [pk for pk, _ in selected],
        "total": len(selected),
        "will_change": sum(n for s, n in by_status.items() if s in op.eligible),
        "unchanged": sorted((s, n) for s, n in by_status.items() if s not in op.eligible),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "media": modeladmin.media,
    }
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(request, "admin/scheduling/message/confirm_operation.html", context)


def _apply(modeladmin, request, op: Operation, ids: list[int], form) -> tuple[str, bool]:
    """Apply ``op`` to each message; (the outcome, whether every selected message was changed)."""
    actor = operator_actor(request)
    data = form.api_data() if form is not None else {}
    changed = 0
    already: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for message in Message.objects.filter(id__in=ids).select_related("tenant").order_by("id").iterator():
        if message.status in op.already:
            already[message.status] += 1
            continue
        if message.status not in op.eligible:
            refused[message.status] += 1
            continue
        try:
            op.apply(message, actor, data)
        except ConflictError as exc:
            if exc.current_status and exc.current_status not in op.eligible:
                refused[exc.current_status] += 1  # lost a race: it moved on since it was read
            else:
                errors[_error_text(exc)] += 1  # refused for another reason (a quota failure, an edit race)
            continue
        except DomainError as exc:  # the API's refusals: a time in the past or too far ahead, a quota
            errors[_error_text(exc)] += 1
            continue
        changed += 1
        modeladmin.log_change(request, message, f"{op.done.lower()} ({actor})")
    complete = not (refused or errors)
    return outcome_text(op, changed, already, refused, errors), complete


__all__ = [
    "BULK_LIMIT",
    "CANCEL",
    "REPLAY",
    "RESCHEDULE",
    "Operation",
    "operator_actor",
    "outcome_text",
    "run",
]
