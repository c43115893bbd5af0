"""What each provider declares, below every app: its capabilities and its settings.

The provider registry is ``delivery.providers.PROVIDERS`` (one line per provider: name -> package). Each
provider package declares, in its ``__init__`` (which imports neither Django settings nor the SDK):

- ``CAPABILITIES``: a ``Capabilities`` (what the core may ask of it: look-up by recipient, fetch by id,
  validity-period bounds, per-part ids, sender pools and their id pattern, signature schemes);
- ``load_settings(production) -> ProviderSettings``: its Django settings read from the environment
  (``config.settings`` merges them), the problem that stops it running in production, its request
  timeout, and which of its settings are secrets (never logged);
- ``create_adapter(name)``: the ``delivery.providers.base.ProviderAdapter`` for a provider key.

``delivery.providers.declare_all()`` (called by the settings module, so before any app code runs)
declares every registered package's capabilities and settings here. Code that may not import
``delivery`` (``scheduling``, ``smsgw``) asks this module instead: e.g. whether a sender-pool id is one a
provider accepts, or which settings to redact from logs. No provider is named here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ValidityBounds:
    """The validity periods (seconds a provider may keep a message queued) a provider accepts."""

    minimum: int
    maximum: int

    def clamp(self, seconds: int) -> int:
        return min(max(seconds, self.minimum), self.maximum)


@dataclass(frozen=True)
class SenderPools:
    """A provider-side pool of senders that picks the From itself (a messaging service): how its ids look,
    and how to say so in a validation error ("must look like <description>")."""

    pattern: str  # a full-match regular expression
    description: str

    def matches(self, value: str) -> bool:
        return re.fullmatch(self.pattern, value) is not None


@dataclass(frozen=True)
class Capabilities:
    """What a provider can do; the core asks these instead of assuming one provider's behaviour."""

    # Its message list can be searched by recipient, sender and creation window (reconciling an
    # uncertain submission whose provider id was never stored).
    lookup_by_recipient: bool = False
    # One message can be fetched by the provider's id (status look-ups, reconciling a stored id).
    fetch_by_id: bool = False
    # The range of validity periods a submission may carry; None: the provider takes none.
    validity_period: ValidityBounds | None = None
    # A long message gets one provider id per part (and one receipt per part).
    per_part_ids: bool = False
    # Provider-side sender pools (messaging services); None: a sender is always given.
    sender_pools: SenderPools | None = None
    # The longest message body it takes, in characters (the API refuses longer bodies); None: no limit.
    max_body_chars: int | None = None
    # How its callbacks are signed (names of schemes, e.g. "hmac-sha1-url"), strongest last.
    signature_schemes: tuple[str, ...] = ()
    # The request header that names a signing key the callback was signed with, when the provider has
    # such keys; and the setting that holds them here (both named in a 503 and its log line).
    signing_key_header: str = ""
    signing_keys_setting: str = ""
    # The media types its callbacks (receipts, inbound messages) are posted as; another is a 415, before
    # the signature is checked. Empty: any.
    callback_content_types: tuple[str, ...] = ()
    # How it is reached: ``"request"`` (an HTTP request per submission; receipts and inbound messages come
    # back as webhooks to /receipts/<name>/ and /inbound/<name>/) or ``"session"`` (a bound session that
    # carries the submissions, the receipts and the inbound messages, as SMPP does). Only ``"request"``
    # runs today: a session needs a process role that holds the bind, which the house has not placed yet.
    transport: str = "request"
    # It posts inbound messages (replies, STOP) to /inbound/<name>/; without, that endpoint answers 404.
    inbound: bool = False


