"""A standalone sandbox SMS provider that speaks Twilio's Messages API (2010-04-01).

It is a real HTTP server (aiohttp.web) that the official twilio SDK talks to unchanged, by base URL
only. It keeps every accepted message in memory with Twilio's lifecycle (queued | accepted -> sent ->
delivered | undelivered | failed, derived from the clock; ``lifecycle.py``), per-sender queues,
ValidityPeriod, opt-outs and Twilio-ordered, signed status callbacks, and injects faults (latency, 5xx,
429, 400, timeouts, accepted-then-hung requests, callback faults) configured at start or at runtime
through ``/_sandbox/``.

Run it with ``python -m delivery.providers.twilio.sandbox --port 8081``. It is built on the sandbox
framework (``sandbox``: the listeners, the control handlers, the callback scheduler, the journal, the
process launcher); the adapter never imports it. This package must never import Django.
"""

from delivery.providers.twilio.sandbox.server import (
    DEFAULT_ACCOUNT_SID,
    DEFAULT_AUTH_TOKEN,
    SandboxConfig,
    build_app,
    main,
)

__all__ = ["DEFAULT_ACCOUNT_SID", "DEFAULT_AUTH_TOKEN", "SandboxConfig", "build_app", "main"]
