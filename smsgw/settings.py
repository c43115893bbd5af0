"""Settings, all from the environment. With nothing set, the embedded defaults apply: SQLite (WAL) in
``.var/``, kombu's filesystem transport as the broker, and the sandbox provider on 127.0.0.1:8081."""

from __future__ import annotations

import math
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from delivery.providers import DEFAULT_PROVIDER, declare_all
from smsgw.config import concurrency, security
from smsgw.config import providers as provider_declarations
from smsgw.config import routes as route_config
from smsgw.config.env import env_bool, env_choice, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("SMSGW_VAR_DIR", str(BASE_DIR / ".var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

# --- metrics (smsgw.observability) ------------------------------------------------------------------
# Event counters of every process on this host are memory-mapped files here (prometheus-client
# multiprocess mode). Set before anything imports prometheus_client, and inherited by the processes
# this one starts. The directory is per host; empty it only when every smsgw process of the host stops.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(VAR_DIR / "metrics"))
Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)
# GET /metrics answers only with "Authorization: Bearer <token>"; without a token it is 404.
METRICS_TOKEN = env_str("SMSGW_METRICS_TOKEN", "")
# /readyz: a sweep pass older than this is reported stale (and /readyz?sweep=1 answers 503).
SWEEP_STALE_SECONDS = env_int("SMSGW_SWEEP_STALE_SECONDS", 60, minimum=5)
# Queue consumers (smsgw.observability.queues): each worker's main process records the queues it consumes
# this often; a consumer not heard from for the stale time (three beats by default: one late beat on a
# loaded host is not a death) is gone. /readyz and /metrics report a queue with messages ready and no
# consumer; past SMSGW_QUEUE_UNCONSUMED_SECONDS /readyz lists it (and /readyz?queues=1 answers 503).
QUEUE_CONSUMER_HEARTBEAT_SECONDS = env_float("SMSGW_QUEUE_CONSUMER_HEARTBEAT_SECONDS", 10.0, minimum=0.5)
QUEUE_CONSUMER_STALE_SECONDS = env_float(
    "SMSGW_QUEUE_CONSUMER_STALE_SECONDS", 3 * QUEUE_CONSUMER_HEARTBEAT_SECONDS, minimum=1.0
)
if QUEUE_CONSUMER_STALE_SECONDS <= QUEUE_CONSUMER_HEARTBEAT_SECONDS:
    raise ImproperlyConfigured(
        "SMSGW_QUEUE_CONSUMER_STALE_SECONDS must be longer than SMSGW_QUEUE_CONSUMER_HEARTBEAT_SECONDS"
    )
QUEUE_UNCONSUMED_SECONDS = env_int("SMSGW_QUEUE_UNCONSUMED_SECONDS", 60, minimum=1)
# /readyz asks the broker (a connection, the queue depths) at most once per this many seconds per process,
# however many probes arrive: it needs no credentials and must not open a broker connection per request.
READYZ_BROKER_SECONDS = env_float("SMSGW_READYZ_BROKER_SECONDS", 5.0, minimum=0.0)

DEBUG = env_bool("DJANGO_DEBUG", False)
EMBEDDED = not env_str("DATABASE_URL")
# development: a laptop (the embedded run, benchmarks); test: the test suite; production: everything
# else, and the default as soon as DATABASE_URL is set. Production refuses to start insecurely: a weak
# or missing DJANGO_SECRET_KEY (smsgw.config.security says why), missing provider credentials (the
# provider's package says why).
SMSGW_ENV = env_choice(
    "SMSGW_ENV", "development" if EMBEDDED else "production", ("development", "test", "production")
)
PRODUCTION = SMSGW_ENV == "production"
SECRET_KEY = env_str("DJANGO_SECRET_KEY", "")
if PRODUCTION:
    if problem := security.secret_key_problem(SECRET_KEY):
        raise ImproperlyConfigured(
            f"{problem} (SMSGW_ENV=production). Generate one with: "
            "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )
elif not SECRET_KEY:
    SECRET_KEY = "embedded-insecure-key-not-for-production"
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

# --- TLS ------------------------------------------------------------------------------------------
# proxy (production default): TLS ends at a reverse proxy / load balancer that sets X-Forwarded-Proto
# (and strips any such header sent by the client); direct: this process is reached over TLS itself;
# off: plain HTTP (development and test default; in production `check --deploy` then warns).
SMSGW_TLS = env_choice("SMSGW_TLS", "proxy" if PRODUCTION else "off", ("proxy", "direct", "off"))
if SMSGW_TLS == "proxy":
    _proto_header = env_str("SMSGW_PROXY_SSL_HEADER", "X-Forwarded-Proto")
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _proto_header.upper().replace("-", "_"), "https")
if SMSGW_TLS != "off":
    SECURE_SSL_REDIRECT = True
    # Load-balancer probes speak plain HTTP to the process; they carry no data.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SMSGW_HSTS_SECONDS", 31_536_000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SMSGW_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SMSGW_HSTS_PRELOAD", True)

INSTALLED_APPS = [
    "django.contrib.admin",
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
    "smsgw.limits",  # its release gate's place: scheduling.dispatch.release.RELEASE_GATES
    "smsgw.observability",
]

MIDDLEWARE = [
    # Provider callbacks (/receipts/, /inbound/) leave here for a chain of only the entries below they use
    # (smsgw.http.callback_chain): none of the sessions, CSRF, auth, messages, axes or whitenoise.
    "smsgw.http.callback_chain.CallbackChainMiddleware",
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
    "smsgw.limits.ratelimit.RateLimitHeadersMiddleware",
    "smsgw.runtime.logs_json.LogContextMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires: it answers a locked-out login
]

ROOT_URLCONF = "smsgw.urls"
WSGI_APPLICATION = "smsgw.wsgi.application"

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

# --- database -------------------------------------------------------------------------------------
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'smsgw.sqlite3'}"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0),
    )
}
DB_VENDOR_SQLITE = DATABASES["default"]["ENGINE"].endswith("sqlite3")
if DB_VENDOR_SQLITE:
    # WAL lets the web, worker and beat processes read while one writes; IMMEDIATE takes the write
    # lock at BEGIN so two writers queue on busy_timeout instead of deadlocking on lock upgrade.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
