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
  DeepSpeed's own estimators count it (2 bytes of 16-bit weights per parameter on every device, and 18
  bytes of 16-bit and fp32 gradients, fp32 master weights and Adam moments spread over the devices; with
  fp32 weights each 16-bit figure doubles), and a torch AdamW without DeepSpeed (16 bytes per trained
  parameter: its fp32 weight, gradient and two moments, plus the frozen weights at their own width).
  Which widths a cell uses is its precision's (:mod:`~privauditor.orchestrator.plan.memory`).
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
    layers: int  # the decoder's (a causal model's blocks)
    hidden: int
    seq2seq: bool
    heads: int = 1
    vocab: int = 0
    attention_width: int = 0  # heads x head size (0: ``hidden``)
    encoder_layers: int = 0
    source_matmul: int = 0  # weights applied to source tokens: the encoder's and the cross-attention K/V

    @classmethod
    def from_config(cls, config: Any) -> Shape:
        """The shape of the model ``config`` describes, built on the meta device."""
        import torch
        from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM
        from transformers.pytorch_utils import Conv1D

        seq2seq = bool(getattr(config, "is_encoder_decoder", False))
        with torch.device("meta"):
            model = (AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM).from_config(config)
        linear = {
            n: m.weight.numel() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear | Conv1D)
        }
        largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
        total = sum(p.numel() for p in model.parameters())  # shared (tied) tensors once
        hidden = _first(config, "hidden_size", "d_model", "n_embd")
        heads = _first(config, "num_attention_heads", "num_heads", "n_head")
        width = heads * getattr(config, "d_kv", 0) or heads * (
            getattr(config, "head_dim", None) or hidden // heads
        )
        layers = _first(config, "num_decoder_layers", "num_hidden_layers", "num_layers", "n_layer")
        source = 0
        if seq2seq:  # the encoder's weights, and the cross-attention's K and V (applied to the source)
            cross = ("EncDecAttention.k", "EncDecAttention.v", "encoder_attn.k_proj", "encoder_attn.v_proj")
            source = sum(v for n, v in linear.items() if n.startswith("encoder.") or n.endswith(cross))
        encoder_layers = config.num_layers if seq2seq else 0
        return cls(total, sum(linear.values()), largest, layers, hidden, seq2seq, heads, config.vocab_size,
                   width, encoder_layers, source)  # fmt: skip


def _first(config: Any, *names: str) -> int:
    return next(getattr(config, n) for n in names if getattr(config, n, None))


def attention_flops(shape: Shape, seq: int, sequences: int = 1, source: int = 0) -> int:
    """QKᵀ and AV of every layer at full S² (2 FLOPs per multiply-accumulate); an encoder-decoder's
    encoder over ``source`` tokens, its decoder over ``seq`` and across to the source."""
    width = shape.attention_width or shape.hidden
    pairs = (
        shape.layers * seq * seq
        + shape.encoder_layers * source * source
        + shape.layers * seq * source * shape.seq2seq
    )
    return sequences * 4 * pairs * width


def _matmul_flops(shape: Shape, seq: int, sequences: int, source: int) -> int:
    return sequences * 2 * ((shape.matmul_params - shape.source_matmul) * seq + shape.source_matmul * source)


def forward_flops(shape: Shape, seq: int, sequences: int = 1, source: int = 0) -> int:
    """FLOPs of the forward passes of ``sequences`` of ``seq`` tokens (an encoder-decoder: ``seq`` target
    tokens after ``source`` source tokens)."""
    return _matmul_flops(shape, seq, sequences, source) + attention_flops(shape, seq, sequences, source)


def train_flops(
    shape: Shape, seq: int, sequences: int, trainable_matmul: int, source: int = 0, inputs: bool = True
) -> int:
    """One training pass over ``sequences``: the forward; the backward's input gradients through the
    whole model (one multiply per projection weight and token, two per attention product, whose operands
    are both activations; none with ``inputs`` False, when only the output layer trains); and the weight
    gradients of ``trainable_matmul`` matrix weights (all of ``shape.matmul_params`` for full
    fine-tuning: 3× the forward; an adapter's for a parameter-efficient technique)."""
    matmul = _matmul_flops(shape, seq, sequences, source)
    grads = (matmul + 2 * attention_flops(shape, seq, sequences, source)) if inputs else 0
    return (
        forward_flops(shape, seq, sequences, source)
        + grads
        + int(matmul * trainable_matmul / shape.matmul_params)
    )


