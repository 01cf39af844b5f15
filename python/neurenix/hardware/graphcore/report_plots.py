"""Plots of a compile report, drawn with matplotlib (an optional dependency:
``pip install neurenix-ipu[plots]``).

- ``tile_memory``: each IPU's tiles, fullest first, as bars stacked
  always-live (constants, code, vertex state, exchange and control code)
  and not-always-live (activations and temporaries at the tile's peak),
  with the tile capacity as a horizontal line.
- ``liveness``: bytes of variables live on each IPU during each step of its
  program.
- ``layer_cycles``: the layers (ONNX nodes) with the most cycles, stacked
  compute / exchange.

Figures are :class:`matplotlib.figure.Figure` objects made directly (no
pyplot, no backend switch), so drawing them leaves the user's matplotlib
state alone.
"""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, Any, Dict, List

from .report import tile_always_live, tile_not_always_live

if TYPE_CHECKING:
    from .report import CompileReport

__all__ = [
    "have_matplotlib",
    "tile_memory_figure",
    "liveness_figure",
    "layer_cycles_figure",
    "figures",
    "save_plots",
    "figure_svg",
    "PLOT_NAMES",
    "bar_id",
]

PLOT_NAMES = ("tile_memory", "liveness", "layer_cycles")
_ALWAYS, _NOT_ALWAYS, _CAPACITY = "#4c72b0", "#dd8452", "#c44e52"
_COMPUTE, _EXCHANGE = "#55a868", "#8172b3"
# Below this fraction of capacity on the busiest tile, tile memory is drawn
# to the data's scale, not the capacity's.
_FULL_SCALE = 0.2
# Beyond this many tiles an IPU's bars are drawn as one filled outline.
_MAX_BARS = 256


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure_class() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError(
            "The report's plots need matplotlib, which is not installed: pip install neurenix-ipu[plots] "
            "(or pip install matplotlib)"
        ) from e
    return Figure


def bar_id(ipu: int, tile: int, always_live: bool) -> str:
    """The id of a tile's bar in the tile-memory plot's SVG."""
    return f"tm-ipu{ipu}-tile{tile}-" + ("always" if always_live else "not-always")


def _kib(n: float) -> float:
    return n / 1024.0


def tile_memory_figure(report: "CompileReport") -> Any:
    """Each IPU's tiles, fullest first: always-live and not-always-live bytes
    stacked, the capacity a horizontal line."""
    Figure = _figure_class()
    n = report.ipus_per_replica
    fig = Figure(figsize=(10, min(1.2 + 2.6 * n, 40)), layout="constrained")
    axes = fig.subplots(n, 1, squeeze=False)[:, 0]
    cap = _kib(report.bytes_per_tile)
    peak = _kib(report.max_tile_memory)
    widest = max([sum(1 for t in report.tiles if t.ipu == i) for i in range(n)] + [1])
    for ipu, ax in enumerate(axes):
        ts = sorted((t for t in report.tiles if t.ipu == ipu), key=lambda t: (-t.total, t.tile))
        always = [_kib(tile_always_live(t)) for t in ts]
        rest = [_kib(tile_not_always_live(t)) for t in ts]
        x = list(range(len(ts)))
        if len(ts) <= _MAX_BARS:
            low = ax.bar(x, always, width=0.85, color=_ALWAYS, label="always live", linewidth=0)
            high = ax.bar(x, rest, width=0.85, bottom=always, color=_NOT_ALWAYS, label="not always live", linewidth=0)
            # Stable ids in SVG output: "tm-ipu<i>-tile<t>-always" / "-not-always".
            for t, a, b in zip(ts, low, high):
                a.set_gid(bar_id(ipu, t.tile, True))
                b.set_gid(bar_id(ipu, t.tile, False))
            if len(ts) <= 32:
                ax.set_xticks(x, [str(t.tile) for t in ts], fontsize=7)
        else:
            edges = [k - 0.5 for k in range(len(ts) + 1)]
            tops = [a + b for a, b in zip(always, rest)]
            ax.stairs(always, edges, fill=True, color=_ALWAYS, label="always live")
            ax.stairs(tops, edges, baseline=always, fill=True, color=_NOT_ALWAYS, label="not always live")
        if peak >= _FULL_SCALE * cap:
            ax.axhline(cap, color=_CAPACITY, linestyle="--", linewidth=1.2, label=f"capacity {cap:,.1f} KiB")
            ax.set_ylim(0, cap * 1.08)
        else:
            # A nearly empty IPU on the capacity's scale shows no bars: scale
            # to the busiest tile and name the capacity in the legend.
            ax.axhline(cap, color=_CAPACITY, linestyle="--", linewidth=1.2,
                       label=f"capacity {cap:,.1f} KiB (off the scale: busiest tile at {100 * peak / cap:.1f}%)")
            ax.set_ylim(0, max(peak, 1e-3) * 1.25)
        ax.set_xlim(-0.6, widest - 0.4)
        used = f"{len(ts)} of {report.system.tiles_per_ipu} tiles used"
        top = f", busiest tile {ts[0].tile}: {_kib(ts[0].total):,.1f} KiB" if ts else ""
        ax.set_title(f"IPU {ipu}: {used}{top}", fontsize=10, loc="left")
        ax.set_ylabel("KiB")
        if ipu == 0:
            ax.legend(loc="upper right", fontsize=8)
    axes[-1].set_xlabel("tiles, fullest first" + (" (tile numbers below)" if len(report.tiles) and all(
        sum(1 for t in report.tiles if t.ipu == i) <= 32 for i in range(n)) else ""))
    fig.suptitle("Tile memory at its peak")
    return fig


