#!/usr/bin/env python3
"""Draws columns of a CSV file as line charts in one SVG file (Python 3 standard library only).

usage: scripts/plot.py DATA.csv --x COLUMN --y PANELS [--title TEXT] [--out FILE.svg] [--logx] [--logy]
                       [--xlabel TEXT] [--ylabels A,B,...] [--labels COLUMN=NAME,...] [--width PX]

PANELS is a comma-separated list of panels, drawn as small multiples stacked over a shared x axis; each panel is
one column or several joined with `+`, drawn as lines in the same panel (so give them the same unit), e.g.

    scripts/plot.py scaling.csv --x peers --logx --y discovery_s+discovery_zeroconf_s+mesh_s,rss_mesh_mib
    scripts/plot.py soak.csv --x minute --y rss_mib,descriptors,cpu_pct --title "soak, per minute"

An empty cell, or one that is not a number, leaves a gap: the line stops and starts again after it. Points get
markers when a series has at most 40 of them. The y axis of every panel starts at zero unless --logy is given or
a value is negative. --ylabels names each panel's axis (default: a one-column panel's column); --labels renames
columns in the legends. Writes the SVG to --out (default: standard output).
"""
import argparse
import csv
import html
import math
import sys

# Colour-blind-safe palette (Okabe and Ito), in drawing order.
COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]
MARKERS = ["circle", "square", "diamond", "triangle"]


