"""The support bot's own settings (hodor), read from the environment like the rest of
``config.settings``, which imports every one of them."""

from config.env import env_str

# ---- support bot (hodor)
# Raw strings (None when unset or empty), parsed leniently by bots/conf.py: a missing or malformed
# value never blocks start-up or a manage.py command (spec §1.3); GET /telegram/selfcheck names it.

TELEGRAM_BOT_TOKEN = env_str("TELEGRAM_BOT_TOKEN")
TELEGRAM_WEBHOOK_SECRET = env_str("TELEGRAM_WEBHOOK_SECRET")
ADMIN_SECRET = env_str("ADMIN_SECRET")
SUPPORT_CHAT_ID = env_str("SUPPORT_CHAT_ID")
ADMIN_IDS = env_str("ADMIN_IDS")
MAX_MESSAGES_PER_MINUTE = env_str("MAX_MESSAGES_PER_MINUTE")
VERIFY_TTL_HOURS = env_str("VERIFY_TTL_HOURS")
MAX_ATTEMPTS = env_str("MAX_ATTEMPTS")
TELEGRAM_DELETES_PER_SECOND = env_str("TELEGRAM_DELETES_PER_SECOND")
BROADCAST_MAX_RECIPIENTS = env_str("BROADCAST_MAX_RECIPIENTS")
TELEGRAM_SENDS_PER_SECOND = env_str("TELEGRAM_SENDS_PER_SECOND")
TELEGRAM_CHAT_INTERVAL_MS = env_str("TELEGRAM_CHAT_INTERVAL_MS")
TELEGRAM_GROUP_SENDS_PER_WINDOW = env_str("TELEGRAM_GROUP_SENDS_PER_WINDOW")
TELEGRAM_GROUP_WINDOW_SECONDS = env_str("TELEGRAM_GROUP_WINDOW_SECONDS")
TELEGRAM_SEND_BUDGET_MS = env_str("TELEGRAM_SEND_BUDGET_MS")
AUDIT_RETENTION_DAYS = env_str("AUDIT_RETENTION_DAYS")
WELCOME_TEXT = env_str("WELCOME_TEXT")
TURNSTILE_SITE_KEY = env_str("TURNSTILE_SITE_KEY")
TURNSTILE_SECRET_KEY = env_str("TURNSTILE_SECRET_KEY")
PUBLIC_BASE_URL = env_str("PUBLIC_BASE_URL")
TELEGRAM_API_BASE = env_str("TELEGRAM_API_BASE", "https://api.telegram.org")
# The Turnstile verification page's outside parts (tests point them at local fakes).
TURNSTILE_VERIFY_URL = env_str(
    "TURNSTILE_VERIFY_URL", "https://challenges.cloudflare.com/turnstile/v0/siteverify"
)
TURNSTILE_SCRIPT_URL = env_str(
    "TURNSTILE_SCRIPT_URL", "https://challenges.cloudflare.com/turnstile/v0/api.js"
)
TELEGRAM_WEBAPP_SCRIPT_URL = env_str(
    "TELEGRAM_WEBAPP_SCRIPT_URL", "https://telegram.org/js/telegram-web-app.js"
)
BOT_LANGUAGE = env_str("BOT_LANGUAGE", "zh")
# ---- end of support bot (hodor)