def liveness_figure(report: "CompileReport") -> Any:
    """Bytes live on each IPU during each step of its program."""
    Figure = _figure_class()
    fig = Figure(figsize=(10, 4), layout="constrained")
    ax = fig.subplots()
    drawn = False
    for lv in report.liveness():
        if not lv["live_bytes"]:
            continue
        ys = [_kib(b) for b in lv["live_bytes"]]
        xs = list(range(len(ys)))
        ax.step(xs, ys, where="post", label=f"IPU {lv['ipu']} (peak {_kib(lv['peak_live_bytes']):,.1f} KiB)")
        drawn = True
    if drawn:
        ax.set_xlabel("step of the IPU's program")
        ax.set_ylabel("KiB live on the IPU")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    else:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no liveness in this report (the native module does not report live bytes per step)",
                ha="center", va="center", transform=ax.transAxes)
    ax.set_title("Variables live per step")
    return fig


def layer_cycles_figure(report: "CompileReport", top: int = 20) -> Any:
    """The ``top`` layers by cycles (one micro-batch), stacked compute / exchange."""
    Figure = _figure_class()
    layers = report.cycles_per_layer()[:top]
    fig = Figure(figsize=(10, max(2.5, 0.8 + 0.32 * len(layers))), layout="constrained")
    ax = fig.subplots()
    if layers:
        labels = [f"{x['node']} (IPU {x['ipu']})" for x in layers]
        comp = [x["by_kind"]["compute"] for x in layers]
        exch = [x["by_kind"]["exchange"] for x in layers]
        y = list(range(len(layers)))
        ax.barh(y, comp, color=_COMPUTE, label="compute")
        ax.barh(y, exch, left=comp, color=_EXCHANGE, label="exchange")
        ax.set_yticks(y, labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("cycles per micro-batch")
        ax.legend(fontsize=8, loc="lower right")
    else:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no compute or exchange steps", ha="center", va="center", transform=ax.transAxes)
    total = len(report.cycles_per_layer())
    ax.set_title(f"Cycles per layer (top {len(layers)} of {total})")
    return fig


def figures(report: "CompileReport") -> Dict[str, Any]:
    """Every plot, by name (``PLOT_NAMES``)."""
    return {
        "tile_memory": tile_memory_figure(report),
        "liveness": liveness_figure(report),
        "layer_cycles": layer_cycles_figure(report),
    }


def save_plots(report: "CompileReport", directory: str) -> List[str]:
    """Writes ``<name>.png`` for every plot into ``directory``; returns the paths."""
    figs = figures(report)
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name in PLOT_NAMES:
        path = os.path.join(directory, f"{name}.png")
        figs[name].savefig(path, format="png", dpi=100)
        paths.append(path)
    return paths


def figure_svg(fig: Any, salt: str = "") -> str:
    """The figure as an ``<svg>`` element to put inline in HTML: text kept as
    text, no XML prologue, ids made unique per figure by ``salt``."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"neurenix-{salt}"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]
