"""The Django project proper: apps, middleware, templates, static files, passwords, the operator console
and the API."""

from __future__ import annotations

from pathlib import Path

from config.settings.environment import PRODUCTION, VAR_DIR
from config.settings.retention import EXPORT_STORAGE
from smsgw.config.env import env_float, env_int, env_str

INSTALLED_APPS = [
    "config.admin_site.ConsoleAdminConfig",  # django.contrib.admin, opening on the health page
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "django_celery_beat",
    "axes",  # admin login lockout (see "admin" below)
    "smsgw",
    "scheduling",
    "delivery",
    "receipts",
    "inbound",  # what recipients send back: above receipts (it uses the webhook outbox)
    "scheduling.limits",  # the tenant limits: quotas, API rates, and the quota's release gate
    "smsgw.observability",
    "reporting",  # the top floor: reports that read every app's models
    "retention",  # beside reporting: it acts on every app's tables (history, redaction, export)
    # The composition root: the admin, and the stages' hand-offs filled when Django is ready (config.wiring).
    "config",
]

MIDDLEWARE = [
    # Provider callbacks (/receipts/, /inbound/) leave here for a chain of only the entries below they use
    # (smsgw.http.callback_chain): none of the sessions, CSRF, auth, messages, axes or whitenoise.
    "smsgw.http.callback_chain.CallbackChainMiddleware",
    # Rate and latency by route, method and status class (smsgw.http.request_metrics), in both chains:
    # outside every entry below, so every early refusal is timed too.
    "smsgw.http.request_metrics.RequestMetricsMiddleware",
    # A Request-Id on every answer and in every log line of the request (smsgw.http.request_id): outside
    # every other entry (in both chains), so that their answers carry it too.
    "smsgw.http.request_id.RequestIdMiddleware",
    "smsgw.http.boundary.ApiBoundaryMiddleware",  # it turns every /v1/ and /receipts/ error into JSON
    "scheduling.facade.errors.FacadeErrorsMiddleware",  # and every facade error into the facade's shape
    "django.middleware.security.SecurityMiddleware",
    # Right after security (HTTPS redirect first): serves /static/ in every mode, DEBUG or not.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "scheduling.limits.ratelimit.RateLimitHeadersMiddleware",
    "smsgw.runtime.logs_json.LogContextMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires: it answers a locked-out login
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]


DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's standard validators: operators' passwords (createsuperuser, the admin's user and password
# forms) are at least 12 characters, not close to the username or email, not on Django's list of 20,000
# common passwords, and not all digits.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": env_int("SMSGW_ADMIN_PASSWORD_MIN_LENGTH", 12, minimum=8)},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
# Where collectstatic puts the admin's CSS, JS and icons (served by WhiteNoise, below).
STATIC_ROOT = Path(env_str("SMSGW_STATIC_ROOT", str(VAR_DIR / "static")))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns at start-up about a missing one
# Static files (the admin's CSS, JS and icons) are served by WhiteNoise in every mode, DEBUG or not.
# It also finds them in the installed apps, so the embedded run and the tests need no collectstatic.
# Production links the compressed, content-hashed copies that `collectstatic` put in STATIC_ROOT
# (smsgw-web.service runs it; cached for a year), and falls back to the plain files where it did
# not run (smsgw.http.static), so the admin never breaks on a missing manifest.
WHITENOISE_USE_FINDERS = True
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "smsgw.http.static.ForgivingManifestStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
    # The daily exports (retention.exports; config.settings.retention says how to point it elsewhere).
    "exports": EXPORT_STORAGE,
}

