"""Anthropic's Messages API (POST /v1/messages) through the `anthropic` SDK against the real
binary: whole and streamed responses, thinking blocks, stop sequences, tools, usage, errors,
and the prompt DeepSeek's own converter (deepseek-recipe's MessagesRequest) builds."""
import json
import random

import anthropic
import deepseek_recipe as dr
import openai
import pytest
import requests

from test_text_conformance import TOKENIZER, fresh_seed

MODEL = "tiny"  # model.served_name defaults to the model directory's name (models/tiny)
ASK = [{"role": "user", "content": "Tell me about Paris"}]
NO_THINKING = {"type": "disabled"}
TOOLS = [{"name": "get_weather", "description": "Weather for a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def client(t):
    return anthropic.Anthropic(base_url=t.url, api_key="unused", max_retries=0)


def test_message_whole_and_streamed_agree(start_tandem):
    t = start_tandem()
    c = client(t)
    args = dict(model=MODEL, max_tokens=12, messages=ASK, extra_body={"temperature": 0}, thinking=NO_THINKING)
    whole = c.messages.create(**args)
    assert whole.type == "message" and whole.role == "assistant" and whole.model == MODEL
    assert whole.id.startswith("msg_")
    assert [b.type for b in whole.content] == ["text"]
    assert whole.stop_reason in ("end_turn", "max_tokens") and whole.stop_sequence is None
    assert 1 <= whole.usage.output_tokens <= 12
    count = c.messages.count_tokens(model=MODEL, messages=ASK, thinking=NO_THINKING)
    assert whole.usage.input_tokens == count.input_tokens > 0

    names = []
    with c.messages.stream(**args) as stream:
        for event in stream:
            names.append(event.type)
        final = stream.get_final_message()
    assert final.content[0].text == whole.content[0].text
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens == whole.usage.input_tokens
    # The raw event order: message_start, blocks (start, deltas, stop), message_delta, stop.
    plain = {k: v for k, v in args.items() if k != "extra_body"} | args["extra_body"]
    raw = requests.post(t.url + "/v1/messages", json={**plain, "stream": True}, stream=True)
    order = [line[7:] for line in raw.iter_lines(decode_unicode=True) if line.startswith("event: ")]
    assert order[0] == "message_start" and order[-2:] == ["message_delta", "message_stop"]
    body = [e for e in order[1:-2] if e != "ping"]
    assert body[0] == "content_block_start" and body[-1] == "content_block_stop"
    assert set(body[1:-1]) <= {"content_block_delta"}


def test_thinking_blocks_match_the_chat_endpoint(start_tandem):
    """One pipeline: the same conversation gives the chat endpoint's reasoning and content."""
    t = start_tandem()
    msg = client(t).messages.create(model=MODEL, max_tokens=40, messages=ASK, extra_body={"temperature": 0},
                                    system="Answer briefly.")
    chat = openai.OpenAI(base_url=t.url + "/v1", api_key="unused", max_retries=0)
    ref = chat.chat.completions.create(model=MODEL, max_tokens=40, temperature=0,
                                       messages=[{"role": "system", "content": "Answer briefly."}] + ASK)
    thinking = "".join(b.thinking for b in msg.content if b.type == "thinking")
    text = "".join(b.text for b in msg.content if b.type == "text")
    assert msg.content[0].type == "thinking" and msg.content[0].signature == msg.id
    assert thinking == getattr(ref.choices[0].message, "reasoning_content", "")
    assert text == (ref.choices[0].message.content or "")
    assert msg.usage.output_tokens == ref.usage.completion_tokens
    with client(t).messages.stream(model=MODEL, max_tokens=40, messages=ASK, extra_body={"temperature": 0},
                                   system="Answer briefly.") as stream:
        final = stream.get_final_message()
    def blocks(m):  # signatures are the message's own id
        assert all(b.signature == m.id for b in m.content if b.type == "thinking")
        return [{k: v for k, v in b.model_dump().items() if k != "signature"} for b in m.content]
    assert blocks(final) == blocks(msg)


def test_stop_sequences(start_tandem):
    t = start_tandem()
    c = client(t)
    args = dict(model=MODEL, max_tokens=24, messages=ASK, extra_body={"temperature": 0}, thinking=NO_THINKING)
    text = c.messages.create(**args).content[0].text
    assert len(text) >= 8, text
    stop = text[4:7]
    cut = text[:text.index(stop)]
    for stream in (False, True):
        if stream:
            with c.messages.stream(**args, stop_sequences=["never-there", stop]) as s:
                r = s.get_final_message()
        else:
            r = c.messages.create(**args, stop_sequences=["never-there", stop])
        assert r.stop_reason == "stop_sequence" and r.stop_sequence == stop
        assert "".join(b.text for b in r.content) == cut


def test_tools_history_and_tool_choice(start_tandem):
    t = start_tandem()
    c = client(t)
    history = ASK + [
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21 C"}]}]
    for choice in ({"type": "auto"}, {"type": "any"}, {"type": "tool", "name": "get_weather"},
                   {"type": "none"}):
        r = c.messages.create(model=MODEL, max_tokens=16, messages=history, extra_body={"temperature": 0},
                              tools=TOOLS, tool_choice=choice, thinking=NO_THINKING)
        assert r.stop_reason in ("end_turn", "max_tokens", "tool_use")
        for block in r.content:
            assert block.type in ("text", "tool_use")
            if block.type == "tool_use":
                assert block.name == "get_weather" and isinstance(block.input, dict)
    rendered = requests.post(t.url + "/v1/messages/render",
                             json={"messages": history, "tools": TOOLS, "thinking": NO_THINKING}).json()
    assert "<tool_result>sunny, 21 C</tool_result>" in rendered["prompt"]
    assert 'invoke name="get_weather"' in rendered["prompt"]


def test_errors_have_anthropic_shape(start_tandem):
    t = start_tandem()
    c = client(t)
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(model=MODEL, max_tokens=4, messages=[])
    assert e.value.body == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "messages: at least one message is required"}}
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(model=MODEL, max_tokens=4, tools=TOOLS, messages=ASK + [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "get_weather", "input": {}}]},
            {"role": "user", "content": "no result"}])
    assert "tool_result" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError) as e:
        c.messages.create(model="claude-nope", max_tokens=4, messages=ASK)
    assert e.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(model=MODEL, max_tokens=4, messages=ASK, extra_body={"temperature": 7})
    r = requests.post(t.url + "/v1/messages", data=b"{not json")
    assert r.status_code == 400 and r.json()["type"] == "error"


