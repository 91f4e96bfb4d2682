"""Django settings for Stepwise.

Every knob is read from the environment through the typed helpers of `stepwise.env`. Each helper raises
ImproperlyConfigured with the variable's name and the accepted values when a value is wrong, and
accepts NAME_FILE (a path whose contents are the value) wherever NAME is accepted, for Docker
secrets. Defaults suit a developer machine and pytest: SQLite and an embedded broker under the data
directory, loopback binding, login required everywhere.
"""

from __future__ import annotations

import os
from typing import Any

import dj_database_url
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from stepwise.env import BASE_DIR, abspath, envbind, envbool, envint, envlist, envpath, envsecret, envstr

# --- Paths --------------------------------------------------------------------------------------

STEPWISE_DATA_DIR = envpath("STEPWISE_DATA_DIR", BASE_DIR / "data")
STEPWISE_DATA_DIR.mkdir(parents=True, exist_ok=True)

# --- Core -----------------------------------------------------------------------------------------

SECRET_KEY = envsecret("SECRET_KEY", STEPWISE_DATA_DIR / "secret_key")
DEBUG = envbool("DEBUG", False)
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "localhost,127.0.0.1")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "investigations.apps.InvestigationsConfig",
    "simple_history",
    "reports.apps.ReportsConfig",
    "axes",  # login rate limiting and lockout (AXES_* below)
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Every view needs a signed-in user unless it is marked @login_not_required (the login page).
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Content-Security-Policy (SECURE_CSP) and Permissions-Policy (STEPWISE_PERMISSIONS_POLICY).
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "stepwise.security.PermissionsPolicyMiddleware",
    # Signs out a session idle for STEPWISE_SESSION_IDLE_SECONDS.
    "stepwise.security.IdleSessionMiddleware",
    # Teams and roles (reports.access) on every investigations view that names an investigation.
    "stepwise.security.InvestigationAccessMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # A machine at its cap of served TSDB copies answers 503 "busy" (page, htmx fragment or JSON).
    "stepwise.busy.SourceBusyMiddleware",
    # Records who made each change kept by django-simple-history (reports).
    "simple_history.middleware.HistoryRequestMiddleware",
    # Last, as django-axes asks: answers a locked-out login with the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "stepwise.urls"
WSGI_APPLICATION = "stepwise.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------------

DATABASE_URL = envstr("DATABASE_URL") or f"sqlite:///{STEPWISE_DATA_DIR / 'stepwise.sqlite3'}"
try:
    _default_db = dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)
except (ValueError, dj_database_url.UnknownSchemeError) as exc:
    raise ImproperlyConfigured(
        f"DATABASE_URL is not a database URL ({exc}): use sqlite:////path/db.sqlite3 or "
        "postgres://user:password@host:5432/name"
    ) from exc
if _default_db["ENGINE"] == "django.db.backends.sqlite3":
    # The web server and the worker write the same file: WAL lets readers proceed during a write,
    # IMMEDIATE takes the write lock up front instead of failing on upgrade, and timeout waits.
    _default_db["CONN_MAX_AGE"] = 0
    _default_db["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL",
        **_default_db.get("OPTIONS", {}),
    }
