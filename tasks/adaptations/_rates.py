"""Learning rates of each technique on each tiny base, chosen by validation NLL under the constant
schedule (the rule and the command: ``benchmarks/learning_rates.py``). Written by that script.
"""

#: the settings they were chosen with
SETTINGS = {
    "batch_size": 8,
    "checkpoints": [1, 2, 4],
    "datasets": ["finance", "sql"],
    "max_length": 96,
    "members": 64,
    "profile": "default",
    "seed": 0,
    "validation": 32,
}

#: technique -> tiny base -> learning rate
RATES: dict[str, dict[str, float]] = {
    "adapter_h": {
        "tiny-bloom": 0.03,
        "tiny-gpt2": 0.1,
        "tiny-gptj": 0.03,
        "tiny-llama": 0.03,
        "tiny-opt": 0.03,
        "tiny-t5": 0.03,
    },
    "adapter_p": {
        "tiny-bloom": 0.3,
        "tiny-gpt2": 0.3,
        "tiny-gptj": 0.1,
        "tiny-llama": 0.3,
        "tiny-opt": 0.3,
        "tiny-t5": 0.03,
    },
    "full": {
        "tiny-bloom": 0.01,
        "tiny-gpt2": 0.01,
        "tiny-gptj": 0.01,
        "tiny-llama": 0.01,
        "tiny-opt": 0.01,
        "tiny-t5": 0.01,
    },
    "head": {
        "tiny-bloom": 0.03,
        "tiny-gpt2": 0.03,
        "tiny-gptj": 0.03,
        "tiny-llama": 0.03,
        "tiny-opt": 0.03,
        "tiny-t5": 0.1,
    },
    "ia3": {
        "tiny-bloom": 0.3,
        "tiny-gpt2": 0.3,
        "tiny-gptj": 1.0,
        "tiny-llama": 0.3,
        "tiny-opt": 1.0,
        "tiny-t5": 0.3,
    },
    "llama_adapter": {"tiny-llama": 0.1},
    "lora": {
        "tiny-bloom": 0.01,
        "tiny-gpt2": 0.01,
        "tiny-gptj": 0.03,
        "tiny-llama": 0.01,
        "tiny-opt": 0.01,
        "tiny-t5": 0.01,
    },
    "parallel": {
        "tiny-bloom": 0.01,
        "tiny-gpt2": 0.01,
        "tiny-gptj": 0.03,
        "tiny-llama": 0.03,
        "tiny-opt": 0.03,
        "tiny-t5": 0.01,
    },
    "prefix": {
        "tiny-bloom": 0.1,
        "tiny-gpt2": 0.03,
        "tiny-gptj": 0.1,
        "tiny-llama": 0.1,
        "tiny-opt": 0.03,
        "tiny-t5": 0.01,
    },
    "prompt": {
        "tiny-bloom": 0.03,
        "tiny-gpt2": 0.1,
        "tiny-gptj": 0.1,
        "tiny-llama": 0.1,
        "tiny-opt": 0.1,
        "tiny-t5": 10.0,
    },
    "ptuning": {
        "tiny-bloom": 0.1,
        "tiny-gpt2": 0.003,
        "tiny-gptj": 0.1,
        "tiny-llama": 0.01,
        "tiny-opt": 0.01,
        "tiny-t5": 0.03,
    },
}