else:
    # A dead peer (a cut link, a host gone) is noticed within seconds instead of after TCP's own
    # retransmission backoff (minutes): libpq's connect timeout, keepalives on an idle connection, and
    # TCP_USER_TIMEOUT for data sent and never acknowledged. libpq parameters, passed through by psycopg.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "connect_timeout": env_int("SMSGW_DB_CONNECT_TIMEOUT", 5, minimum=1),
            "keepalives": 1,
            "keepalives_idle": env_int("SMSGW_DB_KEEPALIVE_IDLE", 5, minimum=1),
            "keepalives_interval": 2,
            "keepalives_count": 3,
            "tcp_user_timeout": env_int("SMSGW_DB_TCP_USER_TIMEOUT_MS", 15000, minimum=1000),
        }
    )
    # Server-side prepared statements only where a statement asks for one (``prepare=True``:
    # smsgw.runtime.db.fetchone_prepared, a create's and a callback's statements); a threshold no
    # statement reaches keeps psycopg from preparing the others on its own. Django's default (None, for
    # poolers) turns them off, and its own cursors bind client-side and never prepare. Behind PgBouncer in
    # transaction mode older than 1.21, or without max_prepared_statements, set
    # SMSGW_DB_PREPARED_STATEMENTS=0.
    if env_bool("SMSGW_DB_PREPARED_STATEMENTS", True):
        DATABASES["default"]["OPTIONS"]["prepare_threshold"] = 2**31 - 1
# While the database does not answer, a request that needs it is a 503 with this Retry-After
# (smsgw.http.unavailable): about one connect timeout, the time a restart or a failover usually takes.
DB_RETRY_AFTER_SECONDS = env_int("SMSGW_DB_RETRY_AFTER_SECONDS", 5, minimum=1)
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
AXES_FAILURE_LIMIT = env_int("SMSGW_ADMIN_LOGIN_FAILURES", 5, minimum=1)
AXES_COOLOFF_TIME = env_float("SMSGW_ADMIN_LOCKOUT_MINUTES", 15.0) / 60  # hours
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
    "DEFAULT_THROTTLE_CLASSES": ["smsgw.limits.ratelimit.ApiKeyRateThrottle"],
    "UNAUTHENTICATED_USER": None,
}
# Adds the error responses every operation can give (401, 429, 400, 404, 413, 415) to the schema.
REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"] = "smsgw.http.schema.ApiAutoSchema"
SPECTACULAR_SETTINGS = {
    "TITLE": "smsgw tenant API",
    "DESCRIPTION": (
        "Scheduled SMS: send now, at a local time in a timezone, cancel, reschedule, trace.\n\n"
        "Authenticate every call with `Authorization: Bearer sk_<prefix>_<secret>`; the key names the "
        'tenant. Errors are always `{"error": {"code", "message", "fields"}}`: a 400 names '
        "each field, query parameter or header to correct, and a refused request changes nothing. Lists "
        "are newest first in cursor pages `{next, previous, results}`: follow `next`."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # 3.1: a nullable object is oneOf [its schema, null], which validators read one way (3.0 is ambiguous).
    "OAS_VERSION": "3.1.0",
}

# --- Celery ---------------------------------------------------------------------------------------
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
BROKER_IS_FILESYSTEM = CELERY_BROKER_URL.startswith("filesystem")
if BROKER_IS_FILESYSTEM:
    # smsgw.runtime.transports.FilesystemTransport: messages are written whole in tmp/ and renamed into out/,
    # a
    # consumer renames the one it takes into claimed/, and a file it cannot read goes to bad/.
    _broker_dir = VAR_DIR / "broker"
    for _folder in ("out", "tmp", "claimed", "bad", "processed", "control"):
        (_broker_dir / _folder).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "out"),
        "data_folder_out": str(_broker_dir / "out"),
        "processed_folder": str(_broker_dir / "processed"),
        # Exchange bindings; kombu would otherwise write them to ./control in the working directory.
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
        "polling_interval": 0.05,
    }
else:
    # visibility_timeout only matters on Redis: an unacked (acks_late) task is redelivered after it.
    # The database is the source of truth anyway (stale `queued` rows are re-published by the sweep).
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600)}
    if CELERY_BROKER_URL.startswith(("redis", "rediss")):
        import socket as _socket

        # A dead Redis (a cut link) is noticed within seconds: keepalive probes on idle sockets (a worker
        # blocked in BRPOP sends nothing), a read timeout above BRPOP's own 1-s wait, and a health check
        # before a connection idle for a while is reused. The worker's consumer reads through its event
        # loop, where the read timeout does not apply, and a BRPOP sent into the cut is never acknowledged,
        # where keepalives do not apply either (TCP retransmits it for 15 minutes): TCP_USER_TIMEOUT gives
        # up on unacknowledged data after 15 s, as for PostgreSQL.
        _keepalive = {_socket.TCP_KEEPIDLE: 5, _socket.TCP_KEEPINTVL: 2, _socket.TCP_KEEPCNT: 3}
        if hasattr(_socket, "TCP_USER_TIMEOUT"):  # Linux
            _keepalive[_socket.TCP_USER_TIMEOUT] = env_int(
                "SMSGW_BROKER_TCP_USER_TIMEOUT_MS", 15000, minimum=1000
            )
        CELERY_BROKER_TRANSPORT_OPTIONS.update(
            socket_connect_timeout=5,
            socket_timeout=env_float("SMSGW_BROKER_SOCKET_TIMEOUT", 10.0, minimum=2.0),
            socket_keepalive=True,
            socket_keepalive_options=_keepalive,
            health_check_interval=10,
        )
