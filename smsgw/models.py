"""Tenants and their API keys. Keys are stored as a public prefix plus a SHA-256 of the secret part."""

from __future__ import annotations

import hashlib
import secrets

from django.db import models
from django.db.models import F, Q

from smsgw.tenancy import priority
from smsgw.tenancy.scopes import FULL_ACCESS, scopes_clean

KEY_PREFIX_LEN = 12
KEY_SECRET_BYTES = 24


def new_facade_account_sid() -> str:
    """The tenant's account SID on the Twilio-compatible API (scheduling.facade): ``AC`` + 32 hex, as
    Twilio's account SIDs are (twilio-oai spec/json/twilio_api_v2010.json, ``^AC[0-9a-fA-F]{32}$``)."""
    return "AC" + secrets.token_hex(16)


# A new tenant's quotas: finite defaults from settings (SMSGW_DEFAULT_*, docs/limits.md), read when the
# tenant is created; 0 stays "unlimited" for an operator who sets it.
def default_daily_message_quota() -> int:
    from django.conf import settings

    return settings.TENANT_DEFAULT_DAILY_MESSAGE_QUOTA


def default_max_pending_scheduled() -> int:
    from django.conf import settings

    return settings.TENANT_DEFAULT_MAX_PENDING_SCHEDULED


def default_send_rate_per_second() -> int:
    from django.conf import settings

    return settings.TENANT_DEFAULT_SEND_RATE_PER_SECOND


def new_callback_signing_key() -> str:
    """The secret that signs the Twilio-shaped status callbacks (``X-Twilio-Signature``): 32 hex, the form
    of a Twilio auth token, so ``RequestValidator(<this key>)`` of the official SDKs checks them."""
    return secrets.token_hex(16)


class Tenant(models.Model):
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=64, unique=True)
    is_active = models.BooleanField(default=True)
    # Sender identity used when a request names none.
    default_from = models.CharField(max_length=32, blank=True)
    # The column keeps its old name until the release after this one (docs/deploy.md, "Rolling out a
    # release": nothing renamed that the previous release still reads).
    sender_pool = models.CharField(max_length=64, blank=True, db_column="messaging_service_sid")
    default_timezone = models.CharField(max_length=64, default="UTC")
    # Quotas (0 = unlimited); a new tenant starts with the finite SMSGW_DEFAULT_* values.
    daily_message_quota = models.PositiveIntegerField(default=default_daily_message_quota)
    max_pending_scheduled = models.PositiveIntegerField(default=default_max_pending_scheduled)
    send_rate_per_second = models.PositiveIntegerField(default=default_send_rate_per_second)
    # A message that becomes due while the daily quota is used up (limits.execution): wait for the next
    # quota window, or fail with reason quota_exceeded.
    quota_exceeded_policy = models.CharField(
        max_length=8,
        choices=[("defer", "defer to the next quota window"), ("fail", "fail (quota_exceeded)")],
        default="defer",
        db_default="defer",
    )
    # API requests per second per API key (limits.ratelimit); empty = SMSGW_API_RATE_PER_SECOND, 0 = none.
    api_rate_per_second = models.PositiveIntegerField(null=True, blank=True)
    webhook_url = models.URLField(blank=True)
    webhook_secret = models.CharField(max_length=128, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Quiet hours (scheduling.dispatch.quiet): a local window [start, end) in the recipient's timezone (the
    # request's, else default_timezone); start > end wraps midnight. Both empty = no quiet hours.
    quiet_hours_start = models.TimeField(null=True, blank=True)
    quiet_hours_end = models.TimeField(null=True, blank=True)
    quiet_hours_exempt_transactional = models.BooleanField(default=False, db_default=False)
    # Destination guards (delivery.guards.destinations, docs/guards.md): the tenant's own country (ISO
    # 3166 alpha-2; empty = from default_from, else SMSGW_DEFAULT_COUNTRY) and the countries it may
    # send to (empty = its own country only); E.164 prefixes (digits) denied on top of the shipped list,
    # and shipped prefixes this tenant is exempt from.
    country = models.CharField(max_length=2, blank=True, default="", db_default="")
    allowed_countries = models.JSONField(default=list, blank=True)
    deny_prefixes = models.JSONField(default=list, blank=True)
    deny_exempt_prefixes = models.JSONField(default=list, blank=True)
    # Velocity guard (delivery.guards.velocity): empty = the SMSGW_VELOCITY_* default, 0 = off.
    velocity_prefix_max = models.PositiveIntegerField(null=True, blank=True)
    velocity_prefix_digits = models.PositiveSmallIntegerField(null=True, blank=True)
    velocity_new_numbers_max = models.PositiveIntegerField(null=True, blank=True)
    # The highest priority its messages may have on the shared account (smsgw.tenancy.priority):
    # transactional = no ceiling (the default), bulk = transactional is refused with a 400 on `priority`.
    max_priority = models.CharField(
        max_length=16,
        choices=priority.CHOICES,
        default=priority.TRANSACTIONAL,
        db_default=priority.TRANSACTIONAL,
    )
    # The Twilio-compatible Messages API (scheduling.facade, docs/coming-from-twilio.md): the account SID
    # the official SDKs are given (with one of the tenant's API keys as the auth token), strict mode (the
    # facade answers exactly Twilio's limits and errors), and the key that signs status callbacks. The
    # signing key is stored as it is, like webhook_secret: an HMAC needs it; API keys stay hashed.
    facade_account_sid = models.CharField(max_length=34, unique=True, default=new_facade_account_sid)
    facade_strict = models.BooleanField(default=False, db_default=False)
    callback_signing_key = models.CharField(max_length=64, default=new_callback_signing_key)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(Q(quiet_hours_start__isnull=True) & Q(quiet_hours_end__isnull=True))
                | (
                    Q(quiet_hours_start__isnull=False)
                    & Q(quiet_hours_end__isnull=False)
                    & ~Q(quiet_hours_start=F("quiet_hours_end"))
                ),
                name="tenant_quiet_hours_window",
                violation_error_message="Quiet hours need both a start and an end, and they must differ.",
            ),
        ]

    def __str__(self) -> str:
        return self.slug


