"""Generation through the real binary and the tiny model: OpenAI client, native /generate,
determinism under concurrency, aborts and page accounting, overload, bad input."""
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import requests


def client(t):
    return openai.OpenAI(base_url=t.url + "/v1", api_key="unused", max_retries=0)


def metrics(t):
    text = requests.get(t.url + "/metrics").text
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^(tandem_[a-z_]+) (\S+)$", text, re.M)}


def generate(t, ids, max_tokens=8, **extra):
    body = {"input_ids": ids, "sampling_params": {"temperature": 0, "max_tokens": max_tokens, **extra}}
    r = requests.post(t.url + "/generate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_chat_completion_with_the_openai_client(start_tandem):
    t = start_tandem()
    c = client(t)
    r = c.chat.completions.create(model="tiny", max_tokens=12, temperature=0,
                                  messages=[{"role": "user", "content": "Say hi"}])
    choice = r.choices[0]
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens >= 1
    assert r.usage.prompt_tokens > 3
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert isinstance(choice.message.content, str)
    again = c.chat.completions.create(model="tiny", max_tokens=12, temperature=0,
                                      messages=[{"role": "user", "content": "Say hi"}])
    assert again.choices[0].message == choice.message  # greedy is deterministic


def test_chat_streaming_matches_non_streaming(start_tandem):
    t = start_tandem()
    c = client(t)
    msgs = [{"role": "user", "content": "Count to five"}]
    whole = c.chat.completions.create(model="tiny", max_tokens=16, temperature=0,
                                      messages=msgs, extra_body={"thinking": {"type": "disabled"}})
    stream = c.chat.completions.create(model="tiny", max_tokens=16, temperature=0,
                                       messages=msgs, stream=True,
                                       stream_options={"include_usage": True},
                                       extra_body={"thinking": {"type": "disabled"}})
    content, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            content += ch.delta.content or ""
            finish = ch.finish_reason or finish
    assert content == (whole.choices[0].message.content or "")
    assert finish == whole.choices[0].finish_reason
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_chat_logprobs_and_n(start_tandem):
    t = start_tandem()
    c = client(t)
    r = c.chat.completions.create(model="tiny", max_tokens=6, temperature=0.8, seed=7, n=3,
                                  logprobs=True, top_logprobs=3,
                                  messages=[{"role": "user", "content": "Hello"}])
    assert len(r.choices) == 3
    for ch in r.choices:
        entries = ch.logprobs.content
        assert len(entries) >= 1
        for e in entries:
            assert e.logprob <= 0
            assert len(e.top_logprobs) == 3
            lps = [x.logprob for x in e.top_logprobs]
            assert lps == sorted(lps, reverse=True)
    same = c.chat.completions.create(model="tiny", max_tokens=6, temperature=0.8, seed=7, n=3,
                                     messages=[{"role": "user", "content": "Hello"}])
    assert [x.message.content for x in same.choices] == [x.message.content for x in r.choices]


def test_chat_with_tools_is_accepted(start_tandem):
    t = start_tandem()
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    r = client(t).chat.completions.create(
        model="tiny", max_tokens=8, temperature=0, tools=tools,
        messages=[{"role": "user", "content": "Weather in Paris?"}])
    ch = r.choices[0]
    assert ch.finish_reason in ("stop", "length", "tool_calls")
    for call in ch.message.tool_calls or []:
        json.loads(call.function.arguments)  # never invalid JSON
    rendered = requests.post(t.url + "/v1/chat/completions/render",
                             json={"tools": tools, "messages": [{"role": "user", "content": "x"}]})
    assert "get_weather" in rendered.json()["prompt"]


def test_completions_text_ids_echo_and_logprobs(start_tandem):
    t = start_tandem()
    c = client(t)
    r = c.completions.create(model="tiny", prompt="The capital of France is",
                             max_tokens=5, temperature=0, logprobs=2, echo=True)
    ch = r.choices[0]
    assert ch.text.startswith("The capital of France is")
    lp = ch.logprobs
    assert lp.token_logprobs[0] is None  # nothing predicts the first prompt token
    assert len(lp.tokens) == r.usage.prompt_tokens + r.usage.completion_tokens
    ids = requests.post(t.url + "/tokenize", json={"prompt": "The capital of France is"}).json()["tokens"]
    by_ids = c.completions.create(model="tiny", prompt=ids, max_tokens=5, temperature=0)
    plain = c.completions.create(model="tiny", prompt="The capital of France is",
                                 max_tokens=5, temperature=0)
    assert by_ids.choices[0].text == plain.choices[0].text
    batch = c.completions.create(model="tiny", prompt=["a", "b"], max_tokens=3, temperature=0, n=2)
    assert len(batch.choices) == 4


def test_native_generate_and_stop_ids(start_tandem):
    t = start_tandem()
    out = generate(t, [0, 100, 200, 300], max_tokens=10, logprobs=2)
    assert len(out["output_ids"]) == out["usage"]["completion_tokens"] <= 10
    assert len(out["logprobs"]) == len(out["output_ids"])
    first = out["output_ids"][0]
    stopped = generate(t, [0, 100, 200, 300], max_tokens=10, stop_token_ids=[first])
    assert stopped["output_ids"] == [first] and stopped["finish_reason"] == "stop"


def test_sixty_four_concurrent_clients_get_their_solo_tokens(start_tandem):
    t = start_tandem()
    prompts = [[0] + [(i * 37 + k * 11) % 5000 + 10 for k in range(3 + i % 20)] for i in range(64)]
    alone = [generate(t, p, max_tokens=12)["output_ids"] for p in prompts]
    with ThreadPoolExecutor(64) as pool:
        together = list(pool.map(lambda p: generate(t, p, max_tokens=12)["output_ids"], prompts))
    assert together == alone


def test_mass_abort_returns_every_page(start_tandem):
    t = start_tandem("--set", "scheduler.max_running_requests=32")
    base = metrics(t)
    stop = threading.Event()

    def long_request(i):
        try:
            requests.post(t.url + "/generate", timeout=60, json={
                "input_ids": [0, 10 + i], "sampling_params": {"max_tokens": 4000, "ignore_eos": True}})
        except requests.RequestException:
            pass

    threads = [threading.Thread(target=long_request, args=(i,)) for i in range(200)]
    for th in threads:
        th.start()
    time.sleep(1.0)
    r = requests.post(t.url + "/abort_request", json={"abort_all": True})
    assert r.status_code == 200 and r.json()["aborted"] > 0
    for th in threads:
        th.join(60)
    deadline = time.time() + 10
    while time.time() < deadline:
        m = metrics(t)
        if (m["tandem_running_requests"] == 0 and m["tandem_queue_depth"] == 0
                and m["tandem_verify_inflight"] == 0):  # a shadow check holds pages too
            break
        time.sleep(0.1)
    m = metrics(t)
    # Every page is free or held by the prefix cache (aborted requests publish what they computed).
    cached = m.get("tandem_prefix_cache_pages", 0)
    assert m["tandem_pages_free"] + cached == m["tandem_pages_total"] == base["tandem_pages_total"]
    assert m["tandem_requests_aborted_total"] >= 1
    assert requests.get(t.url + "/health").status_code == 200
    assert len(generate(t, [0, 5, 6], max_tokens=3)["output_ids"]) >= 1


def test_abort_sent_before_its_request_is_pending_and_ends_it(start_tandem):
    # An abort that overtakes its own request (abort_tombstones.h) is kept, not lost: the request
    # arriving with that X-Request-Id ends at once as aborted, on every generating endpoint.
    t = start_tandem()
    long = {"max_tokens": 3000, "ignore_eos": True}
    cases = [
        ("/generate", {"input_ids": [0, 1, 2], "sampling_params": long}),
        ("/v1/completions", {"prompt": "hello", "n": 2, **long}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], **long}),
    ]
    for i, (path, body) in enumerate(cases):
        rid = f"abort-first-{i}"
        r = requests.post(t.url + "/abort_request", json={"rid": rid})
        assert r.status_code == 200 and r.json() == {"aborted": 0, "pending": True}, r.text
        r = requests.post(t.url + path, json=body, headers={"X-Request-Id": rid}, timeout=120)
        assert r.status_code == 200, (path, r.text)
        reply = r.json()
        reasons = ([reply["finish_reason"]] if path == "/generate"
                   else [c["finish_reason"] for c in reply["choices"]])
        assert reasons == ["abort"] * (2 if path == "/v1/completions" else 1), (path, reply)
        assert reply["usage"]["completion_tokens"] < 3000 * len(reasons)
    # A request no abort names runs to its end.
    assert generate(t, [0, 1, 2], max_tokens=5, ignore_eos=True)["finish_reason"] == "length"


