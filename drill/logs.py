"""The lines the system's processes logged while one drill part ran."""

from __future__ import annotations

from pathlib import Path

TRACEBACK = "Traceback (most recent call last)"


class LogWindow:
    """Remembers where each log file ended; ``tracebacks`` reads what was written since."""

    def __init__(self, files: list[Path]) -> None:
        self._offsets = {path: path.stat().st_size for path in files}

    def new_text(self, files: list[Path]) -> dict[Path, str]:
        written = {}
        for path in files:
            with open(path, "rb") as log:
                log.seek(self._offsets.get(path, 0))
                written[path] = log.read().decode(errors="replace")
        return written

    def tracebacks(self, files: list[Path]) -> list[str]:
        """One excerpt per traceback: the log line before it and its last line (the error)."""
        found = []
        for path, text in self.new_text(files).items():
            lines = text.splitlines()
            for index, line in enumerate(lines):
                if TRACEBACK not in line:
                    continue
                cause = lines[index - 1][:160] if index else ""
                error = next(
                    (
                        later
                        for later in lines[index + 1 : index + 200]
                        if later and not later.startswith((" ", "\t", "Traceback"))
                    ),
                    "",
                )
                found.append(f"{path.name}: {cause} … {error[:200]}")
        return found