class SenderKind(models.TextChoices):
    NUMBER = "number", "phone number (E.164)"
    SHORT_CODE = "short_code", "short code"
    ALPHANUMERIC = "alphanumeric", "alphanumeric sender id"
    POOL = "pool", "sender pool (messaging service)"


class TenantSender(models.Model):
    """A sender a tenant may send from (smsgw.tenancy.senders, docs/senders.md): assigned by an operator,
    never by the tenant. Every path that names a sender checks it against these rows, so one tenant cannot
    send as another on the shared provider account. A value owned by two tenants is refused unless an
    operator marks it ``shared`` (then every row of that value is shared, and an opt-out received on it
    applies to each of its tenants)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="senders")
    kind = models.CharField(max_length=16, choices=SenderKind.choices)
    # Normalised: E.164 for a number; as given for a short code, an alphanumeric id and a pool id.
    value = models.CharField(max_length=64)
    provider = models.CharField(max_length=32, blank=True, help_text="empty: valid on any provider")
    account = models.CharField(max_length=64, blank=True, help_text="empty: valid on any account")
    shared = models.BooleanField(
        default=False, help_text="set by an operator: the same value is also another tenant's"
    )
    # A number's incoming-message URL, as a Twilio program sets it (the Twilio-compatible
    # IncomingPhoneNumbers resource, scheduling.facade.numbers): replies to this number are forwarded there
    # in Twilio's form and its TwiML answer is sent (inbound.facade_forward). Empty: not forwarded.
    # Database defaults too: rows written by code that predates them (an old migration's models, a
    # process of the previous release during a rolling deploy) are valid.
    sms_url = models.CharField(
        max_length=1024,
        blank=True,
        default="",
        db_default="",
        help_text="SmsUrl (the compatible API): replies to this number are forwarded there",
    )
    sms_method = models.CharField(
        max_length=4,
        choices=[("POST", "POST"), ("GET", "GET")],
        default="POST",
        db_default="POST",
        help_text="SmsMethod",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "tenant sender"
        ordering = ("tenant_id", "value", "provider", "account")
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "value", "provider", "account"], name="tenantsender_unique"
            ),
        ]
        indexes = [models.Index(fields=["value"], name="tenantsender_value")]

    def __str__(self) -> str:
        where = "/".join(p for p in (self.provider, self.account) if p)
        return f"{self.value}{' on ' + where if where else ''} ({self.tenant})"


def _hash_secret(secret: str) -> str:
    # The secret is 192 random bits, so a fast hash is enough (no dictionary to brute-force) and keeps
    # authentication to one indexed lookup plus one SHA-256 per request.
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiKey(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, default="default")
    prefix = models.CharField(max_length=KEY_PREFIX_LEN, unique=True)
    secret_hash = models.CharField(max_length=64)
    # What the key may do (smsgw.tenancy.scopes): "*" for everything; an empty list for nothing.
    scopes = models.JSONField(default=list, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.tenant})"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    @staticmethod
    def split(raw_key: str) -> tuple[str, str] | None:
        """``sk_<prefix>_<secret>`` -> (prefix, secret), or None when malformed."""
        parts = raw_key.split("_")
        if len(parts) != 3 or parts[0] != "sk" or len(parts[1]) != KEY_PREFIX_LEN or not parts[2]:
            return None
        return parts[1], parts[2]

    def matches(self, secret: str) -> bool:
        return secrets.compare_digest(self.secret_hash, _hash_secret(secret))


def api_key_create(
    *, tenant: Tenant, name: str = "default", scopes: list[str] | None = None
) -> tuple[ApiKey, str]:
    """Create a key and return it with the raw key string, which is shown once and never stored.

    ``scopes`` (smsgw.tenancy.scopes; UnknownScope names a bad one): None is full access (``*``), what a
    tenant's first key has always had; the admin and ``api_key_create`` ask for the scopes explicitly, and
    an empty list is a key that may do nothing."""
    scopes = [FULL_ACCESS] if scopes is None else scopes_clean(scopes)
    prefix = secrets.token_hex(KEY_PREFIX_LEN // 2)
    secret = secrets.token_urlsafe(KEY_SECRET_BYTES).replace("_", "x")
    key = ApiKey.objects.create(
        tenant=tenant, name=name, prefix=prefix, secret_hash=_hash_secret(secret), scopes=scopes
    )
    return key, f"sk_{prefix}_{secret}"
