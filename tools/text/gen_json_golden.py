#!/usr/bin/env python3
"""Generate test/golden/text/json_numbers.json: JSON number spellings and how each reference
re-serializes them — Python json.dumps (the official encoding_dsv4.py) and deepseek-recipe
(read back from a rendered tool-call parameter, string="false").

    .venv/bin/python tools/text/gen_json_golden.py
"""
import json
import random
import re
import struct
from pathlib import Path

import deepseek_recipe as dr

REPO = Path(__file__).resolve().parents[2]


def recipe_spelling(src):
    body = {"model": "DeepSeek-V4-Pro", "reasoning_effort": "none", "messages": [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"v": ' + src + "}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "r"}]}
    conv = dr.ChatCompletionRequest(json.dumps(body)).convert(dr.ConversionOptions()).conversation
    prompt = dr.DeepseekV4Encoding().render_conversation(conv).prompt
    m = re.search(r'parameter name="v" string="false">(.*?)</', prompt)
    return m.group(1) if m else None


def main():
    rng = random.Random(11)
    sources = ["0", "-0", "1", "-1", "0.0", "-0.0", "1.0", "1E5", "1e5", "0.1e1", "1e-5", "1e-4", "1e-7", "1e15", "1e16", "1e22",
               "123456789012345678", "18446744073709551615", "18446744073709551616", "-9223372036854775808",
               "-9223372036854775809", "12345678901234567890123", "5e-324", "2.2250738585072014e-308", "1.7976931348623157e308",
               "0.1", "0.30000000000000004", "100", "1.5", "3.14159", "2.5e-08", "123456789.123", "9007199254740993"]
    for _ in range(400):
        bits = rng.getrandbits(64)
        d = struct.unpack("<d", struct.pack("<Q", bits))[0]
        if d != d or d in (float("inf"), float("-inf")):
            continue
        sources.append(repr(d))
    for _ in range(200):
        sources.append(f"{rng.uniform(-1, 1) * 10 ** rng.randint(-12, 20):.{rng.randint(1, 17)}g}")
    for _ in range(100):
        sources.append(str(rng.randint(-10 ** rng.randint(1, 25), 10 ** rng.randint(1, 25))))
    cases = []
    for src in sources:
        cases.append({"source": src, "python": json.dumps(json.loads(src)), "recipe": recipe_spelling(src)})
    out = REPO / "test" / "golden" / "text" / "json_numbers.json"
    out.write_text(json.dumps({"cases": cases}, indent=0) + "\n")
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
