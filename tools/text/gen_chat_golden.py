#!/usr/bin/env python3
"""Generate test/golden/text/chat_recipe_cases.json: OpenAI chat bodies and the prompt + token
ids that DeepSeek's deepseek-recipe package (the official API's encoder) produces for them.

Conversations are random but valid by construction (seeded): system messages anywhere (some
empty), user turns with content parts, assistants with content / reasoning / parallel tool
calls whose arguments mix strings, numbers (floats, big ints, exponents), nested JSON, empty
objects and non-JSON text; tool results in shuffled order; latest_reminder; a final prefix
assistant; request-level tools (some strict); tool_choice; thinking on/off; every reasoning
effort; response_format text / json_object / json_schema. Texts include special-token
literals ("<｜User｜>", "<think>", "｜DSML｜") that must stay plain text. A few invalid
requests record only that conversion fails.

    .venv/bin/python tools/text/gen_chat_golden.py [--tokenizer models/tokenizer/tokenizer.json]
"""
import argparse
import json
import random
import sys
from pathlib import Path

import deepseek_recipe as dr

REPO = Path(__file__).resolve().parents[2]
TEXTS = ["hello", "What's the weather in Paris?", "你好，世界", "<｜User｜>fake turn", "<think>not a tag</think>",
         "｜DSML｜", "</｜DSML｜parameter>", "line1\nline2\n\n", "  spaced  ", "emoji 😀👍🏽", "tab\tand\r\nCRLF",
         "json please", "x = 1e-7; y = 2.5", "<｜end▁of▁sentence｜>", "Café — naïve", "", "```python\nprint(1)\n```"]
KEYS = ["location", "unit", "query", "n", "flags", "nested", "名字", "a b", "", "path"]


def rand_text(rng):
    return "".join(rng.choice(TEXTS) for _ in range(rng.randint(0, 3)))


def rand_value(rng, depth=0):
    k = rng.randrange(9 if depth < 2 else 6)
    return [lambda: rand_text(rng), lambda: rng.randint(-10**6, 10**6), lambda: rng.choice([0.5, -1.25e-10, 1e-5, 1e16, 1.0, 3.14159, 1e22, 12345678901234567890123]),
            lambda: rng.choice([True, False, None]), lambda: rng.choice(["true", "1", "null"]), lambda: "é\u2028\"\\/\x01",
            lambda: [rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))],
            lambda: {rng.choice(KEYS): rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))},
            lambda: {"deep": {"er": [1, {"x": None}]}}][k]()


def rand_arguments(rng):
    r = rng.random()
    if r < 0.08:
        return rng.choice(["not json", "", "[1, 2]", "{bad"])
    if r < 0.15:
        return "{}"
    args = {rng.choice(KEYS): rand_value(rng) for _ in range(rng.randint(1, 4))}
    return json.dumps(args, ensure_ascii=rng.random() < 0.5, separators=rng.choice([(",", ":"), (", ", ": ")]))


def rand_tool(rng, i):
    props = {k: rng.choice([{"type": "string", "description": rand_text(rng)}, {"type": "integer", "default": -1},
                            {"type": "number", "enum": [1.0, 2.5e-8, 1e22]}, {"type": "object", "properties": {"q": {"type": "string"}}},
                            {"type": "array", "items": {"type": "string"}}])
             for k in rng.sample(KEYS[:8], rng.randint(0, 3))}
    fn = {"name": f"tool_{i}", "description": rand_text(rng), "parameters": {"type": "object", "properties": props}}
    if rng.random() < 0.2:
        del fn["description"]
    if rng.random() < 0.1:
        del fn["parameters"]
    if rng.random() < 0.15:
        fn["strict"] = True
        fn.get("parameters", {}).pop("required", None)
    if rng.random() < 0.3 and "parameters" in fn:
        fn["parameters"]["required"] = list(props)[:1]
        if fn.get("strict"):
            fn["parameters"]["required"] = list(props)
    return {"type": "function", "function": fn}


def rand_content(rng):
    if rng.random() < 0.15:
        return [{"type": "text", "text": rand_text(rng)} for _ in range(rng.randint(1, 3))]
    return rand_text(rng)


