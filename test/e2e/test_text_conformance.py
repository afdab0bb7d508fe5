"""The text endpoints of the real binary against DeepSeek's references on fresh inputs.

Unlike the unit tests (stored expectations), these generate new cases each run from a seed
that differs from the stored corpora: chat bodies rendered by deepseek-recipe (prompt text and
token ids of /v1/chat/completions/render, and 400 for requests the API rejects), and random
texts tokenized by HF tokenizers on the same tokenizer.json (/tokenize).
"""
import importlib.util
import json
import os
import random
from pathlib import Path

import deepseek_recipe as dr  # etc/requirements-text.txt (installed by etc/setup.sh)
import requests
import tokenizers

ROOT = Path(__file__).resolve().parents[2]


def load_tool(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "text" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TOKENIZER = ROOT / "models" / "tokenizer" / "tokenizer.json"


def fresh_seed():
    """A fixed seed (unlike the stored corpora's) keeps CI repeatable; set
    TANDEM_CONFORMANCE_SEED=random (or a number) to explore new inputs."""
    chosen = os.environ.get("TANDEM_CONFORMANCE_SEED", "20261129")
    return random.randrange(1 << 30) if chosen == "random" else int(chosen)


def test_render_matches_deepseek_recipe_on_fresh_bodies(start_tandem):
    gen = load_tool("gen_chat_golden")
    t = start_tandem()
    tok = dr.Tokenizer.from_file(str(TOKENIZER))
    enc = dr.DeepseekV4Encoding()
    enc_tok = dr.DeepseekV4Encoding().with_tokenizer(tok)
    seed = fresh_seed()
    rng = random.Random(seed)
    checked = rejected = 0
    for _ in range(120):
        body = json.dumps(gen.rand_body(rng))
        r = requests.post(t.url + "/v1/chat/completions/render", data=body.encode())
        try:
            conv = dr.ChatCompletionRequest(body).convert(dr.ConversionOptions()).conversation
        except Exception:
            assert r.status_code == 400, (seed, body)
            rejected += 1
            continue
        assert r.status_code == 200, (seed, body, r.text)
        got = r.json()
        assert got["prompt"] == enc.render_conversation(conv).prompt, (seed, body)
        assert got["tokens"] == enc_tok.encode(conv), (seed, body)
        checked += 1
    assert checked > 60


def test_tokenize_matches_hf_tokenizers_on_fresh_texts(start_tandem):
    gen = load_tool("gen_tokenizer_golden")
    t = start_tandem()
    hf = tokenizers.Tokenizer.from_file(str(TOKENIZER))
    seed = fresh_seed()
    rng = random.Random(seed)
    pools = {"words": gen.MULTILINGUAL + gen.CODE + gen.PUBLISHED}
    for _ in range(200):
        text = gen.random_text(rng, pools)
        r = requests.post(t.url + "/tokenize", json={"prompt": text})
        assert r.status_code == 200, r.text
        assert r.json()["tokens"] == hf.encode(text).ids, (seed, repr(text))


# ---- DeepSeek's request rules: generated schemas and invalid requests -------------------------

SCALARS = ["string", "integer", "number", "boolean", "null"]
NUMBERS = [0, -5, 7, 2.5, 1e10, 1e-7, 123456789012345678901234567890]
BAD_NUMBERS = [10000000000000000000, "3", 0.5]


def shuffled(rng, d):
    items = list(d.items())
    rng.shuffle(items)
    return dict(items)


def pick(rng, good, bad, p_bad=0.03):
    """Mostly a valid choice; now and then one that some rule refuses."""
    return rng.choice(bad) if rng.random() < p_bad else rng.choice(good)


def rand_schema(rng, depth=0, top=False):
    """A JSON schema from the keyword families DeepSeek's strict model keeps, drops or refuses,
    with shuffled key order; rarely invalid on purpose."""
    r = rng.random()
    if top or (r < 0.3 and depth < 2):
        props = {f"p{i}": rand_schema(rng, depth + 1) for i in range(rng.randint(0 if top else 1, 3))}
        s = {"type": "object", "properties": props}
        q = rng.random()
        if q < 0.4:
            s["required"] = list(props)
            rng.shuffle(s["required"])
        elif q < 0.45:
            s["required"] = list(props)[:1] + rng.choice([[], ["zz"], list(props)[:1]])
        if rng.random() < 0.5:
            s["additionalProperties"] = pick(rng, [False], [True, {}], 0.1)
    elif r < 0.45:
        s = {"type": "string"}
        for k, good, bad in [("format", ["email", "uuid", "ipv4", "hostname"], ["date-time", "bogus"]),
                             ("pattern", ["^[a-z]+$"], [5]), ("enum", [["a", "b"]], [[1]]),
                             ("minLength", [1], [-1]), ("maxLength", [9], []), ("default", ["x"], []),
                             ("const", ["a"], []), ("examples", [["a"]], [])]:
            if rng.random() < 0.25:
                s[k] = pick(rng, good, bad or good)
    elif r < 0.65:
        s = {"type": rng.choice(["integer", "number"])}
        for k in ["default", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "enum"]:
            if rng.random() < 0.2:
                s[k] = pick(rng, [x for x in NUMBERS if s["type"] == "number" or isinstance(x, int)] if k != "enum" else [[1, 2]],
                            BAD_NUMBERS + NUMBERS if k != "enum" else [[1, 2]], 0.15)
    elif r < 0.75:
        s = {"type": "array", "items": rand_schema(rng, depth + 1)}
        for k, v in [("minItems", 1), ("maxItems", 3), ("uniqueItems", True)]:
            if rng.random() < 0.3:
                s[k] = v
        if rng.random() < 0.03:
            del s["items"]
    elif r < 0.82:
        s = {"anyOf": [rand_schema(rng, depth + 1) for _ in range(rng.randint(1, 2))]}
    elif r < 0.88:
        s = {"type": rng.sample(SCALARS, 2)}
    elif r < 0.93:
        s = {"$ref": pick(rng, ["#/$defs/X"], ["#/$defs/Missing"], 0.2)}
    else:
        s = {"type": pick(rng, ["boolean", "null"], ["stringy"], 0.1)}
    for k, good, bad in [("description", ["d"], [5]), ("title", ["T"], []), ("examples", [[1]], [])]:
        if rng.random() < (0.3 if k == "description" else 0.1):
            s[k] = pick(rng, good, bad or good)
    return shuffled(rng, s)


def rand_rules_body(rng):
    strict = rng.random() < 0.5
    tools = []
    for i in range(rng.randint(1, 2)):
        params = rand_schema(rng, top=True)
        if rng.random() < 0.9:
            params["$defs"] = {"X": {"type": "string"}}
        fn = {"name": f"tool_{i}", "parameters": shuffled(rng, params)}
        if strict:
            fn["strict"] = True
        tools.append({"type": "function", "function": shuffled(rng, fn)})
    messages = [{"role": "user", "content": "json please"}]
    body = {"model": "DeepSeek-V4-Pro", "messages": messages, "tools": tools}
    # One rule bent now and then (each is a 400 in DeepSeek's API).
    bend = rng.random()
    if bend < 0.06:
        tools[0]["function"]["name"] = rng.choice(["bad name", "a.b", "ünï"])
    elif bend < 0.12:
        tools.append(json.loads(json.dumps(tools[0])))
    elif bend < 0.18:
        tools[0]["function"]["parameters"] = rng.choice([[1], "x", {}, {"type": "string"}, True])
    elif bend < 0.24:
        call = {"id": "c1", "function": {"name": "tool_0", "arguments": "{}"}}
        if rng.random() < 0.5:
            call["type"] = "retrieval"
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": "c1", "content": "r"}]
    elif bend < 0.32:
        del body["tools"]
        body["response_format"] = {"type": "json_schema", "json_schema": {
            "name": "s", "schema": rng.choice([rand_schema(rng, top=True), "x", [1],
                                               {"type": "object", "properties": {"a": {"$ref": "#/nope"}}}])}}
    effort = rng.choice([None, None, "none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max", "huge"])
    if effort:
        body["reasoning_effort"] = effort
    thinking = rng.choice([None, None, "enabled", "disabled", "adaptive", "auto"])
    if thinking:
        body["thinking"] = {"type": thinking}
    return body


def test_request_rules_and_strict_schemas_match_deepseek_recipe(start_tandem):
    t = start_tandem()
    enc = dr.DeepseekV4Encoding()
    seed = fresh_seed()
    rng = random.Random(seed)
    checked = rejected = 0
    other_words = []  # rejected by both, with another message
    for _ in range(250):
        body = json.dumps(rand_rules_body(rng))
        r = requests.post(t.url + "/v1/chat/completions/render", data=body.encode())
        try:
            conv = dr.ChatCompletionRequest(body).convert(dr.ConversionOptions()).conversation
        except Exception as e:
            assert r.status_code == 400, (seed, body, str(e), r.text)
            rejected += 1
            want = json.loads(e.body)["error"]["message"] if getattr(e, "body", None) else str(e)
            if r.json()["error"]["message"] != want:
                other_words.append((want, r.json()["error"]["message"]))
            continue
        assert r.status_code == 200, (seed, body, r.text)
        assert r.json()["prompt"] == enc.render_conversation(conv).prompt, (seed, body)
        checked += 1
    assert checked > 80 and rejected > 40, (checked, rejected)
    # The same message, except where several rules break at once and the two check them in
    # another order (JSON Schema keyword order, serde's field order): at most 1 in 20.
    assert len(other_words) * 20 <= rejected, other_words
