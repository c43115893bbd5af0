"""DRF authentication from ``Authorization: Bearer sk_<prefix>_<secret>``."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from rest_framework import authentication, exceptions

from smsgw.models import ApiKey

# Writing last_used_at on every request would add a write per API call; once a minute is enough to
# answer "is this key still in use".
LAST_USED_RESOLUTION = timedelta(minutes=1)


class ApiPrincipal:
    """request.user for API calls: the tenant and the key that authenticated."""

    is_authenticated = True

    def __init__(self, api_key: ApiKey):
        self.api_key = api_key
        self.tenant = api_key.tenant

    def __str__(self) -> str:
        return f"apikey:{self.api_key.prefix}"


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme != self.keyword or not raw.strip():
            raise exceptions.AuthenticationFailed("Authorization must be 'Bearer <api key>'.")
        parts = ApiKey.split(raw.strip())
        if parts is None:
            raise exceptions.AuthenticationFailed("Malformed API key.")
        prefix, secret = parts
        key = ApiKey.objects.select_related("tenant").filter(prefix=prefix).first()
        if key is None or not key.matches(secret):
            raise exceptions.AuthenticationFailed("Unknown API key.")
        if key.is_revoked:
            raise exceptions.AuthenticationFailed("This API key has been revoked.")
        if not key.tenant.is_active:
            raise exceptions.AuthenticationFailed("This tenant is disabled.")
        now = timezone.now()
        if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
            ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        return ApiPrincipal(key), key

    def authenticate_header(self, request):
        return self.keyword
