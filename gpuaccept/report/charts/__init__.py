"""Every picture gpuaccept draws, in one place: per-GPU figures, NCCL bus bandwidth, fine-tune loss.

* ``gpus``: the summary's heat map (each per-GPU figure the catalogue gives a ``display.heatmap``
  column, against the SKU's floor) and Allure's per-GPU bars (figures with ``display.bars``);
* ``nccl``: busbw against message size per scale, for the summary (from the checks) and for a test's
  own sweep artefact (``plot_busbw``);
* ``loss``: fine-tune loss curves, for the summary and for a run's ``loss_curve.png``.

What is drawn for a metric is the catalogue's word (``thresholds.schema.Display``), never a list of
names kept here. Drawing uses matplotlib's object API on the Agg canvas (no pyplot state, no display,
safe under xdist workers); the ``*_png`` functions return PNG bytes for a ``data:`` URI or an Allure
attachment, and the functions that pick the data are pure (unit-tested).
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpuaccept.thresholds.schema import Display

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from gpuaccept.thresholds.schema import MetricSpec

__all__ = ["FLOOR", "Catalogue", "display_of", "png"]

#: The metric catalogue (``Thresholds.metrics``): metric name -> what it is, its display hints included.
Catalogue = Mapping[str, "MetricSpec"]
#: The colour of a limit line (floor, target) on every chart.
FLOOR = "#c0392b"
_PLAIN = Display()


def display_of(catalogue: Catalogue, metric: str) -> Display:
    """The metric's display hints (the defaults for a metric the catalogue does not know)."""
    spec = catalogue.get(metric)
    return spec.display if spec is not None else _PLAIN


def png(fig: Figure, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (Agg canvas, tight bounding box)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()