# --- admin (the operator console) -----------------------------------------------------------------
# Logins: after SMSGW_ADMIN_LOGIN_FAILURES failed attempts for one username from one address, that
# pair is locked out for SMSGW_ADMIN_LOCKOUT_MINUTES (django-axes; a successful login resets the count);
# after SMSGW_ADMIN_LOGIN_FAILURES_PER_USER failed attempts for one username from all addresses together,
# that username is (a guess spread over many addresses; smsgw.console.login).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Failed attempts for one username from one address before that pair is locked out (django-axes).
AXES_FAILURE_LIMIT = env_int("SMSGW_ADMIN_LOGIN_FAILURES", 5, minimum=1)
# How long a lockout lasts, minutes.
AXES_COOLOFF_TIME = env_float("SMSGW_ADMIN_LOCKOUT_MINUTES", 15.0) / 60  # hours
# Failed attempts for one username from all addresses together before that username is locked out.
ADMIN_LOGIN_FAILURES_PER_USER = env_int(
    "SMSGW_ADMIN_LOGIN_FAILURES_PER_USER", max(20, 4 * AXES_FAILURE_LIMIT), minimum=AXES_FAILURE_LIMIT
)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "username"]  # in this order: LoginLockoutHandler
AXES_HANDLER = "smsgw.console.login.LoginLockoutHandler"
AXES_CLIENT_IP_CALLABLE = "smsgw.console.login.client_ip"  # the client's address behind the TLS proxy
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False  # its own log lines carry the username and address on every attempt
# An admin session ends after SMSGW_ADMIN_SESSION_IDLE_SECONDS without a request: each request moves
# the expiry (SESSION_SAVE_EVERY_REQUEST). The tenant API does not use sessions.
SESSION_COOKIE_AGE = env_int("SMSGW_ADMIN_SESSION_IDLE_SECONDS", 1800, minimum=60)
SESSION_SAVE_EVERY_REQUEST = True
SESSION_COOKIE_HTTPONLY = True
# Admin search: a number written without a country code ("(415) 555-0123") is read in this region.
ADMIN_PHONE_REGION = env_str("SMSGW_ADMIN_PHONE_REGION", "US").upper()

# --- API ------------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["smsgw.tenancy.auth.ApiKeyAuthentication"],
    # Every operation declares the scope it needs (required_scopes); one that does not is refused.
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "smsgw.tenancy.permissions.HasRequiredScope",
    ],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "smsgw.http.negotiation.JsonWhateverTheAccept",
    "DEFAULT_PARSER_CLASSES": ["smsgw.http.boundary.StrictJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "smsgw.http.errors.api_exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["scheduling.limits.ratelimit.ApiKeyRateThrottle"],
    "UNAUTHENTICATED_USER": None,
}
# Adds the error responses every operation can give (401, 429, 400, 404, 413, 415) to the schema.
REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"] = "smsgw.http.schema.ApiAutoSchema"
SPECTACULAR_SETTINGS = {
    "TITLE": "smsgw tenant API",
    "DESCRIPTION": (
        "Scheduled SMS: send now, at a local time in a timezone, cancel, reschedule, trace.\n\n"
        "Authenticate every call with `Authorization: Bearer sk_<prefix>_<secret>`; the key names the "
        "tenant. Errors are RFC 9457 problem details (`application/problem+json`, or `application/json` "
        "to a client whose `Accept` prefers it): `type` links the code's entry in the error catalogue, "
        "`title`, `status`, `detail`, `code`, `errors` (a 400 names each field, query parameter or "
        "header to correct, each with its own code) and `request_id`; the same body carries the envelope "
        'of earlier versions, `{"error": {"code", "message", "fields"}}`, for the clients that read it. '
        "A refused request changes nothing. Every answer has a `Request-Id` header, also in the server's "
        "logs: quote it. Every instant is RFC 3339 UTC with `Z` (`2026-12-05T18:30:00Z`, microseconds "
        "when there are any). Lists are newest first in cursor pages `{next, previous, results}`: follow "
        "`next`."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # 3.1: a nullable object is oneOf [its schema, null], which validators read one way (3.0 is ambiguous).
    "OAS_VERSION": "3.1.0",
    "SERVERS": [
        {
            "url": "http://localhost:8000",
            "description": "The embedded run on a laptop (`./deploy/run-embedded.sh`, README).",
        },
        {
            "url": "{scheme}://{host}",
            "description": "Your deployment, behind its TLS proxy (docs/deploy.md).",
            "variables": {
                "scheme": {"enum": ["https", "http"], "default": "https"},
                "host": {"default": "sms.example.com", "description": "Its public host name (and port)."},
            },
        },
    ],
    # One per tag, in the order a newcomer reads them (the reference's menu follows it).
    "TAGS": [
        {
            "name": "messages",
            "description": "Send one message now or at a time, many in a batch; read, "
            "reschedule, cancel, trace its timeline, redact it.",
        },
        {
            "name": "schedules",
            "description": "Recurring messages (an RRULE in local wall time): their "
            "occurrences, versions and messages; pause, resume, cancel.",
        },
        {
            "name": "campaigns",
            "description": "One template to a list of recipients (JSON or CSV): progress, "
            "rejected rows, the messages made; pause, resume, cancel.",
        },
        {"name": "inbound", "description": "Replies from recipients, and what their keywords did."},
        {"name": "conversations", "description": "One recipient's messages both ways, newest first."},
        {
            "name": "keywords",
            "description": "The tenant's reply keywords (cancel, confirm, ...) beside the "
            "built-in STOP, START and HELP.",
        },
        {
            "name": "suppressions",
            "description": "Numbers not to send to (opt-outs and the tenant's own), for every sender or one.",
        },
        {"name": "quiet-hours", "description": "The tenant's default window in which nothing is sent."},
        {"name": "routes", "description": "How a message's provider and sender are chosen, and a dry run."},
        {"name": "capacity", "description": "Sending limits: sender rates, quotas, the provider's status."},
        {
            "name": "webhook",
            "description": "Where the tenant's notifications go (see `webhooks`), its signing secret.",
        },
        {"name": "webhook-deliveries", "description": "Notifications already sent: deliver one again."},
        {
            "name": "exports",
            "description": "Daily exports of finished messages, to download before they expire.",
        },
        {"name": "retention", "description": "How long content and records are kept."},
        {"name": "recipients", "description": "Erase every trace of one number (a data-subject request)."},
    ],
    # Named components for the enums, derived from the code's own lists (drf-spectacular would otherwise
    # name them by field, StatusEnum and a hash, and rename them when a list changes).
    "ENUM_NAME_OVERRIDES": {
        "MessageStatus": "scheduling.choices.Status",
        "Priority": "scheduling.choices.Priority",
        "ReasonCode": "scheduling.lifecycle.reasons.ReasonCode",
        "EventKind": "scheduling.lifecycle.kinds.EventKind",
        "ScheduleStatus": "scheduling.models.ScheduleStatus",
        "CampaignStatus": "scheduling.campaigns.models.CampaignStatus",
        "CampaignTimeMode": "scheduling.campaigns.models.CampaignTimeMode",
        "KeywordAction": "inbound.models.KeywordAction",
        "WebhookDeliveryStatus": "receipts.models.WebhookStatus",
        "ConversationStatus": "inbound.api.CONVERSATION_STATUSES",
    },
    # The tenant's notifications (OpenAPI 3.1 `webhooks`), each with its payload (receipts.webhook_schema).
    "WEBHOOKS": [
        "receipts.webhook_schema.MESSAGE_STATUS_CHANGED",
        "inbound.webhook_schema.MESSAGE_RECEIVED",
    ],
    # Run after drf-spectacular's own (enum components): the parts every operation shares.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "smsgw.http.schema_contract.contract_postprocess",
    ],
}


