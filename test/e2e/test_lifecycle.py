"""Request lifecycle under hostile timing (design invariant 12): end events that reach the same
request together, a server stopped and resumed under load. Deadlines here are waited out while
the server is stopped (SIGSTOP), so the events meet at the same step boundary however fast or
slow the machine is."""
import json
import os
import signal
import threading
import time

import requests

from pd_support import open_raw_generate, scrape, wait_until


def health_text(t):
    r = requests.get(t.url + "/health", timeout=10)
    return r.text if r.status_code == 503 else None


def test_disconnects_and_queue_timeouts_meeting_on_queued_requests_end_each_once(start_tandem):
    # The reported crash: a queued request whose client gave up (abort) and whose queue deadline
    # passed by the same step ended twice ("aborted -> failed (queue timeout)") and the process
    # aborted. The scheduler is held in one step (debug stall) while the clients hang up and the
    # deadline passes, so both events meet at the next step boundary, in that order, every time.
    t = start_tandem("--set", "scheduler.max_running_requests=1",
                     "--set", "scheduler.queue_timeout_ms=1000",
                     "--set", "scheduler.stall_timeout_ms=500",
                     "--set", "server.debug_endpoints=true")
    holder = open_raw_generate(t.port, [0, 11, 12], 30000)  # holds the only running slot
    assert wait_until(lambda: scrape(t)("tandem_running_requests") == 1, 30)
    queued = [open_raw_generate(t.port, [0, 20 + i], 4) for i in range(8)]
    assert wait_until(lambda: scrape(t)("tandem_queue_depth") == 8, 30)
    before = scrape(t)
    assert requests.post(t.url + "/debug/stall", json={"ms": 6000}).status_code == 200
    # /health turns 503 naming the scheduler once it has sat in the stalled step for
    # stall_timeout_ms with work pending: it is inside the 6 s step now.
    assert wait_until(lambda: "scheduler" in (health_text(t) or ""), 10, 0.02)
    stalled_at = scrape(t)("tandem_steps_total")
    for s in queued:
        s.close()
    open_before = before("tandem_http_connections_open")
    assert wait_until(lambda: scrape(t)("tandem_http_connections_open") <= open_before - 8, 10)
    # Every abort was posted while the scheduler still sat in the stalled step.
    assert scrape(t)("tandem_steps_total") == stalled_at, "the stall ended before the aborts"

    def queue_drained():
        m = scrape(t)
        ended = (m("tandem_requests_aborted_total") + m("tandem_requests_failed_total")
                 - before("tandem_requests_aborted_total") - before("tandem_requests_failed_total"))
        return m("tandem_queue_depth") == 0 and ended == 8
    assert wait_until(queue_drained, 30), t.log[-3000:]
    assert t.proc.poll() is None, t.log[-3000:]
    holder.close()
    assert wait_until(lambda: scrape(t)("tandem_running_requests") == 0, 30)
    m = scrape(t)
    assert m("tandem_pages_free") == m("tandem_pages_total")
    # Each of the nine ended exactly once: finished + aborted + failed counts them once each.
    ended = sum(m(f"tandem_requests_{k}_total") - before(f"tandem_requests_{k}_total")
                for k in ("finished", "aborted", "failed"))
    assert ended == 9
    assert requests.get(t.url + "/health", timeout=10).status_code == 200
    r = requests.post(t.url + "/generate", timeout=60, json={
        "input_ids": [0, 5, 6], "sampling_params": {"max_tokens": 3, "temperature": 0}})
    assert r.status_code == 200 and len(r.json()["output_ids"]) == 3


def test_a_server_stopped_under_load_resumes_and_ends_every_request_once(start_tandem):
    # The operator's version: SIGSTOP with queued clients that give up, SIGCONT after their
    # deadline. Whatever order the events meet in, the process survives and nothing leaks.
    t = start_tandem("--set", "scheduler.max_running_requests=1",
                     "--set", "scheduler.queue_timeout_ms=1000")
    holder = open_raw_generate(t.port, [0, 11, 12], 30000)
    assert wait_until(lambda: scrape(t)("tandem_running_requests") == 1, 30)
    queued = [open_raw_generate(t.port, [0, 30 + i], 4) for i in range(8)]
    assert wait_until(lambda: scrape(t)("tandem_queue_depth") == 8, 30)
    os.kill(t.proc.pid, signal.SIGSTOP)
    try:
        for s in queued:
            s.close()
        time.sleep(1.5)  # past the queue deadline while stopped
    finally:
        os.kill(t.proc.pid, signal.SIGCONT)
    assert wait_until(lambda: scrape(t)("tandem_queue_depth") == 0, 30)
    holder.close()
    assert wait_until(lambda: scrape(t)("tandem_running_requests") == 0, 30)
    m = scrape(t)
    assert t.proc.poll() is None, t.log[-3000:]
    assert m("tandem_pages_free") == m("tandem_pages_total")
    assert m("tandem_requests_aborted_total") + m("tandem_requests_failed_total") == 9


def test_requests_cut_at_shutdown_get_an_error_body_or_sse_error_event(start_tandem):
    # In-flight requests that outlive server.shutdown_grace_ms end with a reason, not a bare
    # closed connection: 503 with an OpenAI error body, or an SSE `error` event in a stream.
    t = start_tandem("--set", "server.shutdown_grace_ms=300")
    results = {}

    def plain():
        r = requests.post(t.url + "/generate", timeout=60, json={
            "input_ids": [0, 1, 2], "sampling_params": {"max_tokens": 30000, "ignore_eos": True}})
        results["plain"] = (r.status_code, r.text)

    def stream():
        r = requests.post(t.url + "/generate", timeout=60, stream=True, json={
            "input_ids": [0, 3, 4], "stream": True,
            "sampling_params": {"max_tokens": 30000, "ignore_eos": True}})
        results["stream"] = (r.status_code, r.content.decode())

    threads = [threading.Thread(target=f) for f in (plain, stream)]
    for th in threads:
        th.start()
    assert wait_until(lambda: scrape(t)("tandem_running_requests") == 2, 30)
    assert t.stop() == 0
    for th in threads:
        th.join(30)
    status, body = results["plain"]
    assert status == 503, body
    assert "shut down" in json.loads(body)["error"]["message"]
    status, body = results["stream"]
    assert status == 200
    assert "event: error" in body and "shut down" in body, body[-500:]
