"""AdapterP: the serial bottleneck adapter of Pfeiffer et al. 2020, "AdapterFusion: Non-Destructive Task
Composition for Transfer Learning", https://arxiv.org/abs/2005.00247 — one adapter per block, after the
MLP (Houlsby's second adapter only).

``placement`` accepts ``privauditor`` and ``paper``, and both attach one serial adapter to the output of
the MLP output projection (LLM-Adapters' ``output_adapter``, as PrivAuditor trains it). The paper's
adapter reads the post-LayerNorm output of BERT's post-LN block; the pre-LN decoders here have no such
LayerNorm, so the MLP's output is the nearest equivalent. The field is kept so that every bottleneck
technique takes the same settings (a sweep override ``placement: paper`` works for all three).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import ADAPTATIONS
from ._bottleneck import BottleneckAdaptation


@ADAPTATIONS.register("adapter_p")
@dataclass
class PfeifferAdapterAdaptation(BottleneckAdaptation):
    """One serial bottleneck adapter per transformer block, after the MLP (Pfeiffer et al. 2020)."""

    name = "adapter_p"
    paper = "https://arxiv.org/abs/2005.00247"

    def apply(self, model: Any, family: Any) -> Any:
        """Freeze ``model`` and attach an adapter after every MLP output projection."""
        return self.attach(model, serial_output=family.modules.mlp_out)