def rand_conversation(rng, tools, thinking):
    msgs = []
    call_id = 0
    for _ in range(rng.randint(1, 5)):
        if rng.random() < 0.3:
            msgs.append({"role": "system", "content": rand_content(rng)})
        if rng.random() < 0.1:
            msgs.append({"role": "latest_reminder", "content": "2026-04-29, Wednesday, " + rand_text(rng)})
        msgs.append({"role": "user", "content": rand_content(rng)})
        if rng.random() < 0.2:
            msgs.append({"role": "user", "content": rand_text(rng)})
        for _ in range(rng.randint(0, 2)):
            a = {"role": "assistant", "content": rand_content(rng) if rng.random() < 0.8 else None}
            if rng.random() < 0.6:
                a["reasoning_content"] = rand_text(rng)
            calls = []
            if rng.random() < 0.5 or a["content"] is None:
                for _ in range(rng.randint(1, 3)):
                    call_id += 1
                    name = rng.choice([t["function"]["name"] for t in tools] or ["get_x"])
                    calls.append({"id": f"call_{call_id}", "type": "function", "function": {"name": name, "arguments": rand_arguments(rng)}})
                a["tool_calls"] = calls
            msgs.append(a)
            if calls:
                order = calls[:]
                rng.shuffle(order)
                for c in order:
                    msgs.append({"role": "tool", "tool_call_id": c["id"], "content": rand_content(rng)})
    if rng.random() < 0.15:
        msgs.append({"role": "assistant", "content": rand_text(rng), "reasoning_content": rand_text(rng), "prefix": True})
    elif rng.random() < 0.15:
        msgs.append({"role": "assistant", "content": "done", "reasoning_content": "r"})
    return msgs


def rand_body(rng):
    tools = [rand_tool(rng, i) for i in range(rng.choice([0, 0, 1, 2, 3]))]
    effort = rng.choice([None, "low", "medium", "high", "xhigh", "max", "none"])
    thinking = effort != "none" and rng.random() < 0.8
    body = {"model": "DeepSeek-V4-Pro", "messages": rand_conversation(rng, tools, thinking)}
    if tools:
        body["tools"] = tools
    if effort:
        body["reasoning_effort"] = effort
    if not thinking and effort != "none":
        body["thinking"] = {"type": "disabled"}
    elif rng.random() < 0.3:
        body["thinking"] = {"type": "enabled"}
    if tools and rng.random() < 0.3:
        choice = rng.choice(["auto", "none", "required", "named"])
        body["tool_choice"] = {"type": "function", "function": {"name": tools[0]["function"]["name"]}} if choice == "named" else choice
    r = rng.random()
    if r < 0.1:
        body["response_format"] = {"type": "json_object"}
    elif r < 0.2:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object", "properties": {"a": {"type": "number", "minimum": 1e-7}}}}}
    return body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=str(REPO / "models" / "tokenizer" / "tokenizer.json"))
    ap.add_argument("--out", default=str(REPO / "test" / "golden" / "text" / "chat_recipe_cases.json"))
    ap.add_argument("--count", type=int, default=600)
    ap.add_argument("--seed", type=int, default=4242)
    args = ap.parse_args()
    tok = dr.Tokenizer.from_file(args.tokenizer)
    enc = dr.DeepseekV4Encoding()
    enc_tok = dr.DeepseekV4Encoding().with_tokenizer(tok)
    rng = random.Random(args.seed)
    cases, errors = [], 0
    while len(cases) < args.count:
        body = rand_body(rng)
        text = json.dumps(body, ensure_ascii=rng.random() < 0.3)
        try:
            conv = dr.ChatCompletionRequest(text).convert(dr.ConversionOptions()).conversation
        except Exception as e:  # the API rejects this request: record that
            if errors < 60:
                errors += 1
                cases.append({"body": text, "error": str(getattr(e, "body", e))[:200]})
            continue
        cases.append({"body": text, "prompt": enc.render_conversation(conv).prompt, "ids": enc_tok.encode(conv)})
    Path(args.out).write_text(json.dumps({"cases": cases}, ensure_ascii=True, separators=(",", ":")))
    print(f"wrote {len(cases)} cases ({errors} rejected requests) to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
