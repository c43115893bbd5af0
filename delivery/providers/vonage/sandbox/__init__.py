"""A standalone sandbox SMS provider that speaks Vonage's SMS API (``POST /sms/json``).

It is a real HTTPS server (aiohttp.web, a throwaway CA and server certificate made at start, ``tls.py``)
that the official ``vonage`` SDK talks to unchanged, by ``rest_host`` only: the SDK always builds
``https://{rest_host}/sms/json``. Each accepted request is split into the parts a handset receives
(``parts.py``), each part gets its own ``message-id`` and its own delivery receipt (``receipts.py``),
optionally signed with the account's signature secret, and ``client-ref`` is echoed in the answer and in
every receipt. Faults (Vonage error statuses, HTTP 5xx, hangs, stored-then-unanswered requests, outages,
per-recipient rules) are configured at start or at runtime through ``/_sandbox/``.

Run it with ``python -m delivery.providers.vonage.sandbox --port 8082``. The generic pieces come from
the sandbox framework (``sandbox``): the listeners (outage ``refuse``), the control handlers and the
callback scheduler with its retries and counters. This package must never import Django.
"""

from delivery.providers.vonage.sandbox.config import DEFAULT_API_KEY, DEFAULT_API_SECRET, VonageConfig

__all__ = ["DEFAULT_API_KEY", "DEFAULT_API_SECRET", "VonageConfig"]
