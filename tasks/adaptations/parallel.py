"""Parallel adapters of He et al. 2022, "Towards a Unified View of Parameter-Efficient Transfer
Learning", https://arxiv.org/abs/2110.04366: a bottleneck adapter beside a module rather than after it,
``y = f(x) + s·A(x)``.

``placement``:

- ``privauditor`` (default): LLM-Adapters' placement (https://arxiv.org/abs/2304.01933), which the
  PrivAuditor benchmark trains with: one adapter beside each attention query/key/value projection (one
  beside the fused projection in BLOOM and GPT-2).
- ``paper``: He et al.'s best variant: one adapter beside the whole MLP, from the MLP's input to its
  output (attached at the input and output projections, see ``_bottleneck``). He et al. also scale the
  adapter's output by s = 4 there and use a wider bottleneck; set ``scaling`` / ``bottleneck`` for that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import ADAPTATIONS
from ._bottleneck import BottleneckAdaptation


@ADAPTATIONS.register("parallel")
@dataclass
class ParallelAdapterAdaptation(BottleneckAdaptation):
    """Bottleneck adapters beside the attention projections or beside the MLP (He et al. 2022)."""

    name = "parallel"
    paper = "https://arxiv.org/abs/2110.04366"

    #: Multiplies the adapter's output. 1.0 as LLM-Adapters (so results compare with PrivAuditor); He et
    #: al. found 4.0 best beside the MLP.
    scaling: float = 1.0

    def apply(self, model: Any, family: Any) -> Any:
        """Freeze ``model`` and attach the adapters where ``placement`` says."""
        modules = family.modules
        if self.placement == "paper":
            return self.attach(model, parallel_mlp=(modules.mlp_in, modules.mlp_out), scale=self.scaling)
        return self.attach(model, parallel=modules.qkv, scale=self.scaling)