BROKER_IS_AMQP = CELERY_BROKER_URL.startswith(("amqp", "pyamqp", "amqps"))
if BROKER_IS_AMQP:
    # RabbitMQ: every task queue is a durable quorum queue (replicated; deploy/rabbitmq/definitions.json
    # declares them, with a policy for the delivery limit and the dead-letter exchange), and every
    # publish waits for the broker's confirm, so a task the sweep counted as published is on disk in the
    # queue (kombu's py-amqp transport: confirm_publish). Quorum queues take no countdown/ETA tasks and no
    # global QoS; nothing here uses either (Celery detects the quorum queues and uses per-consumer QoS).
    CELERY_TASK_DEFAULT_QUEUE_TYPE = env_choice("SMSGW_AMQP_QUEUE_TYPE", "quorum", ("quorum", "classic"))
    CELERY_TASK_CREATE_MISSING_QUEUE_TYPE = CELERY_TASK_DEFAULT_QUEUE_TYPE
    CELERY_BROKER_TRANSPORT_OPTIONS["confirm_publish"] = True
# AMQP: heartbeats every 10 s (RabbitMQ closes a silent connection after two missed ones, and the
# worker notices a dead broker as fast); connecting gives up after 5 s and retries.
CELERY_BROKER_HEARTBEAT = env_int("SMSGW_BROKER_HEARTBEAT", 10, minimum=0)
CELERY_BROKER_CONNECTION_TIMEOUT = 5.0
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A send task returns once its submissions are handed to the event loop, and every task here is
# idempotent on the rows' state: a task still running when the broker connection drops finishes, and its
# redelivery (if any) finds nothing left to do. Cancelling it would kill submissions on the wire.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# Bound each pool child's memory: past this resident size (KiB) a child is replaced after its current
# task (in-flight submissions drain first, delivery.tasks); growth never accumulates across hours. Set
# above what a warm send child holds with a full batch in flight (about 150 MB at 250 submissions in
# flight, 105-111 MB at 200/s): at 140,000 KB every send child crossed it during each task of a burst and
# was replaced after it, which cost a quarter of the send workers' CPU (docs/benchmarks.md, 2026-12-03).
CELERY_WORKER_MAX_MEMORY_PER_CHILD = env_int("SMSGW_WORKER_MAX_MEMORY_KB", 200_000, minimum=10_000)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A warm shutdown (SIGTERM) still waiting for running tasks after this long becomes a cold one
# (smsgw.celery): every process stops within 30 s of SIGTERM, whatever its tasks wait on.
WORKER_STOP_SECONDS = env_float("SMSGW_WORKER_STOP_SECONDS", 22.0, minimum=1.0)
# Task events (received, started, succeeded, failed) for Flower and `celery events`: on in production.
# Published to the broker's event exchange; with no monitor listening, Redis drops them.
CELERY_WORKER_SEND_TASK_EVENTS = env_bool("SMSGW_CELERY_EVENTS", PRODUCTION)
CELERY_TASK_SEND_SENT_EVENT = CELERY_WORKER_SEND_TASK_EVENTS
CELERY_TASK_DEFAULT_QUEUE = "default"
# Celery's consumer with its bad-message handling kept and its log lines free of message contents.
CELERY_WORKER_CONSUMER = "smsgw.runtime.worker_consumer:Consumer"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = "UTC"

# --- pipeline tuning ------------------------------------------------------------------------------
# Whole seconds: django-celery-beat stores intervals as integers (0.5 would become 0 and fire
# continuously). Inside each interval the sweep itself polls every 50 ms, so due work waits far less.
SWEEP_INTERVAL_SECONDS = env_int("SMSGW_SWEEP_INTERVAL", 1, minimum=1)
SWEEP_BATCH_SIZE = env_int("SMSGW_SWEEP_BATCH_SIZE", 1000, minimum=1)
SEND_BATCH_SIZE = env_int("SMSGW_SEND_BATCH_SIZE", 250, minimum=1)
# SEND_CONCURRENCY (provider requests in flight per send process) is set with the provider settings below.
QUEUED_RECOVERY_SECONDS = env_int("SMSGW_QUEUED_RECOVERY_SECONDS", 120, minimum=1)
# A stale `queued` row whose send queue still has a backlog is not re-published (its task is most likely
# still waiting) until it has waited this long; one in an empty queue is re-published after
# TASK_LOST_AFTER (scheduling.dispatch.recovery).
REPUBLISH_MAX_WAIT_SECONDS = env_int("SMSGW_REPUBLISH_MAX_WAIT_SECONDS", 600, minimum=1)
TASK_LOST_AFTER_SECONDS = env_int("SMSGW_TASK_LOST_AFTER_SECONDS", 10, minimum=1)
# A disabled tenant's due messages wait (`tenant_disabled`) and are looked at again this often.
DISABLED_TENANT_RECHECK_SECONDS = env_int("SMSGW_DISABLED_TENANT_RECHECK_SECONDS", 30, minimum=1)
SENDING_LEASE_SECONDS = env_int("SMSGW_SENDING_LEASE_SECONDS", 120, minimum=1)
RETRY_MAX_ATTEMPTS = env_int("SMSGW_RETRY_MAX_ATTEMPTS", 6, minimum=1)
# On a route with another leg after this one, a message moves on after this many transient answers on its
# leg (the provider said it did not process the request) instead of using all SMSGW_RETRY_MAX_ATTEMPTS
# there (delivery.routing.failover).
FAILOVER_RETRY_ATTEMPTS = env_int("SMSGW_FAILOVER_RETRY_ATTEMPTS", 2, minimum=1)
RETRY_BASE_SECONDS = env_float("SMSGW_RETRY_BASE_SECONDS", 2.0, minimum=0.0)
RETRY_MAX_DELAY_SECONDS = env_float("SMSGW_RETRY_MAX_DELAY_SECONDS", 300.0, minimum=0.0)
RETRY_MAX_AGE_SECONDS = env_int("SMSGW_RETRY_MAX_AGE_SECONDS", 6 * 3600, minimum=1)
SEND_AT_PAST_TOLERANCE_SECONDS = env_int("SMSGW_SEND_AT_PAST_TOLERANCE", 300, minimum=0)
MAX_SCHEDULE_AHEAD_DAYS = env_int("SMSGW_MAX_SCHEDULE_AHEAD_DAYS", 400, minimum=1)
# The Twilio-compatible API's strict mode (scheduling.facade): the least lead time of a SendAt, as Twilio's
# scheduling article and error 35114 state it (900 s; Twilio's newer error pages say 300 s).
FACADE_STRICT_MIN_LEAD_SECONDS = env_int("SMSGW_FACADE_STRICT_MIN_LEAD_SECONDS", 900, minimum=0)
DEFAULT_VALIDITY_SECONDS = env_int("SMSGW_DEFAULT_VALIDITY_SECONDS", 48 * 3600, minimum=60)
MAX_SEGMENTS = env_int("SMSGW_MAX_SEGMENTS", 10, minimum=1)
# POST /v1/messages/batch: the most messages one request may carry (the body cap still applies).
BATCH_MAX_MESSAGES = env_int("SMSGW_BATCH_MAX_MESSAGES", 1000, minimum=1)
# Recurring schedules (scheduling.schedules.materialize): occurrences are made as messages this far ahead.
SCHEDULE_HORIZON_SECONDS = env_int("SMSGW_SCHEDULE_HORIZON_SECONDS", 24 * 3600, minimum=60)
# Whole seconds: django-celery-beat stores an interval as an integer, and 0 would fire continuously.
MATERIALIZE_INTERVAL_SECONDS = env_int("SMSGW_MATERIALIZE_INTERVAL", 10, minimum=1)
# Schedules claimed per statement; one batch is one transaction.
MATERIALIZE_BATCH_SIZE = env_int("SMSGW_MATERIALIZE_BATCH_SIZE", 500, minimum=1)
# Abuse guard: a rule that fires more often than this on one local day is rejected (field `rrule`).
SCHEDULE_MAX_PER_DAY = env_int("SMSGW_SCHEDULE_MAX_PER_DAY", 24, minimum=1)

