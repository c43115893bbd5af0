"""The tenant's routes, read-only (rules are edited in the admin): `GET /v1/routes` lists every rule that
applies to the tenant in the order they are tried; `GET /v1/routes/resolve?to=...` answers the route a
message to that number would get now (docs/routing.md)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from delivery.providers import DEFAULT_PROVIDER, PROVIDERS
from delivery.routing import selectors
from delivery.routing.rules import DEFAULT_ROUTE, Rule
from scheduling.models import Priority
from smsgw.channels import DEFAULT_CHANNEL, AddressError
from smsgw.config.routes import LegSpec
from smsgw.http import schema, strict_input
from smsgw.http.errors import field_error

SOURCES = ("tenant", "all", "settings")


class LegOutput(serializers.Serializer):
    provider = serializers.CharField()
    account = serializers.CharField(help_text="Empty: the provider's configured account.")
    sender = serializers.CharField(help_text="Empty: the message's own sender (its `from` or sender pool).")
    weight = serializers.IntegerField(
        help_text="The first leg tried is drawn among those of weight above 0, in proportion to their "
        "weights; the others follow in this order. 0: a standby, reached only by failover."
    )


class RuleOutput(serializers.Serializer):
    route = serializers.CharField(help_text="`<source>:<name>`, as a routed message names it.")
    # The serializer's metaclass pops declared fields off the class, so this never shadows Field.source;
    # the stubs cannot know that (rest_framework/serializers.py, SerializerMetaclass._get_declared_fields).
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=SOURCES,
        help_text="`tenant`: this tenant's own; `all`: for all tenants; `settings`: the gateway's defaults.",
    )
    name = serializers.CharField()
    country = serializers.CharField(help_text="ISO 3166 alpha-2 of the destination; empty: any.")
    prefix = serializers.CharField(help_text="E.164 prefix of the destination; empty: any.")
    priority = serializers.CharField(help_text="`transactional` or `bulk`; empty: any.")
    legs = LegOutput(many=True)


class DefaultRouteOutput(serializers.Serializer):
    route = serializers.CharField(help_text="`default`.")
    legs = LegOutput(many=True)


class RoutesOutput(serializers.Serializer):
    results = RuleOutput(many=True, help_text="In the order they are tried; the first that matches routes.")
    default = DefaultRouteOutput(help_text="What a message no rule matches goes through.")


class ResolutionOutput(serializers.Serializer):
    to = serializers.CharField(help_text="The number, as E.164.")
    country = serializers.CharField(help_text="Its ISO 3166 alpha-2 country; empty when unknown.")
    priority = serializers.ChoiceField(choices=Priority.choices)
    route = serializers.CharField(help_text="The matching rule (`<source>:<name>`), or `default`.")
    legs = LegOutput(many=True)


# The examples name the registered providers (no provider is named outside its package).
_FIRST, _SECOND = (*PROVIDERS, DEFAULT_PROVIDER)[:2]
_LEGS_EXAMPLE = [
    {"provider": _SECOND, "account": "", "sender": "ACME", "weight": 1},
    {"provider": _FIRST, "account": "", "sender": "+14155550100", "weight": 0},
]
LIST_EXAMPLE = OpenApiExample(
    "A tenant rule, then the gateway's",
    value={
        "results": [
            {
                "route": "tenant:gb-bulk",
                "source": "tenant",
                "name": "gb-bulk",
                "country": "GB",
                "prefix": "",
                "priority": "bulk",
                "legs": _LEGS_EXAMPLE,
            },
            {
                "route": "settings:us",
                "source": "settings",
                "name": "us",
                "country": "US",
                "prefix": "",
                "priority": "",
                "legs": [{"provider": _FIRST, "account": "", "sender": "", "weight": 1}],
            },
        ],
        "default": {
            "route": "default",
            "legs": [{"provider": _FIRST, "account": "", "sender": "", "weight": 1}],
        },
    },
    response_only=True,
)
RESOLVE_EXAMPLE = OpenApiExample(
    "A GB number in the bulk class",
    value={
        "to": "+447400123456",
        "country": "GB",
        "priority": "bulk",
        "route": "tenant:gb-bulk",
        "legs": _LEGS_EXAMPLE,
    },
    response_only=True,
)
RESOLVE_PARAMS = frozenset(("to", "priority"))


def _legs(legs: tuple[LegSpec, ...]) -> list[dict]:
    return [
        {"provider": leg.provider, "account": leg.account, "sender": leg.sender, "weight": leg.weight}
        for leg in legs
    ]


def _rule(rule: Rule) -> dict:
    source, _, name = rule.label.partition(":")
    return {
        "route": rule.label,
        "source": source,
        "name": name,
        "country": rule.country,
        "prefix": rule.prefix,
        "priority": rule.priority,
        "legs": _legs(rule.legs),
    }


class RoutesApi(APIView):
    required_scopes = {"GET": "routes:read"}

    @extend_schema(
        # No query parameter is taken: any is a 400 naming it (as an unknown filter of a list would be).
        responses={200: RoutesOutput, 400: schema.BAD_QUERY},
        examples=[LIST_EXAMPLE],
        description=(
            "The rules that choose a message's provider, account and sender (the tenant's, then the "
            "gateway's), in the order they are tried, each with its legs (failover order) and what it "
            "matches."
        ),
        summary="The routing rules that apply to this tenant, in the order they are tried",
    )
    def get(self, request):
        strict_input.query_params_check(request.query_params, frozenset())
        rules = selectors.routes_list(request.user.tenant.pk)
        return Response(
            {
                "results": [_rule(rule) for rule in rules],
                "default": {"route": DEFAULT_ROUTE, "legs": _legs(selectors.default_legs())},
            }
        )


class RouteResolveApi(APIView):
    required_scopes = {"GET": "routes:read"}

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "to",
                str,
                required=True,
                description="The destination, E.164 (`+` as `%2B`). Else 400.",
                examples=[OpenApiExample("A GB number", value="+447400123456")],
            ),
            OpenApiParameter(
                "priority",
                str,
                enum=Priority.values,
                description="The message's priority class (default `transactional`, as a message's).",
            ),
        ],
        responses=ResolutionOutput,
        examples=[RESOLVE_EXAMPLE],
        description=(
            "A dry run: the rule and legs a message to `to` with `priority` would be routed by now. Nothing "
            "is sent or stored."
        ),
        summary="The route a message to this number would get now",
    )
    def get(self, request):
        params = request.query_params
        strict_input.query_params_check(params, RESOLVE_PARAMS)
        if not params.get("to"):
            raise field_error("to", "required")
        try:
            to = DEFAULT_CHANNEL.address(params["to"])
        except AddressError as exc:
            raise field_error("to", str(exc)) from exc
        priority = params.get("priority", Priority.TRANSACTIONAL)
        if priority not in Priority.values:
            raise field_error("priority", f"must be one of {', '.join(Priority.values)}")
        found = selectors.route_resolve(request.user.tenant.pk, to=to, priority=priority)
        return Response(
            {
                "to": to,
                "country": found.country,
                "priority": priority,
                "route": found.route,
                "legs": _legs(found.legs),
            }
        )