def test_abort_of_a_running_request_says_it_aborted_one(start_tandem):
    t = start_tandem()
    body = {"input_ids": [0, 1], "stream": True,
            "sampling_params": {"max_tokens": 5000, "ignore_eos": True}}
    with requests.post(t.url + "/generate", json=body, headers={"X-Request-Id": "running-1"},
                       stream=True, timeout=120) as r:
        events = (line[len(b"data: "):] for line in r.iter_lines() if line.startswith(b"data: "))
        next(events)  # streaming has begun, so the server tracks the request
        a = requests.post(t.url + "/abort_request", json={"rid": "running-1"})
        assert a.status_code == 200 and a.json() == {"aborted": 1, "pending": False}, a.text
        last = [json.loads(e) for e in events if e != b"[DONE]"][-1]
    assert last["finish_reason"] == "abort"


def test_full_queue_answers_503_with_retry_after(start_tandem):
    t = start_tandem("--set", "scheduler.max_running_requests=1", "--set", "scheduler.max_queued_requests=1")

    def slow(_):
        return requests.post(t.url + "/generate", timeout=120, json={
            "input_ids": [0, 1, 2], "sampling_params": {"max_tokens": 300, "ignore_eos": True}})

    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(slow, range(8)))
    codes = [r.status_code for r in replies]
    assert 503 in codes and 200 in codes
    for r in replies:
        if r.status_code == 503:
            assert r.headers["Retry-After"]
            assert r.json()["error"]["type"] == "unavailable_error"


