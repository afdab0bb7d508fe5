"""Constrained decoding through the real binary, the `openai` SDK and the random-weight tiny model
(which writes garbage when free): JSON-schema outputs that always parse and validate, forced and
strict tool calls that always parse into tool_calls, json_object, streaming, what max_tokens does
to a constrained output, clear 400s, and the same greedy tokens in the pd topology."""
import json

import anthropic
import jsonschema
import openai
import pytest

from pd_support import pd_args

NO_THINKING = {"thinking": {"type": "disabled"}}

# Schemas whose every value is bounded (enums, booleans, ranged integers, short arrays), so even
# a random model reaches the end of the JSON well within max_tokens.
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "metric": {"type": "boolean"},
        "alerts": {"type": "array", "items": {"type": "string", "enum": ["wind", "rain", "heat"]}, "maxItems": 3},
    },
    "required": ["city", "days", "metric"],
    "additionalProperties": False,
}
# A random model spells literal markup with arbitrary small tokens (a DSML tag can take ~15), so
# the tool calls get small schemas and a larger budget, and one call per block
# (parallel_tool_calls false): with parallel calls allowed, nothing makes a random model stop.
CALL_ARGS = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
                   "days": {"type": "integer", "minimum": 1, "maximum": 14}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": CALL_ARGS}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"utc": {"type": "boolean"}}, "required": ["utc"],
        "additionalProperties": False}}},
]
MAX_TOKENS = 200
CALL_MAX_TOKENS = 600


def client(t):
    return openai.OpenAI(base_url=t.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def schema_format(schema, strict=True):
    return {"type": "json_schema", "json_schema": {"name": "answer", "strict": strict, "schema": schema}}


def chat(c, content, **kw):
    kw.setdefault("max_tokens", MAX_TOKENS)
    kw.setdefault("temperature", 0)
    extra = dict(NO_THINKING)
    extra.update(kw.pop("extra_body", {}))
    model = c.models.list().data[0].id
    return c.chat.completions.create(model=model, messages=[{"role": "user", "content": content}],
                                     extra_body=extra, **kw)


def check_tool_calls(choice, allowed):
    assert choice.finish_reason == "tool_calls", choice
    assert not getattr(choice, "tool_call_parse_error", False)
    calls = choice.message.tool_calls
    assert calls, choice
    for call in calls:
        assert call.type == "function"
        assert call.function.name in allowed, call
        schema = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == call.function.name)
        jsonschema.validate(json.loads(call.function.arguments), schema)
    return calls


def test_json_schema_outputs_parse_and_validate(start_tandem):
    t = start_tandem()
    c = client(t)
    for i, (temperature, seed) in enumerate([(0, None), (1.0, 1), (1.0, 2), (0.7, 3)]):
        r = chat(c, f"Weather report {i} as JSON", temperature=temperature, seed=seed,
                 response_format=schema_format(WEATHER, strict=i % 2 == 0))
        choice = r.choices[0]
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), WEATHER)
        assert r.usage.completion_tokens < MAX_TOKENS


def test_json_object_is_one_object(start_tandem):
    t = start_tandem()
    c = client(t)
    for seed in (1, 2, 3):
        r = chat(c, "Reply in json", temperature=1.0, seed=seed, max_tokens=400,
                 response_format={"type": "json_object"})
        choice = r.choices[0]
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(choice.message.content), dict)
        else:  # a random model may write one long string; what it wrote is still a JSON prefix
            assert choice.finish_reason == "length"
            assert choice.message.content.lstrip().startswith("{")


def test_forced_tool_calls_parse_into_tool_calls(start_tandem):
    t = start_tandem()
    c = client(t)
    named = {"type": "function", "function": {"name": "get_weather"}}
    for i, (choice_arg, allowed) in enumerate([("required", {"get_weather", "get_time"}),
                                               (named, {"get_weather"})]):
        for seed in (None, 5):
            r = chat(c, f"Weather in Paris? {i}", tools=TOOLS, tool_choice=choice_arg,
                     temperature=0 if seed is None else 1.0, seed=seed, parallel_tool_calls=False,
                     max_tokens=CALL_MAX_TOKENS)
            assert len(check_tool_calls(r.choices[0], allowed)) == 1


def test_strict_tools_under_auto_give_text_or_valid_calls(start_tandem):
    t = start_tandem()
    c = client(t)
    strict = [{"type": "function", "function": dict(tool["function"], strict=True)} for tool in TOOLS]
    for seed in (1, 2, 3):
        r = chat(c, "Weather in Lima?", tools=strict, temperature=1.0, seed=seed, max_tokens=60,
                 parallel_tool_calls=False)
        choice = r.choices[0]
        assert not getattr(choice, "tool_call_parse_error", False), choice
        if choice.message.tool_calls:
            check_tool_calls(choice, {"get_weather", "get_time"})
        else:
            assert choice.finish_reason in ("stop", "length")
            assert "DSML" not in (choice.message.content or "")


