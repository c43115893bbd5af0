"""Correcting a failed (dead-lettered) message from its page before it is replayed: its body, its
sender, or its route taken again by today's routing rules, through scheduling.messages.corrections
(the timeline records what changed, with the operator as actor); "and replay" then replays it as the
list's action does (scheduling.messages.final.message_replay)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from scheduling.console.bulk import operator_actor
from scheduling.messages import corrections, final
from scheduling.models import Message, Status
from smsgw.domain_errors import DomainError, InvalidInput


class CorrectForm(forms.Form):
    # As the API takes it: leading and trailing spaces are part of the body.
    body = forms.CharField(widget=forms.Textarea(attrs={"rows": 4, "cols": 60}), max_length=1600, strip=False)
    sender = forms.CharField(
        label="Sender", max_length=32, required=False, help_text="Blank: the tenant's default sender"
    )
    reroute = forms.BooleanField(label="Route again by today's routing rules", required=False, initial=False)
    replay = forms.BooleanField(label="Replay it once corrected", required=False, initial=True)

    def api_data(self, message: Message) -> dict:
        data: dict = {"body": self.cleaned_data["body"], "reroute": self.cleaned_data["reroute"]}
        sender = self.cleaned_data["sender"]
        if sender != (message.from_number or message.sender_pool):
            data["from"] = sender
        return data


def correct_view(modeladmin, request, object_id: str):
    if not modeladmin.has_change_permission(request):
        raise PermissionDenied
    message = (
        Message.objects.select_related("tenant").filter(pk=object_id if object_id.isdigit() else 0).first()
    )
    if message is None:
        raise Http404("No such message.")
    page = reverse("admin:scheduling_message_change", args=[message.pk])
    initial = {"body": message.body, "sender": message.from_number or message.sender_pool}
    form = CorrectForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        actor = operator_actor(request)
        try:
            corrections.message_correct(
                tenant=message.tenant, public_id=message.public_id, actor=actor, data=form.api_data(message)
            )
            modeladmin.log_change(request, message, f"corrected ({actor})")
            text = "Corrected."
            if form.cleaned_data["replay"]:
                final.message_replay(tenant=message.tenant, public_id=message.public_id, actor=actor)
                modeladmin.log_change(request, message, f"replayed ({actor})")
                text = "Corrected and replayed."
            modeladmin.message_user(request, text, messages.SUCCESS)
            return HttpResponseRedirect(page)
        except InvalidInput as exc:
            name = {"from": "sender", "body": "body"}.get(exc.field)
            form.add_error(name, f"{exc.field}: {exc.message}")
        except DomainError as exc:
            form.add_error(None, exc.message)
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"Correct {message.public_id} before its replay",
        "opts": modeladmin.model._meta,
        "original": message,
        "form": form,
        "failed": message.status == Status.FAILED,
        "media": modeladmin.media + form.media,
    }
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(request, "admin/scheduling/message/correct.html", context)


__all__ = ["CorrectForm", "correct_view"]
