"""What a drill part reports: figures (printed as one table at the end) and broken invariants
(each one makes ``make drill`` exit non-zero)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Part:
    name: str
    figures: dict[str, object] = field(default_factory=dict)
    broken: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def figure(self, name: str, value: object) -> None:
        self.figures[name] = value

    def require(self, holds: bool, invariant: str) -> bool:
        """Record ``invariant`` as broken unless it ``holds``."""
        if not holds:
            self.broken.append(invariant)
        return holds

    def note(self, text: str) -> None:
        self.notes.append(text)


def _shown(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, list | tuple):
        return ", ".join(_shown(item) for item in value) or "-"
    return str(value)


def print_report(parts: list[Part]) -> None:
    width = max((len(name) for part in parts for name in part.figures), default=20) + 2
    for part in parts:
        print(f"\n== {part.name} " + "=" * max(0, 70 - len(part.name)))
        for name, value in part.figures.items():
            print(f"  {name:<{width}}{_shown(value)}")
        for text in part.notes:
            print(f"  note: {text}")
        for invariant in part.broken:
            print(f"  BROKEN: {invariant}")
    broken = sum(len(part.broken) for part in parts)
    print(f"\n{'PASS' if not broken else 'FAIL'}: {broken} invariant(s) broken")


def as_json(parts: list[Part]) -> list[dict]:
    return [
        {"part": part.name, "figures": part.figures, "broken": part.broken, "notes": part.notes}
        for part in parts
    ]
