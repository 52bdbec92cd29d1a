"""Secrets generated once and kept in a file (mode 0600) so that later runs reuse them."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def read_or_create_secret(path: Path, generate: Callable[[], str]) -> tuple[str, bool]:
    """Return (secret, created) for ``path``, creating it with ``generate()`` if missing.

    Creation is atomic across processes: the value is written to a private temporary file and
    hard-linked into place, so a concurrent reader never sees a half-written file and exactly
    one generated value wins.
    """
    try:
        return path.read_text().strip(), False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    value = generate()
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".secret-")
    try:
        with os.fdopen(descriptor, "w") as secret_file:
            secret_file.write(value + "\n")
        os.chmod(temporary, 0o600)
        try:
            os.link(temporary, path)
        except FileExistsError:
            return path.read_text().strip(), False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return value, True
