"""A line chart as SVG drawn on the server: no script and no library, readable by a screen
reader through its label (what it shows, its range, the latest value)."""

from collections.abc import Sequence
from typing import NamedTuple

WIDTH = 360
HEIGHT = 72


class Chart(NamedTuple):
    points: str
    """The polyline's `x,y x,y ...` in a WIDTH x HEIGHT box, y growing downwards."""
    top: float
    """The value at the top edge."""
    latest: float | None


def line_chart(values: Sequence[tuple[float, float | None]], start: float, end: float) -> Chart:
    """`values` are (time, value) pairs; times between `start` and `end` run left to right,
    values from 0 at the bottom to the largest at the top. Unknown values leave a gap in the
    label's figures but not in the line (they are left out)."""
    known = [(at, value) for at, value in values if value is not None]
    top = max((value for _, value in known), default=0.0) or 1.0
    span = max(end - start, 1e-9)
    coordinates = []
    for at, value in known:
        x = (at - start) / span * WIDTH
        y = HEIGHT - value / top * HEIGHT
        coordinates.append(f"{x:.1f},{y:.1f}")
    latest = known[-1][1] if known else None
    return Chart(" ".join(coordinates), top, latest)
