"""Retention (docs/retention.md): how long a finished message's content and record are kept, when it
leaves the operational tables for history, and the daily exports."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from config.settings.environment import VAR_DIR
from smsgw.config.env import env_int, env_json_object, env_str

# Days after a message is final before its content goes (the body, the full number, metadata, webhook
# payloads) and before its record goes. Each tenant may set its own (the API's /v1/retention, the admin).
RETENTION_CONTENT_DAYS = env_int("SMSGW_RETENTION_CONTENT_DAYS", 30, minimum=1)
# The second horizon: days before the record itself goes.
RETENTION_RECORD_DAYS = env_int("SMSGW_RETENTION_RECORD_DAYS", 365, minimum=1)
# Hours after a message is final before it leaves the operational tables for history (retention.history).
# It is also how long an idempotency key is remembered: a retried POST with the same key inside this
# window gets the first answer; after it the key is free (docs/retention.md, "Idempotency window").
HISTORY_AFTER_HOURS = env_int("SMSGW_HISTORY_AFTER_HOURS", 48, minimum=1)
# Messages a retention batch moves, redacts or deletes in one transaction: bounded so one batch holds its
# row locks for well under a second and a killed job loses at most one uncommitted batch.
RETENTION_BATCH_SIZE = env_int("SMSGW_RETENTION_BATCH_SIZE", 1000, minimum=1)
# How often the retention job runs (seconds); each run does at most RETENTION_RUN_BATCHES batches of each
# kind, so a large first run is spread over several.
RETENTION_INTERVAL_SECONDS = env_int("SMSGW_RETENTION_INTERVAL_SECONDS", 300, minimum=1)
# The most batches of each kind one retention run does.
RETENTION_RUN_BATCHES = env_int("SMSGW_RETENTION_RUN_BATCHES", 50, minimum=1)

# Daily exports (retention.exports): kept this many days in the export storage, then removed.
EXPORT_KEEP_DAYS = env_int("SMSGW_EXPORT_KEEP_DAYS", 30, minimum=1)
# The local folder the exports are written to (with the default storage).
EXPORT_DIR = env_str("SMSGW_EXPORT_DIR", str(VAR_DIR / "exports"))
# The storage the exports are written through (STORAGES["exports"], docs/exports.md): a local folder by
# default; an operator with object storage names django-storages' backend and its options, e.g.
# SMSGW_EXPORT_STORAGE_BACKEND=storages.backends.s3.S3Storage
# SMSGW_EXPORT_STORAGE_OPTIONS='{"bucket_name": "smsgw-exports", "location": "exports"}'.
_FILESYSTEM = "django.core.files.storage.FileSystemStorage"
# The storage class (default: a local folder, SMSGW_EXPORT_DIR).
EXPORT_STORAGE_BACKEND = env_str("SMSGW_EXPORT_STORAGE_BACKEND", "").strip() or _FILESYSTEM
EXPORT_STORAGE = {
    "BACKEND": EXPORT_STORAGE_BACKEND,
    # The storage's options as a JSON object (default: the local folder's location).
    "OPTIONS": env_json_object(
        "SMSGW_EXPORT_STORAGE_OPTIONS",
        # The local folder; another backend has no such default (its options say where).
        {"location": EXPORT_DIR} if EXPORT_STORAGE_BACKEND == _FILESYSTEM else {},
        # It may hold the storage's credentials (an access key): a secret.
        secret=True,
    ),
}

if RETENTION_RECORD_DAYS < RETENTION_CONTENT_DAYS:
    raise ImproperlyConfigured(
        "SMSGW_RETENTION_RECORD_DAYS must be at least SMSGW_RETENTION_CONTENT_DAYS: a record cannot go "
        "before its content."
    )