@dataclass(frozen=True)
class ProviderSettings:
    """What a provider package reads from the environment (``load_settings``)."""

    values: Mapping[str, object]  # Django settings, by name
    problem: str | None = None  # why the provider cannot run with these values (fatal in production)
    request_timeout: float = 10.0  # seconds one submission may take (the sending lease must be longer)
    request_timeout_setting: str = ""  # the setting that sets it (named in errors)
    secret_settings: tuple[str, ...] = ()  # settings whose values never appear in a log line
    redact_patterns: tuple[tuple[str, str], ...] = field(default=())  # (regex, replacement) for log lines
    # Requests one provider account may have in progress at once, over all its clients (every process on
    # every host); past it the provider refuses requests. None: the provider states no such limit. The
    # default of SMSGW_ACCOUNT_CONCURRENT_REQUESTS (smsgw.config.concurrency).
    concurrent_requests: int | None = None


# The transports a provider may declare: a request per submission. ("session", a bound session such as
# SMPP's, comes with the process role that holds it.)
TRANSPORTS = ("request",)

_capabilities: dict[str, Capabilities] = {}
_settings: dict[str, ProviderSettings] = {}
_redactions: tuple[tuple[re.Pattern, str], ...] = ()


def _compile_redactions() -> None:
    global _redactions
    _redactions = tuple((re.compile(p), r) for s in _settings.values() for p, r in s.redact_patterns)


def declare(name: str, capabilities: Capabilities, provider_settings: ProviderSettings | None = None) -> None:
    if capabilities.transport not in TRANSPORTS:
        raise ValueError(
            f"provider {name!r}: transport {capabilities.transport!r} is not one this gateway runs "
            f"({', '.join(TRANSPORTS)}; a bound session needs a process role that holds it)"
        )
    _capabilities[name] = capabilities
    if provider_settings is not None:
        _settings[name] = provider_settings
    _compile_redactions()


def forget(name: str) -> None:
    """Remove a declaration (a test's own provider)."""
    _capabilities.pop(name, None)
    _settings.pop(name, None)
    _compile_redactions()


def declared() -> dict[str, Capabilities]:
    return dict(_capabilities)


def capabilities(name: str) -> Capabilities:
    try:
        return _capabilities[name]
    except KeyError:
        raise LookupError(f"no provider {name!r} is declared ({', '.join(sorted(_capabilities))})") from None


def sender_pool_problem(value: str) -> str | None:
    """Why ``value`` is not a sender-pool id of any declared provider, or None when one accepts it."""
    pools = [c.sender_pools for c in _capabilities.values() if c.sender_pools is not None]
    if any(pool.matches(value) for pool in pools):
        return None
    if not pools:
        return "no provider has sender pools"
    return "must look like " + " or ".join(dict.fromkeys(pool.description for pool in pools))


def body_max_length() -> int | None:
    """The longest body every declared provider takes (characters), or None when none declares one."""
    limits = [c.max_body_chars for c in _capabilities.values() if c.max_body_chars is not None]
    return min(limits) if limits else None


def is_sender_pool(value: str) -> bool:
    return sender_pool_problem(value) is None


def secret_settings() -> tuple[str, ...]:
    return tuple(name for s in _settings.values() for name in s.secret_settings)


def redact_patterns() -> tuple[tuple[re.Pattern, str], ...]:
    """(compiled regex, replacement) of every provider's log redactions."""
    return _redactions


def longest_request_timeout(default: float = 10.0) -> float:
    return max((s.request_timeout for s in _settings.values()), default=default)


def concurrent_requests(names: set[str]) -> tuple[int, str] | None:
    """The lowest concurrent-request limit the providers ``names`` declare, and the provider declaring
    it; None when none of them declares one."""
    limits = [
        (s.concurrent_requests, name)
        for name in sorted(names)
        if (s := provider_settings(name)) is not None and s.concurrent_requests is not None
    ]
    return min(limits) if limits else None


def provider_settings(name: str) -> ProviderSettings | None:
    return _settings.get(name)


def all_settings() -> tuple[ProviderSettings, ...]:
    return tuple(_settings.values())


def settings_in_use(names: set[str]) -> tuple[ProviderSettings, ...]:
    """The declared settings of the providers ``names`` (unknown names are skipped: the registry reports
    them where they are used)."""
    return tuple(s for name in sorted(names) if (s := provider_settings(name)) is not None)
