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
