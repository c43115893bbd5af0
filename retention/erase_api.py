"""The tenant API's redaction and erasure (docs/erasure.md): one thin view each over retention.redact and
retention.erase. Tenant-scoped by the key (another tenant's id is a 404, another tenant's number is never
read) and audited by the services."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from retention import erase, redact
from smsgw.channels import DEFAULT_CHANNEL, AddressError
from smsgw.http import schema
from smsgw.http.errors import field_error
from smsgw.http.strict_input import ClosedJsonSerializer

COUNTS_HELP = "Rows changed per table (0 for a repeat): never what was removed."


class RedactOutput(serializers.Serializer):
    id = serializers.CharField()
    status = serializers.CharField(help_text="The message's status (unchanged by a redaction).")
    place = serializers.ChoiceField(
        choices=["live", "history"], help_text="Where the message was: the live tables or history."
    )
    counts = serializers.DictField(child=serializers.IntegerField(), help_text=COUNTS_HELP)


class MessageRedactApi(APIView):
    # Erases content the audit trail would otherwise keep, as the Twilio API's Body="" does.
    required_scopes = {"POST": "messages:delete"}

    @extend_schema(
        request=None,
        responses={200: RedactOutput, 404: schema.NOT_FOUND, 409: schema.CONFLICT},
        description=(
            "Removes a final message's content now, before its retention horizon: its body and metadata, and "
            "the recipient's number masked. The record (status, times, timeline) stays. A repeat answers 200."
            " 409 while the message is not yet final (it may still be sent)."
        ),
        summary="Remove a message's content now: body, metadata, the full number (409 before it is sent)",
    )
    def post(self, request, public_id: str):
        done = redact.message_redact(tenant=request.user.tenant, public_id=public_id, actor=str(request.user))
        return Response(
            {"id": done.public_id, "status": done.status, "place": done.place, "counts": done.counts}
        )


class EraseInput(ClosedJsonSerializer):
    to = serializers.CharField(max_length=32, help_text="The person's number (E.164).")


class EraseOutput(serializers.Serializer):
    counts = serializers.DictField(child=serializers.IntegerField(), help_text=COUNTS_HELP)


class RecipientEraseApi(APIView):
    required_scopes = {"POST": "recipients:erase"}

    @extend_schema(
        request=EraseInput,
        responses={200: EraseOutput, 400: schema.BAD_BODY},
        examples=[OpenApiExample("Erase a number", value={"to": "+14155550123"}, request_only=True)],
        description=(
            "Erases one number from the tenant's data (messages and their history, schedules, campaign "
            "rows, replies, notifications): content removed, the number masked, pending messages to it "
            "cancelled. Its opt-out stays in force, so the number is still not sent to. Answers the counts."
        ),
        summary="Erase every trace of one number from the tenant's data; its opt-out stays in force",
    )
    def post(self, request):
        data = EraseInput(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            number = DEFAULT_CHANNEL.address(data.validated_data["to"])
        except AddressError as exc:
            raise field_error("to", str(exc)) from exc
        counts = erase.recipient_erase(tenant=request.user.tenant, number=number, actor=str(request.user))
        return Response({"counts": counts})