def number(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def nice_step(span, count):
    """A step of 1, 2 or 5 times a power of ten giving about `count` intervals over `span`."""
    if span <= 0:
        return 1.0
    raw = span / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * power:
            return factor * power
    return 10 * power


def linear_ticks(low, high, count=5):
    step = nice_step(high - low, count)
    first = math.floor(low / step) * step
    last = math.ceil(high / step) * step
    ticks = []
    value = first
    while value <= last + step / 2:
        ticks.append(round(value, 12))
        value += step
    return ticks


def log_ticks(low, high):
    """Powers of ten, plus 2 and 5 times them when the range spans few decades."""
    first = math.floor(math.log10(low))
    last = math.ceil(math.log10(high))
    multipliers = (1, 2, 5) if last - first <= 3 else (1,)
    ticks = []
    for power in range(first, last + 1):
        for m in multipliers:
            value = m * 10**power
            if low / 1.0001 <= value <= high * 1.0001:
                ticks.append(value)
    return ticks or [low, high]


def label(value):
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e6 or magnitude < 1e-3:
        return f"{value:.0e}"
    if float(value).is_integer():
        return f"{int(value)}"
    return f"{value:.3g}"


class Scale:
    """Maps data values to pixels, linearly or logarithmically."""

    def __init__(self, low, high, start, end, log):
        self.log = log
        if log:
            low, high = math.log10(low), math.log10(high)
        if high == low:
            high = low + 1
        self.low, self.high, self.start, self.end = low, high, start, end

    def __call__(self, value):
        if self.log:
            value = math.log10(value)
        return self.start + (value - self.low) / (self.high - self.low) * (self.end - self.start)


def read_table(path):
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        sys.exit(f"plot.py: {path} has no rows")
    return rows


def marker(shape, x, y, colour):
    if shape == "square":
        return f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" fill="{colour}"/>'
    if shape == "diamond":
        return f'<path d="M{x:.1f},{y - 4:.1f} L{x + 4:.1f},{y:.1f} L{x:.1f},{y + 4:.1f} L{x - 4:.1f},{y:.1f} Z" fill="{colour}"/>'
    if shape == "triangle":
        return f'<path d="M{x:.1f},{y - 4:.1f} L{x + 4:.1f},{y + 3:.1f} L{x - 4:.1f},{y + 3:.1f} Z" fill="{colour}"/>'
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>'


def plot(rows, args):
    panels = [[c for c in panel.split("+") if c] for panel in args.y.split(",") if panel]
    names = dict(item.split("=", 1) for item in args.labels.split(",") if "=" in item) if args.labels else {}
    ylabels = args.ylabels.split(",") if args.ylabels else []
    columns = set(rows[0].keys())
    for column in [args.x] + [c for panel in panels for c in panel]:
        if column not in columns:
            sys.exit(f"plot.py: no column {column!r} in the data (columns: {', '.join(sorted(columns))})")

    xs = [number(row[args.x]) for row in rows]
    points = [x for x in xs if x is not None and (x > 0 or not args.logx)]
    if not points:
        sys.exit(f"plot.py: column {args.x!r} has no usable numbers")
    xlow, xhigh = min(points), max(points)

    width = args.width
    # Room for the y labels on the left, and for the longest legend entry on the right (about 7 px a character).
    longest = max(len(names.get(c, c)) for panel in panels for c in panel)
    left, right = 70, max(120, 50 + 7 * longest)
    width = max(width, left + right + 300)
    panel_height, gap, top = 170, 48, 46 if args.title else 16
    height = top + len(panels) * (panel_height + gap) + 10
    xscale = Scale(xlow, xhigh, left, width - right, args.logx)
    xticks = log_ticks(xlow, xhigh) if args.logx else linear_ticks(xlow, xhigh, 8)
    xticks = [t for t in xticks if xlow / 1.0001 <= t <= xhigh * 1.0001] if args.logx else xticks
    if not args.logx:
        xscale = Scale(min(xticks[0], xlow), max(xticks[-1], xhigh), left, width - right, False)
    if args.logx:
        # The data's own x values are the ticks when there are few (2, 4, 8, ... peers).
        distinct = sorted(set(points))
        if len(distinct) <= 12:
            xticks = distinct

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    if args.title:
        out.append(
            f'<text x="{width / 2:.0f}" y="24" text-anchor="middle" font-size="15" font-weight="bold">'
            f"{html.escape(args.title)}</text>"
        )
    for index, panel in enumerate(panels):
        y0 = top + index * (panel_height + gap)
        y1 = y0 + panel_height
        series = []
        for column in panel:
            ys = [number(row[column]) for row in rows]
            series.append((column, ys))
        values = [
            v for _, ys in series for x, v in zip(xs, ys) if v is not None and x is not None and (v > 0 or not args.logy)
        ]
        if not values:
            values = [0, 1]
        if args.logy:
            ylow, yhigh = min(values), max(values)
            if ylow == yhigh:
                ylow, yhigh = ylow / 2, yhigh * 2
            yticks = log_ticks(ylow, yhigh)
            ylow, yhigh = min(ylow, yticks[0]), max(yhigh, yticks[-1])
        else:
            ylow, yhigh = min(0.0, min(values)), max(values)
            if yhigh == ylow:
                yhigh = ylow + 1
            yticks = linear_ticks(ylow, yhigh, 4)
            ylow, yhigh = min(ylow, yticks[0]), max(yhigh, yticks[-1])
        yscale = Scale(ylow, yhigh, y1, y0, args.logy)

        # Frame, grid and ticks.
        out.append(f'<rect x="{left}" y="{y0}" width="{width - right - left}" height="{panel_height}" '
                   'fill="none" stroke="#888"/>')
        for tick in yticks:
            y = yscale(tick)
            out.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>')
            out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{label(tick)}</text>')
        for tick in xticks:
            x = xscale(tick)
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y0}" y2="{y1}" stroke="#e4e4e4"/>')
            out.append(f'<text x="{x:.1f}" y="{y1 + 15}" text-anchor="middle">{label(tick)}</text>')
        # Without --ylabels a one-column panel is named after its column; the legend names several.
        axis = ylabels[index] if index < len(ylabels) and ylabels[index] else (panel[0] if len(panel) == 1 else "")
        out.append(
            f'<text x="16" y="{(y0 + y1) / 2:.0f}" text-anchor="middle" '
            f'transform="rotate(-90 16 {(y0 + y1) / 2:.0f})">{html.escape(axis)}</text>'
        )
        out.append(
            f'<text x="{(left + width - right) / 2:.0f}" y="{y1 + 32}" text-anchor="middle" fill="#444">'
            f"{html.escape(args.xlabel or args.x)}{' (log scale)' if args.logx else ''}</text>"
        )

        # Lines (broken at gaps) and markers; legend to the right.
        for number_in_panel, (column, ys) in enumerate(series):
            colour = COLOURS[number_in_panel % len(COLOURS)]
            shape = MARKERS[number_in_panel % len(MARKERS)]
            pairs = sorted(
                (x, y) for x, y in zip(xs, ys)
                if x is not None and (x > 0 or not args.logx)
            )
            segment = []
            segments = [segment]
            for x, y in pairs:
                if y is None or (args.logy and y <= 0):
                    segment = []
                    segments.append(segment)
                else:
                    segment.append((xscale(x), yscale(y)))
            for part in segments:
                if len(part) > 1:
                    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in part)
                    out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
                if len(pairs) <= 40:  # markers on dense series would hide the line
                    for x, y in part:
                        out.append(marker(shape, x, y, colour))
            ly = y0 + 14 + number_in_panel * 18
            lx = width - right + 14
            out.append(f'<line x1="{lx}" x2="{lx + 22}" y1="{ly - 4}" y2="{ly - 4}" stroke="{colour}" stroke-width="2"/>')
            out.append(marker(shape, lx + 11, ly - 4, colour))
            out.append(f'<text x="{lx + 28}" y="{ly}">{html.escape(names.get(column, column))}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(
        description="Draws CSV columns as line charts (small multiples over a shared x axis) into an SVG file."
    )
    parser.add_argument("data", help="a CSV file with a header row")
    parser.add_argument("--x", required=True, help="the column of the x axis")
    parser.add_argument("--y", required=True, help="panels, comma-separated; columns of one panel joined with +")
    parser.add_argument("--title", default="")
    parser.add_argument("--out", help="the SVG file to write (default: standard output)")
    parser.add_argument("--logx", action="store_true", help="logarithmic x axis (positive x values only)")
    parser.add_argument("--logy", action="store_true", help="logarithmic y axes (positive values only)")
    parser.add_argument("--xlabel", default="", help="the x axis' name (default: its column)")
    parser.add_argument("--ylabels", default="", help="each panel's axis name, comma-separated")
    parser.add_argument("--labels", default="", help="legend names: COLUMN=NAME,COLUMN=NAME")
    parser.add_argument("--width", type=int, default=760, help="in pixels (default 760)")
    args = parser.parse_args()
    svg = plot(read_table(args.data), args)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(svg)
    else:
        sys.stdout.write(svg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
