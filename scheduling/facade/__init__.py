"""The Twilio-compatible Messages API (docs/coming-from-twilio.md): ``/2010-04-01/Accounts/{AC}/Messages``
as Twilio's official SDKs call it, over the same messages, birth path, timeline and webhooks as ``/v1/``.

``resources`` is Twilio's shapes (SIDs, RFC 2822 dates, statuses, errors), ``requests`` turns a Twilio
request into the services' calls (with the extensions and the strict mode), ``api`` the thin views."""
