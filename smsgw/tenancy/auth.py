"""DRF authentication from ``Authorization: Bearer sk_<prefix>_<secret>``."""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from functools import cache

from django.db import connection, connections
from django.utils import timezone
from rest_framework import authentication, exceptions

from smsgw.models import KEY_PREFIX_LEN, ApiKey, Tenant
from smsgw.runtime import logs_json
from smsgw.runtime.db import fetchone_prepared

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


def _column(field) -> str:
    # A concrete field always has a column (Field.get_attname_column); the stubs allow None for the rest.
    assert field.column is not None
    return field.column


@cache
def _key_query(alias: str, vendor: str):
    """One SELECT for the key and its tenant, built once per database: the same row
    ``ApiKey.objects.select_related("tenant").filter(prefix=...)`` reads, without building the query
    on every request. Returns (sql, converters per column, the key's and the tenant's field names)."""
    connection = connections[alias]
    qn = connection.ops.quote_name
    key_fields = ApiKey._meta.concrete_fields
    tenant_fields = Tenant._meta.concrete_fields
    columns = [f"k.{qn(_column(f))}" for f in key_fields] + [f"t.{qn(_column(f))}" for f in tenant_fields]
    # Only column and table names from the models go into the text; the prefix is a parameter.
    sql = (
        f"SELECT {', '.join(columns)} FROM {qn(ApiKey._meta.db_table)} k "  # noqa: S608
        f"JOIN {qn(Tenant._meta.db_table)} t ON t.{qn(_column(Tenant._meta.pk))} = "
        f"k.{qn(_column(ApiKey._meta.get_field('tenant')))} "
        f"WHERE k.{qn(_column(ApiKey._meta.get_field('prefix')))} = %s"
    )
    # The converters the ORM's compiler would apply (e.g. JSON text -> dict, SQLite's datetime strings).
    converters = []
    for alias_, field in [("k", f) for f in key_fields] + [("t", f) for f in tenant_fields]:
        col = field.get_col(alias_)
        funcs = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
        converters.append((col, funcs))
    return sql, converters, tuple(f.attname for f in key_fields), tuple(f.attname for f in tenant_fields)


def key_lookup(prefix: str) -> ApiKey | None:
    """The key with this prefix, its tenant loaded, straight from the database (never cached: a revoked
    key or a disabled tenant stops working on the next request). Every API request runs it, so on
    PostgreSQL it is a prepared statement (fetchone_prepared)."""
    using = connection.alias
    sql, converters, key_names, tenant_names = _key_query(using, connection.vendor)
    row = fetchone_prepared(sql, [prefix])
    if row is None:
        return None
    values = list(row)
    for i, (col, funcs) in enumerate(converters):
        for func in funcs:
            values[i] = func(values[i], col, connection)
    n_key = len(key_names)
    key = ApiKey.from_db(using, key_names, values[:n_key])
    ApiKey.tenant.field.set_cached_value(key, Tenant.from_db(using, tenant_names, values[n_key:]))
    return key


def key_verify(prefix: str, secret: str) -> ApiKey:
    """The key with this prefix when the secret matches and neither it nor its tenant is switched off;
    else AuthenticationFailed saying why. Marks the key used (once a minute) and names the tenant in the
    request's log lines."""
    key = key_lookup(prefix)
    if key is None or not key.matches(secret):
        raise exceptions.AuthenticationFailed("Unknown API key.")
    if key.is_revoked:
        raise exceptions.AuthenticationFailed("This API key has been revoked.")
    if not key.tenant.is_active:
        raise exceptions.AuthenticationFailed("This tenant is disabled.")
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    logs_json.context_set(tenant=key.tenant.slug)  # every line of this request names its tenant
    return key


# --- the Twilio-compatible API's credentials (scheduling.facade) -------------------------------------
ACCOUNT_SID = re.compile(r"^AC[0-9a-fA-F]{32}$")
KEY_SID = re.compile(r"^SK[0-9a-f]{32}$")


def api_key_sid(key: ApiKey) -> str:
    """The key as a Twilio API key SID (``SK`` + 32 hex): its prefix and a check over it, so the prefix is
    read back from the SID without a stored column."""
    return f"SK{key.prefix}{_sid_check(key.prefix)}"


def _sid_check(prefix: str) -> str:
    return hashlib.blake2s(prefix.encode(), digest_size=10).hexdigest()


def basic_verify(username: str, password: str) -> ApiKey:
    """HTTP Basic credentials as Twilio's SDKs send them: the tenant's account SID (``AC…``) with one of
    its API keys (``sk_<prefix>_<secret>``) as the auth token, or an API key SID (``SK…``, shown by
    ``manage.py tenant_create``) with the key's secret. AuthenticationFailed otherwise."""
    if KEY_SID.match(username):
        prefix = username[2 : 2 + KEY_PREFIX_LEN]
        if _sid_check(prefix) != username[2 + KEY_PREFIX_LEN :]:
            raise exceptions.AuthenticationFailed("Unknown API key.")
        return key_verify(prefix, password)
    if not ACCOUNT_SID.match(username):
        raise exceptions.AuthenticationFailed("The username must be an account SID or an API key SID.")
    parts = ApiKey.split(password)
    if parts is None:
        raise exceptions.AuthenticationFailed("The auth token must be one of the account's API keys.")
    key = key_verify(*parts)
    if key.tenant.facade_account_sid != username:
        raise exceptions.AuthenticationFailed("This API key belongs to another account.")
    return key


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
        key = key_verify(*parts)
        return ApiPrincipal(key), key

    def authenticate_header(self, request):
        return self.keyword
