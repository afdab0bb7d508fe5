"""The HTTP front door of the real binary: endpoints, bad input, limits, load, shutdown."""
import json
import resource
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import requests


def raw(port, data, timeout=5.0, read_until_close=True):
    """Sends raw bytes and returns whatever comes back before the server closes or timeout."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            chunks.append(chunk)
            if not read_until_close:
                break
        return b"".join(chunks)


def assert_error_body(body, code=None):
    """OpenAI's shape: message, type, param and code, the last two a string or null."""
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["code"] == code
    assert err["param"] is None or isinstance(err["param"], str)
    assert isinstance(err["message"], str) and err["message"]
    assert isinstance(err["type"], str) and err["type"]


def test_health_and_models(start_tandem):
    t = start_tandem()
    r = requests.get(t.url + "/health")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert r.headers["X-Request-Id"]
    models = requests.get(t.url + "/v1/models").json()
    assert models["object"] == "list"
    # model.served_name defaults to the name of the model directory (models/tiny)
    assert [m["id"] for m in models["data"]] == ["tiny"]
    assert models["data"][0]["object"] == "model"


def test_openai_client_lists_models(start_tandem):
    import openai
    t = start_tandem("--set", "model.served_name=my-model")
    client = openai.OpenAI(base_url=t.url + "/v1", api_key="unused")
    assert [m.id for m in client.models.list()] == ["my-model"]


def test_unknown_route_and_wrong_method(start_tandem):
    t = start_tandem()
    r = requests.get(t.url + "/v1/nope")
    assert r.status_code == 404
    assert_error_body(r.content)
    r = requests.delete(t.url + "/health")
    assert r.status_code == 405 and r.headers["Allow"] == "GET"
    assert_error_body(r.content)


def test_malformed_requests_get_400_and_server_keeps_serving(start_tandem):
    t = start_tandem()
    bad_inputs = [
        b"GARBAGE\r\n\r\n",
        b"GET /health HTTP/9.9\r\n\r\n",
        b"GET /health HTTP/1.1\r\nBad Header Line\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: a\x00b\r\n\r\n",
        b"POST /v1/models HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        b"POST /v1/models HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        b"POST /v1/models HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello on a plain port
    ]
    for data in bad_inputs:
        reply = raw(t.port, data)
        assert reply.startswith(b"HTTP/1.1 400"), (data, reply)
        assert_error_body(reply.split(b"\r\n\r\n", 1)[1])
    assert requests.get(t.url + "/health").status_code == 200


def test_oversized_headers_and_bodies_get_413(start_tandem):
    t = start_tandem("--set", "server.max_body_bytes=1000", "--set", "server.max_header_bytes=2048")
    r = requests.post(t.url + "/v1/models", data=b"x" * 1001)
    assert r.status_code == 413
    assert_error_body(r.content)
    reply = raw(t.port, b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 4096 + b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 413")
    # A huge declared body is refused before it is sent.
    reply = raw(t.port, b"POST /v1/models HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 413")
    assert requests.get(t.url + "/health").status_code == 200


def test_partial_request_times_out_with_408(start_tandem):
    t = start_tandem("--set", "server.request_timeout_ms=300")
    started = time.time()
    reply = raw(t.port, b"POST /v1/models HTTP/1.1\r\nContent-Length: 100\r\n\r\nonly-part")
    assert reply.startswith(b"HTTP/1.1 408")
    assert time.time() - started < 4
    reply = raw(t.port, b"GET /heal")  # stuck inside the request line
    assert reply.startswith(b"HTTP/1.1 408")
    assert requests.get(t.url + "/health").status_code == 200


def test_keep_alive_and_pipelining(start_tandem):
    t = start_tandem()
    with requests.Session() as s:
        for _ in range(20):
            assert s.get(t.url + "/health").status_code == 200
    pipelined = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                 b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
                 b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    reply = raw(t.port, pipelined)
    assert reply.count(b"HTTP/1.1 200 OK") == 3
    assert reply.index(b'"status":"ok"') < reply.index(b'"object":"list"')


def test_request_id_is_echoed(start_tandem):
    t = start_tandem()
    r = requests.get(t.url + "/health", headers={"X-Request-Id": "abc-123"})
    assert r.headers["X-Request-Id"] == "abc-123"
    r = requests.get(t.url + "/health", headers={"X-Request-Id": "bad id with spaces"})
    assert r.headers["X-Request-Id"] != "bad id with spaces"


def test_one_thousand_concurrent_connections(start_tandem):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    t = start_tandem()
    socks = []
    try:
        for _ in range(1000):
            socks.append(socket.create_connection(("127.0.0.1", t.port), timeout=10))
        for s in socks:  # every connection is open at once before any request is answered
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        ok = 0
        for s in socks:
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            ok += data.startswith(b"HTTP/1.1 200")
        assert ok == 1000
    finally:
        for s in socks:
            s.close()
    with ThreadPoolExecutor(32) as pool:
        codes = list(pool.map(lambda _: requests.get(t.url + "/v1/models").status_code, range(500)))
    assert codes == [200] * 500
    assert requests.get(t.url + "/health").status_code == 200


def test_connection_limit_answers_503(start_tandem):
    t = start_tandem("--set", "server.max_connections=4")
    time.sleep(0.3)  # let the server see the health poll's connection close
    held = [socket.create_connection(("127.0.0.1", t.port)) for _ in range(4)]
    time.sleep(0.2)
    try:
        reply = raw(t.port, b"GET /health HTTP/1.1\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 503")
    finally:
        for s in held:
            s.close()
    time.sleep(0.2)
    assert requests.get(t.url + "/health").status_code == 200


def test_sigterm_and_sigint_shut_down_cleanly(start_tandem):
    for sig in (signal.SIGTERM, signal.SIGINT):
        t = start_tandem()
        idle = socket.create_connection(("127.0.0.1", t.port))  # an idle keep-alive client
        assert t.stop(sig) == 0
        assert "shut down cleanly" in t.log
        idle.close()


def test_shutdown_refuses_new_connections(start_tandem):
    t = start_tandem()
    assert t.stop() == 0
    try:
        requests.get(t.url + "/health", timeout=2)
        raise AssertionError("the server still answered after shutdown")
    except requests.ConnectionError:
        pass
