#!/usr/bin/env python3
"""Plots the cost/latency trade-off of scripts/latency_sweep.sh as an SVG.

    python3 scripts/plot_latency.py [SWEEP.jsonl [OUT.svg]]

(defaults: latency_sweep.jsonl, latency.svg). Reads the JSON lines of open-loop
`bench write --rate R` runs and draws, against the offered load (appends/s, log axis),
the p50 and p99 append latency (ms, left axis; log when they span more than 30x) and
the PUT rate (PUTs/s, right axis, dashed), one colour per `min_object_interval`. Points
where the WAL acknowledged less than 90% of what was offered are crossed out: the load
was beyond what that setting sustains, and their latencies grow with the run's length.
Lines that are not open-loop write runs are skipped; of several runs with the same
interval and rate, the last counts. Python 3 standard library only.
"""

import json
import math
import sys
from html import escape

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf"]
WIDTH, HEIGHT = 960, 600
LEFT, RIGHT, TOP, BOTTOM = 90, 100, 70, 150


def load(path):
    """{interval_ms: {offered_rate: line}} of the open-loop write runs in `path`."""
    runs = {}
    with open(path, encoding="utf-8") as f:
        for raw in f:
            raw = raw.strip()
            if not raw.startswith("{"):
                continue
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if line.get("workload") != "write" or line.get("mode") != "open":
                continue
            rate = line.get("offered_rate")
            interval = line.get("min_object_interval_ms")
            if not rate or interval is None:
                continue
            runs.setdefault(interval, {})[float(rate)] = line
    return runs


def nice_step(span, target=6):
    """A 1-2-5 step giving about `target` ticks over `span`."""
    if span <= 0:
        return 1.0
    raw = span / target
    magnitude = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * magnitude:
            return m * magnitude
    return 10 * magnitude


def linear_ticks(top):
    step = nice_step(top)
    top = math.ceil(top / step) * step
    n = int(round(top / step))
    return top, [i * step for i in range(n + 1)]


def log_ticks(lo, hi):
    """1-2-5 ticks from below `lo` to above `hi` (both > 0), and the axis ends."""
    ticks = []
    for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            ticks.append(m * 10**e)
    below = [t for t in ticks if t <= lo]
    above = [t for t in ticks if t >= hi]
    lo_end = below[-1] if below else lo
    hi_end = above[0] if above else hi
    return lo_end, hi_end, [t for t in ticks if lo_end <= t <= hi_end]


def label(v):
    if v >= 1000 and v % 1000 == 0:
        return f"{v / 1000:g}k"
    if v >= 1:
        return f"{v:g}"
    return f"{v:.2g}"


class Svg:
    def __init__(self):
        self.parts = []

    def add(self, s):
        self.parts.append(s)

    def text(self, x, y, s, size=13, anchor="middle", weight="normal", rotate=None, fill="#222"):
        transform = f' transform="rotate({rotate} {x:.1f} {y:.1f})"' if rotate else ""
        self.add(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'font-weight="{weight}" fill="{fill}"{transform}>{escape(s)}</text>'
        )

    def line(self, x1, y1, x2, y2, stroke="#222", width=1.0, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="{stroke}" stroke-width="{width}"{d}/>'
        )

    def polyline(self, points, stroke, width=2.0, dash=None):
        if len(points) < 2:
            return
        d = f' stroke-dasharray="{dash}"' if dash else ""
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        self.add(
            f'<polyline points="{pts}" fill="none" stroke="{stroke}" '
            f'stroke-width="{width}" stroke-linejoin="round"{d}/>'
        )

    def marker(self, kind, x, y, colour, size=4.5):
        if kind == "circle":
            self.add(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{size:.1f}" fill="{colour}"/>')
        elif kind == "triangle":
            s = size * 1.3
            pts = f"{x:.1f},{y - s:.1f} {x - s:.1f},{y + s * 0.8:.1f} {x + s:.1f},{y + s * 0.8:.1f}"
            self.add(f'<polygon points="{pts}" fill="{colour}"/>')
        elif kind == "square":
            s = size * 0.9
            self.add(
                f'<rect x="{x - s:.1f}" y="{y - s:.1f}" width="{2 * s:.1f}" height="{2 * s:.1f}" '
                f'fill="white" stroke="{colour}" stroke-width="1.5"/>'
            )
        elif kind == "cross":
            s = size * 1.6
            for dx in (-s, s):
                self.line(x - dx, y - s, x + dx, y + s, stroke="#000", width=1.6)

    def render(self):
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="Helvetica, Arial, sans-serif">\n'
            f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>\n'
        )
        return head + "\n".join(self.parts) + "\n</svg>\n"


def overloaded(line):
    offered = line.get("issued_rate") or line.get("offered_rate") or 0
    return offered > 0 and (line.get("rate") or 0) < 0.9 * offered


