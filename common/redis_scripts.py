"""Redis Lua scripts as ``.lua`` files: ``<package>/lua/<name>.lua``, read once when the module
that runs it is imported (the text is a module constant; callers register it per client with
``register_script`` or ``AsyncScript`` as before). They ship as package data (pyproject.toml).

``COMPARE_AND_DELETE`` is the one compare-and-delete of the project (a lease or claim deleted
only by its holder): KEYS[1] the key, ARGV[1] the holder's value; returns 1 when it deleted the
key, else 0.
"""

from __future__ import annotations

import re
from importlib.resources import files

# ``${name}``: a constant of the Python side written into the script (never valid Lua, so it
# cannot clash with the script's own text).
_PLACEHOLDER = re.compile(r"\$\{([a-z_]+)\}")


def lua_script(package: str, name: str, **constants: str) -> str:
    """The text of ``<package>/lua/<name>.lua``, its ``${constant}`` placeholders replaced by
    ``constants``. Raises FileNotFoundError when the file is missing and KeyError when a
    placeholder has no value (both at import: a broken script never waits for its first call
    to show)."""
    text = files(package).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")
    return _PLACEHOLDER.sub(lambda match: constants[match.group(1)], text)


COMPARE_AND_DELETE = lua_script("common", "compare_and_delete")