def test_bad_generation_inputs(start_tandem):
    t = start_tandem()
    cases = [
        ("/v1/chat/completions", {"messages": []}, 400),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "temperature": 9}, 400),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, 400),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "model": "gpt-9"}, 404),
        ("/v1/chat/completions", {"messages": [{"role": "user"}], "n": "two"}, 400),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                  "max_tokens": 2_000_000}, 400),
        ("/v1/completions", {"prompt": []}, 400),
        ("/v1/completions", {"prompt": [1, -5]}, 400),
        ("/v1/completions", {"prompt": "x", "logprobs": 99}, 400),
        ("/v1/completions", {}, 400),
        ("/generate", {"input_ids": [99999999]}, 400),
        ("/generate", {"input_ids": "abc"}, 400),
        ("/generate", {"input_ids": [1], "sampling_params": []}, 400),
        ("/abort_request", {"nothing": 1}, 400),
    ]
    for path, body, status in cases:
        r = requests.post(t.url + path, json=body)
        assert r.status_code == status, (path, body, r.text)
        assert r.json()["error"]["message"], (path, body)
    r = requests.post(t.url + "/v1/chat/completions", data=b"{broken")
    assert r.status_code == 400
    assert requests.get(t.url + "/health").status_code == 200


def test_client_disconnect_aborts_its_request(start_tandem):
    t = start_tandem()
    import socket
    body = json.dumps({"input_ids": [0, 1], "sampling_params": {"max_tokens": 5000, "ignore_eos": True}})
    s = socket.create_connection(("127.0.0.1", t.port))
    s.sendall(f"POST /generate HTTP/1.1\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
    time.sleep(0.5)
    s.close()
    deadline = time.time() + 10
    while time.time() < deadline and metrics(t)["tandem_requests_aborted_total"] < 1:
        time.sleep(0.1)
    assert metrics(t)["tandem_requests_aborted_total"] >= 1
    assert metrics(t)["tandem_running_requests"] == 0


def test_health_generate_and_metrics(start_tandem):
    t = start_tandem()
    r = requests.get(t.url + "/health_generate", timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "ok"
    m = metrics(t)
    assert m["tandem_generated_tokens_total"] >= 1
    assert m["tandem_up"] == 1


def test_a_stalled_scheduler_turns_health_503_then_recovers(start_tandem):
    t = start_tandem("--set", "server.debug_endpoints=true", "--set", "scheduler.stall_timeout_ms=300")
    assert requests.get(t.url + "/health").status_code == 200
    assert requests.post(t.url + "/debug/stall", json={"ms": 3000}).status_code == 200
    pending = threading.Thread(target=lambda: generate(t, [0, 1, 2], max_tokens=2))
    pending.start()  # work waiting for the stalled loop
    deadline = time.time() + 2.5
    status = 200
    while time.time() < deadline and status == 200:
        status = requests.get(t.url + "/health").status_code
        time.sleep(0.05)
    assert status == 503
    assert "scheduler" in requests.get(t.url + "/health").json()["error"]["message"]
    assert requests.get(t.url + "/health_generate", timeout=10).status_code == 503
    pending.join(30)
    deadline = time.time() + 10
    while time.time() < deadline and requests.get(t.url + "/health").status_code != 200:
        time.sleep(0.1)
    assert requests.get(t.url + "/health").status_code == 200


def test_debug_routes_are_off_by_default(start_tandem):
    t = start_tandem()
    assert requests.post(t.url + "/debug/stall", json={"ms": 10}).status_code == 404