def test_streaming_under_a_grammar_matches_the_whole_response(start_tandem):
    t = start_tandem()
    c = client(t)
    whole = chat(c, "Weather as JSON", response_format=schema_format(WEATHER))
    stream = chat(c, "Weather as JSON", response_format=schema_format(WEATHER), stream=True)
    content, finish = "", None
    for chunk in stream:
        if chunk.choices:
            content += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "stop"
    assert content == whole.choices[0].message.content
    jsonschema.validate(json.loads(content), WEATHER)

    calls = {}
    for chunk in chat(c, "Time?", tools=TOOLS, tool_choice="required", stream=True,
                      parallel_tool_calls=False, max_tokens=CALL_MAX_TOKENS):
        for d in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            calls[d.index] = (d.function.name, json.loads(d.function.arguments))
    assert calls and all(name in ("get_weather", "get_time") for name, _ in calls.values())


def test_max_tokens_cuts_a_constrained_output_with_finish_length(start_tandem):
    t = start_tandem()
    c = client(t)
    full = chat(c, "Weather as JSON", response_format=schema_format(WEATHER)).choices[0].message.content
    cut = chat(c, "Weather as JSON", response_format=schema_format(WEATHER), max_tokens=3).choices[0]
    assert cut.finish_reason == "length"
    assert full.startswith(cut.message.content)  # the same tokens, stopped early: not valid JSON
    with pytest.raises(json.JSONDecodeError):
        json.loads(cut.message.content)


def test_bad_constraints_are_clear_400s(start_tandem):
    t = start_tandem()
    c = client(t)
    # The request checks (DeepSeek's rules) catch most bad schemas; what passes them and still
    # cannot be a grammar is refused by xgrammar ("grammar: ..."). Either way: a 400 naming it.
    cases = [
        (dict(response_format=schema_format({"$ref": "#/$defs/missing"})), "missing"),
        (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": [1, 2]}}),
         "response_format.json_schema.schema"),
        (dict(response_format=schema_format({"type": "object", "required": 5})), "response_format.json_schema.schema"),
        (dict(response_format=schema_format({"type": "string", "pattern": "(unclosed"}, strict=False)), "grammar"),
        (dict(response_format=schema_format(WEATHER), extra_body={"ignore_eos": True}), "ignore_eos"),
        (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": [1]}}], tool_choice="required"),
         "parameters"),
    ]
    for kwargs, needle in cases:
        with pytest.raises(openai.BadRequestError) as err:
            chat(c, "json please", **kwargs)
        assert needle in str(err.value), err.value
    # The server is fine afterwards.
    ok = chat(c, "json please", response_format=schema_format(WEATHER))
    jsonschema.validate(json.loads(ok.choices[0].message.content), WEATHER)


def test_anthropic_forced_tool_use_matches_the_input_schema(start_tandem):
    t = start_tandem()
    c = anthropic.Anthropic(base_url=t.url, api_key="unused", max_retries=0, timeout=300)
    model = client(t).models.list().data[0].id
    tools = [{"name": "get_weather", "description": "Weather", "input_schema": CALL_ARGS}]
    for seed in (1, 2):
        r = c.messages.create(model=model, max_tokens=CALL_MAX_TOKENS, tools=tools,
                              tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
                              thinking={"type": "disabled"}, extra_body={"temperature": 1.0, "seed": seed},
                              messages=[{"role": "user", "content": "Weather in Lima?"}])
        assert r.stop_reason == "tool_use", r
        uses = [b for b in r.content if b.type == "tool_use"]
        assert len(uses) == 1 and uses[0].name == "get_weather"
        jsonschema.validate(uses[0].input, CALL_ARGS)


def answer_of(response):
    """What the model said: content and calls (call ids name the HTTP request, so they differ)."""
    choice = response.choices[0]
    calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
    return choice.message.content, calls, choice.finish_reason, response.usage.completion_tokens


def test_pd_samples_the_same_constrained_tokens_as_single(start_tandem):
    requests_ = [
        dict(response_format=schema_format(WEATHER)),
        dict(response_format=schema_format(WEATHER), temperature=1.0, seed=11),
        dict(tools=TOOLS, tool_choice="required", temperature=1.0, seed=4, parallel_tool_calls=False,
             max_tokens=CALL_MAX_TOKENS),
    ]
    single = start_tandem()
    expected = [answer_of(chat(client(single), "Weather in Tokyo?", **kw)) for kw in requests_]
    single.stop()
    pd = start_tandem(*pd_args("inproc"))
    for kw, want in zip(requests_, expected):
        assert answer_of(chat(client(pd), "Weather in Tokyo?", **kw)) == want
