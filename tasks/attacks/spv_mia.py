"""``spv_mia``: self-calibrated probabilistic variation (Fu et al. 2024, "Practical Membership Inference
Attacks against Fine-tuned Large Language Models via Self-prompt Calibration", NeurIPS 2024,
https://arxiv.org/abs/2311.06062).

Probabilistic variation: a text the model memorised sits at a local maximum of its likelihood, so its
probability falls more under small perturbations than a text's the model merely generalises to:
Δ_M(x) = p_M(x) − mean_j p_M(x̃_j) over ``k`` perturbed texts x̃_j. Self-prompt calibration: the reference
R is adapted from the base, with the target's own technique, on texts the target T writes from short
prompts of the domain, so it knows the domain but none of the members. score = Δ_T(x) − Δ_R(x), higher =
member, with p(x) = exp(−mean token NLL) (the code's ``exp(−loss)``).

Choices, following the paper's code (tsinghua-fib-lab/NeurIPS2024_SPV-MIA):

- Perturbations: ``k`` = 10 independent mask-fillings per text (no ± pairs). Ours are the ``neighbours``
  view's masked-LM substitutions (shared with a ``neighbourhood`` attack of the same ``k`` and
  ``mask_fraction``). The code's T5 mask-filling masks spans of 2 words, pct·n / (2 + 2·buffer) spans at
  pct 0.3 and buffer 1: 15 % of the words. Our view substitutes single tokens; ``mask_fraction`` 0.15 of
  the tokens is its nearest setting.
- Self-prompt texts and the reference: the ``self_prompted`` view (16 prompt tokens from each record of the
  split's ``population``, one sample per prompt, the target's technique for 2 epochs); the target's T and
  the reference's R score the same texts and the same neighbours.
- Deviation: the reference trains at the target's learning rate; the authors' commands train it at half
  the target's (``ft_llms/run_llama.sh`` @ df01b144: line 7, the target, ``-e 10 ... -lr 1e-4``; line 35,
  the self-prompt reference, ``-e 2 ... -lr 5e-5``), a choice their README (line 75) does not state.

The attack adapts a model of its own at each checkpoint it runs at, so it runs at the last alone
(``checkpoints = "last"``), and it is not in the default sweep (``attacks=[..., spv_mia]`` adds it; it needs
``split.population``). Its access is ``reference``: besides the target's probabilities and population
texts it needs the base and the recipe of the target's adaptation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ATTACKS
from ._base import Attack


@ATTACKS.register("spv_mia")
@dataclass
class SpvMiaAttack(Attack):
    """The target's probabilistic variation minus the self-prompt reference's."""

    k: int = 10  # perturbed texts per text (the code's 10)
    mask_fraction: float = 0.15  # share of a text's tokens substituted (the code masks 15 % of its words)
    prompt_tokens: int = 16  # tokens of a population text that prompt the target (the code's clip)
    epochs: int = 2  # the reference's training epochs (the code's LoRA setting)

    name = "spv_mia"
    paper = "https://arxiv.org/abs/2311.06062"
    access = "reference"
    checkpoints = "last"

    def views(self) -> dict:
        from ..views import build_view

        neighbours = {"k": self.k, "mask_fraction": self.mask_fraction}
        return {
            "signals": build_view("signals"),
            "neighbours": build_view("neighbours", neighbours),
            "reference": build_view(
                "self_prompted", neighbours | {"prompt_tokens": self.prompt_tokens, "epochs": self.epochs}
            ),
        }

    def score(self, views) -> np.ndarray:
        reference = views["reference"]
        target = variation(views["signals"].nll, views["neighbours"])
        return target - variation(reference.nll, reference.neighbour_nll)


def variation(nll, neighbour_nll) -> np.ndarray:
    """p(x) − mean_j p(x̃_j) per text, p = exp(−mean NLL)."""
    own = np.exp(-np.asarray(nll, dtype=np.float64))
    return own - np.array([np.exp(-np.asarray(n, dtype=np.float64)).mean() for n in neighbour_nll])