# --- provider -------------------------------------------------------------------------------------
# The provider registry (delivery.providers.PROVIDERS) names each provider's package; each package reads
# its own settings from the environment (e.g. its credentials, API base URL and request timeout: see
# docs/deploy.md) and declares its capabilities (smsgw.config.providers). Outside production their
# defaults are the sandbox's (deploy/run-embedded.sh starts it on :8081).
SMSGW_PROVIDER = env_str("SMSGW_PROVIDER", DEFAULT_PROVIDER)
globals().update(declare_all(PRODUCTION))
# Every provider this deployment sends through (the default one and those the settings' routes name:
# ``SMSGW_ROUTES`` below) must answer, or give up, well inside a sending lease: the reconciler must never
# look a message up while its worker may still be waiting on the provider. In production each must also
# have its credentials and the secret its callbacks are verified with, none of them an example's
# placeholder (its package's ``problem``): a receipt or a STOP from a provider we cannot verify is
# either refused or forgeable. A route edited in the admin is checked when it is saved
# (delivery.routing). A registered provider nobody routes to is not checked.
try:
    SMSGW_ROUTES = route_config.parse(
        env_str("SMSGW_ROUTES", ""), provider_declarations.declared(), ("transactional", "bulk")
    )
except route_config.RouteConfigError as exc:
    raise ImproperlyConfigured(f"SMSGW_ROUTES {exc}") from None
for _provider_settings in provider_declarations.settings_in_use(
    {SMSGW_PROVIDER} | route_config.providers_named(SMSGW_ROUTES)
):
    if PRODUCTION and _provider_settings.problem:
        raise ImproperlyConfigured(f"{_provider_settings.problem} (SMSGW_ENV=production)")
    if _provider_settings.request_timeout >= SENDING_LEASE_SECONDS:
        # The reconciler must never look a message up while its worker may still be waiting on the provider.
        raise ImproperlyConfigured(
            f"SMSGW_SENDING_LEASE_SECONDS must be longer than {_provider_settings.request_timeout_setting}"
        )
# Routing rules edited in the admin are read once per this many seconds per process (every message born
# asks for its tenant's), and at once after this process saved one (delivery.routing.rules).
ROUTES_CACHE_SECONDS = env_float("SMSGW_ROUTES_CACHE_SECONDS", 5.0, minimum=0.0)
# Provider requests in flight per send process (smsgw.config.concurrency): SMSGW_SEND_CONCURRENCY when set,
# else an equal share of the provider account's concurrent-request limit over every send process using it.
SEND_CONCURRENCY_PLAN = concurrency.from_env(
    provider_declarations.concurrent_requests({SMSGW_PROVIDER} | route_config.providers_named(SMSGW_ROUTES))
)
SEND_CONCURRENCY = SEND_CONCURRENCY_PLAN.per_process
# The longest request timeout of any provider (a worker's drain, the longest uncertain wait).
PROVIDER_REQUEST_TIMEOUT_SECONDS = provider_declarations.longest_request_timeout()
# Public base URL the provider calls back on (behind a proxy this differs from what Django sees).
SMSGW_PUBLIC_BASE_URL = env_str("SMSGW_PUBLIC_BASE_URL", "")

# --- reconciliation, throttling and holds (delivery) ----------------------------------------------
# An uncertain attempt is first looked up this long after it ended (the provider may still be writing it).
RECONCILE_FIRST_LOOK_SECONDS = env_int("SMSGW_RECONCILE_FIRST_LOOK_SECONDS", 10, minimum=1)
# Absence is only declared after a second look this long after the first found nothing: it outlasts
# the provider's own processing and listing lag (nothing of ours can still be on the wire by then).
RECONCILE_ABSENT_GRACE_SECONDS = env_int("SMSGW_RECONCILE_ABSENT_GRACE_SECONDS", 30, minimum=1)
# The longest the provider's message list may lag behind a stored message. A provider may document no
# freshness guarantee for its list (users report minutes): absence is declared only by a complete listing
# made this long after nothing of the attempt could still arrive (the provider's page in docs/,
# "Uncertain submissions"). A truly absent message is resent after at most the provider's request
# timeout + SMSGW_RECONCILE_ABSENT_GRACE_SECONDS + this (190 s by default).
RECONCILE_LIST_LAG_SECONDS = env_int("SMSGW_RECONCILE_LIST_LAG_SECONDS", 150, minimum=0)
# The shortest wait a tenant may ask for per message (``uncertain_wait_seconds``: a one-time code, where
# late is worse than a rare duplicate): never less than the request timeout plus the processing grace.
RECONCILE_MIN_WAIT_SECONDS = env_int("SMSGW_RECONCILE_MIN_WAIT_SECONDS", 40, minimum=1)
# Pages of 1,000 read per listing; a recipient with more messages than this in the provider's history
# cannot be proven absent (the message waits and ends failed, never sent twice).
RECONCILE_MAX_PAGES = env_int("SMSGW_RECONCILE_MAX_PAGES", 10, minimum=1)
# One reconcile task stops after this long (the rest wait for their lease to run out again), so a slow
# or failing provider never holds a reconcile process for minutes.
RECONCILE_TASK_SECONDS = env_float("SMSGW_RECONCILE_TASK_SECONDS", 20.0, minimum=1.0)
# Throttled by the provider (429, full sender queue): resent after this backoff, not counted as an attempt.
THROTTLE_BASE_SECONDS = env_float("SMSGW_THROTTLE_BASE_SECONDS", 1.0, minimum=0.0)
THROTTLE_MAX_DELAY_SECONDS = env_float("SMSGW_THROTTLE_MAX_DELAY_SECONDS", 60.0, minimum=0.0)
# Account faults (bad credentials, unregistered sender, geo permission): the scope is held and probed.
HOLD_PROBE_FIRST_SECONDS = env_int("SMSGW_HOLD_PROBE_FIRST_SECONDS", 15, minimum=1)
HOLD_PROBE_MAX_SECONDS = env_int("SMSGW_HOLD_PROBE_MAX_SECONDS", 600, minimum=1)
HOLDS_PROBE_INTERVAL_SECONDS = env_int("SMSGW_HOLDS_PROBE_INTERVAL", 5, minimum=1)

