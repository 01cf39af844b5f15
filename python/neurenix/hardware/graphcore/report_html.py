"""A compile report (and optionally a run's) as one self-contained HTML page.

Everything is inline: the style sheet, and the plots as ``<svg>`` elements
(drawn with matplotlib when it is installed, else simple bar charts drawn
here). The page has no scripts and loads nothing: its Content-Security-Policy
forbids every fetch, so it opens the same offline, from a mail attachment or
from a CI artifact. Plots have stable ids: ``tile-memory-plot``,
``liveness-plot``, ``layer-cycles-plot``.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence

from .report import _bytes, step_terms, tile_always_live, tile_largest, tile_not_always_live
from .report_plots import bar_id, have_matplotlib

if TYPE_CHECKING:
    from .report import CompileReport, ExecutionReport

__all__ = ["render_html", "PLOT_IDS"]

PLOT_IDS = {"tile_memory": "tile-memory-plot", "liveness": "liveness-plot", "layer_cycles": "layer-cycles-plot"}
_PLOT_TITLES = {
    "tile_memory": "Tile memory at its peak (always live / not always live, capacity)",
    "liveness": "Bytes live per step",
    "layer_cycles": "Cycles per layer",
}

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 0 auto;
       max-width: 1200px; padding: 0 1.5em 3em; color: #1d2330; background: #fff; }
h1 { font-size: 1.6em; margin: 1em 0 0.2em; } h2 { margin-top: 2em; border-bottom: 1px solid #d8dce6; }
nav a { margin-right: 1em; } .muted { color: #5b6478; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.88em; }
th, td { border: 1px solid #d8dce6; padding: 0.25em 0.55em; text-align: left; vertical-align: top; }
th { background: #f1f3f8; } td.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.sub td { background: #fafbfd; }
figure.plot { margin: 1em 0; } figure.plot svg { max-width: 100%; height: auto; }
figcaption { font-weight: 600; margin-bottom: 0.3em; }
pre { background: #f6f7fb; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
details summary { cursor: pointer; margin: 0.5em 0; }
.warn { color: #8a4b00; }
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _n(x: Any) -> str:
    if x is None:
        return "&ndash;"
    if isinstance(x, float):
        return f"{x:,.3g}" if abs(x) < 100 else f"{x:,.0f}"
    return f"{x:,}"


def _table(head: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Sequence[int] = (), cls: str = "") -> str:
    heads = "".join(f"<th>{_e(h)}</th>" for h in head)
    out = [f'<table class="{_e(cls)}"><thead><tr>{heads}</tr></thead><tbody>']
    for r in rows:
        cells = []
        for k, v in enumerate(r):
            if k in numeric:
                cells.append(f'<td class="n">{_n(v)}</td>')
            else:
                cells.append(f"<td>{v if isinstance(v, _Raw) else _e(v)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


class _Raw(str):
    """Markup to put in a table cell as it is."""


def _kv(rows: Sequence[Sequence[Any]]) -> str:
    return "<table>" + "".join(
        f"<tr><th>{_e(k)}</th><td>{v if isinstance(v, _Raw) else _e(v)}</td></tr>" for k, v in rows
    ) + "</table>"


# -- plots without matplotlib ----------------------------------------------------

_W, _PAD_L, _PAD_B = 900, 70, 30


def _svg(width: int, height: int, body: List[str], label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(label)}" '
            'font-family="sans-serif" font-size="11">' + "".join(body) + "</svg>")


def _svg_tile_memory(report: "CompileReport") -> str:
    cap = report.bytes_per_tile
    peak = report.max_tile_memory
    scale_top = cap * 1.08 if peak >= 0.2 * cap else max(peak, 1) * 1.25
    n = report.ipus_per_replica
    panel = 170
    body: List[str] = []
    for ipu in range(n):
        y0 = 20 + ipu * (panel + 30)
        ts = sorted((t for t in report.tiles if t.ipu == ipu), key=lambda t: (-t.total, t.tile))
        body.append(f'<text x="{_PAD_L}" y="{y0 - 6}">IPU {ipu}: {len(ts)} of {report.system.tiles_per_ipu} '
                    f"tiles used</text>")
        body.append(f'<rect x="{_PAD_L}" y="{y0}" width="{_W - _PAD_L - 10}" height="{panel}" fill="none" '
                    'stroke="#aab"/>')
        width = (_W - _PAD_L - 10) / max(len(ts), 1)
        for k, t in enumerate(ts):
            x = _PAD_L + k * width
            a, b = tile_always_live(t), tile_not_always_live(t)
            ha, hb = panel * a / scale_top, panel * b / scale_top
            tip = f"tile {t.tile}: {_bytes(t.total)} (always live {_bytes(a)}, not always live {_bytes(b)})"
            w = max(width * 0.85, 0.5)
            body.append(f'<g><title>{_e(tip)}</title>'
                        f'<rect id="{bar_id(ipu, t.tile, True)}" x="{x:.2f}" y="{y0 + panel - ha:.3f}" '
                        f'width="{w:.2f}" height="{ha:.3f}" fill="#4c72b0"/>'
                        f'<rect id="{bar_id(ipu, t.tile, False)}" x="{x:.2f}" y="{y0 + panel - ha - hb:.3f}" '
                        f'width="{w:.2f}" height="{hb:.3f}" fill="#dd8452"/></g>')
        if cap <= scale_top:
            yc = y0 + panel - panel * cap / scale_top
            body.append(f'<line x1="{_PAD_L}" x2="{_W - 10}" y1="{yc:.2f}" y2="{yc:.2f}" stroke="#c44e52" '
                        'stroke-dasharray="6 4"/>')
            body.append(f'<text x="{_W - 12}" y="{yc - 4:.2f}" text-anchor="end" fill="#c44e52">capacity '
                        f"{_e(_bytes(cap))}</text>")
        else:
            body.append(f'<text x="{_W - 12}" y="{y0 + 14}" text-anchor="end" fill="#c44e52">capacity '
                        f"{_e(_bytes(cap))} off the scale (busiest tile at {100 * peak / cap:.1f}%)</text>")
        body.append(f'<text x="{_PAD_L - 6}" y="{y0 + 10}" text-anchor="end">{_e(_bytes(scale_top))}</text>')
        body.append(f'<text x="{_PAD_L - 6}" y="{y0 + panel}" text-anchor="end">0</text>')
    h = 20 + n * (panel + 30) + 10
    body.append(f'<text x="{_PAD_L}" y="{h - 4}"><tspan fill="#4c72b0">&#9632; always live</tspan> '
                '<tspan fill="#dd8452">&#9632; not always live</tspan> (tiles fullest first)</text>')
    return _svg(_W, h + 6, body, "tile memory per IPU")


def _svg_liveness(report: "CompileReport") -> str:
    lv = [x for x in report.liveness() if x["live_bytes"]]
    h = 240
    if not lv:
        return _svg(_W, 40, ['<text x="10" y="24">no liveness in this report</text>'], "liveness")
    top = max(max(x["live_bytes"]) for x in lv) or 1
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]
    body = [f'<rect x="{_PAD_L}" y="10" width="{_W - _PAD_L - 10}" height="{h}" fill="none" stroke="#aab"/>',
            f'<text x="{_PAD_L - 6}" y="20" text-anchor="end">{_e(_bytes(top))}</text>',
            f'<text x="{_PAD_L - 6}" y="{10 + h}" text-anchor="end">0</text>']
    for k, x in enumerate(lv):
        ys = x["live_bytes"]
        step = (_W - _PAD_L - 10) / max(len(ys), 1)
        pts = []
        for i, b in enumerate(ys):
            y = 10 + h - h * b / top
            pts += [f"{_PAD_L + i * step:.2f},{y:.2f}", f"{_PAD_L + (i + 1) * step:.2f},{y:.2f}"]
        c = colors[k % len(colors)]
        body.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{" ".join(pts)}"/>')
        body.append(f'<text x="{_PAD_L + 8}" y="{28 + 14 * k}" fill="{c}">IPU {x["ipu"]} (peak '
                    f'{_e(_bytes(x["peak_live_bytes"]))})</text>')
    return _svg(_W, h + 30, body, "bytes live per step")


def _svg_layer_cycles(report: "CompileReport", top: int = 20) -> str:
    layers = report.cycles_per_layer()[:top]
    if not layers:
        return _svg(_W, 40, ['<text x="10" y="24">no compute or exchange steps</text>'], "cycles per layer")
    left, row = 220, 18
    most = max(x["cycles"] for x in layers) or 1
    body = []
    for k, x in enumerate(layers):
        y = 10 + k * row
        c, e = x["by_kind"]["compute"], x["by_kind"]["exchange"]
        wc, we = (_W - left - 80) * c / most, (_W - left - 80) * e / most
        label = f"{x['node']} (IPU {x['ipu']})"
        body.append(f'<g><title>{_e(label)}: compute {c:,}, exchange {e:,} cycles</title>'
                    f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{_e(label[:40])}</text>'
                    f'<rect x="{left}" y="{y + 2}" width="{wc:.2f}" height="{row - 5}" fill="#55a868"/>'
                    f'<rect x="{left + wc:.2f}" y="{y + 2}" width="{we:.2f}" height="{row - 5}" fill="#8172b3"/>'
                    f'<text x="{left + wc + we + 4:.2f}" y="{y + 12}">{x["cycles"]:,}</text></g>')
    h = 10 + len(layers) * row + 20
    body.append(f'<text x="{left}" y="{h - 4}"><tspan fill="#55a868">&#9632; compute</tspan> '
                '<tspan fill="#8172b3">&#9632; exchange</tspan> (cycles per micro-batch)</text>')
    return _svg(_W, h + 4, body, "cycles per layer")


def _plots(report: "CompileReport", use_matplotlib: Optional[bool]) -> Dict[str, str]:
    if use_matplotlib is None:
        use_matplotlib = have_matplotlib()
    if use_matplotlib:
        from .report_plots import figure_svg, figures

        return {name: figure_svg(fig, salt=name) for name, fig in figures(report).items()}
    return {
        "tile_memory": _svg_tile_memory(report),
        "liveness": _svg_liveness(report),
        "layer_cycles": _svg_layer_cycles(report),
    }


# -- the page --------------------------------------------------------------------


def render_html(
    report: "CompileReport",
    execution: Optional["ExecutionReport"] = None,
    use_matplotlib: Optional[bool] = None,
) -> str:
    """The page. ``use_matplotlib``: None draws the plots with matplotlib when
    it is installed (else with the simple built-in charts); False always
    uses the built-in charts."""
    r = report
    s = r.system
    e = r.estimate
    parts: List[str] = []
    add = parts.append
    add("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">")
    add('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
        'img-src data:">')
    add('<meta name="viewport" content="width=device-width, initial-scale=1">')
    add(f"<title>IPU report: {_e(r.num_ipus)} x {_e(s.version)}, {_e(r.cycles_per_run)} cycles</title>")
    add(f"<style>{_CSS}</style></head><body>")
    add("<h1>IPU compile report</h1>")
    add(f'<p class="muted">{_e(r.num_ipus)} x {_e(s.version)} ({_e(s.chip)}), {_e(s.tiles_per_ipu)} tiles x '
        f"{_e(_bytes(s.bytes_per_tile))} at {s.clock_hz / 1e9:.2f} GHz (simulator); {_e(r.precision)}; "
        f"{_e(e.execution)}, {r.num_stages} stage(s) x {r.replication_factor} replica(s)</p>")
    add('<nav><a href="#summary">Summary</a><a href="#plots">Plots</a><a href="#memory">Memory</a>'
        '<a href="#plans">Plans</a><a href="#layers">Layers</a><a href="#steps">Steps</a>'
        '<a href="#text">Text</a></nav>')

    # Summary.
    add('<section id="summary"><h2>Summary</h2>')
    rows = [
        ("total cycles per run", f"{r.cycles_per_run:,} ({r.estimated_seconds * 1e6:,.2f} us)"),
        ("samples per run", f"{r.batch_size:,} (micro-batch {r.micro_batch_size} x {r.device_iterations} device "
                            f"iteration(s) x {r.replication_factor} replica(s))"),
        ("throughput, steady state", f"{r.estimated_throughput:,.0f} samples/s"),
        ("throughput of one call", f"{r.call_throughput:,.0f} samples/s"),
        ("latency of one micro-batch", f"{r.latency_cycles:,} cycles ({r.latency_seconds * 1e6:,.2f} us)"),
        ("steady-state interval", f"{r.interval_cycles:,} cycles"),
        ("cycles by kind of step", ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in
                                             sorted(r.cycles_by_kind().items(), key=lambda kv: -kv[1]))),
        ("memory", f"{_bytes(r.total_memory)} in all; busiest tile {_bytes(r.max_tile_memory)} of "
                   f"{_bytes(r.bytes_per_tile)} ({100.0 * r.max_tile_memory / r.bytes_per_tile:.1f}%)"),
        ("precision", r.precision_label() + f"; memory proportion {r.memory_proportion:g}"),
        ("graph", f"{r.passes['nodes_in']} nodes in, {r.passes['folded']} folded, {r.passes['fused']} fused, "
                  f"{r.passes['dead']} dead, {r.passes['nodes_out']} on device; compiled in "
                  f"{r.compile_seconds:.2f} s"),
    ]
    add(_kv(rows))
    if r.warnings:
        add("<ul>" + "".join(f'<li class="warn">Warning: {_e(w)}</li>' for w in r.warnings) + "</ul>")
    if execution is not None:
        x = execution
        add("<h3>Run</h3>")
        add(_kv([
            ("cycles", f"{x.cycles:,} ({x.estimated_seconds * 1e6:,.2f} us on the device)"),
            ("samples", f"{x.batch_size:,} ({x.samples_per_second:,.0f} samples/s)"),
            ("by kind", f"compute {x.compute_cycles:,}, exchange {x.exchange_cycles:,}, host I/O "
                        f"{x.host_cycles:,}; {x.steps:,} BSP steps"),
            ("bytes moved", f"{_bytes(x.exchanged_bytes)} exchanged, {_bytes(x.host_bytes)} to and from the host"),
            ("simulation", f"{x.wall_seconds * 1e3:,.1f} ms on the host (compute {x.compute_seconds * 1e3:,.1f}, "
                           f"exchange {x.exchange_seconds * 1e3:,.1f}, host I/O {x.host_io_seconds * 1e3:,.1f}); "
                           f"{_bytes(x.host_memory_bytes)} of host memory for tiles"
                           + ("; checked mode" if x.checked else "")),
            ("IPUs", ", ".join(map(str, x.ipus)) if x.ipus else "–"),
        ]))
    add("<h3>Pipeline</h3>")
    add(_table(
        ["stage (IPU)", "nodes", "compute cycles", "host I/O cycles", "IPU-Link copy cycles", "cycles per micro-batch",
         "carried in", "busiest tile", "memory"],
        [(st.ipu, st.nodes, st.compute_cycles, st.host_cycles, st.copy_cycles, st.interval_cycles,
          ", ".join(f"{c.name} ({_bytes(c.bytes)} from IPU {c.from_ipu})" for c in st.carried_in) or "–",
          _bytes(st.max_tile_bytes), _bytes(st.memory_bytes)) for st in e.stages],
        numeric=(1, 2, 3, 4, 5),
    ))
    add(f'<p class="muted">{_e(e.execution)}: fill and drain {e.fill_cycles:,} cycles, interval '
        f"{e.interval_cycles:,} cycles, {e.device_iterations} micro-batch(es) per replica: "
        f"{e.cycles_per_call:,} cycles per call.</p></section>")

    # Plots.
    add('<section id="plots"><h2>Plots</h2>')
    for name, svg in _plots(r, use_matplotlib).items():
        add(f'<figure class="plot" id="{PLOT_IDS[name]}"><figcaption>{_e(_PLOT_TITLES[name])}</figcaption>'
            f"{svg}</figure>")
    add("</section>")

    # Memory.
    cap = r.bytes_per_tile
    add('<section id="memory"><h2>Memory</h2>')
    add(_table(
        ["IPU", "tiles used", "total", "always live", "not always live", "busiest tile", "its bytes", "headroom",
         "busiest / mean"],
        [(m["ipu"], m["tiles_used"], _bytes(m["total_bytes"]), _bytes(m["always_live_bytes"]),
          _bytes(m["not_always_live_bytes"]), "–" if m["max_tile"] is None else m["max_tile"],
          _bytes(m["max_tile_bytes"]), _bytes(m["headroom_bytes"]),
          "–" if m["max_over_mean"] is None else f"{m['max_over_mean']:.2f}") for m in r.memory_per_ipu()],
        numeric=(0, 1),
    ))
    add("<h3>Busiest tiles and their largest tensors</h3>")
    rows2 = []
    for t in r.busiest_tiles(per_ipu=3):
        big = tile_largest(t)
        tensors = _Raw("<br>".join(
            f"{_e(x['name'])}" + (f" <span class='muted'>({_e(x['node'])})</span>" if x["node"] else "")
            + f": {_e(_bytes(x['bytes']))}" for x in big[:8]
        ) + (f"<br>... and {len(big) - 8} more" if len(big) > 8 else "") or "–")
        rows2.append((t.ipu, t.tile, _bytes(t.total), f"{100.0 * t.total / cap:.1f}%", _bytes(tile_always_live(t)),
                      _bytes(tile_not_always_live(t)), _bytes(cap - t.total), tensors))
    add(_table(["IPU", "tile", "total", "of capacity", "always live", "not always live", "headroom",
                "largest tensors at the peak (owning node)"], rows2, numeric=(0, 1)))
    add("</section>")

    # Plans.
    layer_cycles = {x["node"]: x["cycles"] for x in r.cycles_per_layer()}
    add(f'<section id="plans"><h2>Plans ({len(r.plans)} operations)</h2>')
    add(_table(
        ["node", "kind", "IPU", "plan", "tiles", "temporaries per tile", "planner's cycles", "node's cycles"],
        [(o.name, o.kind, o.ipu, o.plan, o.tiles_used, _bytes(o.temp_bytes_per_tile), o.estimated_cycles,
          layer_cycles.get(o.name)) for o in r.plans],
        numeric=(2, 4, 6, 7),
    ))
    add("</section>")

    # Layers.
    layers = r.cycles_per_layer()
    un = r.unattributed_cycles()
    add(f'<section id="layers"><h2>Cycles per layer ({len(layers)} layers, one micro-batch)</h2>')
    add(_table(
        ["node", "operator", "IPU", "cycles", "compute", "exchange", "steps", "plans"],
        [(x["node"], x["op_type"], x["ipu"], x["cycles"], x["by_kind"]["compute"], x["by_kind"]["exchange"],
          x["steps"], ", ".join(x["plans"])) for x in layers],
        numeric=(2, 3, 4, 5, 6),
    ))
    if un["compute"] or un["exchange"]:
        add(f'<p class="muted">Steps of no node: compute {un["compute"]:,}, exchange {un["exchange"]:,} '
            "cycles.</p>")
    add("</section>")

    # Steps.
    nodes = r.step_nodes()
    add(f'<section id="steps"><h2>Steps ({len(r.steps)})</h2>')
    add("<details><summary>Every step of every IPU's program, with the terms of its cost</summary>")
    add(_table(
        ["#", "IPU", "kind", "step", "node", "cycles", "bytes", "items", "busiest tile", "live bytes", "terms"],
        [(i, st.ipu, st.kind, st.name, nodes[i], st.cycles, st.bytes, st.items,
          "–" if st.tile is None else st.tile, st.live_bytes,
          ", ".join(f"{t['name']} {t['cycles']:,}" for t in step_terms(st)) or "–")
         for i, st in enumerate(r.steps)],
        numeric=(0, 1, 5, 6, 7, 9),
    ))
    add("</details></section>")

    add(f'<section id="text"><h2>Text summary</h2><pre>{_e(str(r))}'
        + (f"\n{_e(str(execution))}" if execution is not None else "") + "</pre></section>")
    add("</body></html>\n")
    return "".join(parts)