#: bytes per token and hidden unit a transformer layer keeps for the backward at 16 bits (Korthikanti et
#: al. 2022, eq. 1, ``sbh(34 + 5as/h)``, less the ``5as/h`` attention scores fused kernels do not keep)
LAYER_BYTES = 34
#: what a checkpointed layer keeps instead: its 16-bit input (Korthikanti et al. 2022, section 5, "full
#: activation recomputation": ``2sbhL`` for the stack)
BOUNDARY_BYTES = 2


def layer_activation_bytes(
    shape: Shape, seq: int, batch: int, dtype_bytes: int = 2, source: int = 0, checkpointing: bool = False
) -> int:
    """The layers' share of :func:`activation_bytes`: every layer's :data:`LAYER_BYTES` per token and
    hidden unit; with ``checkpointing``, each layer's input (:data:`BOUNDARY_BYTES`) and one layer's
    activations, recomputed in the backward, the largest of the decoder's and the encoder's (Chen et al.
    2016, section 3, a checkpoint at every layer boundary). Scaled from 16 bits to ``dtype_bytes``."""
    tokens = seq * batch * shape.hidden
    source_tokens = source * batch * shape.hidden
    if checkpointing:
        found = BOUNDARY_BYTES * (shape.layers * tokens + shape.encoder_layers * source_tokens)
        found += LAYER_BYTES * max(tokens, source_tokens if shape.encoder_layers else 0)
    else:
        found = LAYER_BYTES * (shape.layers * tokens + shape.encoder_layers * source_tokens)
    return int(found * dtype_bytes / 2)


def activation_bytes(
    shape: Shape, seq: int, batch: int, dtype_bytes: int = 2, source: int = 0, checkpointing: bool = False
) -> int:
    """Activations a training step keeps for the backward: the layers' (:func:`layer_activation_bytes`:
    per layer and token ``34 · hidden`` bytes at 16 bits, Korthikanti et al. 2022, table 2, less the S²
    attention scores that fused attention kernels such as PyTorch's SDPA do not keep; with
    ``checkpointing`` each layer's input and one layer recomputed), scaled to ``dtype_bytes``; and the
    logits with their fp32 log-softmax and its gradient, which checkpointing leaves as they are."""
    layers = layer_activation_bytes(shape, seq, batch, dtype_bytes, source, checkpointing)
    return int(layers + batch * seq * shape.vocab * (dtype_bytes + 8))


def zero_state_bytes(
    params: int,
    largest_layer: int,
    stage: int,
    gpus_per_node: int = 1,
    nodes: int = 1,
    offload: bool = False,
    weight_bytes: int = 2,
) -> tuple[int, int]:
    """(CPU bytes per node, GPU bytes per device) of ZeRO's model states for ``params`` trained with
    mixed-precision Adam (DeepSpeed's estimators' figures, their 1.5 buffer factor on the CPU side; stage
    3 assumes ``zero.Init`` and, with ``offload``, parameters offloaded as well as the optimizer).
    ``weight_bytes``: the width of the model's own weights and gradients, 2 under bf16 (DeepSpeed's
    figures exactly) and 4 when DeepSpeed trains fp32 weights (its ZeRO optimizer keeps its own fp32
    copy of the partition all the same): every 16-bit figure of the estimators at that width."""
    devices = gpus_per_node * nodes
    states = MIXED_ADAM_STATE - 2 + weight_bytes  # model-width gradients, fp32 ones, master, moments
    layer = 2 * weight_bytes * largest_layer  # ZeRO-3's gathered layer: its weights and gradients
    if stage == 3:
        gpu = layer + (0 if offload else int(states * params / devices))
        cpu = (states * params / nodes) if offload else layer * gpus_per_node
        return int(cpu * 1.5), gpu
    if stage not in (1, 2):
        raise ValueError(f"ZeRO stage {stage}: 1, 2 or 3")
    if offload:
        return int(params * max(4 * devices, 16) * 1.5), weight_bytes * params
    return int(4 * params * gpus_per_node * 1.5), weight_bytes * params + int(states * params / devices)


#: bytes per trained parameter under a torch AdamW, whatever the precision: fp32 weight, gradient, moments
TRAINED_STATE = 16


def plain_state_bytes(frozen: int, trainable: int, frozen_bytes: int = 4) -> int:
    """One process with a torch AdamW: the ``frozen`` weights at ``frozen_bytes`` each, and per trained
    parameter its fp32 weight, fp32 gradient and two fp32 moments (:data:`TRAINED_STATE`)."""
    return frozen * frozen_bytes + trainable * TRAINED_STATE
