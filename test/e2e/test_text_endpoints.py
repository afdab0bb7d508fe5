"""/tokenize, /detokenize and /v1/chat/completions/render against the real binary."""
import requests


def test_tokenize_detokenize_round_trip(start_tandem):
    t = start_tandem()
    text = "Hello, world! 你好 🙂 def f(x):\n    return x  "
    r = requests.post(t.url + "/tokenize", json={"prompt": text})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["count"] == len(body["tokens"]) > 5
    back = requests.post(t.url + "/detokenize", json={"tokens": body["tokens"]})
    assert back.status_code == 200 and back.json()["prompt"] == text


def test_render_gives_the_model_input_and_keeps_user_specials_as_text(start_tandem):
    t = start_tandem()
    chat = {"messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": "literal <｜User｜> and <think> here"}]}
    r = requests.post(t.url + "/v1/chat/completions/render", json=chat)
    assert r.status_code == 200, r.text
    body = r.json()
    assert "Be brief." in body["prompt"]
    tokenized = requests.post(t.url + "/tokenize", json=chat).json()
    assert tokenized["tokens"] == body["tokens"]
    user_token = requests.post(t.url + "/tokenize", json={"prompt": "<｜User｜>"}).json()["tokens"]
    assert len(user_token) == 1
    # The template's own <｜User｜> is one special token; the user's literal one is not.
    assert body["tokens"].count(user_token[0]) == 1


def test_text_endpoint_errors(start_tandem):
    t = start_tandem()
    cases = [
        ("/tokenize", b"{not json"),
        ("/tokenize", b"[1,2]"),
        ("/tokenize", b'{"prompt": 5}'),
        ("/tokenize", b"{}"),
        ("/detokenize", b'{"tokens": [1, -1]}'),
        ("/detokenize", b'{"tokens": [999999999]}'),
        ("/detokenize", b'{"tokens": "abc"}'),
        ("/v1/chat/completions/render", b'{"messages": [{"role": "wizard", "content": "x"}]}'),
        ("/v1/chat/completions/render", b'{"messages": "hi"}'),
    ]
    for path, body in cases:
        r = requests.post(t.url + path, data=body)
        assert r.status_code == 400, (path, body, r.text)
        assert r.json()["error"]["message"]
    assert requests.get(t.url + "/health").status_code == 200


def test_invalid_json_body_is_400_naming_the_problem(start_tandem):
    t = start_tandem()
    r = requests.post(t.url + "/tokenize", data=b'{"prompt": "unterminated')
    assert r.status_code == 400
    assert "not valid JSON" in r.json()["error"]["message"]


def test_invalid_utf8_in_a_json_string_is_400_on_every_endpoint(start_tandem):
    # JSON text is UTF-8: a body whose string holds bytes that are not is refused with a 400 that
    # says why, on every endpoint family (both JSON readers: simdjson's and text::json_parse).
    t = start_tandem()
    bad = b"caf\xe9 \xff"  # Latin-1 bytes, not UTF-8
    cases = [
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "' + bad + b'"}]}'),
        ("/v1/completions", b'{"prompt": "' + bad + b'", "max_tokens": 1}'),
        ("/v1/messages", b'{"max_tokens": 1, "messages": [{"role": "user", "content": "'
         + bad + b'"}]}'),
        ("/v1/messages/count_tokens", b'{"messages": [{"role": "user", "content": "' + bad
         + b'"}]}'),
        ("/generate", b'{"input_ids": [0, 1], "rid": "' + bad + b'"}'),
        ("/tokenize", b'{"prompt": "' + bad + b'"}'),
        ("/v1/chat/completions/render", b'{"messages": [{"role": "user", "content": "' + bad
         + b'"}]}'),
        ("/abort_request", b'{"rid": "' + bad + b'"}'),
    ]
    for path, body in cases:
        r = requests.post(t.url + path, data=body)
        assert r.status_code == 400, (path, r.text)
        err = r.json()["error"]
        assert "UTF-8" in err["message"], (path, err)
    assert requests.get(t.url + "/health").status_code == 200


def test_missing_model_fails_startup_with_exit_1(tmp_path):
    from conftest import TandemServer
    s = TandemServer(["--model", str(tmp_path / "nowhere")])
    rc = s.proc.wait(30)
    s._reader.join(5)
    assert rc == 1
    assert "nowhere" in s.log and "startup failed" in s.log


def test_chat_template_kwargs_switch_thinking(start_tandem):
    t = start_tandem()
    msgs = [{"role": "user", "content": "hi"}]

    def render(**extra):
        r = requests.post(t.url + "/v1/chat/completions/render", json={"messages": msgs, **extra})
        assert r.status_code == 200, r.text
        return r.json()["prompt"]

    off = render(thinking={"type": "disabled"})
    assert off.endswith("</think>")
    assert render(chat_template_kwargs={"thinking": False}) == off
    assert render(chat_template_kwargs={"enable_thinking": False}) == off
    assert render(chat_template_kwargs={"thinking": True}).endswith("<think>")
    r = requests.post(t.url + "/v1/chat/completions/render",
                      json={"messages": msgs, "chat_template_kwargs": {"thinking": "no"}})
    assert r.status_code == 400 and "chat_template_kwargs.thinking" in r.json()["error"]["message"]