# --- capacity and pacing (delivery.flow.capacity, delivery.flow.pacing, delivery.flow.circuit) --------------
# Defaults in segments per second by sender type, when a sender has no configured rate: the first
# provider's documented defaults for US/Canada (docs/limits.md, "Sending within limits").
SENDER_RATE_DEFAULTS = {
    "long_code": env_float("SMSGW_RATE_LONG_CODE", 1.0, minimum=0.01),
    "toll_free": env_float("SMSGW_RATE_TOLL_FREE", 3.0, minimum=0.01),
    "short_code": env_float("SMSGW_RATE_SHORT_CODE", 100.0, minimum=0.01),
    "alphanumeric": env_float("SMSGW_RATE_ALPHANUMERIC", 10.0, minimum=0.01),
    "messaging_service": env_float("SMSGW_RATE_MESSAGING_SERVICE", 10.0, minimum=0.01),
}
ACCOUNT_RATE_DEFAULT = env_float("SMSGW_ACCOUNT_RATE", 2000.0, minimum=0.01)
# Off only to measure what pacing costs (bench limiter): every due message is then released at once.
PACING_ENABLED = env_bool("SMSGW_PACING", True)
# Pace a little under the configured rate: a released message reaches the provider after a variable
# delay (broker, worker), and the provider counts what arrives, not what we released.
PACING_HEADROOM = env_float("SMSGW_PACING_HEADROOM", 0.97, minimum=0.1)
# Messages are released with their exact slot, up to this far ahead of it (they are then `sending`, on
# their way): a sweep pass that comes late by less than this loses no capacity, and the slots (not the
# sweep's cadence) set the spacing the provider sees.
PACING_RELEASE_AHEAD_SECONDS = env_float("SMSGW_PACING_RELEASE_AHEAD_SECONDS", 1.0, minimum=0.1)
# A message that waits for a limit gets a slot at least this far from the pass that releases it: the time
# for the pass to commit and a worker to pick the batch up (a slot already past on arrival would crowd
# the next one). A message its limits let go at once has no slot and goes immediately.
PACING_DISPATCH_SECONDS = env_float("SMSGW_PACING_DISPATCH_SECONDS", 0.35, minimum=0.0)
if PACING_DISPATCH_SECONDS >= PACING_RELEASE_AHEAD_SECONDS:
    raise ImproperlyConfigured(
        "SMSGW_PACING_DISPATCH_SECONDS must be below SMSGW_PACING_RELEASE_AHEAD_SECONDS"
    )
# Within a constrained account, bulk keeps at least this share of each pass while transactional waits.
PACING_BULK_MIN_SHARE = env_float("SMSGW_PACING_BULK_MIN_SHARE", 0.1, minimum=0.0)
# Backpressure (AIMD): a throttle multiplies the rate by this (at most once per cooldown), and the rate
# climbs back by this fraction of the configured rate per second, never above it or below the floor.
AIMD_DECREASE = env_float("SMSGW_AIMD_DECREASE", 0.7, minimum=0.05)
AIMD_INCREASE_PER_SECOND = env_float("SMSGW_AIMD_INCREASE_PER_SECOND", 0.03, minimum=0.0)
AIMD_COOLDOWN_SECONDS = env_float("SMSGW_AIMD_COOLDOWN_SECONDS", 1.0, minimum=0.0)
AIMD_FLOOR = env_float("SMSGW_AIMD_FLOOR", 0.05, minimum=0.0)
# Circuit breaker per provider account: opens when, within the window, at least MIN_FAILURES requests
# failed (timeouts, connection errors, 5xx) and they were at least RATIO of the answers; while open, one
# probe message per PROBE_SECONDS; waiting messages are parked and released when it closes.
CIRCUIT_WINDOW_SECONDS = env_float("SMSGW_CIRCUIT_WINDOW_SECONDS", 10.0, minimum=0.1)
CIRCUIT_MIN_FAILURES = env_int("SMSGW_CIRCUIT_MIN_FAILURES", 5, minimum=1)
CIRCUIT_FAILURE_RATIO = env_float("SMSGW_CIRCUIT_FAILURE_RATIO", 0.5, minimum=0.0)
# ... or as soon as this many requests in a row failed for the provider's reasons (an outage).
CIRCUIT_STREAK_FAILURES = env_int("SMSGW_CIRCUIT_STREAK_FAILURES", 20, minimum=1)
CIRCUIT_PROBE_SECONDS = env_float("SMSGW_CIRCUIT_PROBE_SECONDS", 1.0, minimum=0.1)
CIRCUIT_PARK_SECONDS = env_int("SMSGW_CIRCUIT_PARK_SECONDS", 30, minimum=1)
# The host circuit (delivery.flow.circuit): this host cannot reach the provider (no answer at all:
# connection refused or timed out, read timeouts) while another host gets answers within the window. The
# same thresholds open it; while open this host's workers park their batches for HOST_CIRCUIT_PARK_SECONDS
# (another host's worker takes them) and send one probe after PROBE_SECONDS, doubling up to PROBE_MAX.
# HOST_ID names this host (default: the machine's hostname): processes with the same id share a circuit.
HOST_ID = env_str("SMSGW_HOST_ID", "")[:128]
HOST_CIRCUIT_PROBE_SECONDS = env_float("SMSGW_HOST_CIRCUIT_PROBE_SECONDS", 2.0, minimum=0.1)
HOST_CIRCUIT_PROBE_MAX_SECONDS = env_float("SMSGW_HOST_CIRCUIT_PROBE_MAX_SECONDS", 30.0, minimum=0.1)
HOST_CIRCUIT_PARK_SECONDS = env_float("SMSGW_HOST_CIRCUIT_PARK_SECONDS", 2.0, minimum=0.1)

