"""Services raise smsgw.domain_errors; the API's exception handler is where they become HTTP."""

import ast
from pathlib import Path

import pytest

from smsgw import domain_errors
from smsgw.http.errors import api_exception_handler

ROOT = Path(__file__).resolve().parents[3]
APP_PACKAGES = ("config", "reporting", "smsgw", "scheduling", "delivery", "receipts")
# The HTTP edge: DRF views (modules named *api), the authentication, permission (scope), throttle and
# pagination classes, the parsers and request checks, the schema, the error handler and the settings
# that name them.
EDGE_MODULES = frozenset(
    {
        "auth",
        "boundary",
        "errors",
        "negotiation",
        "outputs",  # scheduling/messages/outputs.py: the messages API's output serializers
        "pagination",
        "permissions",
        "ratelimit",
        "schema",
        "settings",
        "strict_input",
        "webhook_schema",  # receipts/webhook_schema.py: the notifications' payloads for the OpenAPI schema
    }
)


def _imports_rest_framework(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):  # function bodies too
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "rest_framework" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rest_framework":
            return True
    return False


def test_only_the_http_edge_imports_rest_framework():
    offenders = [
        str(path.relative_to(ROOT))
        for package in APP_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
        and "sandbox" not in path.parts  # a provider's emulator is its own web app, not the API
        and not path.stem.endswith("api")
        and path.stem not in EDGE_MODULES
        and _imports_rest_framework(path)
    ]
    assert offenders == []


@pytest.mark.parametrize(
    ("error", "status", "body", "retry_after"),
    [
        (domain_errors.NotFoundError("No message with this id."), 404, {"code": "not_found"}, None),
        (
            domain_errors.ConflictError("Too late.", current_status="sent"),
            409,
            {"code": "conflict", "status": "sent"},
            None,
        ),
        (domain_errors.IdempotencyMismatch("Reused."), 422, {"code": "idempotency_key_reused"}, None),
        (
            domain_errors.QuotaExceeded("Over.", extra={"quota": "daily_message_quota"}, retry_after=7),
            429,
            {"code": "quota_exceeded", "quota": "daily_message_quota"},
            "7",
        ),
        (
            domain_errors.QuotaExceeded("Over.", extra={"quota": "max_pending_scheduled"}, retry_after=None),
            429,
            {"code": "quota_exceeded", "quota": "max_pending_scheduled"},
            None,
        ),
        (domain_errors.RateLimited("Slow down.", retry_after=3), 429, {"code": "rate_limited"}, "3"),
        (
            domain_errors.DatabaseUnavailable("Down.", retry_after=5, extra={"retry_after": 5}),
            503,
            {"code": "database_unavailable", "retry_after": 5},
            "5",
        ),
    ],
)
def test_each_domain_error_is_answered_with_its_status_code_and_retry_after(error, status, body, retry_after):
    response = api_exception_handler(error, {})
    assert response.status_code == status
    assert response.data["error"] == {**body, "message": error.message}
    assert response.headers.get("Retry-After") == retry_after
    # The problem details around the envelope (RFC 9457).
    problem = response.data
    assert response.content_type == "application/problem+json"  # set when rendered
    assert (problem["status"], problem["code"], problem["detail"]) == (status, body["code"], error.message)
    assert problem["type"] == f"/docs/errors/#{body['code']}" and problem["title"]


def test_an_invalid_input_reads_like_a_serializers_error_naming_the_field():
    response = api_exception_handler(domain_errors.InvalidInput("to", "not a phone number"), {})
    assert response.status_code == 400
    assert response.data["error"] == {
        "code": "invalid",
        "message": "to: not a phone number",
        "fields": {"to": ["not a phone number"]},
    }
    assert response.data["errors"] == [{"field": "to", "code": "invalid", "detail": "not a phone number"}]


def test_each_field_error_keeps_its_own_code():
    from rest_framework import serializers

    class Input(serializers.Serializer):
        to = serializers.CharField()
        kind = serializers.ChoiceField(choices=["a", "b"])
        name = serializers.CharField(max_length=3)

    form = Input(data={"kind": "c", "name": "long"})
    assert not form.is_valid()
    response = api_exception_handler(serializers.ValidationError(form.errors), {})
    codes = {e["field"]: e["code"] for e in response.data["errors"]}
    assert codes == {"to": "required", "kind": "invalid_choice", "name": "max_length"}
    # DRF's choice message repeats the value given; the API's does not.
    kind = next(e for e in response.data["errors"] if e["field"] == "kind")
    assert '"c"' not in kind["detail"] and "allowed values" in kind["detail"]
    assert set(response.data["error"]["fields"]) == {"to", "kind", "name"}
    reasoned = api_exception_handler(domain_errors.InvalidInput("to", "opted out", reason="suppressed"), {})
    assert reasoned.data["errors"] == [{"field": "to", "code": "suppressed", "detail": "opted out"}]


def test_a_subclass_takes_its_nearest_bases_status():
    class Gone(domain_errors.NotFoundError):
        code = "gone"

    response = api_exception_handler(Gone("It went."), {})
    assert (response.status_code, response.data["error"]["code"]) == (404, "gone")


def test_djangos_own_404_and_permission_denied_are_answered_in_the_envelope_not_a_500():
    from django.core.exceptions import PermissionDenied
    from django.http import Http404

    missing = api_exception_handler(Http404("No such message."), {})
    assert (missing.status_code, missing.data["error"]) == (
        404,
        {"code": "not_found", "message": "No such message."},
    )
    refused = api_exception_handler(PermissionDenied("Not yours."), {})
    assert (refused.status_code, refused.data["error"]["code"]) == (403, "permission_denied")
