"""Adaptation techniques (full fine-tuning, LoRA, bottleneck adapters, prompt learning, ...).

One plugin file per technique, registered under its file stem in ``ADAPTATIONS``.
"""

from ..registry import Registry

ADAPTATIONS: Registry = Registry("adaptation", __name__)