DATABASES = {"default": _default_db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Auth and security ----------------------------------------------------------------------------

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "investigations:home"
LOGOUT_REDIRECT_URL = "login"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# STEPWISE_TLS=1 when the app is served over HTTPS (normally by a reverse proxy that terminates TLS
# and sets X-Forwarded-Proto). Cookies are then only sent over HTTPS and browsers pinned to it.
# Off by default because the demo is plain HTTP on loopback, where secure cookies would never be sent.
STEPWISE_TLS = envbool("STEPWISE_TLS", False)
# Fernet keys (comma-separated, newest first) that encrypt stored source passwords; empty: keys derived
# from SECRET_KEY and SECRET_KEY_FALLBACKS (investigations/crypto.py tells how to rotate them).
STEPWISE_CREDENTIALS_KEY = envlist("STEPWISE_CREDENTIALS_KEY", "")
for _key in STEPWISE_CREDENTIALS_KEY:
    try:
        Fernet(_key)
    except ValueError:
        raise ImproperlyConfigured(
            "STEPWISE_CREDENTIALS_KEY holds a key that is not a Fernet key (32 url-safe base64-encoded "
            "bytes, as `python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'` prints)"
        ) from None
SESSION_COOKIE_SECURE = STEPWISE_TLS
CSRF_COOKIE_SECURE = STEPWISE_TLS
SESSION_COOKIE_HTTPONLY = True
# A session unused this long is signed out (IdleSessionMiddleware); none lives past SESSION_COOKIE_AGE.
STEPWISE_SESSION_IDLE_SECONDS = envint("STEPWISE_SESSION_IDLE_SECONDS", 2 * 3600, minimum=60)
SESSION_COOKIE_AGE = envint("STEPWISE_SESSION_MAX_SECONDS", 12 * 3600, minimum=STEPWISE_SESSION_IDLE_SECONDS)
# django-axes: after 5 failed sign-ins for one user name from one address, that pair is locked out for
# 15 minutes (other users and addresses are not); every failure is logged (axes.watch_login).
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = envint("STEPWISE_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = envint("STEPWISE_LOGIN_LOCKOUT_MINUTES", 15, minimum=1) / 60.0  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (Django's ContentSecurityPolicyMiddleware): scripts only from the app's own
# static files (htmx, Plotly, the page scripts; no inline script, no eval), everything else from self.
# Plotly sets style attributes and inserts <style> elements as it draws, so styles allow inline.
# Browsers report what it blocks to /csp-report/ (logged on the stepwise.csp logger).
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF, CSP.UNSAFE_INLINE],
    "img-src": [CSP.SELF, "data:"],
    "font-src": [CSP.SELF],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
    "report-uri": "/csp-report/",
}
# Permissions-Policy: the app uses none of these browser features, nor may anything it embeds.
STEPWISE_PERMISSIONS_POLICY = dict.fromkeys(
    (
        "accelerometer",
        "camera",
        "display-capture",
        "geolocation",
        "gyroscope",
        "magnetometer",
        "microphone",
        "midi",
        "payment",
        "usb",
        "serial",
        "xr-spatial-tracking",
    ),
    (),
)
if STEPWISE_TLS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = envbool("STEPWISE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = envint("STEPWISE_HSTS_SECONDS", 31_536_000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("STEPWISE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = envbool("STEPWISE_HSTS_PRELOAD", False)
    if not SECURE_HSTS_PRELOAD:
        # Preloading binds the whole domain to HTTPS for browsers, for good: its owner opts in with
        # STEPWISE_HSTS_PRELOAD=1; until then `check --deploy` need not warn about it.
        SILENCED_SYSTEM_CHECKS = ["security.W021"]

# --- Internationalisation -------------------------------------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Static and uploaded files --------------------------------------------------------------------

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = envpath("STEPWISE_STATIC_ROOT", STEPWISE_DATA_DIR / "staticfiles")
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns on every start when it is missing
# WhiteNoise serves static files from the app itself (gunicorn does not), straight from the finders
# when collectstatic has not been run, so the demo needs no extra step and no CDN.
# STEPWISE_STATIC_COLLECTED=1 (the Docker image, which runs collectstatic when it is built): the files get
# content-hashed names and compressed copies, which WhiteNoise serves compressed (plotly-gl2d.min.js: 1.5 MB,
# 0.4 MB with brotli) and cacheable for a year, instead of revalidated on each page.
STEPWISE_STATIC_COLLECTED = envbool("STEPWISE_STATIC_COLLECTED", False)
WHITENOISE_USE_FINDERS = not STEPWISE_STATIC_COLLECTED
# Served from the source tree (the demo, a developer's run), a file is looked up again on each request:
# WhiteNoise otherwise records every file's size when it starts, and a file edited while the app runs was
# served cut off at its old length; and the browser asks again on each page (max-age 0: a 304 when the file
# did not change), so an edit shows on the next load. Collected files never change: read once, cached.
WHITENOISE_AUTOREFRESH = not STEPWISE_STATIC_COLLECTED
if not STEPWISE_STATIC_COLLECTED:
    WHITENOISE_MAX_AGE = 0
else:
    STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
MEDIA_ROOT = envpath("STEPWISE_MEDIA_ROOT", STEPWISE_DATA_DIR / "media")
MEDIA_URL = "media/"
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024

# --- Stepwise -------------------------------------------------------------------------------------

STEPWISE_BIND = envbind("STEPWISE_BIND", "127.0.0.1:8000")
# Prometheus servers the app may query: host, host:port, host:first-last, [v6]:port or a CIDR. Hostnames
# are compared literally and never resolved (no DNS rebinding). stepwise.E002 reports entries that do not
# parse. Default: loopback on the Prometheus ports 9090-9199 and the ranges the app's own served TSDB
# copies (19190-19989) and SSH tunnels (20190-20989) use; never another loopback service (Redis, ...).
_LOOPBACK_PORTS = ("9090-9199", "19190-19989", "20190-20989")
STEPWISE_ALLOWED_PROMETHEUS = envlist(
    "STEPWISE_ALLOWED_PROMETHEUS",
    ",".join(f"{host}:{ports}" for host in ("127.0.0.1", "localhost", "[::1]") for ports in _LOOPBACK_PORTS),
)
STEPWISE_DEMO_JOBS = STEPWISE_DATA_DIR / "demo-jobs"
# Folders whose job directories may be read (os.pathsep-separated); anything else is refused.
STEPWISE_JOB_ROOTS = [
    abspath(p) for p in envlist("STEPWISE_JOB_ROOTS", str(STEPWISE_DEMO_JOBS), sep=os.pathsep)
]
STEPWISE_PROMETHEUS_BIN = envstr("STEPWISE_PROMETHEUS_BIN") or "prometheus"
STEPWISE_TSDB_VIEWS = envpath("STEPWISE_TSDB_VIEWS", STEPWISE_DATA_DIR / "tsdb-views")
# A served TSDB copy unused this long is stopped by the next query run (the worker has no other clock).
STEPWISE_TSDB_IDLE_SECONDS = envint("STEPWISE_TSDB_IDLE_SECONDS", 1800, minimum=60)
# One served copy per TSDB per machine, at most this many at a time: past it the least recently used
# copy unused for STEPWISE_TSDB_BUSY_SECONDS is stopped first, and if every copy is in use the page
# answers 503 "busy" and tasks retry.
STEPWISE_TSDB_MAX_COPIES = envint("STEPWISE_TSDB_MAX_COPIES", 4, minimum=1)
STEPWISE_TSDB_BUSY_SECONDS = envint("STEPWISE_TSDB_BUSY_SECONDS", 60, minimum=0)
# SSH tunnels Stepwise opens to a job's Prometheus: the ssh client, where each tunnel is recorded, how
# long opening may take, and how long one may stay unused before tunnels_prune() closes it.
STEPWISE_SSH_BIN = envstr("STEPWISE_SSH_BIN") or "ssh"
STEPWISE_TUNNELS_DIR = envpath("STEPWISE_TUNNELS_DIR", STEPWISE_DATA_DIR / "tunnels")
STEPWISE_TUNNEL_TIMEOUT = envint("STEPWISE_TUNNEL_TIMEOUT", 20, minimum=1, maximum=600)
STEPWISE_TUNNEL_IDLE_SECONDS = envint("STEPWISE_TUNNEL_IDLE_SECONDS", 1800, minimum=60)
# The tunnel allow-list (playbooks.tunnel_policy): head nodes and jump hosts (names, shell patterns, IPs
# or CIDRs; empty: tunnels are off), their SSH ports, the Prometheus ports a tunnel may forward to, and
# the only folder identity and known_hosts files may come from. stepwise.E007 reports bad port lists.
STEPWISE_TUNNEL_HOSTS = envlist("STEPWISE_TUNNEL_HOSTS", "")
STEPWISE_TUNNEL_SSH_PORTS = envstr("STEPWISE_TUNNEL_SSH_PORTS") or "22"
STEPWISE_TUNNEL_PROMETHEUS_PORTS = envstr("STEPWISE_TUNNEL_PROMETHEUS_PORTS") or "9090-9199"
STEPWISE_TUNNEL_KEYS_DIR = envpath("STEPWISE_TUNNEL_KEYS_DIR", STEPWISE_DATA_DIR / "ssh-keys")
STEPWISE_PROMETHEUS_TIMEOUT = envint("STEPWISE_PROMETHEUS_TIMEOUT", 30, minimum=1)
STEPWISE_QUERY_CONCURRENCY = envint("STEPWISE_QUERY_CONCURRENCY", 4, minimum=1, maximum=64)
STEPWISE_RESULT_MAX_SERIES = envint("STEPWISE_RESULT_MAX_SERIES", 50, minimum=1)
STEPWISE_RESULT_MAX_POINTS = envint("STEPWISE_RESULT_MAX_POINTS", 200, minimum=2)
STEPWISE_TASK_MAX_RETRIES = envint("STEPWISE_TASK_MAX_RETRIES", 4, minimum=0)
# Largest job log a user may upload on the new-investigation page (triage streams it, so size is
# only a disk and upload-time question).
STEPWISE_LOG_UPLOAD_MAX_MB = envint("STEPWISE_LOG_UPLOAD_MAX_MB", 1024, minimum=1)

# --- Celery ---------------------------------------------------------------------------------------

REDIS_URL = envstr("REDIS_URL") or ""
STEPWISE_BROKER_DIR = STEPWISE_DATA_DIR / "broker"
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
        # With acks_late, Redis redelivers an unacknowledged task after this long: just above the hard
        # time limit, so a task still running is never run twice, and one whose worker died is run
        # again minutes later (its claim then sees the run failed by the watchdog, or takes it over).
        # (set below from the time limits)
    }
