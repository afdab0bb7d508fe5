// The server's lifecycle: listen, dispatch, responder delivery, graceful shutdown.
#include "http/server.h"

#include <csignal>

#include <fmt/format.h>

#include "core/check.h"
#include "core/json_writer.h"
#include "core/log.h"
#include "http/server_impl.h"

namespace tandem::http {

std::string error_body(std::string_view message, std::string_view type, std::string_view param,
                       std::string_view code) {
    json_writer w;
    w.begin_object().key("error").begin_object();
    w.key("message").value(message).key("type").value(type).key("param");
    if (param.empty()) w.null(); else w.value(param);
    w.key("code");
    if (code.empty()) w.null(); else w.value(code);
    w.end_object().end_object();
    return w.take();
}

// ---- responder: any thread → mailbox → loop thread ------------------------------------------

namespace {
server::impl* impl_of(const std::shared_ptr<exchange>& ex) {
    return static_cast<server::impl*>(ex->owner);
}
}  // namespace

void responder::send(response r) const {
    if (!ex_) return;
    ex_->box->post([ex = ex_, r = std::move(r)]() mutable { impl_of(ex)->deliver(ex, std::move(r)); });
}

void responder::start_stream(int status, header_list headers, std::string content_type) const {
    if (!ex_) return;
    ex_->box->post([ex = ex_, status, h = std::move(headers), ct = std::move(content_type)]() mutable {
        impl_of(ex)->deliver_stream_start(ex, status, std::move(h), std::move(ct));
    });
}

void responder::write(std::string chunk) const {
    if (!ex_ || chunk.empty()) return;
    ex_->box->post([ex = ex_, c = std::move(chunk)]() mutable {
        impl_of(ex)->deliver_chunk(ex, std::move(c));
    });
}

void responder::end_stream() const {
    if (!ex_) return;
    ex_->box->post([ex = ex_] { impl_of(ex)->deliver_stream_end(ex); });
}

bool responder::cancelled() const { return !ex_ || ex_->cancelled.load(); }

void responder::on_cancel(std::function<void()> callback) const {
    if (!ex_) return;
    ex_->box->post([ex = ex_, cb = std::move(callback)]() mutable {
        if (ex->cancelled.load()) {
            cb();  // the client left before the callback was registered
        } else {
            ex->on_cancel = std::move(cb);
        }
    });
}

const std::string& responder::request_id() const {
    static const std::string none;
    return ex_ ? ex_->request_id : none;
}

// ---- server ----------------------------------------------------------------------------------

server::server(server_limits limits, handler on_request) : impl_(std::make_unique<impl>()) {
    impl_->limits = limits;
    impl_->on_request = std::move(on_request);
    TANDEM_CHECK(uv_loop_init(&impl_->loop) == 0);
    uv_async_init(&impl_->loop, &impl_->wakeup, [](uv_async_t* a) {
        static_cast<impl*>(a->data)->box->drain();
    });
    impl_->wakeup.data = impl_.get();
    impl_->box->attach(&impl_->wakeup);
    uv_timer_init(&impl_->loop, &impl_->grace);
    impl_->grace.data = impl_.get();
}

server::~server() {
    impl_->box->close();
    if (!impl_->loop_closed) {
        // run() was never called or did not finish: close what is open and let callbacks run.
        uv_walk(&impl_->loop, [](uv_handle_t* h, void*) {
            if (!uv_is_closing(h)) uv_close(h, nullptr);
        }, nullptr);
        uv_run(&impl_->loop, UV_RUN_DEFAULT);
    }
    uv_loop_close(&impl_->loop);
}

result<int> server::listen(const std::string& host, int port) {
    sockaddr_storage addr{};
    if (uv_ip4_addr(host.c_str(), port, reinterpret_cast<sockaddr_in*>(&addr)) != 0 &&
        uv_ip6_addr(host.c_str(), port, reinterpret_cast<sockaddr_in6*>(&addr)) != 0) {
        return make_error(error_code::invalid_argument,
                          fmt::format("server.host '{}' is not an IPv4 or IPv6 address", host));
    }
    uv_tcp_init(&impl_->loop, &impl_->listener);
    impl_->listener.data = impl_.get();
    int rc = uv_tcp_bind(&impl_->listener, reinterpret_cast<const sockaddr*>(&addr), 0);
    if (rc == 0) {
        rc = uv_listen(reinterpret_cast<uv_stream_t*>(&impl_->listener), 1024,
                       [](uv_stream_t* s, int status) {
                           if (status == 0) static_cast<impl*>(s->data)->accept_one();
                       });
    }
    if (rc != 0) {
        return make_error(error_code::io_error, fmt::format("cannot listen on {}:{}: {}", host,
                                                            port, uv_strerror(rc)));
    }
    impl_->listening = true;
    sockaddr_storage bound{};
    int len = sizeof(bound);
    uv_tcp_getsockname(&impl_->listener, reinterpret_cast<sockaddr*>(&bound), &len);
    int bound_port = bound.ss_family == AF_INET6
                         ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    return bound_port;
}

void server::run() {
    std::signal(SIGPIPE, SIG_IGN);  // a vanished client must not kill the process
    auto on_signal = [](uv_signal_t* s, int signum) {
        TANDEM_LOG_INFO("received {}, shutting down", signum == SIGINT ? "SIGINT" : "SIGTERM");
        static_cast<impl*>(s->data)->begin_shutdown();
    };
    uv_signal_init(&impl_->loop, &impl_->sigint);
    uv_signal_init(&impl_->loop, &impl_->sigterm);
    impl_->sigint.data = impl_->sigterm.data = impl_.get();
    uv_signal_start(&impl_->sigint, on_signal, SIGINT);
    uv_signal_start(&impl_->sigterm, on_signal, SIGTERM);
    uv_run(&impl_->loop, UV_RUN_DEFAULT);
    impl_->loop_closed = true;
}

void server::shutdown() {
    impl* self = impl_.get();
    if (!impl_->box->post([self] { self->begin_shutdown(); })) return;
}

void server::post(std::function<void()> fn) { impl_->box->post(std::move(fn)); }
bool server::stopping() const { return impl_->stopping.load(); }
const server_stats& server::stats() const { return impl_->stats; }

// ---- dispatch and completion -----------------------------------------------------------------

void server::impl::dispatch(connection* c) {
    stats.requests_total++;
    stats.requests_in_flight++;
    auto ex = std::make_shared<exchange>();
    ex->box = box;
    ex->owner = this;
    ex->connection_id = c->id;
    ex->sequence = ++c->requests_seen;
    ex->request_id = c->parser->req().request_id;
    c->active = ex;
    c->response_started = false;
    c->stream_open = false;
    c->started_at = std::chrono::steady_clock::now();
    if (stopping.load()) {
        c->parser->req().keep_alive = false;
        deliver(ex, {503, {}, error_body("the server is shutting down", "unavailable_error")});
        return;
    }
    log::request_scope scope(ex->request_id);
    try {
        on_request(c->parser->req(), responder(ex));
    } catch (const std::exception& e) {
        TANDEM_LOG_ERROR("handler threw: {}", e.what());
        deliver(ex, {500, {}, error_body("internal error", "internal_error")});
    }
}

void server::impl::on_exchange_done(connection* c) {
    if (limits.access_log) {
        auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now() - c->started_at).count();
        log::request_scope scope(c->active->request_id);
        TANDEM_LOG_INFO("{} {} {} {:.3f}ms", c->parser->req().method, c->parser->req().target, c->response_status,
                        micros / 1000.0);
    }
    stats.requests_in_flight--;
    c->active.reset();
    if (stopping.load() || !c->parser->req().keep_alive) {
        close_after_writes(c);
        finish_if_drained();
        return;
    }
    // Serve the next pipelined request, if any bytes of it already arrived.
    c->parser->resume();
    std::string rest = std::move(c->unparsed);
    c->unparsed.clear();
    if (!rest.empty()) feed(c, rest.data(), rest.size());
    if (!c->closing) start_reading(c);
    if (!c->closing) arm_timer(c);
}

