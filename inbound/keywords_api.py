"""The tenant's keyword rules: ``GET``/``PUT /v1/keywords`` (docs/inbound.md, "Keywords and actions").

``PUT`` replaces the whole list: every rule is checked first and a refusal (a 400 naming the field, e.g.
``rules[2].keyword``) changes nothing; an accepted list replaces the old one in one transaction. The
built-in lists (inbound.keywords) are shown beside the tenant's rules, which win over them."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable

from django.db import transaction
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from inbound import keywords
from inbound.models import KeywordAction, KeywordRule
from smsgw.channels import DEFAULT_CHANNEL, AddressError
from smsgw.http.errors import field_error
from smsgw.http.strict_input import ClosedJsonSerializer
from smsgw.tenancy.senders import OwnershipCheck

MAX_RULES = 200
KEYWORD = re.compile(r"^[A-Za-z0-9]{1,32}$")
REPLY_MAX = KeywordRule._meta.get_field("reply").max_length


class KeywordRuleInput(ClosedJsonSerializer):
    keyword = serializers.CharField(
        max_length=64,
        trim_whitespace=True,
        help_text="One word, letters A-Z and digits, up to 32; stored upper case. Matched against the whole "
        "message, trimmed and case-insensitive.",
    )
    action = serializers.ChoiceField(choices=KeywordAction.choices)
    reply = serializers.CharField(
        max_length=REPLY_MAX,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text="Sent back to the contact. Empty: the default text for opt_out, opt_in and help (in the "
        "keyword's language); none for cancel and confirm.",
    )
    number = serializers.CharField(
        max_length=64,
        required=False,
        allow_blank=True,
        help_text="Only for messages to this sender of the tenant (an E.164 number or a messaging service "
        "SID); empty or absent: every one of them.",
    )


class KeywordsInput(ClosedJsonSerializer):
    rules = serializers.ListField(
        child=serializers.DictField(), max_length=MAX_RULES, help_text="The whole list (replaces it)."
    )


class KeywordRuleOutput(serializers.Serializer):
    keyword = serializers.CharField()
    action = serializers.ChoiceField(choices=KeywordAction.choices)
    reply = serializers.CharField()
    number = serializers.CharField()


class BuiltInKeywordsOutput(serializers.Serializer):
    opt_out = serializers.ListField(child=serializers.CharField())
    opt_in = serializers.ListField(child=serializers.CharField())
    help = serializers.ListField(child=serializers.CharField())


class KeywordsOutput(serializers.Serializer):
    rules = KeywordRuleOutput(many=True, help_text="The tenant's rules; they win over the built-in lists.")
    built_in = BuiltInKeywordsOutput(
        help_text="The keywords every tenant has (English, French, Spanish, German)."
    )


EXAMPLE = {
    "rules": [
        {"keyword": "C", "action": "cancel", "reply": "Your appointment is cancelled."},
        {"keyword": "Y", "action": "confirm", "reply": "Thank you, see you then."},
        {"keyword": "ARRET", "action": "opt_out", "reply": "", "number": "+14155550100"},
    ]
}


def owned_sender(raw: str, owns: Callable[[str], bool]) -> str | None:
    """The tenant's sender ``raw`` names (as given, or normalised: "+1 415..." is +1415...), or None."""
    candidates = [raw]
    with contextlib.suppress(AddressError):
        candidates.append(DEFAULT_CHANNEL.sender(raw))
    return next((c for c in candidates if owns(c)), None)


def _number(owns: OwnershipCheck, raw: str, field: str) -> str:
    raw = raw.strip()
    if not raw:
        return ""
    owned = owned_sender(raw, owns.owns)
    if owned is None:
        raise field_error(field, "is not one of this tenant's senders (the operator assigns them)")
    return owned


def _rules(tenant, items: list) -> list[KeywordRule]:
    owns = OwnershipCheck(tenant)
    rules: list[KeywordRule] = []
    seen: set[tuple[str, str]] = set()
    for i, item in enumerate(items):
        where = f"rules[{i}]"
        one = KeywordRuleInput(data=item)
        if not one.is_valid():
            name, messages = next(iter(one.errors.items()))
            raise field_error(f"{where}.{name}", str(messages[0]))
        data = one.validated_data
        keyword = data["keyword"]
        if not KEYWORD.match(keyword):
            raise field_error(f"{where}.keyword", "must be one word of letters A-Z and digits, up to 32")
        keyword = keyword.upper()
        number = _number(owns, data.get("number", ""), f"{where}.number")
        if (keyword, number) in seen:
            raise field_error(f"{where}.keyword", f"{keyword} is already in the list for this number")
        seen.add((keyword, number))
        rules.append(
            KeywordRule(
                tenant=tenant,
                keyword=keyword,
                action=data["action"],
                reply=data.get("reply", ""),
                number=number,
            )
        )
    return rules


def _output(tenant_id: int) -> dict:
    rules = KeywordRule.objects.filter(tenant_id=tenant_id).order_by("number", "keyword")
    return {
        "rules": [
            {"keyword": r.keyword, "action": r.action, "reply": r.reply, "number": r.number} for r in rules
        ],
        "built_in": {
            "opt_out": sorted(keywords.OPT_OUT),
            "opt_in": sorted(keywords.OPT_IN),
            "help": sorted(keywords.HELP),
        },
    }


class KeywordsApi(APIView):
    required_scopes = {"GET": "keywords:read", "PUT": "keywords:write"}

    @extend_schema(
        responses=KeywordsOutput,
        description=(
            "The tenant's own keyword rules (a reply's first word and its action: cancel, confirm, help, ...)"
            " and the built-in lists beside them (STOP and its synonyms opt out, START opts in, HELP); a "
            "tenant's rule wins over a built-in keyword."
        ),
        summary="The tenant's keyword rules and the built-in keywords",
        examples=[
            OpenApiExample(
                "Rules",
                value={
                    "rules": [{**r, "number": r.get("number", "")} for r in EXAMPLE["rules"]],
                    "built_in": {"opt_out": ["ARRET", "STOP"], "opt_in": ["START"], "help": ["HELP"]},
                },
                response_only=True,
            )
        ],
    )
    def get(self, request):
        return Response(_output(request.user.tenant.pk))

    @extend_schema(
        request=KeywordsInput,
        responses=KeywordsOutput,
        description=(
            "Replaces every rule of the tenant at once (send the whole list; `[]` removes them). A keyword is"
            " one word; a rule wins over a built-in keyword. Applies to replies processed from now on."
        ),
        summary="Replace the tenant's keyword rules (the whole list)",
        examples=[OpenApiExample("Cancel, confirm and a French opt-out", value=EXAMPLE, request_only=True)],
    )
    def put(self, request):
        if not isinstance(request.data, dict):
            raise field_error("body", "must be a JSON object")
        data = KeywordsInput(data=request.data)
        data.is_valid(raise_exception=True)
        tenant = request.user.tenant
        rules = _rules(tenant, data.validated_data["rules"])
        with transaction.atomic():
            KeywordRule.objects.filter(tenant=tenant).delete()
            KeywordRule.objects.bulk_create(rules)
        return Response(_output(tenant.pk))