# --- logging --------------------------------------------------------------------------------------
# One JSON object per line (smsgw.runtime.logs_json) in production, plain text elsewhere.
LOG_FORMAT = env_choice("SMSGW_LOG_FORMAT", "json" if PRODUCTION else "plain", ("json", "plain"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "smsgw.runtime.logs_json.JsonFormatter"},
    },
    "filters": {
        "repeat_limit": {"()": "smsgw.runtime.logs.RepeatLimit"},
        "quiet_ticks": {"()": "smsgw.runtime.logs.QuietTicks"},
        "redact": {"()": "smsgw.runtime.logs.Redact"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["repeat_limit", "quiet_ticks", "redact"],  # redact last: it merges the args
        }
    },
    # Django's default config gives "django" its own console handler (with DEBUG) that would print
    # django.request's tracebacks unredacted before the record reaches the root handler.
    "loggers": {"django": {"handlers": [], "level": "INFO", "propagate": True}},
    "root": {"handlers": ["console"], "level": env_str("SMSGW_LOG_LEVEL", "INFO")},
}
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
# Recipients per creation-job transaction (scheduling.campaigns.make): large enough that per-statement and
# per-commit costs vanish against the rows, small enough that a killed worker redoes well under a second of
# work and a cancel waits at most that long for the batch in flight.
CAMPAIGN_BATCH_SIZE = env_int("SMSGW_CAMPAIGN_BATCH_SIZE", 5000, minimum=1)
# A recipient list is made in at most this many line ranges, each a job of its own on the `campaigns` queue,
# so a large list is made by that many worker processes at once (one process is one core: its build
# thread and its inserts share one GIL). Set it to the campaigns workers' total concurrency, or above: a
# range waits in the queue for a free process. A range holds at least CAMPAIGN_RANGE_MIN_ROWS records,
# so a small list stays one job.
CAMPAIGN_MAKE_RANGES = env_int("SMSGW_CAMPAIGN_MAKE_RANGES", 4, minimum=1)
CAMPAIGN_RANGE_MIN_ROWS = env_int("SMSGW_CAMPAIGN_RANGE_MIN_ROWS", 50_000, minimum=1)

# --- status look-ups for receipts that never came (receipts.lookup) --------------------------------
# Messages still `sent` this long after sending, with no final receipt, are looked up at the provider by
# sid (receipts.lookup); a lookup that still shows no final status is repeated with doubling delays, at
# most STATUS_LOOKUP_MAX_TRIES times.
STATUS_LOOKUP_AFTER_SECONDS = env_int("SMSGW_STATUS_LOOKUP_AFTER_SECONDS", 3600, minimum=1)
STATUS_LOOKUP_MAX_TRIES = env_int("SMSGW_STATUS_LOOKUP_MAX_TRIES", 5, minimum=1)
STATUS_LOOKUP_INTERVAL_SECONDS = env_float("SMSGW_STATUS_LOOKUP_INTERVAL", 60.0, minimum=0.5)
# Provider requests per second, messages per run, seconds per request and per run: a run never holds a
# `reconcile` worker for long, and stays far below the provider's API concurrency limits.
STATUS_LOOKUP_RATE = env_float("SMSGW_STATUS_LOOKUP_RATE", 5.0, minimum=0.1)
STATUS_LOOKUP_BATCH_SIZE = env_int("SMSGW_STATUS_LOOKUP_BATCH_SIZE", 100, minimum=1)
STATUS_LOOKUP_TIMEOUT_SECONDS = env_float("SMSGW_STATUS_LOOKUP_TIMEOUT_SECONDS", 3.0, minimum=0.1)
STATUS_LOOKUP_BUDGET_SECONDS = env_float("SMSGW_STATUS_LOOKUP_BUDGET_SECONDS", 20.0, minimum=1.0)

# How often campaigns are looked at for completion (scheduling.campaigns.control.campaigns_tick).
CAMPAIGN_TICK_SECONDS = env_float("SMSGW_CAMPAIGN_TICK_SECONDS", 5.0, minimum=0.5)

CELERY_TASK_ROUTES = {
    "scheduling.sweep": {"queue": "sweep"},
    # The materializer shares the sweep's queue and workers: both are short, database-bound passes.
    "scheduling.materialize": {"queue": "sweep"},
    # A campaign's creation job runs for as long as its list takes (about a minute per million rows):
    # its own queue and workers, so it never holds up the sweep's ticks or the sends.
    "scheduling.campaign_make": {"queue": "campaigns"},
    "delivery.reconcile_batch": {"queue": "reconcile"},
    "delivery.holds_probe": {"queue": "reconcile"},
    "delivery.circuit_probe": {"queue": "reconcile"},
    "receipts.process": {"queue": "receipts"},
    "receipts.status_lookup": {"queue": "reconcile"},
    "receipts.deliver_webhooks": {"queue": "webhooks"},
    "limits.prune": {"queue": "reconcile"},
    # Campaign control jobs (bounded batch runs): background database work beside the reconciler.
    "scheduling.campaign_cancel": {"queue": "reconcile"},
    "scheduling.campaign_release": {"queue": "reconcile"},
    "scheduling.campaigns_tick": {"queue": "reconcile"},
}


