"""The kernels a model is served with: the fastest that still give every GPU of a SKU the same tokens.

The fine-tune runs with ``torch.use_deterministic_algorithms(True)`` (bit-identical training on every GPU of
a SKU and stack). Left on while serving, it slows decoding by 21% on an H100 and 25% on an H200
(docs/measurements.md 'Inference at serving speed'): every new tensor is NaN-filled
(``torch.utils.deterministic.fill_uninitialized_memory``, about a third of the loss), and the static cache's
``index_copy_`` becomes a sort-based ``index_put_``. Serving needs neither: decode is matrix products and
attention forwards, which cuBLAS computes bit-wise identically run to run on GPUs of one architecture and SM
count with one stream (NVIDIA cuBLAS guide, 'Results reproducibility'), and the cache's writes go to distinct
positions, so no atomic order can differ. The suite's agreement check (every GPU's tokens and logits
checksum, ``gpuaccept.verdicts.inference.judge_agreement``) and graph-against-eager hold that promise on
every run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["SERVING_KERNELS", "serving_kernels"]

#: What the record says the model was served with
SERVING_KERNELS = "default (deterministic algorithms off while serving)"


@contextmanager
def serving_kernels() -> Iterator[str]:
    """Deterministic algorithms off for the block (and NaN fills with them), as they were after it."""
    was = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(False)
    try:
        yield SERVING_KERNELS
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn_only)
