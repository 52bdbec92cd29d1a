"""Bar charts drawn as SVG by the server (``bots/admin/chart.html``): a y axis with round
ticks and its unit, a labelled day on the x axis, one group of bars per day (a series per
colour, a legend), each bar's value in its tooltip and in ``data-*`` attributes. No script, so
the page needs nothing beyond the admin's own files."""

from __future__ import annotations

import math
from dataclasses import dataclass

WIDTH, HEIGHT = 760, 260
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 14, 44
TICKS = 4  # about this many steps up the y axis
MOST_X_LABELS = 15  # a longer period labels every n-th day


@dataclass(frozen=True)
class Series:
    """One colour of bars: ``values`` one per label (None: nothing to draw that day)."""

    name: str
    colour: str
    values: list[float | None]


def round_step(highest: float) -> float:
    """A 1, 2 or 5 × 10ⁿ step that reaches ``highest`` in about ``TICKS`` steps."""
    if highest <= 0:
        return 1.0
    rough = highest / TICKS
    magnitude = 10 ** math.floor(math.log10(rough))
    for factor in (1, 2, 5, 10):
        if factor * magnitude >= rough:
            return float(factor * magnitude)
    return float(10 * magnitude)  # unreachable: factor 10 always reaches


def _number(value: float) -> str:
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def bar_chart(
    *,
    title: str,
    unit: str,
    labels: list[str],
    series: list[Series],
    shown=_number,
    counts: bool = False,
) -> dict:
    """The chart's geometry for the template: ``labels`` along x (one group of bars each),
    ``series`` side by side in each group; heights against the y axis' top tick. ``shown``
    formats a value for the tooltips; ``counts``: whole numbers, so no tick below 1."""
    values = [value for one in series for value in one.values if value is not None]
    step = round_step(max(values, default=0))
    if counts:
        step = max(1.0, step)
    top = step * max(1, math.ceil(max(values, default=0) / step))
    plot_width, plot_height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    baseline = TOP + plot_height
    group = plot_width / max(1, len(labels))
    bar_width = max(1.0, (group * 0.8) / max(1, len(series)))
    every = max(1, math.ceil(len(labels) / MOST_X_LABELS))
    bars = []
    for index, label in enumerate(labels):
        for position, one in enumerate(series):
            value = one.values[index]
            height = 0.0 if value is None else value / top * plot_height
            x = LEFT + index * group + group * 0.1 + position * bar_width
            bars.append(
                {
                    "x": round(x, 1),
                    "y": round(baseline - height, 1),
                    "width": round(max(1.0, bar_width - 1), 1),
                    "height": round(height, 1),
                    "colour": one.colour,
                    "series": one.name,
                    "label": label,
                    "value": "" if value is None else round(value, 3),
                    "title": f"{label} · {one.name}: "
                    + ("none" if value is None else f"{shown(value)} {unit}"),
                }
            )
    ticks = [
        {"y": round(baseline - index * step / top * plot_height, 1), "text": _number(index * step)}
        for index in range(int(round(top / step)) + 1)
    ]
    x_labels = [
        {"x": round(LEFT + index * group + group / 2, 1), "text": label}
        for index, label in enumerate(labels)
        if index % every == 0 or index == len(labels) - 1
    ]
    return {
        "title": title,
        "unit": unit,
        "width": WIDTH,
        "height": HEIGHT,
        "left": LEFT,
        "right": WIDTH - RIGHT,
        "top": TOP,
        "baseline": baseline,
        "label_y": baseline + 16,
        "ticks": ticks,
        "x_labels": x_labels,
        "bars": bars,
        "legend": [
            {"name": one.name, "colour": one.colour, "x": LEFT + 8 + 150 * index}
            for index, one in enumerate(series)
        ],
        "legend_y": HEIGHT - 10,
    }
