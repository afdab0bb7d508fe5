// llhttp's callbacks build one request; limits are enforced as bytes arrive, so a client can
// never make us buffer more than max_header_bytes + max_body_bytes for one request.
#include "http/request_parser.h"

#include <fmt/format.h>
#include <llhttp.h>

#include <algorithm>
#include <atomic>
#include <random>

namespace tandem::http {

struct request_parser::state {
    llhttp_t parser{};
    parse_limits limits;
    hooks on;
    request cur;
    std::string field, value;
    bool in_value = false;
    bool message_started = false;
    int64_t header_bytes = 0;
    int refusal_status = 0;  // set by a callback that refuses the request (413)
    std::string refusal_message;
};

namespace {

using parser_state = request_parser::state;

parser_state* state_of(llhttp_t* p) { return static_cast<parser_state*>(p->data); }

// Request ids are unique per process run: a random prefix chosen at start plus a counter.
std::string next_request_id() {
    static const uint32_t nonce = std::random_device{}();
    static std::atomic<uint64_t> counter{0};
    return fmt::format("{:08x}-{:06x}", nonce, ++counter);
}

bool sane_request_id(std::string_view id) {
    if (id.empty() || id.size() > 128) return false;
    return std::all_of(id.begin(), id.end(), [](char ch) {
        return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
               ch == '-' || ch == '_' || ch == '.' || ch == ':';
    });
}

int refuse(parser_state* s, int status, std::string message) {
    s->refusal_status = status;
    s->refusal_message = std::move(message);
    return -1;  // makes llhttp stop with a callback error
}

int count_header_bytes(parser_state* s, size_t len) {
    s->header_bytes += static_cast<int64_t>(len);
    if (s->header_bytes > s->limits.max_header_bytes) {
        return refuse(s, 413, fmt::format("request line and headers exceed {} bytes",
                                          s->limits.max_header_bytes));
    }
    return 0;
}

void commit_header(parser_state* s) {
    // Reset first: a header line with an empty name and value (":") is dropped, but the next
    // field must still start fresh, or its name split across two reads became two headers.
    s->in_value = false;
    if (s->field.empty() && s->value.empty()) return;
    std::transform(s->field.begin(), s->field.end(), s->field.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    s->cur.headers.emplace_back(std::move(s->field), std::move(s->value));
    s->field.clear();
    s->value.clear();
}

int on_headers_complete(llhttp_t* p) {
    parser_state* s = state_of(p);
    commit_header(s);
    request& r = s->cur;
    r.method = llhttp_method_name(static_cast<llhttp_method_t>(llhttp_get_method(p)));
    size_t q = r.target.find('?');
    r.path = r.target.substr(0, q);
    if (q != std::string::npos) r.query = r.target.substr(q + 1);
    std::string_view id = r.header("x-request-id");
    r.request_id = sane_request_id(id) ? std::string(id) : next_request_id();
    if ((p->flags & F_CONTENT_LENGTH) &&
        p->content_length > static_cast<uint64_t>(s->limits.max_body_bytes)) {
        return refuse(s, 413, fmt::format("request body of {} bytes exceeds {} bytes",
                                          p->content_length, s->limits.max_body_bytes));
    }
    if (r.header("expect") == "100-continue" && s->on.on_expect_continue) s->on.on_expect_continue();
    return 0;
}

const llhttp_settings_t& parser_settings() {
    static const llhttp_settings_t settings = [] {
        llhttp_settings_t st;
        llhttp_settings_init(&st);
        st.on_message_begin = [](llhttp_t* p) {
            parser_state* s = state_of(p);
            s->cur = request{};
            s->message_started = true;
            s->header_bytes = 0;
            if (s->on.on_message_begin) s->on.on_message_begin();
            return 0;
        };
        st.on_url = [](llhttp_t* p, const char* at, size_t len) {
            parser_state* s = state_of(p);
            s->cur.target.append(at, len);
            return count_header_bytes(s, len);
        };
        st.on_header_field = [](llhttp_t* p, const char* at, size_t len) {
            parser_state* s = state_of(p);
            if (s->in_value) commit_header(s);
            s->field.append(at, len);
            return count_header_bytes(s, len);
        };
        st.on_header_value = [](llhttp_t* p, const char* at, size_t len) {
            parser_state* s = state_of(p);
            s->in_value = true;
            s->value.append(at, len);
            return count_header_bytes(s, len);
        };
        st.on_headers_complete = on_headers_complete;
        st.on_body = [](llhttp_t* p, const char* at, size_t len) {
            parser_state* s = state_of(p);
            if (static_cast<int64_t>(s->cur.body.size() + len) > s->limits.max_body_bytes) {
                return refuse(s, 413, fmt::format("request body exceeds {} bytes",
                                                  s->limits.max_body_bytes));
            }
            s->cur.body.append(at, len);
            return 0;
        };
        st.on_message_complete = [](llhttp_t* p) {
            parser_state* s = state_of(p);
            s->cur.keep_alive = llhttp_should_keep_alive(p) != 0;
            s->message_started = false;
            return static_cast<int>(HPE_PAUSED);  // one request at a time: hand it over
        };
        return st;
    }();
    return settings;
}

}  // namespace

request_parser::request_parser(parse_limits limits, hooks h) : s_(std::make_unique<state>()) {
    s_->limits = limits;
    s_->on = std::move(h);
    llhttp_init(&s_->parser, HTTP_REQUEST, &parser_settings());
    s_->parser.data = s_.get();
}

request_parser::~request_parser() = default;

request_parser::fed request_parser::feed(const char* data, size_t len) {
    if (s_->refusal_status != 0) return {outcome::refused, 0};
    llhttp_errno_t err = llhttp_execute(&s_->parser, data, len);
    if (err == HPE_OK) return {outcome::need_more, len};
    if (err == HPE_PAUSED) {
        const char* stop = llhttp_get_error_pos(&s_->parser);
        return {outcome::complete, stop ? static_cast<size_t>(stop - data) : len};
    }
    if (s_->refusal_status == 0) {
        s_->refusal_status = 400;
        s_->refusal_message =
            fmt::format("malformed HTTP request: {}", llhttp_get_error_reason(&s_->parser));
    }
    return {outcome::refused, 0};
}

void request_parser::resume() {
    llhttp_resume(&s_->parser);
    s_->cur = request{};
}

request& request_parser::req() { return s_->cur; }
const request& request_parser::req() const { return s_->cur; }
bool request_parser::message_started() const { return s_->message_started; }
int request_parser::refusal_status() const { return s_->refusal_status; }
const std::string& request_parser::refusal_message() const { return s_->refusal_message; }

}  // namespace tandem::http
