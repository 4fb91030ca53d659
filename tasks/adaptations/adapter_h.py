"""AdapterH: serial bottleneck adapters of Houlsby et al. 2019, "Parameter-Efficient Transfer Learning
for NLP", https://arxiv.org/abs/1902.00751.

``placement``:

- ``privauditor`` (default): LLM-Adapters' placement (https://arxiv.org/abs/2304.01933), which the
  PrivAuditor benchmark trains with: an adapter on the MLP's input (``x + A(x)`` before the input
  projections) and one on the MLP output projection's output. On gated MLPs (LLaMA, T5) one adapter
  feeds both input projections; LLM-Adapters puts a separate adapter on each of them, which makes the
  "input" of the MLP two different things, so we do not follow it there.
- ``paper``: Houlsby's: after the attention output projection and after the MLP output projection,
  before the residual sum (self-attention only; T5's cross-attention gets none).

The adapter, its zero-initialised up-projection and the shared hyper-parameters are in ``_bottleneck``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import ADAPTATIONS
from ._bottleneck import BottleneckAdaptation


@ADAPTATIONS.register("adapter_h")
@dataclass
class HoulsbyAdapterAdaptation(BottleneckAdaptation):
    """Two serial bottleneck adapters per transformer block (Houlsby et al. 2019)."""

    name = "adapter_h"
    paper = "https://arxiv.org/abs/1902.00751"

    def apply(self, model: Any, family: Any) -> Any:
        """Freeze ``model`` and attach the adapters where ``placement`` says."""
        modules = family.modules
        if self.placement == "paper":
            return self.attach(model, serial_output=modules.attn_out + modules.mlp_out)
        return self.attach(model, serial_mlp_input=modules.mlp_in, serial_output=modules.mlp_out)
