"""fabricmon settings: one module, driven by the environment.

Every knob an operator may turn is read here with a small typed helper, so the
configuration table in README.md is the whole story. Secrets may be given as
``NAME_FILE`` (a path) instead of ``NAME`` so they stay out of process listings.
"""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from django.core.exceptions import ImproperlyConfigured
from kombu import Queue
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("FABRICMON_VAR_DIR", BASE_DIR / "var"))


def env_str(name: str, default: str = "") -> str:
    """``NAME`` from the environment, or the contents of the file named by ``NAME_FILE``."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return default if raw in (None, "") else int(raw)


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return default if raw in (None, "") else float(raw)


def env_list(name: str, default: list[str]) -> list[str]:
    raw = env_str(name) if os.environ.get(f"{name}_FILE") else os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.replace("\n", ",").split(",") if item.strip()]


def secret_key(debug: bool) -> str:
    """``SECRET_KEY``: required unless debugging. A public default would sign every session and
    CSRF token with a key anyone can read in this file, so without one we refuse to start."""
    key = env_str("SECRET_KEY")
    if key:
        return key
    if debug:
        return "dev-only-not-secret-change-me"
    raise ImproperlyConfigured(
        "SECRET_KEY is not set: give the SECRET_KEY environment variable (or SECRET_KEY_FILE, a path) "
        "a long random value, e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))' "
        "(DEBUG=true runs with a development key)"
    )


def fernet_keys(name: str) -> list[str]:
    """``name`` as a list of Fernet keys (comma-separated, first one encrypts). Checked here, so a
    typo stops every process at start instead of failing the first delivery or poll."""
    keys = env_list(name, [])
    for i, key in enumerate(keys, 1):
        try:
            ok = len(base64.urlsafe_b64decode(key.encode())) == 32
        except (binascii.Error, ValueError):
            ok = False
        if not ok:  # never echo the key itself
            raise ImproperlyConfigured(
                f"{name}: key {i} of {len(keys)} is not a Fernet key (32 url-safe base64-encoded bytes; "
                "make one with python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())')"
            )
    return keys


def proxy_ssl_header(name: str) -> tuple[str, str] | None:
    """``X-Forwarded-Proto,https`` (or Django's ``HTTP_X_FORWARDED_PROTO,https``) → the tuple
    Django's SECURE_PROXY_SSL_HEADER takes; unset → None (no proxy is trusted)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    header, sep, value = (part.strip() for part in raw.partition(","))
    if not sep or not header or not value:
        raise ImproperlyConfigured(
            f"{name}: expected 'HEADER,VALUE' such as 'X-Forwarded-Proto,https', got {raw!r}"
        )
    meta = header.upper().replace("-", "_")
    return (meta if meta.startswith("HTTP_") else f"HTTP_{meta}", value)


# Concurrent writers (ASGI threads, Celery) on SQLite: take the write lock at BEGIN and wait for it,
# instead of failing with "database is locked" when a read transaction upgrades to a write.
# WAL + synchronous=NORMAL: readers no longer block the writer, and a commit appends to the log
# instead of rewriting pages twice with two fsyncs (event ingest commits a block per batch).
SQLITE_OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
    # journal_size_limit: each time the log is reset it is cut back to 64 MB, not kept at its peak
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA journal_size_limit=67108864",
}


# Django's SQLite backend with the database file and its -wal/-shm kept owner-only (0600): the file
# holds password hashes, API token digests and sealed secrets (fabricmon/base/sqlite/base.py).
SQLITE_ENGINE = "fabricmon.base.sqlite"
# Test databases in memory, as Django does for its own SQLite engine (said explicitly: pytest-django
# recognises SQLite by the stock ENGINE name only, and would give each xdist worker a file instead).
SQLITE_TEST = {"NAME": ":memory:"}