def plot(runs):
    intervals = sorted(runs)
    rates = sorted({r for by_rate in runs.values() for r in by_rate})
    lines = [l for by_rate in runs.values() for l in by_rate.values()]
    lat = [v for l in lines for v in (l.get("p50_ms"), l.get("p99_ms")) if v and v > 0]
    puts = [l.get("puts_per_s", 0) for l in lines]
    if not rates or not lat:
        raise SystemExit("plot_latency: no open-loop write runs with latencies to plot")

    x0, x1 = LEFT, WIDTH - RIGHT
    y0, y1 = HEIGHT - BOTTOM, TOP  # bottom, top

    # x: log of the offered load, a little beyond the outer points.
    lx_lo = math.log10(min(rates)) - 0.08
    lx_hi = math.log10(max(rates)) + 0.08 if len(rates) > 1 else lx_lo + 0.16

    def x_of(rate):
        return x0 + (math.log10(rate) - lx_lo) / (lx_hi - lx_lo) * (x1 - x0)

    # Left y: latency, log if it spans more than 30x, else linear from 0.
    log_y = max(lat) / min(lat) > 30
    if log_y:
        ly_lo, ly_hi, lticks = log_ticks(min(lat), max(lat))

        def y_lat(v):
            v = max(v, ly_lo)
            return y0 - (math.log10(v) - math.log10(ly_lo)) / (
                math.log10(ly_hi) - math.log10(ly_lo)
            ) * (y0 - y1)

    else:
        ly_hi, lticks = linear_ticks(max(lat) * 1.05)

        def y_lat(v):
            return y0 - v / ly_hi * (y0 - y1)

    # Right y: PUTs per second, linear from 0.
    py_hi, pticks = linear_ticks(max(max(puts), 1) * 1.05)

    def y_put(v):
        return y0 - v / py_hi * (y0 - y1)

    svg = Svg()
    first = lines[0]
    svg.text(
        WIDTH / 2,
        28,
        "Append latency and PUT rate against offered load, by min_object_interval",
        size=17,
        weight="bold",
    )
    svg.text(
        WIDTH / 2,
        48,
        f"open loop, {first.get('store', '?')} store, PUT {first.get('put_latency_ms', '?')} ms, "
        f"GET {first.get('get_latency_ms', '?')} ms, {first.get('regions', '?')} regions, "
        f"{first.get('entry_bytes', '?')} B entries, max_in_flight {first.get('max_in_flight', '?')}, "
        f"hedge {first.get('hedge', '?')}, {first.get('seconds', '?')} s per run",
        size=12,
        fill="#555",
    )

    # Grid and ticks.
    for t in lticks:
        y = y_lat(t)
        svg.line(x0, y, x1, y, stroke="#e4e4e4")
        svg.line(x0 - 5, y, x0, y)
        svg.text(x0 - 8, y + 4, label(t), size=12, anchor="end")
    for t in pticks:
        y = y_put(t)
        svg.line(x1, y, x1 + 5, y)
        svg.text(x1 + 8, y + 4, label(t), size=12, anchor="start")
    for r in rates:
        x = x_of(r)
        svg.line(x, y0, x, y1, stroke="#efefef")
        svg.line(x, y0, x, y0 + 5)
        svg.text(x, y0 + 20, label(r), size=12)
    svg.add(
        f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none" stroke="#222"/>'
    )

    # Axis labels.
    svg.text((x0 + x1) / 2, y0 + 42, "offered load (appends/s, log scale)", size=14)
    svg.text(
        x0 - 58,
        (y0 + y1) / 2,
        "append latency, ms (from scheduled arrival)" + (", log scale" if log_y else ""),
        size=14,
        rotate=-90,
    )
    svg.text(x1 + 62, (y0 + y1) / 2, "PUTs/s (dashed)", size=14, rotate=90)

    # Series.
    for i, interval in enumerate(intervals):
        colour = COLOURS[i % len(COLOURS)]
        by_rate = runs[interval]
        rs = sorted(by_rate)
        for key, kind, width in (("p50_ms", "circle", 1.6), ("p99_ms", "triangle", 2.6)):
            pts = [(x_of(r), y_lat(by_rate[r][key])) for r in rs if by_rate[r].get(key)]
            svg.polyline(pts, colour, width=width)
            for x, y in pts:
                svg.marker(kind, x, y, colour)
        pts = [(x_of(r), y_put(by_rate[r].get("puts_per_s", 0))) for r in rs]
        svg.polyline(pts, colour, width=1.8, dash="7 5")
        for x, y in pts:
            svg.marker("square", x, y, colour, size=3.5)
        for r in rs:
            if overloaded(by_rate[r]) and by_rate[r].get("p99_ms"):
                svg.marker("cross", x_of(r), y_lat(by_rate[r]["p99_ms"]), colour)

    # Legend, below the plot: colours, then what each mark means.
    ly = y0 + 70
    lx = x0
    svg.text(lx, ly + 4, "min_object_interval:", size=13, anchor="start", weight="bold")
    lx += 150
    for i, interval in enumerate(intervals):
        colour = COLOURS[i % len(COLOURS)]
        svg.line(lx, ly, lx + 28, ly, stroke=colour, width=3)
        svg.text(lx + 34, ly + 4, f"{interval} ms", size=13, anchor="start")
        lx += 100
    ly += 26
    lx = x0
    keys = [
        ("circle", 1.6, None, "p50 latency (left)"),
        ("triangle", 2.6, None, "p99 latency (left)"),
        ("square", 1.8, "7 5", "PUTs/s (right)"),
        ("cross", None, None, "achieved < 90% of offered"),
    ]
    for kind, width, dash, text in keys:
        if width:
            svg.line(lx, ly, lx + 28, ly, stroke="#555", width=width, dash=dash)
        svg.marker(kind, lx + 14, ly, "#555", size=3.5 if kind == "square" else 4.5)
        svg.text(lx + 36, ly + 4, text, size=13, anchor="start")
        lx += 200
    svg.text(
        x0,
        ly + 26,
        "Shorter intervals buy latency with PUTs: each object is one PUT (hedges add more), "
        "and at most 1000 / interval objects start per second.",
        size=12,
        anchor="start",
        fill="#555",
    )
    return svg.render()


def main(argv):
    src = argv[1] if len(argv) > 1 else "latency_sweep.jsonl"
    dst = argv[2] if len(argv) > 2 else "latency.svg"
    runs = load(src)
    with open(dst, "w", encoding="utf-8") as f:
        f.write(plot(runs))
    n = sum(len(v) for v in runs.values())
    print(f"plot_latency: {n} runs, {len(runs)} intervals -> {dst}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
