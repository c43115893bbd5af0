"""POST /v1/campaigns/{id}/pause, /resume, /cancel (docs/campaigns.md, "Campaigns: pause, resume, cancel,
progress"). Thin views over scheduling.campaigns.control; every answer carries the campaign's progress by
status, read from its counters."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from scheduling.campaigns import control
from scheduling.campaigns.api import CampaignOutput
from smsgw.http import schema

CAMPAIGN_CONFLICT = schema.error(
    409,
    "The campaign's current status does not allow this; `status` gives it. Nothing was changed.",
    schema.problem_example(
        "Completed campaign",
        409,
        "conflict",
        "Only a creating or active campaign can be paused; this one is completed.",
        status="completed",
    ),
)


class CancellationOutput(serializers.Serializer):
    cancelled = serializers.IntegerField(help_text="Messages of the campaign cancelled so far.")
    pending = serializers.IntegerField(help_text="Still scheduled or queued: being cancelled.")
    too_late = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Already handed to the provider (sending, sent, delivered, ...): not cancellable.",
    )
    in_progress = serializers.BooleanField(help_text="A background job is cancelling the rest.")


class ReleaseOutput(serializers.Serializer):
    released = serializers.IntegerField(help_text="Waiting messages made due by this request.")
    in_progress = serializers.BooleanField(help_text="A background job is releasing the rest.")


class CampaignControlOutput(CampaignOutput):
    """The campaign as GET /v1/campaigns/{id} shows it, and whether this call changed it."""

    changed = serializers.BooleanField(help_text="False: it already was in the requested state.")


class CampaignCancelOutput(CampaignControlOutput):
    cancellation = CancellationOutput()


class CampaignResumeOutput(CampaignControlOutput):
    release = ReleaseOutput()


def _body(change: control.CampaignChange) -> dict:
    # The progress the service read inside its transaction, not a second read.
    context = {"progress": {change.campaign.pk: change.progress}}
    return {**CampaignOutput(change.campaign, context=context).data, "changed": change.changed}


def _actor(request) -> str:
    return str(request.user)


class CampaignPauseApi(APIView):
    required_scopes = {"POST": "campaigns:write"}

    @extend_schema(
        request=None,
        responses={200: CampaignControlOutput, 409: CAMPAIGN_CONFLICT},
        description=(
            "Pauses an `active` or `creating` campaign: its messages wait (`reason_code` `campaign_paused`) "
            "instead of going to the provider. A repeat answers 200 with `changed: false`. 409 once "
            "cancelled, completed or failed."
        ),
        summary="Pause: nothing more is handed to the provider until resumed (a repeat: changed false)",
    )
    def post(self, request, public_id: str):
        change = control.campaign_pause(
            tenant=request.user.tenant, public_id=public_id, actor=_actor(request)
        )
        return Response(_body(change))


class CampaignResumeApi(APIView):
    required_scopes = {"POST": "campaigns:write"}

    @extend_schema(
        request=None,
        responses={200: CampaignResumeOutput, 409: CAMPAIGN_CONFLICT},
        description=(
            "Resumes a paused campaign: the messages that waited are due again at once (then paced as usual)."
            " A repeat on an active campaign answers 200. 409 once cancelled, completed or failed."
        ),
        summary="Resume a paused campaign: the messages that waited are due again at once",
    )
    def post(self, request, public_id: str):
        change = control.campaign_resume(
            tenant=request.user.tenant, public_id=public_id, actor=_actor(request)
        )
        body = _body(change)
        body["release"] = {"released": change.released_now, "in_progress": change.in_progress}
        return Response(body)


class CampaignCancelApi(APIView):
    required_scopes = {"POST": "campaigns:write"}

    @extend_schema(
        request=None,
        responses={200: CampaignCancelOutput, 409: CAMPAIGN_CONFLICT},
        description=(
            "Cancels the campaign: its `scheduled` and `queued` messages are cancelled (in the background for"
            " a large one) and no more are made. Messages already with the provider are counted as too late. "
            "A repeat answers 200. 409 on a completed or failed campaign."
        ),
        summary="Cancel: pending messages are cancelled (in the background for large campaigns); "
        "those already with the provider are reported too late",
    )
    def post(self, request, public_id: str):
        change = control.campaign_cancel(
            tenant=request.user.tenant, public_id=public_id, actor=_actor(request)
        )
        body = _body(change)
        p = change.progress
        pending = sum(p.get(s, 0) for s in control.PENDING)
        body["cancellation"] = {
            "cancelled": p.get("cancelled", 0),
            "pending": pending,
            "too_late": {s: n for s, n in p.items() if s in control.TOO_LATE},
            "in_progress": change.in_progress or pending > 0,
        }
        return Response(body)
