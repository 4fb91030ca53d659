"""What a cell's work costs, from a model's architecture alone: FLOPs and memory, no weights, no network.

The architecture is read from a transformers config and instantiated on the ``meta`` device (no memory, no
weights), so every family's layers are counted as they are built: :class:`Shape` holds the weights of
the matrix multiplications (every ``nn.Linear`` and GPT-2's ``Conv1D``, the LM head included even when
tied to the embedding; embedding lookups cost no multiply), the parameter count, the largest layer and
the attention dimensions.

- **Forward**, per sequence of ``S`` tokens: ``2 · matmul_params · S`` for the projections and
  ``4 · layers · S² · hidden`` for attention (QKᵀ and AV at full S²: causal masking saves no multiply in
  the kernels), as ``torch.utils.flop_counter`` counts it.
- **Training step**: the forward, the backward's input gradients (from the output down to the lowest
  trainable layer, taken here as the whole model) and the weight gradients of the trainable matrices
  (``2 · trainable_matmul · S``): 3× the forward when everything trains, about 2× for adapters spread
  over every layer.
- **Memory** of training state per device: ZeRO stage 2 / 3 partitioning of mixed-precision Adam as
  DeepSpeed's own estimators count it (2 bytes of fp16 weights per parameter on every device, and 18
  bytes of fp16 and fp32 gradients, fp32 master weights and Adam moments spread over the devices), and
  plain fp32 AdamW without DeepSpeed (16 bytes per trainable parameter plus the frozen weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: bytes per trained parameter: fp16 gradients 2, fp32 gradients 4, fp32 master weights 4, Adam moments 8
MIXED_ADAM_STATE = 18


@dataclass(frozen=True)
class Shape:
    total_params: int
    matmul_params: int  # weights of every matrix multiplication per token (LM head included)
    largest_layer_params: int  # the largest module's own parameters (ZeRO-3 gathers one at a time)
    layers: int
    hidden: int
    seq2seq: bool

    @classmethod
    def from_config(cls, config: Any) -> Shape:
        """The shape of the model ``config`` describes, built on the meta device."""
        import torch
        from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM
        from transformers.pytorch_utils import Conv1D

        seq2seq = bool(getattr(config, "is_encoder_decoder", False))
        with torch.device("meta"):
            model = (AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM).from_config(config)
        matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear | Conv1D))
        largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
        layers = getattr(config, "num_hidden_layers", None) or config.num_layers
        hidden = getattr(config, "hidden_size", None) or config.d_model
        total = sum(p.numel() for p in model.parameters())  # shared (tied) tensors once
        return cls(total, matmul, largest, layers, hidden, seq2seq)


def attention_flops(shape: Shape, seq: int, sequences: int = 1) -> int:
    """QKᵀ and AV of every layer at full S² (2 FLOPs per multiply-accumulate)."""
    return sequences * 4 * shape.layers * seq * seq * shape.hidden


def forward_flops(shape: Shape, seq: int, sequences: int = 1) -> int:
    """FLOPs of the forward passes of ``sequences`` of ``seq`` tokens through a causal model."""
    return sequences * 2 * shape.matmul_params * seq + attention_flops(shape, seq, sequences)


def train_flops(shape: Shape, seq: int, sequences: int, trainable_matmul: int) -> int:
    """One training pass over ``sequences``: the forward; the backward's input gradients through the
    whole model (one multiply per projection weight and token, two per attention product, whose operands
    are both activations); and the weight gradients of ``trainable_matmul`` matrix weights (all of
    ``shape.matmul_params`` for full fine-tuning: 3× the forward; an adapter's for a parameter-efficient
    technique)."""
    inputs = sequences * 2 * shape.matmul_params * seq + 2 * attention_flops(shape, seq, sequences)
    return forward_flops(shape, seq, sequences) + inputs + sequences * 2 * trainable_matmul * seq


def zero_state_bytes(
    params: int, largest_layer: int, stage: int, gpus_per_node: int = 1, nodes: int = 1, offload: bool = False
) -> tuple[int, int]:
    """(CPU bytes per node, GPU bytes per device) of ZeRO's model states for ``params`` trained with
    mixed-precision Adam (DeepSpeed's estimators' figures, their 1.5 buffer factor on the CPU side; stage
    3 assumes ``zero.Init`` and, with ``offload``, parameters offloaded as well as the optimizer)."""
    devices = gpus_per_node * nodes
    if stage == 3:
        gpu = 4 * largest_layer + (0 if offload else int(MIXED_ADAM_STATE * params / devices))
        cpu = (MIXED_ADAM_STATE * params / nodes) if offload else 4 * largest_layer * gpus_per_node
        return int(cpu * 1.5), gpu
    if stage not in (1, 2):
        raise ValueError(f"ZeRO stage {stage}: 1, 2 or 3")
    if offload:
        return int(params * max(4 * devices, 16) * 1.5), 2 * params
    return int(4 * params * gpus_per_node * 1.5), 2 * params + int(MIXED_ADAM_STATE * params / devices)


def plain_state_bytes(total_params: int, trainable: int, dtype_bytes: int = 4) -> int:
    """One process with a torch AdamW: every weight in ``dtype_bytes``, and per trainable parameter its
    gradient and two fp32 moments."""
    return total_params * dtype_bytes + trainable * (dtype_bytes + 8)


def per_sample_gradient_bytes(trainable: int, batch: int) -> int:
    """DP-SGD's per-sample gradients: one fp32 copy of the trainable parameters per record of a batch."""
    return 4 * trainable * batch