def database_from_url(url: str) -> dict[str, object]:
    """``sqlite:///path`` or ``postgres://user:pass@host:port/name`` → a Django DATABASES entry."""
    if not url:
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        return {"ENGINE": SQLITE_ENGINE, "NAME": VAR_DIR / "fabricmon.sqlite3", "OPTIONS": SQLITE_OPTIONS,
                "TEST": SQLITE_TEST}
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        return {"ENGINE": SQLITE_ENGINE, "NAME": unquote(parsed.path) or ":memory:",
                "OPTIONS": SQLITE_OPTIONS, "TEST": SQLITE_TEST}
    if parsed.scheme in {"postgres", "postgresql", "pgsql"}:
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")),
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            "CONN_MAX_AGE": 60,
        }
    raise ValueError(f"DATABASE_URL: unsupported scheme {parsed.scheme!r} (use sqlite:/// or postgres://)")


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = secret_key(DEBUG)
# Old keys still accepted for signatures (sessions, password resets) while a new SECRET_KEY rolls out;
# secrets at rest sealed with a key derived from one of them stay readable too (fabricmon/base/sealed.py).
SECRET_KEY_FALLBACKS = env_list("SECRET_KEY_FALLBACKS", [])
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# --- HTTPS behind a TLS-terminating proxy (what `manage.py check --deploy` asks for) -------------
# All off by default so `make demo` works on plain http://127.0.0.1; README lists the production set.
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_PROXY_SSL_HEADER = proxy_ssl_header("SECURE_PROXY_SSL_HEADER")
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", False)

# --- Secrets at rest (SNMP communities and v3 keys, receiver URLs and webhook secrets) -----------
# Fernet keys, newest first: the first encrypts, all decrypt (rotate: put a new key in front, run
# `manage.py rotate_secrets`, then drop the old one). Empty: a key derived from SECRET_KEY.
FABRICMON_SECRETS_KEYS = fernet_keys("FABRICMON_SECRETS_KEY")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "fabricmon.topology",
    "fabricmon.telemetry",
    "fabricmon.live",
    "fabricmon.jobs",
    "fabricmon.alerts",
    "fabricmon.phases",
    "fabricmon.whatif",
    "fabricmon.reports",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "fabricmon.urls"
ASGI_APPLICATION = "fabricmon.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "frontend" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "fabricmon.live.nav.nav",  # the top bar's links, by role (live/nav.py)
            ],
        },
    },
]

DATABASES = {"default": database_from_url(env_str("DATABASE_URL"))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "frontend" / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # plotly.min.js straight from the installed plotly package (no CDN, no vendored copy in git)
    "fabricmon.live.staticfinders.PlotlyFinder",
]
STATIC_ROOT = VAR_DIR / "static"

# --- Redis: Celery broker, channel layer and the live window of frames -------------------------
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")

CHANNEL_LAYER_RETRY = {
    "retry": AsyncRetry(ExponentialBackoff(cap=1.0, base=0.05), 3),
    "retry_on_error": [RedisConnectionError, RedisTimeoutError],
}
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # socket_timeout > channels_redis's 5 s BZPOPMIN: redis-py 8 defaults to 5 s too, and the
        # tie kills every idle consumer with "Timeout reading from …" after 5 s.
        # retry: after a Redis restart the pool's connections are dead, and without it the first
        # socket to connect got a 500 ("Connection closed by server", 60-minute soak)
        "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30, **CHANNEL_LAYER_RETRY}],
                   "capacity": 200, "expiry": 30},
    }
}

CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# --- Collection and the live window --------------------------------------------------------------
# How many seconds of frames each fabric keeps in Redis for the live views.
FABRICMON_LIVE_WINDOW_S = env_int("FABRICMON_LIVE_WINDOW_S", 600)
# A collector holds its shard's lease for as long as it is healthy, renewing it every third of this
# TTL; a standby takes a dead holder's shard over once it expires. 0: 0.9 of the shard's fastest
# poll interval (a takeover then costs about two intervals).
FABRICMON_LEASE_TTL_S = env_float("FABRICMON_LEASE_TTL_S", 0.0)
# SNMP client of the collectors: "fast" = our own (v2c, and v3 with auth MD5/SHA/SHA-2 + priv
# AES-128 or none; other v3 protocols through pysnmp), "pysnmp" = pysnmp for every switch (the
# reference, and the fallback should the fast path misread an agent).
FABRICMON_SNMP_ENGINE = env_str("FABRICMON_SNMP_ENGINE", "fast")
if FABRICMON_SNMP_ENGINE not in ("fast", "pysnmp"):
    raise ValueError(f"FABRICMON_SNMP_ENGINE: {FABRICMON_SNMP_ENGINE!r} is neither fast nor pysnmp")
# Switches per collector shard (one long-lived Celery task per shard).
FABRICMON_SHARD_SIZE = env_int("FABRICMON_SHARD_SIZE", 16)
# Downsampled history kept in the database: one row per port per this many seconds.
FABRICMON_HISTORY_STEP_S = env_int("FABRICMON_HISTORY_STEP_S", 60)
# A SQLite write transaction that waited for, or held, the one write lock longer than this is logged
# with the code that ran it (fabricmon.base.sqlite.base)
FABRICMON_SQLITE_SLOW_WRITE_S = env_float("FABRICMON_SQLITE_SLOW_WRITE_S", 2.0)
# History rows older than this are pruned (default 30 days).
FABRICMON_HISTORY_RETENTION_S = env_float("FABRICMON_HISTORY_RETENTION_S", 30 * 86400.0)
# --- Celery queues: collection, evaluation, imports, delivery (docs/deploy.md) ---------------------
# Each stage has its own queue so each can have its own workers: collection (the long-lived shard
# collectors and beat's ensure_collectors), evaluation (alert evaluation, notification groups, the
# cabling check, retention), imports (trace uploads too large to import inside the request) and
# delivery (notifications; below). A worker started without -Q consumes every queue but delivery
# (CELERY_TASK_QUEUES): `make demo` runs one such worker beside the delivery worker; compose runs
# one service per queue (`docker compose up --scale worker=3` adds collection workers).
FABRICMON_COLLECTOR_QUEUE = env_str("FABRICMON_COLLECTOR_QUEUE", "collection")
FABRICMON_EVALUATION_QUEUE = env_str("FABRICMON_EVALUATION_QUEUE", "evaluation")
# When set, every collector process appends one NDJSON line per poll to its own file in this
# directory (telemetry/poll_journal.py): who polled which switch for which tick, and when.
FABRICMON_POLL_JOURNAL_DIR = env_str("FABRICMON_POLL_JOURNAL_DIR", "")
# Beat hands every free shard (none running, or its worker died) to a collector this often.
FABRICMON_ENSURE_COLLECTORS_S = env_float("FABRICMON_ENSURE_COLLECTORS_S", 3.0)
CELERY_BEAT_SCHEDULE = {
    "ensure-collectors": {
        "task": "telemetry.ensure_collectors",
        "schedule": FABRICMON_ENSURE_COLLECTORS_S,
        # A beat tick nobody ran in time is superseded by the next one: never let them pile up.
        "options": {"expires": FABRICMON_ENSURE_COLLECTORS_S, "queue": FABRICMON_COLLECTOR_QUEUE},
    },
}

