"""The scope check of every ``/v1`` operation (REST_FRAMEWORK["DEFAULT_PERMISSION_CLASSES"]).

Each APIView declares the scope of each of its methods::

    class MessagesApi(APIView):
        required_scopes = {"GET": "messages:read", "POST": "messages:send"}

A method the view does not declare is refused (403), never let through: a new view or a new method that
forgets its scope fails closed, and tests/smsgw/tenancy/test_permissions.py fails for it. HEAD is
GET's; OPTIONS (DRF's metadata, no tenant data) needs an authenticated key and a view that declares
scopes, no scope of its own."""

from __future__ import annotations

from rest_framework import exceptions, permissions

from smsgw.tenancy.scopes import scopes_grant

FREE_METHODS = frozenset({"OPTIONS"})


class MissingScope(exceptions.PermissionDenied):
    """403 ``missing_scope``; the envelope's ``required_scope`` names the scope (none when the operation
    declares no scope at all, which is refused as well)."""

    default_code = "missing_scope"

    def __init__(self, scope: str | None, operation: str) -> None:
        if scope is None:
            detail = f"{operation} declares no scope, so no API key may call it."
        else:
            detail = f"This API key lacks the scope {scope!r}, which {operation} needs."
        super().__init__(detail, code=self.default_code)
        self.required_scope = scope
        self.envelope_extra = {"required_scope": scope} if scope else {}


def operation_scope(view, method: str) -> str | None:
    """The scope the view declares for the method (HEAD is GET's), None when it declares none."""
    declared = getattr(view, "required_scopes", None) or {}
    method = method.upper()
    return declared.get("GET" if method == "HEAD" else method)


class HasRequiredScope(permissions.BasePermission):
    """The authenticated key holds the scope the view declares for the request's method."""

    def has_permission(self, request, view) -> bool:
        key = getattr(request.user, "api_key", None)
        if key is None:  # IsAuthenticated, before this class, answers 401 for a request without a key
            return False
        if request.method in FREE_METHODS and getattr(view, "required_scopes", None):
            return True
        if getattr(view, request.method.lower(), None) is None:
            return True  # a method the view does not have: DRF answers 405, which changes nothing
        scope = operation_scope(view, request.method)
        if scope is None or not scopes_grant(key.scopes, scope):
            raise MissingScope(scope, f"{request.method} {request.path}")
        return True