def _tick_expiry(interval: float) -> dict:
    """A tick that waited longer than two intervals is redundant: a newer one covers the same work, and
    piled-up ticks would be replayed in a rush when workers catch up. django-celery-beat's
    DatabaseScheduler drops an ``expires`` option when it installs an entry (ModelEntry._unpack_options
    keeps only ``expire_seconds``, an integer, which it then sends as ``expires``); ``expires`` is kept
    for any other scheduler. Workers discard an expired task unrun (Celery: "Discarding revoked task")."""
    seconds = max(2, math.ceil(interval * 2))
    return {"expires": float(seconds), "expire_seconds": seconds}


CELERY_BEAT_SCHEDULE = {
    # django-celery-beat's DatabaseScheduler installs this entry in its tables at start-up; operators
    # can then see and pause it in the admin.
    "smsgw-sweep": {
        "task": "scheduling.sweep",
        "schedule": SWEEP_INTERVAL_SECONDS,
        # A sweep that waited longer than two intervals is redundant: a newer one covers the same rows.
        "options": {"queue": "sweep", **_tick_expiry(SWEEP_INTERVAL_SECONDS)},
    },
    # Rolls every active schedule's horizon forward. Runs are idempotent (unique occurrence keys) and
    # safe to overlap (SKIP LOCKED), so a late duplicate only finds nothing to do.
    "smsgw-materialize": {
        "task": "scheduling.materialize",
        "schedule": MATERIALIZE_INTERVAL_SECONDS,
        "options": {"queue": "sweep", **_tick_expiry(MATERIALIZE_INTERVAL_SECONDS)},
    },
    # Receipts and webhooks have their own queues and workers: a burst of callbacks never delays sends.
    "smsgw-receipts": {
        "task": "receipts.process",
        "schedule": SWEEP_INTERVAL_SECONDS,
        "options": {"queue": "receipts", **_tick_expiry(SWEEP_INTERVAL_SECONDS)},
    },
    # Probes provider accounts held after an account fault (delivery.flow.provider_holds); idle: one indexed
    # query.
    "smsgw-holds-probe": {
        "task": "delivery.holds_probe",
        "schedule": HOLDS_PROBE_INTERVAL_SECONDS,
        "options": {"queue": "reconcile", **_tick_expiry(HOLDS_PROBE_INTERVAL_SECONDS)},
    },
    # An open provider circuit with no message waiting is probed by fetching the account (a waiting
    # message is the probe otherwise, sent by the sweep). Idle: one indexed read.
    "smsgw-circuit-probe": {
        "task": "delivery.circuit_probe",
        "schedule": HOLDS_PROBE_INTERVAL_SECONDS,
        "options": {"queue": "reconcile", **_tick_expiry(HOLDS_PROBE_INTERVAL_SECONDS)},
    },
    # Messages stuck at `sent` (a lost final receipt) are looked up at the provider; idle: one query.
    "smsgw-status-lookup": {
        "task": "receipts.status_lookup",
        "schedule": STATUS_LOOKUP_INTERVAL_SECONDS,
        "options": {"queue": "reconcile", **_tick_expiry(STATUS_LOOKUP_INTERVAL_SECONDS)},
    },
    "smsgw-webhooks": {
        "task": "receipts.deliver_webhooks",
        "schedule": SWEEP_INTERVAL_SECONDS,
        "options": {"queue": "webhooks", **_tick_expiry(SWEEP_INTERVAL_SECONDS)},
    },
    # Old quota windows and idle API rate buckets (smsgw.limits.housekeeping): two deletes over small
    # tables (a row per tenant per day, a row per key).
    "smsgw-limits-prune": {
        "task": "limits.prune",
        "schedule": 3600.0,
        "options": {"queue": "reconcile", **_tick_expiry(3600.0)},
    },
    # Campaigns: completed when every message is final; a cancel or resume whose task was lost goes on.
    # Idle: one query on the campaign table and a counter read per active campaign.
    "smsgw-campaigns": {
        "task": "scheduling.campaigns_tick",
        "schedule": CAMPAIGN_TICK_SECONDS,
        "options": {"queue": "reconcile", **_tick_expiry(CAMPAIGN_TICK_SECONDS)},
    },
}

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
TENANT_DEFAULT_SEND_RATE_PER_SECOND = env_int("SMSGW_DEFAULT_SEND_RATE_PER_SECOND", 1_000, minimum=0)
API_RATE_BURST_SECONDS = env_float("SMSGW_API_RATE_BURST_SECONDS", 2.0, minimum=0.0)
# Where the per-key buckets live, shared by every web process: a Redis URL, by default the broker's when
# the broker is Redis; anything else ("database", or a RabbitMQ/filesystem broker) = the database.
RATELIMIT_URL = env_str(
    "SMSGW_RATELIMIT_URL",
    CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis", "rediss")) else "database",
)

# --- receipts and tenant webhooks -----------------------------------------------------------------
RECEIPT_BATCH_SIZE = env_int("SMSGW_RECEIPT_BATCH_SIZE", 500, minimum=1)
RECEIPT_MAX_BODY_BYTES = env_int("SMSGW_RECEIPT_MAX_BODY_BYTES", 16384, minimum=1024)
# How long a receipt whose provider id matches no message is kept trying before it is marked orphaned.
RECEIPT_PENDING_MAX_AGE_SECONDS = env_int("SMSGW_RECEIPT_PENDING_MAX_AGE", 86400, minimum=60)
# Signed callbacks that arrive while the database is unreachable wait here (receipts.spool). It must be a
# persistent disk local to the web process (not tmpfs, not a container's throwaway layer).
RECEIPT_SPOOL_DIR = Path(env_str("SMSGW_RECEIPT_SPOOL_DIR", str(VAR_DIR / "receipt-spool")))
WEBHOOK_ALLOW_HTTP = env_bool("SMSGW_WEBHOOK_ALLOW_HTTP", EMBEDDED or DEBUG)
# Loopback/private/link-local targets are refused (SSRF) unless this is set (tests, local development).
WEBHOOK_ALLOW_PRIVATE = env_bool("SMSGW_WEBHOOK_ALLOW_PRIVATE", False)
# A delivery's whole time (connect, send, answer), wall clock: a server that trickles its answer is cut
# off at this deadline (receipts.webhook_http). Of its answer only the status counts, and at most
# WEBHOOK_MAX_RESPONSE_BYTES of the body are read.
WEBHOOK_TIMEOUT_SECONDS = env_float("SMSGW_WEBHOOK_TIMEOUT_SECONDS", 5.0, minimum=0.1)
WEBHOOK_MAX_RESPONSE_BYTES = env_int("SMSGW_WEBHOOK_MAX_RESPONSE_BYTES", 4096, minimum=0)
WEBHOOK_MAX_ATTEMPTS = env_int("SMSGW_WEBHOOK_MAX_ATTEMPTS", 12, minimum=1)
WEBHOOK_RETRY_BASE_SECONDS = env_float("SMSGW_WEBHOOK_RETRY_BASE_SECONDS", 5.0, minimum=0.0)
WEBHOOK_RETRY_MAX_DELAY_SECONDS = env_float("SMSGW_WEBHOOK_RETRY_MAX_DELAY_SECONDS", 3600.0, minimum=0.0)

