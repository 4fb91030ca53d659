"""Loading is safe by construction: no pickle, no unsafe YAML, no checkpoint code unless the user opts in
(``PRIVAUDITOR_TRUST_REMOTE_CODE=1``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from privauditor.tasks.infra.errors import PrivauditorError
from privauditor.tasks.models import TRUST_REMOTE_CODE_ENV, load_model

ROOT = Path(__file__).resolve().parents[1]
UNSAFE = {
    r"yaml\.(unsafe_)?load\(": "YAML through yaml.safe_load only",
    r"pickle\.loads?\(": "no pickle",
    r"torch\.load\((?![^)]*weights_only=True)": "torch.load only with weights_only=True",
    r"trust_remote_code=True": "trust_remote_code only from the user's opt-in",
}


def test_no_unsafe_loading_in_the_source():
    found = []
    for path in [p for d in ("tasks", "orchestrator", "benchmarks") for p in (ROOT / d).rglob("*.py")]:
        text = path.read_text()
        found += [
            f"{path.relative_to(ROOT)}: {why}" for pattern, why in UNSAFE.items() if re.search(pattern, text)
        ]
    assert found == []


def test_yaml_numbers_come_from_the_safe_loader_that_builds_no_objects():
    import yaml

    from privauditor.tasks.infra.strict import _loader, load_yaml

    assert issubclass(_loader(), yaml.SafeLoader)
    assert load_yaml("{lr: 3e-4, big: 1E5, text: '3e-4', name: e5, count: 12}") == {
        "lr": 3e-4, "big": 1e5, "text": "3e-4", "name": "e5", "count": 12,
    }  # fmt: skip
    with pytest.raises(yaml.YAMLError, match="python/object"):
        load_yaml("!!python/object/apply:os.system ['echo unsafe']")


def test_a_checkpoint_with_its_own_code_is_refused_unless_the_user_opts_in(tmp_path, monkeypatch):
    monkeypatch.delenv(TRUST_REMOTE_CODE_ENV, raising=False)
    loaded = load_model("tiny-gpt2", device="cpu")
    folder = tmp_path / "checkpoint"
    loaded.model.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    marker = tmp_path / "code-ran"
    (folder / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    assert (
        type(load_model(str(folder), device="cpu").model).__name__ == "GPT2LMHeadModel"
    )  # the library's class
    assert not marker.exists()
    monkeypatch.setenv(TRUST_REMOTE_CODE_ENV, "1")  # the opt-in really reaches transformers: the code runs
    with pytest.raises(PrivauditorError, match="cannot load model"):
        load_model(str(folder), device="cpu")  # (and fails: the file defines no EvilModel)
    assert marker.exists()