# A run's phase-view socket looks for new events and counters this often even when ingest sends
# no "run changed" nudge (fabricmon/phases/stream.py); an unchanged run costs two small queries.
FABRICMON_PHASES_TICK_S = env_float("FABRICMON_PHASES_TICK_S", 2.0)
# views.json and the heatmap's phase markers may answer from a run's views computed at most this
# long ago, when only events and counter frames that streamed in since are missing from them (a
# changed rank map, state or topology always counts); a web-process thread keeps the watched runs that fresh
# (fabricmon/phases/refresher.py). 0: always compute in the request.
FABRICMON_PHASES_MAX_STALE_S = env_float("FABRICMON_PHASES_MAX_STALE_S", 5.0)
# The phase views (page, socket, views.json) cover this many of a run's newest reported steps;
# older steps are paged (views.json?steps_from=&steps_to=, at most 64 steps a page).
FABRICMON_PHASE_WINDOW_STEPS = int(env_float("FABRICMON_PHASE_WINDOW_STEPS", 16))
# … and send at most this many ports as rows (fabricmon/core/phases/rows.py: every column's hot port,
# then the busiest); a fabric with no more ports sends them all. views.json?max_ports= asks for
# another count (up to 4096). At 16,896 ports a full window of every port was ~45 MB an answer.
FABRICMON_PHASE_MAX_PORTS = env_int("FABRICMON_PHASE_MAX_PORTS", 512)
# A run's shareable report (fabricmon/reports): its heatmap shows at most this many ports (every
# column's hot port, then the run's busiest) and this many (step, layer, phase) columns (the newest
# steps of the phase views' window that fit), so the file stays a few MB for any run.
FABRICMON_REPORT_MAX_PORTS = env_int("FABRICMON_REPORT_MAX_PORTS", 96)
FABRICMON_REPORT_MAX_COLUMNS = env_int("FABRICMON_REPORT_MAX_COLUMNS", 512)

# --- Alerts ------------------------------------------------------------------------------------
# Host names, IPs or CIDRs that notifications may reach although the SSRF guard refuses
# loopback/private/link-local addresses (e.g. an on-prem Alertmanager: "10.0.0.5,am.internal").
FABRICMON_ALERTS_ALLOW_HOSTS = env_list("FABRICMON_ALERTS_ALLOW_HOSTS", [])
# Beat sends due notifications (outbox rows) this often.
FABRICMON_ALERTS_DELIVER_S = env_float("FABRICMON_ALERTS_DELIVER_S", 2.0)
# One delivery (DNS, connect, TLS, sending, every read, redirects) ends within this many seconds,
# however slowly the receiver answers (Alertmanager's minimum notification timeout is 10 s too);
# at most this many KB of an answer are read; a notification that keeps failing with retryable
# errors (timeouts, 5xx, 429, refused connections) fails for good after this many attempts.
FABRICMON_ALERTS_DELIVERY_DEADLINE_S = env_float("FABRICMON_ALERTS_DELIVERY_DEADLINE_S", 10.0)
FABRICMON_ALERTS_MAX_RESPONSE_KB = env_int("FABRICMON_ALERTS_MAX_RESPONSE_KB", 64)
# (15: with full jitter a retry waits half its bound on average, so 15 attempts span about the
# 20 minutes that 10 un-jittered ones did.)
FABRICMON_ALERTS_MAX_ATTEMPTS = env_int("FABRICMON_ALERTS_MAX_ATTEMPTS", 15)
# Deliveries run on their own Celery queue, consumed by their own worker (`make demo`, compose):
# a slow receiver then holds a delivery worker, never the one that evaluates alerts or collects.
FABRICMON_DELIVERY_QUEUE = env_str("FABRICMON_DELIVERY_QUEUE", "delivery")
CELERY_TASK_ROUTES = {
    "alerts.deliver_due": {"queue": FABRICMON_DELIVERY_QUEUE},
    "alerts.deliver": {"queue": FABRICMON_DELIVERY_QUEUE},
    "telemetry.collect_shard": {"queue": FABRICMON_COLLECTOR_QUEUE},
    "telemetry.ensure_collectors": {"queue": FABRICMON_COLLECTOR_QUEUE},
    **{name: {"queue": FABRICMON_EVALUATION_QUEUE} for name in (
        "alerts.evaluate", "alerts.flush_groups", "alerts.check_cabling", "alerts.prune_history",
        "jobs.prune_storage")},
}
CELERY_BEAT_SCHEDULE["alerts-deliver-due"] = {
    "task": "alerts.deliver_due",
    "schedule": FABRICMON_ALERTS_DELIVER_S,
    "options": {"expires": FABRICMON_ALERTS_DELIVER_S},
}
# Notification groups (docs/alerts.md) whose group_wait / group_interval is over are flushed this
# often (on the main queue: a group's timer never waits on a slow receiver); a group without
# alerts is kept this long (Alertmanager's --data.retention, 120 h) before it is deleted.
FABRICMON_ALERTS_FLUSH_S = env_float("FABRICMON_ALERTS_FLUSH_S", 1.0)
FABRICMON_ALERTS_GROUP_RETENTION_S = env_float("FABRICMON_ALERTS_GROUP_RETENTION_S", 120 * 3600.0)
CELERY_BEAT_SCHEDULE["alerts-flush-groups"] = {
    "task": "alerts.flush_groups",
    "schedule": FABRICMON_ALERTS_FLUSH_S,
    "options": {"expires": FABRICMON_ALERTS_FLUSH_S},
}
# Detection runs over each fabric's new frames this often.
FABRICMON_ALERTS_EVALUATE_S = env_float("FABRICMON_ALERTS_EVALUATE_S", 1.0)
CELERY_BEAT_SCHEDULE["alerts-evaluate"] = {
    "task": "alerts.evaluate",
    "schedule": FABRICMON_ALERTS_EVALUATE_S,
    "options": {"expires": FABRICMON_ALERTS_EVALUATE_S},
}