# --- task time limits (smsgw.runtime.task_limits) -------------------------------------------------
# Every task has a soft limit (SoftTimeLimitExceeded in the task: a periodic pass stops cleanly and the
# next tick goes on) and a hard one 30 s later (the pool process is killed; acks_late puts the message
# back). Each is sized to the task's own work with room for a slow database, never to "unlimited".


def _time_limits(soft: float, *, grace: float = 30.0) -> dict[str, float]:
    return {"soft_time_limit": float(soft), "time_limit": float(soft + grace)}


_WEBHOOK_ROUNDS = math.ceil(200 / 16)  # receipts.webhooks: 200 deliveries a pass on 16 threads
CELERY_TASK_ANNOTATIONS = {
    "scheduling.sweep": _time_limits(SWEEP_INTERVAL_SECONDS * 0.9 + 60),
    "scheduling.materialize": _time_limits(MATERIALIZE_INTERVAL_SECONDS * 0.9 + 60),
    # About a minute per million rows (CELERY_TASK_ROUTES); a stopped job resumes from its checkpoint.
    "scheduling.campaign_make": _time_limits(env_float("SMSGW_CAMPAIGN_MAKE_TIME_LIMIT", 1800.0, minimum=60)),
    "scheduling.campaign_cancel": _time_limits(60),  # runs of TASK_BUDGET_SECONDS (5 s) each
    "scheduling.campaign_release": _time_limits(60),
    "scheduling.campaigns_tick": _time_limits(60),
    # Returns once the batch's submissions have started (answers are recorded as they come).
    "delivery.send_batch": _time_limits(PROVIDER_REQUEST_TIMEOUT_SECONDS + 60),
    "delivery.reconcile_batch": _time_limits(RECONCILE_TASK_SECONDS + PROVIDER_REQUEST_TIMEOUT_SECONDS + 60),
    "delivery.holds_probe": _time_limits(PROVIDER_REQUEST_TIMEOUT_SECONDS + 30),
    "delivery.circuit_probe": _time_limits(PROVIDER_REQUEST_TIMEOUT_SECONDS + 30),
    "receipts.process": _time_limits(SWEEP_INTERVAL_SECONDS * 0.9 + 60),
    "receipts.status_lookup": _time_limits(STATUS_LOOKUP_BUDGET_SECONDS + STATUS_LOOKUP_TIMEOUT_SECONDS + 60),
    # A pass may wait for a full batch of deliveries that each run to their deadline.
    "receipts.deliver_webhooks": _time_limits(
        SWEEP_INTERVAL_SECONDS * 0.9 + WEBHOOK_TIMEOUT_SECONDS * (_WEBHOOK_ROUNDS + 1) + 30
    ),
    "limits.prune": _time_limits(300),
}
# Any task not listed (Celery's own) gets these.
CELERY_TASK_SOFT_TIME_LIMIT = 600
CELERY_TASK_TIME_LIMIT = 630

# --- destination guards: fraud and SMS pumping (delivery.guards.destinations, delivery.guards.velocity) -----
# Off only to measure what the guards cost (bench guards) or as an emergency switch: destinations are then
# not checked and nothing is held for review. The suppression list is enforced either way.
GUARDS_ENABLED = env_bool("SMSGW_GUARDS", True)
# What scheduling asks at acceptance (suppression list, destination guards), through its port
# (scheduling.messages.acceptance): the module that answers. Scheduling never imports it.
ACCEPTANCE_CHECKS = "delivery.guards.acceptance"
# A tenant with no country of its own and no E.164 default_from sends within this one (ISO 3166 alpha-2).
DEFAULT_COUNTRY = env_str("SMSGW_DEFAULT_COUNTRY", "US").strip().upper()
if not (len(DEFAULT_COUNTRY) == 2 and DEFAULT_COUNTRY.isalpha()):
    raise ImproperlyConfigured("SMSGW_DEFAULT_COUNTRY must be an ISO 3166 alpha-2 code such as US")
# Denied E.164 prefixes on top of the shipped list (delivery/data/deny_prefixes.txt): a file in the same
# format, and/or a comma-separated list of prefixes.
DENY_PREFIXES_FILE = env_str("SMSGW_DENY_PREFIXES_FILE", "")
DENY_PREFIXES = env_list("SMSGW_DENY_PREFIXES", [])
# Velocity: fixed windows of this length; a tenant's own values (smsgw.models.Tenant) override the
# maxima. 0 = the rule is off (the default: turn it on per tenant or here, docs/guards.md).
VELOCITY_WINDOW_SECONDS = env_int("SMSGW_VELOCITY_WINDOW_SECONDS", 3600, minimum=60)
VELOCITY_PREFIX_DIGITS = env_int("SMSGW_VELOCITY_PREFIX_DIGITS", 7, minimum=2)
VELOCITY_PREFIX_MAX = env_int("SMSGW_VELOCITY_PREFIX_MAX", 0, minimum=0)
VELOCITY_NEW_NUMBERS_MAX = env_int("SMSGW_VELOCITY_NEW_NUMBERS_MAX", 0, minimum=0)
