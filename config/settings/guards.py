"""The destination guards: fraud and SMS pumping (delivery.guards)."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from smsgw.config.env import env_bool, env_int, env_list, env_str

# --- destination guards: fraud and SMS pumping (delivery.guards.destinations, delivery.guards.velocity) -----
# Off only to measure what the guards cost (bench guards) or as an emergency switch: destinations are then
# not checked and nothing is held for review. The suppression list is enforced either way.
GUARDS_ENABLED = env_bool("SMSGW_GUARDS", True)
# A tenant with no country of its own and no E.164 default_from sends within this one (ISO 3166 alpha-2).
DEFAULT_COUNTRY = env_str("SMSGW_DEFAULT_COUNTRY", "US").strip().upper()
if not (len(DEFAULT_COUNTRY) == 2 and DEFAULT_COUNTRY.isalpha()):
    raise ImproperlyConfigured("SMSGW_DEFAULT_COUNTRY must be an ISO 3166 alpha-2 code such as US")
# Denied E.164 prefixes on top of the shipped list (delivery/data/deny_prefixes.txt): a file in the same
# format, and/or a comma-separated list of prefixes.
DENY_PREFIXES_FILE = env_str("SMSGW_DENY_PREFIXES_FILE", "")
# The comma-separated list (the file is SMSGW_DENY_PREFIXES_FILE).
DENY_PREFIXES = env_list("SMSGW_DENY_PREFIXES", [])
# Velocity: fixed windows of this length; a tenant's own values (smsgw.models.Tenant) override the
# maxima. 0 = the rule is off (the default: turn it on per tenant or here, docs/guards.md).
VELOCITY_WINDOW_SECONDS = env_int("SMSGW_VELOCITY_WINDOW_SECONDS", 3600, minimum=60)
# Velocity: the leading digits that make a number range (E.164 without the +).
VELOCITY_PREFIX_DIGITS = env_int("SMSGW_VELOCITY_PREFIX_DIGITS", 7, minimum=2)
# Velocity: the most messages per window a tenant may send into one number range (0 = off).
VELOCITY_PREFIX_MAX = env_int("SMSGW_VELOCITY_PREFIX_MAX", 0, minimum=0)
# Velocity: the most numbers never sent to before a tenant may send to per window (0 = off).
VELOCITY_NEW_NUMBERS_MAX = env_int("SMSGW_VELOCITY_NEW_NUMBERS_MAX", 0, minimum=0)