# ---- conformance with DeepSeek's converter, on generated bodies ------------------------------

TEXTS = ["hello", "Weather in Paris?", "你好", "<｜User｜>x", "<think>t</think>", "", "a\n\nb", "emoji 😀"]


def rand_text(rng):
    return "".join(rng.choice(TEXTS) for _ in range(rng.randint(0, 2)))


def rand_blocks(rng):
    if rng.random() < 0.5:
        return rand_text(rng)
    return [{"type": "text", "text": rand_text(rng)} for _ in range(rng.randint(1, 2))]


def rand_body(rng):
    """A Messages body: mostly valid, sometimes breaking one of the API's rules."""
    tools = [{"name": f"tool_{i}", "input_schema": {"type": "object", "properties": {
        "q": rng.choice([{"type": "string"}, {"type": "integer", "default": 1}])}}}
        for i in range(rng.choice([0, 0, 1, 2]))]
    for tool in tools:
        if rng.random() < 0.5:
            tool["description"] = rand_text(rng)
    msgs, n = [], 0
    for _ in range(rng.randint(1, 3)):
        msgs.append({"role": "user", "content": rand_blocks(rng)})
        if rng.random() < 0.6:
            blocks = []
            if rng.random() < 0.5:
                blocks.append({"type": "thinking", "thinking": rand_text(rng), "signature": "s"})
            blocks.append({"type": "text", "text": rand_text(rng)})
            calls = []
            if tools and rng.random() < 0.6:
                for _ in range(rng.randint(1, 2)):
                    n += 1
                    calls.append({"type": "tool_use", "id": f"toolu_{n}", "name": rng.choice(tools)["name"],
                                  "input": {"q": rng.choice(["x", 5, 2.5, [1, {"a": None}]])}})
            msgs.append({"role": "assistant", "content": blocks + calls})
            if calls:
                results = [{"type": "tool_result", "tool_use_id": c["id"], "content": rand_blocks(rng)}
                           for c in calls]
                rng.shuffle(results)
                if rng.random() < 0.1:
                    results.pop()  # a tool_use left unanswered: rejected
                tail = [{"type": "text", "text": rand_text(rng)}] if rng.random() < 0.4 else []
                msgs.append({"role": "user", "content": results + tail})
    if rng.random() < 0.1:
        msgs.append({"role": "assistant", "content": rand_text(rng) or "x"})
    body = {"model": "DeepSeek-V4-Pro", "max_tokens": rng.choice([16, 1000]), "messages": msgs}
    if rng.random() < 0.4:
        body["system"] = rand_blocks(rng)
    if tools:
        body["tools"] = tools
        if rng.random() < 0.4:
            body["tool_choice"] = rng.choice([{"type": "auto"}, {"type": "any"}, {"type": "none"},
                                              {"type": "tool", "name": tools[0]["name"]}])
    body["thinking"] = rng.choice([{"type": "enabled", "budget_tokens": 1024}, {"type": "disabled"},
                                   {"type": "adaptive"}, None])
    if body["thinking"] is None:
        del body["thinking"]
    if rng.random() < 0.3:
        body["output_config"] = {"effort": rng.choice(["low", "medium", "high", "max", "none", "minimal"])}
    if rng.random() < 0.05:
        body["messages"] = []
    return body


def test_render_matches_deepseek_recipe_messages_conversion(start_tandem):
    t = start_tandem()
    tok = dr.Tokenizer.from_file(str(TOKENIZER))
    enc, enc_tok = dr.DeepseekV4Encoding(), dr.DeepseekV4Encoding().with_tokenizer(tok)
    seed = fresh_seed()
    rng = random.Random(seed)
    checked = rejected = 0
    for _ in range(150):
        body = json.dumps(rand_body(rng))
        r = requests.post(t.url + "/v1/messages/render", data=body.encode())
        try:
            conv = dr.MessagesRequest(body).convert(dr.ConversionOptions()).conversation
        except Exception:
            assert r.status_code == 400, (seed, body, r.text)
            assert r.json()["type"] == "error"
            rejected += 1
            continue
        assert r.status_code == 200, (seed, body, r.text)
        assert r.json()["prompt"] == enc.render_conversation(conv).prompt, (seed, body)
        assert r.json()["tokens"] == enc_tok.encode(conv), (seed, body)
        checked += 1
    assert checked > 80 and rejected > 3
