#!/usr/bin/env bash
# Packs what a GPU machine with torch, transformers and peft (and no network, Ray, DeepSpeed, opacus, faker
# or gensim) needs to run benchmarks/gpu_bench.py and the `gpu` tests, into one folder of under 64 MiB:
# this package's wheel, faker's wheel (the offline datasets are drawn with it), gpu_bench's inputs and the
# offline artefacts of the fast profile (tokenizer, corpus, tiny-llama and the masked LM).
#   benchmarks/gpu_pack.sh [DIR]        # default DIR: .dev (add /.dev/ to .git/info/exclude)
# There, from the project root (PYTHONPATH, not an install: the machine's site-packages stay untouched):
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site DIR/wheels/*.whl
#   export PYTHONPATH=/tmp/site PRIVAUDITOR_CACHE=$PWD/DIR/cache PRIVAUDITOR_PRETRAIN_PROFILE=fast HF_HUB_OFFLINE=1
#   python3 benchmarks/gpu_bench.py run DIR/bench --out bench.json
#   python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.dev}"
python=${PYTHON:-python}
rm -rf "$dir/wheels" "$dir/bench" "$dir/cache"
mkdir -p "$dir/wheels" "$dir/cache/bases"
"$python" -m pip wheel -q --no-deps -w "$dir/wheels" .
faker=$("$python" -c "import importlib.metadata as m; print(m.version('faker'))")
"$python" -m pip download -q --no-deps -d "$dir/wheels" "faker==$faker"
export PRIVAUDITOR_PRETRAIN_PROFILE=fast HF_HUB_OFFLINE=1
"$python" benchmarks/gpu_bench.py prepare "$dir/bench"
# builds what is missing: tiny-llama and the masked LM that makes neighbour texts
"$python" -c "from privauditor.tasks.models import load_model, masked_lm_path; load_model('tiny-llama', 'cpu'); masked_lm_path()"
cache=$("$python" -c "from privauditor.tasks.infra.cache import cache_root; print(cache_root())")
for part in tokenizer corpus frequencies; do
  [ -e "$cache/$part" ] && cp -r "$cache/$part" "$dir/cache/"
done
for base in "$cache"/bases/tiny-llama-fast-* "$cache"/bases/tiny-mlm-fast-*; do
  case "$base" in *.lock) ;; *) cp -r "$base" "$dir/cache/bases/" ;; esac
done
du -sh "$dir"