// ---- shutdown --------------------------------------------------------------------------------

void server::impl::begin_shutdown() {
    if (stopping.exchange(true)) return;
    if (listening) {
        uv_close(reinterpret_cast<uv_handle_t*>(&listener), nullptr);
        listening = false;
    }
    // Idle connections go now; busy ones finish their current response, then close.
    std::vector<connection*> idle;
    for (auto& [id, c] : connections) {
        if (!c->active) idle.push_back(c);
    }
    for (connection* c : idle) close_connection(c);
    grace_started = true;
    uv_timer_start(&grace, [](uv_timer_t* t) { static_cast<impl*>(t->data)->force_close_all(); },
                   static_cast<uint64_t>(limits.shutdown_grace_ms), 0);
    finish_if_drained();
}

void server::impl::force_close_all() {
    std::vector<connection*> busy;
    for (auto& [id, c] : connections) busy.push_back(c);
    for (connection* c : busy) {
        if (c->active && !c->closing) {
            std::shared_ptr<exchange> ex = c->active;
            if (c->stream_open) {
                deliver_chunk(ex, "event: error\ndata: " +
                                      error_body("the server shut down before the response "
                                                 "completed", "unavailable_error") + "\n\n");
                deliver_stream_end(ex);
            } else if (!c->response_started) {
                deliver(ex, {503, {}, error_body("the server shut down before the response "
                                                 "completed", "unavailable_error")});
            }
            ex->cancelled = true;
            if (ex->on_cancel) std::exchange(ex->on_cancel, nullptr)();
        }
        if (!c->closing) close_connection(c);
    }
    finish_if_drained();
}

void server::impl::finish_if_drained() {
    if (!stopping.load() || !connections.empty()) return;
    // Everything answered: release the remaining handles so uv_run returns.
    box->close();
    auto close_if_open = [](uv_handle_t* h) {
        if (!uv_is_closing(h)) uv_close(h, nullptr);
    };
    close_if_open(reinterpret_cast<uv_handle_t*>(&wakeup));
    close_if_open(reinterpret_cast<uv_handle_t*>(&grace));
    close_if_open(reinterpret_cast<uv_handle_t*>(&sigint));
    close_if_open(reinterpret_cast<uv_handle_t*>(&sigterm));
}

}  // namespace tandem::http
