"""Part 4: no secret in any log line or any non-admin response.

The parts hand every non-admin response they receive (headers and body) to ``Scanner.response``
as they go; at the end ``Scanner.logs`` reads every line the system's processes logged. Each
secret the system was given (``System.secrets``) is looked for verbatim.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from drill.report import Part
from drill.system import Secrets

# Shorter values could match by chance; every drill secret is longer than this.
MIN_SECRET_LENGTH = 12


class Scanner:
    def __init__(self, secrets: Secrets) -> None:
        self._needles = [
            (kind, value.encode())
            for kind, values in secrets.values.items()
            for value in values
            if len(value) >= MIN_SECRET_LENGTH
        ]
        self.responses = 0
        self.log_lines = 0
        self.found: Counter[tuple[str, str]] = Counter()
        self.examples: list[str] = []

    def _look(self, where: str, blob: bytes) -> None:
        for kind, needle in self._needles:
            if needle in blob:
                self.found[(kind, where)] += 1
                if len(self.examples) < 5:
                    self.examples.append(f"{kind} in {where}")

    def response(self, source: str, headers: dict[str, str], body: bytes) -> None:
        """One non-admin response (``source``: its route, for the report)."""
        self.responses += 1
        rendered = "\n".join(f"{name}: {value}" for name, value in headers.items()).encode()
        self._look(f"response of {source}", rendered + b"\n" + body)

    def logs(self, files: list[Path]) -> None:
        for path in files:
            with open(path, "rb") as log:
                for line in log:
                    self.log_lines += 1
                    self._look(f"log {path.name}", line)

    def part(self, log_files: list[Path]) -> Part:
        self.logs(log_files)
        part = Part("secrets")
        part.figure("secret values looked for", len(self._needles))
        part.figure("kinds", sorted({kind for kind, _ in self._needles}))
        part.figure("non-admin responses scanned", self.responses)
        part.figure("log lines scanned", self.log_lines)
        part.figure("secrets found", sum(self.found.values()))
        for (kind, where), count in sorted(self.found.items()):
            part.note(f"{kind} found {count}× in {where}")
        part.require(not self.found, "no secret in any log line or non-admin response")
        return part