# The rail-plan check reads every switch's LLDP neighbours and raises rail_plan_violation alerts
# this often (an SNMP walk of LLDP-MIB or a gNMI Get per switch: small next to a poll).
FABRICMON_CABLING_CHECK_S = env_float("FABRICMON_CABLING_CHECK_S", 60.0)
# … paced: reads start at most this many a second (a 184-switch fabric's check is ~9 s of reads
# rather than one burst that stalled telemetry every minute), at most this many in flight. Not
# fewer: a busy switch answers a Get in seconds (the twin's ~3 s at 16,896 ports), and at 8 in
# flight a check took 65-76 s, longer than its interval
FABRICMON_CABLING_READS_PER_S = env_float("FABRICMON_CABLING_READS_PER_S", 20.0)
FABRICMON_CABLING_CONCURRENCY = env_int("FABRICMON_CABLING_CONCURRENCY", 64)
CELERY_BEAT_SCHEDULE["alerts-check-cabling"] = {
    "task": "alerts.check_cabling",
    "schedule": FABRICMON_CABLING_CHECK_S,
    "options": {"expires": FABRICMON_CABLING_CHECK_S},
}

# --- Prometheus /metrics -----------------------------------------------------------------------
# The bearer token a scraper sends to GET /metrics (empty: /metrics answers 401 to everyone).
FABRICMON_METRICS_TOKEN = env_str("FABRICMON_METRICS_TOKEN", "")
# Ports with per-port series per fabric and scrape (over it: the hottest by utilization); with
# ~11 per-port families this bounds a fabric's series at about 11 × this.
FABRICMON_METRICS_MAX_PORTS = env_int("FABRICMON_METRICS_MAX_PORTS", 2048)

# --- Jobs: trace uploads ------------------------------------------------------------------------
# Uploads up to this size are imported inside the request (the answer carries the result); larger
# ones are saved under FABRICMON_UPLOAD_DIR and imported by a Celery task whose progress the API
# and the run page show.
FABRICMON_UPLOAD_INLINE_BYTES = env_int("FABRICMON_UPLOAD_INLINE_BYTES", 8 * 1024 * 1024)
FABRICMON_UPLOAD_DIR = Path(os.environ.get("FABRICMON_UPLOAD_DIR", VAR_DIR / "uploads"))
# Celery queue the trace imports run on.
FABRICMON_IMPORT_QUEUE = env_str("FABRICMON_IMPORT_QUEUE", "imports")
CELERY_TASK_ROUTES["jobs.import_upload"] = {"queue": FABRICMON_IMPORT_QUEUE}
# What a worker started without -Q consumes: every queue but delivery's (unless delivery shares
# one of them), and Celery's default queue for anything unrouted.
CELERY_TASK_QUEUES = [Queue(name) for name in dict.fromkeys(
    ("celery", FABRICMON_COLLECTOR_QUEUE, FABRICMON_EVALUATION_QUEUE, FABRICMON_IMPORT_QUEUE))]
