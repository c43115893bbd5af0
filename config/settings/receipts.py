"""Receipts, status look-ups and the tenants' webhooks."""

from __future__ import annotations

from pathlib import Path

from config.settings.environment import DEBUG, EMBEDDED, VAR_DIR
from smsgw.config.env import env_bool, env_float, env_int, env_str

# --- status look-ups for receipts that never came (receipts.lookup) --------------------------------
# Messages still `sent` this long after sending, with no final receipt, are looked up at the provider by
# sid (receipts.lookup); a lookup that still shows no final status is repeated with doubling delays, at
# most STATUS_LOOKUP_MAX_TRIES times.
STATUS_LOOKUP_AFTER_SECONDS = env_int("SMSGW_STATUS_LOOKUP_AFTER_SECONDS", 3600, minimum=1)
# Look-ups of one message before it is left `sent`.
STATUS_LOOKUP_MAX_TRIES = env_int("SMSGW_STATUS_LOOKUP_MAX_TRIES", 5, minimum=1)
# Beat interval of the look-up job, seconds.
STATUS_LOOKUP_INTERVAL_SECONDS = env_float("SMSGW_STATUS_LOOKUP_INTERVAL", 60.0, minimum=0.5)
# Provider requests per second, messages per run, seconds per request and per run: a run never holds a
# `reconcile` worker for long, and stays far below the provider's API concurrency limits.
STATUS_LOOKUP_RATE = env_float("SMSGW_STATUS_LOOKUP_RATE", 5.0, minimum=0.1)
# Messages one look-up run takes.
STATUS_LOOKUP_BATCH_SIZE = env_int("SMSGW_STATUS_LOOKUP_BATCH_SIZE", 100, minimum=1)
# Seconds one look-up request may take.
STATUS_LOOKUP_TIMEOUT_SECONDS = env_float("SMSGW_STATUS_LOOKUP_TIMEOUT_SECONDS", 3.0, minimum=0.1)
# Seconds one look-up run may take.
STATUS_LOOKUP_BUDGET_SECONDS = env_float("SMSGW_STATUS_LOOKUP_BUDGET_SECONDS", 20.0, minimum=1.0)


# --- receipts and tenant webhooks -----------------------------------------------------------------
# Received status callbacks one processing batch takes (receipts.processor).
RECEIPT_BATCH_SIZE = env_int("SMSGW_RECEIPT_BATCH_SIZE", 500, minimum=1)
# A provider callback (status or inbound) larger than this is refused with a 413 before it is read.
RECEIPT_MAX_BODY_BYTES = env_int("SMSGW_RECEIPT_MAX_BODY_BYTES", 16384, minimum=1024)
# How long a receipt whose provider id matches no message is kept trying before it is marked orphaned.
RECEIPT_PENDING_MAX_AGE_SECONDS = env_int("SMSGW_RECEIPT_PENDING_MAX_AGE", 86400, minimum=60)
# Signed callbacks that arrive while the database is unreachable wait here (receipts.spool). It must be a
# persistent disk local to the web process (not tmpfs, not a container's throwaway layer).
RECEIPT_SPOOL_DIR = Path(env_str("SMSGW_RECEIPT_SPOOL_DIR", str(VAR_DIR / "receipt-spool")))
# Tenant webhook URLs may be http:// (not only https://): on in the embedded mode and with DEBUG.
WEBHOOK_ALLOW_HTTP = env_bool("SMSGW_WEBHOOK_ALLOW_HTTP", EMBEDDED or DEBUG)
# Loopback/private/link-local targets are refused (SSRF) unless this is set (tests, local development).
WEBHOOK_ALLOW_PRIVATE = env_bool("SMSGW_WEBHOOK_ALLOW_PRIVATE", False)
# A delivery's whole time (connect, send, answer), wall clock: a server that trickles its answer is cut
# off at this deadline (receipts.webhook_http). Of its answer only the status counts, and at most
# WEBHOOK_MAX_RESPONSE_BYTES of the body are read.
WEBHOOK_TIMEOUT_SECONDS = env_float("SMSGW_WEBHOOK_TIMEOUT_SECONDS", 5.0, minimum=0.1)
# The most of a webhook answer's body that is read.
WEBHOOK_MAX_RESPONSE_BYTES = env_int("SMSGW_WEBHOOK_MAX_RESPONSE_BYTES", 4096, minimum=0)
# A failed delivery is tried again until this long after its first attempt (receipts.webhook_retry,
# docs/webhooks.md "Retries"): a deadline, not a count, so a receiver that is down over a weekend still
# gets its notifications (Stripe retries for up to three days too). Each wait is about as long as the
# time since the first attempt (exponential), at least the base and at most the max delay; the last
# attempt is at the deadline itself, and a failure then dead-letters the delivery.
WEBHOOK_RETRY_WINDOW_SECONDS = env_int("SMSGW_WEBHOOK_RETRY_WINDOW_SECONDS", 3 * 86400, minimum=0)
# The shortest wait between two attempts of a webhook delivery.
WEBHOOK_RETRY_BASE_SECONDS = env_float("SMSGW_WEBHOOK_RETRY_BASE_SECONDS", 5.0, minimum=0.0)
# The longest wait between two attempts of a webhook delivery.
WEBHOOK_RETRY_MAX_DELAY_SECONDS = env_float("SMSGW_WEBHOOK_RETRY_MAX_DELAY_SECONDS", 6 * 3600.0, minimum=1.0)
