#!/usr/bin/env python3
"""Generate test/golden/text/parser_recipe_cases.json: well-formed DeepSeek-V4 generations and
what DeepSeek's own stream processor (deepseek-recipe's StreamProcessor, fed one character at
a time) returns for them: reasoning_content, content and tool calls (name, arguments).

Only well-formed outputs are compared: on malformed markup tandem deliberately differs (it
returns the markup as content and flags it; recipe skips junk, drops text after a block and
can emit invalid JSON arguments). Values never contain "</｜DSML｜", where the two grammars
differ (recipe ends any value there, DeepSeek's encoding_dsv4.py only at the parameter tag).

    .venv/bin/python tools/text/gen_parser_golden.py
"""
import json
import random
from pathlib import Path

import deepseek_recipe as dr

REPO = Path(__file__).resolve().parents[2]
D = "｜DSML｜"
TEXTS = ["Let me check the weather.", "好的，我来查一下。", "a < b && c > d", "\"quoted\" 'single'", "line\nbreak", "  spaces  ",
         "emoji 😀👍🏽", "tab\there", "<think> literal", "50% off & more", "back\\slash", "{not json}", ""]
# Keys with spaces are left out: deepseek-recipe 0.2.0 cuts a parameter name at its first
# space and emits invalid JSON ("a b" -> "a: ...); tandem keeps the whole name.
KEYS = ["location", "unit", "query", "名字", "", "n", "snake_case", "CamelCase"]


def value(rng):
    if rng.random() < 0.55:
        s = "".join(rng.choice(TEXTS) for _ in range(rng.randint(0, 3)))
        return s, True
    v = rng.choice([1, -2.5, 1e-7, True, False, None, [1, "two", {"x": None}], {"k": [1, 2]}, {}, [], "str", 12345678901234567890])
    sep = rng.choice([(",", ":"), (", ", ": ")])
    text = json.dumps(v, separators=sep, ensure_ascii=rng.random() < 0.3)
    if rng.random() < 0.2:
        text = json.dumps(v, indent=2)
    return text, False


def generation(rng, thinking):
    out = ""
    if thinking:
        out += rng.choice(["", "\n"]) + "".join(rng.choice(TEXTS) for _ in range(rng.randint(0, 4))) + rng.choice(["", "\n", "\n\n"]) + "</think>"
    content = "".join(rng.choice(TEXTS) for _ in range(rng.randint(0, 4)))
    out += rng.choice(["", "\n\n"]) + content
    n = rng.choice([0, 0, 1, 1, 2, 3])
    if n:
        invokes = []
        for _ in range(n):
            keys = rng.sample(KEYS, rng.randint(0, 4))
            params = []
            for k in keys:
                v, is_str = value(rng)
                params.append(f'<{D}parameter name="{k}" string="{"true" if is_str else "false"}">{v}</{D}parameter>')
            name = rng.choice(["get_weather", "search", "f"])
            invokes.append(f'<{D}invoke name="{name}">\n' + "".join(p + "\n" for p in params) + f"</{D}invoke>")
        out += "\n\n" + f"<{D}tool_calls>\n" + "\n".join(invokes) + f"\n</{D}tool_calls>"
    return out


def recipe_parse(text, thinking):
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}} for n in ("get_weather", "search", "f")]
    body = {"model": "DeepSeek-V4-Pro", "messages": [{"role": "user", "content": "hi"}], "stream": True, "tools": tools}
    if not thinking:
        body["reasoning_effort"] = "none"
    req = dr.ChatCompletionRequest(json.dumps(body)).convert(dr.ConversionOptions())
    sp = dr.StreamProcessor(dr.ChatCompletionRequest.chunk_generator(req, "id", "m"), req.parsing_options)
    resp = dr.ChatCompletionResponse("id", "m", 0, 0, 0)
    chunks = sp.push(dr.InferenceChunk.ready())
    for ch in text:
        chunks += sp.push(dr.InferenceChunk.text(ch, 1))
    chunks += sp.push(dr.InferenceChunk.finish(dr.InferenceFinishReason.Stop))
    chunks += sp.finish()
    for c in chunks:
        resp.accumulate(c)
    msg = json.loads(resp.to_json())["choices"][0]["message"]
    calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in msg.get("tool_calls") or []]
    return {"reasoning": msg.get("reasoning_content") or "", "content": msg.get("content") or "", "calls": calls}


def main():
    import sys
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 77
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        thinking = rng.random() < 0.6
        text = generation(rng, thinking)
        cases.append({"text": text, "thinking": thinking, "expected": recipe_parse(text, thinking)})
    out = REPO / "test" / "golden" / "text" / "parser_recipe_cases.json"
    out.write_text(json.dumps({"cases": cases}, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
