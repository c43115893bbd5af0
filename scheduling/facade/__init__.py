"""The Twilio-compatible Messages API (docs/coming-from-twilio.md): ``/2010-04-01/Accounts/{AC}/Messages``
as Twilio's official SDKs call it, over the same messages, birth path, timeline and webhooks as ``/v1/``.

``resources`` is Twilio's shapes (SIDs, RFC 2822 dates, statuses, errors), ``requests`` turns a Twilio
request into the services' calls (with the extensions and the strict mode), ``api`` the thin views."""

# The facade is the one package outside delivery/providers/<name>/ that names a provider: it speaks that
# provider's public API to tenants (tests/delivery/providers/test_provider_neutral.py exempts it). The rest
# of the core refers to it through these.
LABEL = "Twilio-compatible API"
STRICT_HELP = (
    f"{LABEL}: answer exactly Twilio's limits and errors (SendAt 15 min to 35 days ahead, only with a "
    "Messaging Service, UTC only, cancel only while scheduled)"
)
