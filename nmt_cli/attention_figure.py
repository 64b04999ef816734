"""Attention heatmaps of one translation (``nmt attention``), as in the paper's Figures 3-5.

One row of small heatmaps per layer and kind (encoder self-attention, decoder self-attention,
cross-attention), one column per head; axes labelled with the pieces when the sentence is short
enough to read them. matplotlib is an optional extra (``pip install 'nmt-cli[plot]'``).
"""

from __future__ import annotations

from pathlib import Path

from .decode.attention_maps import AttentionMaps
from .errors import NmtError
from .utils.files import atomic_path

LABELLED_UP_TO = 40  # pieces per axis beyond which tick labels are left out (unreadable)


def draw_attention(maps: AttentionMaps, source: list[str], output: list[str], path: Path) -> None:
    """Write the heatmaps of ``maps`` for ``source``/``output`` pieces (EOS and BOS added here) to PNG ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise NmtError("nmt attention needs matplotlib: pip install 'nmt-cli[plot]'") from None
    src_labels, in_labels = [*source, "</s>"], ["<s>", *output]
    rows = (
        [("encoder self-attention", i, m, src_labels, src_labels) for i, m in enumerate(maps.encoder)]
        + [("decoder self-attention", i, m, in_labels, in_labels) for i, m in enumerate(maps.decoder)]
        + [("cross-attention", i, m, in_labels, src_labels) for i, m in enumerate(maps.cross)]
    )
    heads = rows[0][2].size(0)
    figure, axes = plt.subplots(len(rows), heads, figsize=(2.4 * heads, 2.4 * len(rows)), squeeze=False)
    for r, (kind, layer, weights, queries, keys) in enumerate(rows):
        for h in range(heads):
            box = axes[r][h]
            box.imshow(weights[h].numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            box.set_xticks([])
            box.set_yticks([])
            if h == 0:
                box.set_ylabel(f"{kind}\nlayer {layer + 1}", fontsize=8)
                if len(queries) <= LABELLED_UP_TO:
                    box.set_yticks(range(len(queries)), queries, fontsize=5)
            if r == 0 or rows[r - 1][0] != kind:
                box.set_title(f"head {h + 1}", fontsize=8)
            if len(keys) <= LABELLED_UP_TO and (r + 1 == len(rows) or rows[r + 1][0] != kind):
                box.set_xticks(range(len(keys)), keys, fontsize=5, rotation=90)
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=100)
    plt.close(figure)


__all__ = ["draw_attention"]