# Ranks a run may report when it declares no world_size (matrices are ranks × ranks int64: 1024
# ranks is 8 MB a matrix), and the largest world_size a run may declare.
FABRICMON_MAX_RANKS = env_int("FABRICMON_MAX_RANKS", 1024)
FABRICMON_MAX_WORLD_SIZE = env_int("FABRICMON_MAX_WORLD_SIZE", 65536)
# Request bodies are refused over these sizes before they are read (fabricmon/jobs/body_guard.py;
# inside Daphne by fabricmon/serve.py): an event batch, a trace upload (held by Daphne while the
# app reads it: the cap bounds that memory), any other ingest API body, and every other request.
FABRICMON_INGEST_MAX_BYTES = env_int("FABRICMON_INGEST_MAX_BYTES", 32 * 1024 * 1024)
FABRICMON_UPLOAD_MAX_BYTES = env_int("FABRICMON_UPLOAD_MAX_BYTES", 256 * 1024 * 1024)
FABRICMON_API_MAX_JSON_BYTES = env_int("FABRICMON_API_MAX_JSON_BYTES", 4 * 1024 * 1024)
FABRICMON_MAX_BODY_BYTES = env_int("FABRICMON_MAX_BODY_BYTES", 8 * 1024 * 1024)
# Per-token rate limit of the jobs ingest API (a token bucket in Redis): requests per second and
# burst size per API token; a rate of 0 turns it off. Over the limit: 429 with Retry-After.
FABRICMON_INGEST_RATE_PER_S = env_float("FABRICMON_INGEST_RATE_PER_S", 200.0)
FABRICMON_INGEST_BURST = env_int("FABRICMON_INGEST_BURST", 1000)

# --- Storage: retention and budgets (fabricmon/jobs/retention.py, fabricmon/alerts/retention.py) ---
# Event blocks are kept this many days after they were stored; traffic matrices this many days
# after their run ended; a run's blocks + matrices + keys are cut, oldest steps first, when they
# pass its budget; alert history (resolved alerts, their changes, closed episodes, finished
# notifications) is kept this many days. The beat applies them every FABRICMON_PRUNE_EVERY_S.
FABRICMON_EVENTS_RETENTION_DAYS = env_float("FABRICMON_EVENTS_RETENTION_DAYS", 14.0)
FABRICMON_MATRICES_RETENTION_DAYS = env_float("FABRICMON_MATRICES_RETENTION_DAYS", 30.0)
FABRICMON_RUN_BUDGET_MB = env_float("FABRICMON_RUN_BUDGET_MB", 2048.0)
FABRICMON_ALERTS_RETENTION_DAYS = env_float("FABRICMON_ALERTS_RETENTION_DAYS", 30.0)
FABRICMON_PRUNE_EVERY_S = env_float("FABRICMON_PRUNE_EVERY_S", 300.0)
CELERY_BEAT_SCHEDULE["jobs-prune-storage"] = {
    "task": "jobs.prune_storage",
    "schedule": FABRICMON_PRUNE_EVERY_S,
    "options": {"expires": FABRICMON_PRUNE_EVERY_S},
}
CELERY_BEAT_SCHEDULE["alerts-prune-history"] = {
    "task": "alerts.prune_history",
    "schedule": FABRICMON_PRUNE_EVERY_S,
    "options": {"expires": FABRICMON_PRUNE_EVERY_S},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}