else:
    # Embedded broker: kombu's filesystem transport, pure Python. Producer and consumer share this
    # configuration, so they must read and write the same folder ("messages"). Processed messages
    # are moved (an atomic rename on the same filesystem, so two workers never both take one) to
    # "processed", which `rundemo` prunes.
    CELERY_BROKER_URL = "filesystem://localhost/"  # the host is ignored; naming one avoids a warning
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(STEPWISE_BROKER_DIR / "messages"),
        "data_folder_out": str(STEPWISE_BROKER_DIR / "messages"),
        "processed_folder": str(STEPWISE_BROKER_DIR / "processed"),
        "control_folder": str(STEPWISE_BROKER_DIR / "control"),
        "store_processed": True,
        "polling_interval": 0.5,
    }
    for _sub in ("messages", "processed", "control"):
        (STEPWISE_BROKER_DIR / _sub).mkdir(parents=True, exist_ok=True)
    # Remote control needs broadcast replies that the filesystem transport does not deliver.
    CELERY_WORKER_ENABLE_REMOTE_CONTROL = False

# --- Shared cache ---------------------------------------------------------------------------------

# Timeline contexts and panel results (keyed by what the data source holds, so a finished job's stay
# valid) are shared by every web process and worker: Redis when REDIS_URL is set, else a database table
# (created by the investigations migration 0003). A live source's entries expire after
# STEPWISE_TIMELINE_LIVE_TTL seconds.
CACHES: dict[str, dict[str, Any]]
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "stepwise",
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "stepwise_cache",
            "KEY_PREFIX": "stepwise",
            # About 50 KB a panel: 20,000 entries are about 1 GB at most; a full table drops a third.
            "OPTIONS": {"MAX_ENTRIES": 20_000, "CULL_FREQUENCY": 3},
        }
    }
