"""Text primary keys generated in code (seed 004 §2.4): ``<prefix>_<uuid hex>``."""

import uuid


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def new_admin_user_id() -> str:
    return new_id("admin")


def new_login_event_id() -> str:
    return new_id("login")
