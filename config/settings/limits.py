"""The tenant limits: API rates, quotas and a new tenant's defaults."""

from __future__ import annotations

from config.settings.broker import CELERY_BROKER_URL
from smsgw.config.env import env_float, env_int, env_secret

# --- tenant limits (limits/) ----------------------------------------------------------------------
# API requests per second per API key when the tenant sets none (Tenant.api_rate_per_second), and the
# burst a full bucket allows, in seconds of that rate. 0 = unlimited.
API_RATE_PER_SECOND = env_int("SMSGW_API_RATE_PER_SECOND", 50, minimum=0)
# What a new tenant starts with (smsgw.models: Tenant's field defaults): finite, so a tenant nobody sized
# cannot fill the shared queue or the provider account on its own; large enough not to bother normal
# use. An operator raises (or, with 0, lifts) each per tenant in the admin; existing tenants keep theirs.
TENANT_DEFAULT_DAILY_MESSAGE_QUOTA = env_int("SMSGW_DEFAULT_DAILY_MESSAGE_QUOTA", 1_000_000, minimum=0)
# 0 (unlimited) by default, unlike the daily quota: its check counts the tenant's pending messages on
# every acceptance, under a lock on the tenant's row, which is work that grows with what is pending
# (docs/limits.md, "Finite defaults for a new tenant"). The daily quota bounds intake instead.
TENANT_DEFAULT_MAX_PENDING_SCHEDULED = env_int("SMSGW_DEFAULT_MAX_PENDING_SCHEDULED", 0, minimum=0)
# A new tenant's send rate, messages per second (0 = unlimited).
TENANT_DEFAULT_SEND_RATE_PER_SECOND = env_int("SMSGW_DEFAULT_SEND_RATE_PER_SECOND", 1_000, minimum=0)
# The burst a full per-key bucket allows, in seconds of SMSGW_API_RATE_PER_SECOND.
API_RATE_BURST_SECONDS = env_float("SMSGW_API_RATE_BURST_SECONDS", 2.0, minimum=0.0)
# Where the per-key buckets live, shared by every web process: a Redis URL, by default the broker's when
# the broker is Redis; anything else ("database", or a RabbitMQ/filesystem broker) = the database.
RATELIMIT_URL = env_secret(
    "SMSGW_RATELIMIT_URL",
    CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis", "rediss")) else "database",
)