STEPWISE_TIMELINE_LIVE_TTL = envint("STEPWISE_TIMELINE_LIVE_TTL", 60, minimum=1)
# With Redis, every request reads its session from the shared cache (written through to the database, so
# a flushed cache signs nobody out): one database query less per page. The database cache would gain nothing.
SESSION_ENGINE = "django.contrib.sessions.backends." + ("cached_db" if REDIS_URL else "db")

# --- Per-source query budget ------------------------------------------------------------------------

# A live job's Prometheus serves the training job too: every process on this host (web, workers) runs
# at most STEPWISE_SOURCE_MAX_QUERIES queries at a time on one source (lock files under
# STEPWISE_BUDGET_DIR; the others queue, at most STEPWISE_SOURCE_QUEUE_SECONDS), and a timeline panel
# asks at most STEPWISE_SOURCE_MAX_SAMPLES samples (series x points) of one query (its step coarsens).
STEPWISE_SOURCE_MAX_QUERIES = envint("STEPWISE_SOURCE_MAX_QUERIES", 4, minimum=1, maximum=64)
STEPWISE_SOURCE_MAX_SAMPLES = envint("STEPWISE_SOURCE_MAX_SAMPLES", 1_000_000, minimum=10_000)
STEPWISE_SOURCE_QUEUE_SECONDS = envint("STEPWISE_SOURCE_QUEUE_SECONDS", 120, minimum=1)
STEPWISE_BUDGET_DIR = envpath("STEPWISE_BUDGET_DIR", STEPWISE_DATA_DIR / "budget")