# Where the error catalogue (docs/errors.md) is published: an error's `type` is this followed by
# `#<code>` (smsgw.http.problems). The default is the path the documentation site has when it is served
# beside the API (mkdocs build puts errors.md at errors/); set the absolute URL where it is published.
ERROR_DOCS_URL = env_str("SMSGW_ERROR_DOCS_URL", "/docs/errors/")

# Request bodies on /v1/ larger than this are refused with a 413 before they are read (smsgw.http.boundary).
API_MAX_BODY_BYTES = env_int("SMSGW_API_MAX_BODY_BYTES", 1024 * 1024, minimum=4096)
# The same for a /v1 body that is one object (every endpoint but POST /v1/messages/batch and POST
# /v1/campaigns). The largest valid one is about 25 KB: a 1,600-character body of characters JSON escapes
# to 12 bytes each (a body never passes MAX_SEGMENTS segments, nor 1,600 characters), 4 KiB of metadata
# (scheduling.messages.api.MAX_METADATA_BYTES) and the short fields; the minimum keeps that room.
API_MAX_OBJECT_BYTES = env_int("SMSGW_API_MAX_OBJECT_BYTES", 64 * 1024, minimum=32 * 1024)
# POST /v1/campaigns with a CSV file (multipart/form-data) only: the file is streamed to disk and then into
# the database in chunks, never held in memory, so its cap is about storage (a 1,000,000-row list with two
# variables is about 40 MB).
CAMPAIGN_MAX_UPLOAD_BYTES = env_int("SMSGW_CAMPAIGN_MAX_UPLOAD_BYTES", 256 * 1024 * 1024, minimum=4096)
# Where the /v1 compatibility and deprecation policy (docs/compatibility.md) is published: the target of the
# `Link: <…>; rel="deprecation"` header on answers to requests that use a deprecated name
# (smsgw.http.deprecation). The default is the path the documentation site has when served beside the API.
DEPRECATION_DOCS_URL = env_str("SMSGW_DEPRECATION_DOCS_URL", "/docs/compatibility/#deprecated-aliases")
