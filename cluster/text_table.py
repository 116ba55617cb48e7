"""Plain-text tables for people (`logquake cluster status`): every column as wide as its
widest cell, so a long host, topic or replica list pushes its column out instead of
shifting the rest of its line; numeric columns right-aligned, the last column left as is."""

from __future__ import annotations

from collections.abc import Collection, Sequence

GAP = "  "


def render(rows: Sequence[Sequence[str]], right: Collection[int] = ()) -> list[str]:
    """The lines of `rows` (the header, if any, is the first row), aligned in columns;
    `right` holds the indexes of the right-aligned columns. Rows may differ in length."""
    width = max((len(row) for row in rows), default=0)
    widths = [max((len(row[i]) for row in rows if i < len(row)), default=0) for i in range(width)]
    lines = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            last = i == len(row) - 1
            if i in right:
                cells.append(cell.rjust(widths[i]))
            else:
                cells.append(cell if last else cell.ljust(widths[i]))
        lines.append(GAP.join(cells).rstrip())
    return lines
