"""docs/errors.md lists every error code the API can answer (an error's ``type`` links to its entry), and
every field error code: the codes are found in the code, not copied from the page."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from rest_framework import exceptions, serializers

from smsgw import domain_errors
from smsgw.http import boundary, problems
from smsgw.runtime import gunicorn_errors
from smsgw.tenancy.permissions import MissingScope
from smsgw.values.timeutil import TimeResolutionError

ROOT = Path(__file__).resolve().parents[3]
# The builders of the edge's own refusals, whose ``code=`` is an answered code.
EDGE_BUILDERS = ("envelope", "_field_error", "callback_error", "problem")
PAGE = ROOT / "docs" / "errors.md"
APP_PACKAGES = ("smsgw", "scheduling", "delivery", "receipts", "inbound", "reporting", "retention", "config")
# The DRF exceptions the API lets through as they are (ParseError and ValidationError become
# malformed_request and invalid: smsgw.http.errors; the throttle raises the domain's RateLimited, and the
# content negotiation never answers NotAcceptable).
DRF_ANSWERED = (
    exceptions.AuthenticationFailed,
    exceptions.NotAuthenticated,
    exceptions.PermissionDenied,
    exceptions.NotFound,
    exceptions.MethodNotAllowed,
    exceptions.UnsupportedMediaType,
    exceptions.APIException,
    MissingScope,
)


def _sources():
    for package in APP_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = set(path.parts)
            if not parts & {"tests", "migrations", "sandbox", "facade"}:  # the facade answers Twilio's codes
                yield path, ast.parse(path.read_text(), filename=str(path))


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _literal_keywords(name: str, callees: tuple[str, ...]) -> set[str]:
    """Every string literal passed as the keyword ``name`` to a call of one of ``callees``."""
    found = set()
    for _, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _called(node) in callees:
                for kw in node.keywords:
                    if (
                        kw.arg == name
                        and isinstance(kw.value, ast.Constant)
                        and isinstance(kw.value.value, str)
                    ):
                        found.add(kw.value.value)
    return found


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _anchors(section: str) -> set[str]:
    text = PAGE.read_text()
    start = text.index(f"## {section}")
    end = text.find("\n## ", start + 1)
    return set(re.findall(r"\{#([a-z_]+)\}", text[start : end if end > 0 else None]))


def _field_table_codes() -> set[str]:
    text = PAGE.read_text()
    table = text[text.index("## Field error codes") :]
    return {
        code
        for line in table.splitlines()
        if line.startswith("| `")
        for code in re.findall(r"`([a-z_]+)`", line.split("|")[1])
    }


def raisable_codes() -> set[str]:
    import django.apps

    for app in django.apps.apps.get_app_configs():  # every app's modules, so that every subclass is loaded
        __import__(app.name)
    codes = {cls.code for cls in [domain_errors.DomainError, *_subclasses(domain_errors.DomainError)]}
    codes |= {cls.default_code for cls in DRF_ANSWERED}
    codes |= set(boundary._CODES.values()) | set(gunicorn_errors._CODES.values())
    codes |= {"invalid", "malformed_request"}
    # code="..." given to the edge's builders (boundary.envelope, receipts' callback_error, ...).
    codes |= _literal_keywords("code", EDGE_BUILDERS)
    return codes


def test_every_code_the_api_can_answer_is_in_the_registry():
    missing = raisable_codes() - set(problems.TITLES)
    assert not missing, f"add a title in smsgw.http.problems.TITLES and an entry in docs/errors.md: {missing}"


def test_every_code_of_the_registry_has_an_entry_on_the_page():
    assert set(problems.TITLES) == _anchors("Error codes")


def field_codes() -> set[str]:
    """DRF's codes for the field classes the API's serializers use, the domain's reasons and time codes."""
    used = set()
    for _, tree in _sources():
        for node in ast.walk(tree):
            named = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            if named and node.value.id == "serializers" and hasattr(serializers, node.attr):
                used.add(getattr(serializers, node.attr))
    codes = set()
    for cls in [serializers.Serializer, serializers.ListSerializer, *used]:
        if isinstance(cls, type) and issubclass(cls, serializers.Field):
            for klass in cls.__mro__:
                codes |= set(getattr(klass, "default_error_messages", None) or {})
    codes |= set(TimeResolutionError.CODES.values())
    codes |= {r for r in _literal_keywords("reason", ("InvalidInput",)) if r}
    return codes


def test_every_field_code_is_on_the_page():
    missing = field_codes() - _field_table_codes()
    assert not missing, f"add a row to docs/errors.md, Field error codes: {missing}"
