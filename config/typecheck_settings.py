"""The settings mypy's django plugin loads (pyproject.toml, ``[tool.django-stubs]``).

``config.settings`` needs what ``config.bootstrap.prepare()`` provides (a secret key, where the
stores are) and stops with NotPrepared without it; type checking must not start the embedded
stores or write ``var/``. So the missing values get placeholders here: the plugin only reads the
installed apps and models, nothing connects to these URLs.
"""

import os

for _name, _placeholder in (
    ("DJANGO_SECRET_KEY", "typecheck-only"),
    ("DATABASE_URL", "postgres://typecheck@127.0.0.1:1/typecheck"),
    ("REDIS_URL", "redis://127.0.0.1:1/0"),
):
    os.environ.setdefault(_name, _placeholder)

from config.settings import *  # noqa: E402, F403
