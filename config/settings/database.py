"""The database: SQLite (WAL) in the var folder when DATABASE_URL is unset, else PostgreSQL with bounded
waits."""

from __future__ import annotations

import dj_database_url

from config.settings.environment import PRODUCTION, VAR_DIR
from smsgw.config import security
from smsgw.config.env import env_bool, env_int, env_secret

# --- database -------------------------------------------------------------------------------------
# postgres://user:password@host:5432/name (PostgreSQL, what production runs on); unset, SQLite in the
# var folder (the embedded mode), and setting it makes SMSGW_ENV default to production.
_database_url = env_secret("DATABASE_URL", f"sqlite:///{VAR_DIR / 'smsgw.sqlite3'}")
security.placeholders_refuse(PRODUCTION, DATABASE_URL=_database_url)  # an example's password left in
DATABASES = {
    "default": dj_database_url.parse(
        _database_url,
        # Seconds a database connection is kept open for the next request or task (0: one per request).
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