# Results go to the database (QueryRun/QueryResult rows), so Celery keeps none.
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = envint("STEPWISE_TASK_SOFT_TIME_LIMIT", 600, minimum=1)
CELERY_TASK_TIME_LIMIT = envint("STEPWISE_TASK_TIME_LIMIT", CELERY_TASK_SOFT_TIME_LIMIT + 60, minimum=2)
if CELERY_TASK_TIME_LIMIT <= CELERY_TASK_SOFT_TIME_LIMIT:
    raise ImproperlyConfigured(
        f"STEPWISE_TASK_TIME_LIMIT={CELERY_TASK_TIME_LIMIT} must exceed "
        f"STEPWISE_TASK_SOFT_TIME_LIMIT={CELERY_TASK_SOFT_TIME_LIMIT}"
    )
if REDIS_URL:
    CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] = CELERY_TASK_TIME_LIMIT + 60
# Dead runs (investigations.services.deadruns): a task working on a run beats this often; a beat this
# old, left by a task that never ended, means its worker died: the run is failed with that reason.
STEPWISE_RUN_HEARTBEAT_SECONDS = envint("STEPWISE_RUN_HEARTBEAT_SECONDS", 10, minimum=1)
STEPWISE_RUN_DEAD_AFTER_SECONDS = envint(
    "STEPWISE_RUN_DEAD_AFTER_SECONDS",
    6 * STEPWISE_RUN_HEARTBEAT_SECONDS,
    minimum=3 * STEPWISE_RUN_HEARTBEAT_SECONDS,
)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# --- Logging --------------------------------------------------------------------------------------

STEPWISE_LOG_LEVEL = (envstr("STEPWISE_LOG_LEVEL") or "INFO").upper()
if STEPWISE_LOG_LEVEL not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
    raise ImproperlyConfigured(
        f"STEPWISE_LOG_LEVEL={STEPWISE_LOG_LEVEL!r} is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL"
    )

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": STEPWISE_LOG_LEVEL},
    # One line per Prometheus request is noise at INFO; failures surface through the client's errors.
    # axes.apps only announces its version at start-up (on stderr of every manage.py command); lockouts
    # and failed sign-ins are logged by axes.handlers and axes.watch_login, which keep the root level.
    "loggers": {
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        "axes.apps": {"level": "WARNING"},
    },
}

# --- Mail (reports: mentions and assignments) ------------------------------------------------------
# Django's mail backend. Served over TLS (production) the default is SMTP to STEPWISE_MAIL_HOST:_PORT
# (localhost:25, the host's MTA; a failed send is logged, the comment is kept); otherwise (the demo) the
# console backend prints each message to the web server's log. STEPWISE_MAIL_BACKEND overrides both.
_mail_backend = envstr(
    "STEPWISE_MAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if STEPWISE_TLS
    else "django.core.mail.backends.console.EmailBackend",
)
MAILERS = {
    "default": {
        "BACKEND": _mail_backend,
        "OPTIONS": (
            {
                "host": envstr("STEPWISE_MAIL_HOST", "localhost"),
                "port": envint("STEPWISE_MAIL_PORT", 25, minimum=1),
            }
            if _mail_backend.endswith("smtp.EmailBackend")
            else {}
        ),
    }
}
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "stepwise@localhost")

# --- Reports: exports -------------------------------------------------------------------------------
# Chromium that kaleido drives to draw pinned charts as SVG for the HTML and PDF exports.
STEPWISE_CHROMIUM = envstr("STEPWISE_CHROMIUM") or "/usr/bin/chromium"
# A report's PDF is built by the worker (reports.tasks.report_pdf_task) within this many seconds (its soft
# limit; the hard one is 30 s later); an export still building after that is failed with the reason.
STEPWISE_REPORT_PDF_TIME_LIMIT = envint("STEPWISE_REPORT_PDF_TIME_LIMIT", 300, minimum=2)
