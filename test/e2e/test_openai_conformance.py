"""OpenAI API shapes, checked through the `openai` SDK against the real binary: error bodies,
logprobs riding with their text in streams, GET /v1/models/{id}, the developer role,
tool_choice without tools, and the lm-evaluation-harness loglikelihood request."""
import math

import openai
import pytest
import requests

MODEL = "tiny"  # model.served_name defaults to the model directory's name (models/tiny)
USER = [{"role": "user", "content": "Tell me about Paris"}]
NO_THINKING = {"thinking": {"type": "disabled"}}


def client(t):
    return openai.OpenAI(base_url=t.url + "/v1", api_key="unused", max_retries=0)


def test_errors_have_openai_shape_with_param_and_string_code(start_tandem):
    t = start_tandem()
    c = client(t)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=MODEL, messages=USER, temperature=9)
    assert e.value.body["param"] == "temperature"
    assert e.value.body["type"] == "invalid_request_error"
    assert e.value.code is None
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": 5}])
    assert e.value.body["param"] == "messages[0].content"
    with pytest.raises(openai.NotFoundError) as e:
        c.chat.completions.create(model="gpt-9", messages=USER)
    assert e.value.code == "model_not_found" and e.value.body["param"] == "model"
    # Every error body has the four keys; code is a string or null, never the HTTP status.
    for method, path, body in [("GET", "/v1/nope", None), ("POST", "/v1/models", None),
                               ("POST", "/v1/completions", {"prompt": "x", "logprobs": 99}),
                               ("POST", "/v1/chat/completions", b"{broken")]:
        r = requests.request(method, t.url + path,
                             **({"data": body} if isinstance(body, bytes) else {"json": body}))
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}, (path, err)
        assert err["code"] is None or isinstance(err["code"], str), (path, err)
    assert requests.post(t.url + "/v1/completions", json={"prompt": "x", "logprobs": 99}).json()[
        "error"]["param"] == "logprobs"


def test_models_retrieve(start_tandem):
    t = start_tandem()
    c = client(t)
    m = c.models.retrieve(MODEL)
    assert m.id == MODEL and m.object == "model"
    with pytest.raises(openai.NotFoundError) as e:
        c.models.retrieve("no-such-model")
    assert e.value.code == "model_not_found"
    assert requests.get(t.url + "/v1/models/" + MODEL).json()["id"] == MODEL
    assert requests.post(t.url + "/v1/models/" + MODEL).status_code == 405


def test_streamed_logprobs_ride_in_the_chunk_with_their_text(start_tandem):
    t = start_tandem()
    c = client(t)
    args = dict(model=MODEL, messages=USER, max_tokens=24, temperature=0, logprobs=True,
                top_logprobs=2, extra_body=NO_THINKING)
    whole = c.chat.completions.create(**args)
    stream = c.chat.completions.create(**args, stream=True, stream_options={"include_usage": True})
    entries, content, usage, lonely = [], "", None, 0
    for chunk in stream:
        usage = chunk.usage or usage
        for ch in chunk.choices:
            got = ch.logprobs.content if ch.logprobs and ch.logprobs.content else []
            d = ch.delta
            has_text = bool(d.content or getattr(d, "reasoning_content", None) or d.tool_calls)
            if got and not has_text and ch.finish_reason is None:
                lonely += 1  # logprobs without the text they describe
            entries += got
            content += ch.delta.content or ""
    assert lonely == 0
    assert content == (whole.choices[0].message.content or "")
    assert [e.token for e in entries] == [e.token for e in whole.choices[0].logprobs.content]
    assert len(entries) == usage.completion_tokens == whole.usage.completion_tokens


def test_developer_role_is_system_and_tool_choice_needs_tools(start_tandem):
    t = start_tandem()
    c = client(t)

    def render(role):
        body = {"messages": [{"role": role, "content": "Be brief."}] + USER}
        r = requests.post(t.url + "/v1/chat/completions/render", json=body)
        assert r.status_code == 200, r.text
        return r.json()["prompt"]

    assert render("developer") == render("system")
    assert "Be brief." in render("developer")
    r = c.chat.completions.create(model=MODEL, max_tokens=2, extra_body=NO_THINKING,
                                  messages=[{"role": "developer", "content": "Be brief."}] + USER)
    assert r.choices[0].finish_reason in ("stop", "length")
    for choice in ["required", {"type": "function", "function": {"name": "f"}}]:
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model=MODEL, messages=USER, tool_choice=choice,
                                      extra_body=NO_THINKING)
        assert e.value.body["param"] == "tool_choice"


def test_lm_eval_loglikelihood_request(start_tandem):
    """lm-evaluation-harness scores a context + continuation with exactly this body."""
    t = start_tandem()
    prompt = "The capital of France is Paris"
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 1,
            "temperature": 0}
    r = requests.post(t.url + "/v1/completions", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    ch = out["choices"][0]
    ids = requests.post(t.url + "/tokenize", json={"prompt": prompt}).json()["tokens"]
    assert ch["text"] == prompt  # the prompt only: nothing generated
    lp = ch["logprobs"]
    assert len(lp["tokens"]) == len(ids) == out["usage"]["prompt_tokens"]
    assert out["usage"]["completion_tokens"] == 0
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(x <= 0 and math.isfinite(x) for x in lp["token_logprobs"][1:])
    assert all(len(top) >= 1 for top in lp["top_logprobs"][1:])
    assert "".join(lp["tokens"]) == prompt
    # The same prompt scores the same when a completion follows it (the echo path).
    more = client(t).completions.create(model=MODEL, prompt=prompt, max_tokens=3, echo=True,
                                        logprobs=1, temperature=0)
    assert more.choices[0].logprobs.token_logprobs[:len(ids)] == lp["token_logprobs"]
    # Streamed, the same request gives the same prompt logprobs and ends with "length".
    chunks = client(t).completions.create(model=MODEL, prompt=prompt, max_tokens=0, echo=True,
                                          logprobs=1, temperature=0, stream=True)
    streamed, text, finish = [], "", None
    for chunk in chunks:
        for c in chunk.choices:
            text += c.text
            streamed += c.logprobs.token_logprobs if c.logprobs else []
            finish = c.finish_reason or finish
    assert text == prompt and streamed == lp["token_logprobs"] and finish == "length"
    with pytest.raises(openai.BadRequestError) as e:
        client(t).completions.create(model=MODEL, prompt=prompt, max_tokens=0)
    assert e.value.body["param"] == "max_tokens"
