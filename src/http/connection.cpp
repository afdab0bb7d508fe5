// One connection's life: accept, parse (request_parser.h), enforce timeouts, write, close.
#include <fmt/format.h>

#include "core/log.h"
#include "http/server_impl.h"

namespace tandem::http {
namespace {

constexpr size_t k_read_chunk = 64 * 1024;
constexpr uint64_t k_linger_ms = 1000;

int64_t srv_limit_bytes(connection* c) {
    return c->srv->limits.max_header_bytes + c->srv->limits.max_body_bytes;
}

struct write_request {
    uv_write_t req;
    std::string data;
    connection* conn;
};

}  // namespace

void server::impl::accept_one() {
    auto* c = new connection();
    c->id = next_connection_id++;
    c->srv = this;
    uv_tcp_init(&loop, &c->tcp);
    uv_timer_init(&loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->open_handles = 2;
    if (uv_accept(reinterpret_cast<uv_stream_t*>(&listener),
                  reinterpret_cast<uv_stream_t*>(&c->tcp)) != 0) {
        connections[c->id] = c;
        close_connection(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    connections[c->id] = c;
    stats.connections_total++;
    stats.connections_open++;
    c->parser = std::make_unique<request_parser>(
        parse_limits{limits.max_header_bytes, limits.max_body_bytes},
        request_parser::hooks{[c] { c->srv->arm_timer(c); },
                              [c] { c->srv->write_raw(c, "HTTP/1.1 100 Continue\r\n\r\n"); }});
    if (static_cast<int64_t>(connections.size()) > limits.max_connections || stopping.load()) {
        stats.connections_rejected++;
        respond_error(c, 503, "too many connections; retry later", "unavailable_error", true);
        return;
    }
    start_reading(c);
    arm_timer(c);
}

void server::impl::start_reading(connection* c) {
    if (c->reading || c->closing) return;
    c->reading = true;
    uv_read_start(
        reinterpret_cast<uv_stream_t*>(&c->tcp),
        [](uv_handle_t*, size_t, uv_buf_t* buf) {
            static thread_local char scratch[k_read_chunk];  // consumed before the next read
            *buf = uv_buf_init(scratch, sizeof(scratch));
        },
        [](uv_stream_t* s, ssize_t nread, const uv_buf_t* buf) {
            auto* c = static_cast<connection*>(s->data);
            if (nread < 0) {
                c->srv->close_connection(c);  // EOF or reset: the client is gone
                return;
            }
            if (nread > 0) c->srv->feed(c, buf->base, static_cast<size_t>(nread));
        });
}

void server::impl::feed(connection* c, const char* data, size_t len) {
    if (c->closing || c->lingering || c->close_after_flush) return;  // discarded
    if (c->active) {
        // A response is pending: keep pipelined bytes for later, in order. Reading goes on so
        // that a client hanging up is noticed (and its request cancelled) at once; only a
        // client that floods us with more than one maximal request is paused.
        c->unparsed.append(data, len);
        int64_t cap = srv_limit_bytes(c);
        if (static_cast<int64_t>(c->unparsed.size()) > cap && c->reading) {
            uv_read_stop(reinterpret_cast<uv_stream_t*>(&c->tcp));
            c->reading = false;
        }
        return;
    }
    request_parser::fed r = c->parser->feed(data, len);
    if (r.result == request_parser::outcome::need_more) return;
    if (r.result == request_parser::outcome::complete) {
        c->unparsed.assign(data + r.consumed, len - r.consumed);
        uv_timer_stop(&c->timer);
        dispatch(c);
        return;
    }
    stats.bad_requests++;
    respond_error(c, c->parser->refusal_status(), c->parser->refusal_message(),
                  "invalid_request_error", true);
}

void server::impl::write_raw(connection* c, std::string data) {
    if (c->closing || data.empty()) return;
    auto* w = new write_request{{}, std::move(data), c};
    uv_buf_t buf = uv_buf_init(w->data.data(), static_cast<unsigned>(w->data.size()));
    c->writes_in_flight++;
    int rc = uv_write(&w->req, reinterpret_cast<uv_stream_t*>(&c->tcp), &buf, 1,
                      [](uv_write_t* req, int) {
                          auto* w = reinterpret_cast<write_request*>(req);
                          connection* c = w->conn;
                          delete w;
                          c->writes_in_flight--;
                          if (c->close_after_flush && c->writes_in_flight == 0 && !c->closing) {
                              c->srv->linger_close(c);
                          }
                      });
    if (rc != 0) {
        c->writes_in_flight--;
        delete w;
        close_connection(c);
    }
}

void server::impl::respond_error(connection* c, int status, std::string_view message,
                                 std::string_view type, bool close) {
    std::string body = error_body(message, type);
    write_raw(c, serialize_head(status, {}, "application/json", &body, !close, "") + body);
    if (close) close_after_writes(c);
}

void server::impl::close_after_writes(connection* c) {
    c->close_after_flush = true;
    if (c->writes_in_flight == 0) linger_close(c);
}

// Closing a socket whose receive buffer still holds client bytes makes the kernel send RST,
// which can destroy our last response before the client reads it. So: send FIN, discard what
// the client still sends until it closes, and give up after a short linger.
void server::impl::linger_close(connection* c) {
    if (c->closing || c->lingering) return;
    c->lingering = true;
    auto* req = new uv_shutdown_t;
    if (uv_shutdown(req, reinterpret_cast<uv_stream_t*>(&c->tcp),
                    [](uv_shutdown_t* r, int) { delete r; }) != 0) {
        delete req;
        close_connection(c);
        return;
    }
    start_reading(c);
    uv_timer_start(&c->timer, [](uv_timer_t* t) {
        auto* c = static_cast<connection*>(t->data);
        c->srv->close_connection(c);
    }, k_linger_ms, 0);
}

void server::impl::arm_timer(connection* c) {
    if (c->closing || c->lingering) return;
    if (c->active) {
        uv_timer_stop(&c->timer);  // handlers own their deadlines
        return;
    }
    bool partial = c->parser->message_started();
    uint64_t ms = static_cast<uint64_t>(partial ? limits.request_timeout_ms : limits.idle_timeout_ms);
    uv_timer_start(&c->timer, [](uv_timer_t* t) {
        auto* c = static_cast<connection*>(t->data);
        if (c->active || c->closing) return;
        if (c->parser->message_started()) {
            c->srv->stats.bad_requests++;
            c->srv->respond_error(c, 408, "the request did not arrive in time",
                                  "invalid_request_error", true);
        } else {
            c->srv->close_connection(c);  // idle keep-alive connection
        }
    }, ms, 0);
}

void server::impl::close_connection(connection* c) {
    if (c->closing) return;
    c->closing = true;
    if (c->active) {
        // The client left (or we gave up) before the response completed: tell the handler.
        std::shared_ptr<exchange> ex = std::move(c->active);
        ex->cancelled = true;
        stats.requests_in_flight--;
        if (ex->on_cancel) std::exchange(ex->on_cancel, nullptr)();
    }
    auto on_closed = [](uv_handle_t* h) {
        auto* c = static_cast<connection*>(h->data);
        if (--c->open_handles > 0) return;
        server::impl* srv = c->srv;
        srv->connections.erase(c->id);
        srv->stats.connections_open--;
        delete c;
        srv->finish_if_drained();
    };
    uv_close(reinterpret_cast<uv_handle_t*>(&c->timer), on_closed);
    uv_close(reinterpret_cast<uv_handle_t*>(&c->tcp), on_closed);
}

// ---- responses (loop thread) -----------------------------------------------------------------

connection* server::impl::owner_of(const std::shared_ptr<exchange>& ex) {
    auto it = connections.find(ex->connection_id);
    if (it == connections.end()) return nullptr;
    connection* c = it->second;
    return (c->active == ex && !c->closing) ? c : nullptr;
}

void server::impl::deliver(const std::shared_ptr<exchange>& ex, response r) {
    connection* c = owner_of(ex);
    if (!c || c->response_started) return;
    c->response_started = true;
    c->response_status = r.status;
    bool keep = c->parser->req().keep_alive && !stopping.load();
    if (!keep) c->parser->req().keep_alive = false;
    write_raw(c, serialize_head(r.status, r.headers, r.content_type, &r.body, keep,
                                ex->request_id) + r.body);
    on_exchange_done(c);
}

void server::impl::deliver_stream_start(const std::shared_ptr<exchange>& ex, int status,
                                        header_list headers, std::string content_type) {
    connection* c = owner_of(ex);
    if (!c || c->response_started) return;
    c->response_started = true;
    c->stream_open = true;
    c->response_status = status;
    write_raw(c, serialize_head(status, headers, content_type, nullptr,
                                c->parser->req().keep_alive && !stopping.load(), ex->request_id));
}

void server::impl::deliver_chunk(const std::shared_ptr<exchange>& ex, std::string chunk) {
    connection* c = owner_of(ex);
    if (!c || !c->stream_open || chunk.empty()) return;
    write_raw(c, fmt::format("{:x}\r\n", chunk.size()) + chunk + "\r\n");
}

void server::impl::deliver_stream_end(const std::shared_ptr<exchange>& ex) {
    connection* c = owner_of(ex);
    if (!c || !c->stream_open) return;
    c->stream_open = false;
    write_raw(c, "0\r\n\r\n");
    if (stopping.load()) c->parser->req().keep_alive = false;
    on_exchange_done(c);
}

}  // namespace tandem::http
