#include "api/generation_options.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace tandem::api {
namespace {

using simdjson::dom::element;
using simdjson::dom::object;

// Every message here starts with the quoted field ("'top_p' must be ..."), which is also the
// error's OpenAI `param`.
status bad(std::string message) {
    std::string param;
    if (message.size() > 1 && message[0] == '\'') param = message.substr(1, message.find('\'', 1) - 1);
    return make_error(error_code::invalid_argument, std::move(message)).with_param(std::move(param));
}
status bad_field(std::string field, std::string message) {
    return make_error(error_code::invalid_argument, std::move(message)).with_param(std::move(field));
}

// DeepSeek's API words range errors so; tandem uses its wording where the ranges agree.
status out_of_range(const char* field, const std::string& range) {
    return bad_field(field, fmt::format("Invalid {0} value, the valid range of {0} is {1}", field, range));
}

// Reads an optional number field into `out`, checking [lo, hi]. Integers are accepted.
status read_number(const object& body, const char* field, double lo, double hi, double* out,
                   bool* present = nullptr, const char* range_text = nullptr) {
    element e;
    if (body[field].get(e)) return status::ok();
    if (e.is_null()) return status::ok();
    double v;
    if (e.is_double()) {
        v = e.get_double().value();
    } else if (e.is_int64()) {
        v = static_cast<double>(e.get_int64().value());
    } else if (e.is_uint64()) {
        v = static_cast<double>(e.get_uint64().value());
    } else {
        return bad(fmt::format("'{}' must be a number", field));
    }
    if (!std::isfinite(v) || v < lo || v > hi) {
        return out_of_range(field, range_text ? std::string(range_text) : fmt::format("[{}, {}]", lo, hi));
    }
    *out = v;
    if (present) *present = true;
    return status::ok();
}

status read_integer(const object& body, const char* field, int64_t lo, int64_t hi, int64_t* out,
                    bool* present = nullptr) {
    element e;
    if (body[field].get(e)) return status::ok();
    if (e.is_null()) return status::ok();
    int64_t v;
    if (e.is_int64()) {
        v = e.get_int64().value();
    } else if (e.is_double() && std::floor(e.get_double().value()) == e.get_double().value() &&
               std::fabs(e.get_double().value()) < 9e15) {
        v = static_cast<int64_t>(e.get_double().value());  // 16.0 from loosely typed clients
    } else {
        return bad(fmt::format("'{}' must be an integer", field));
    }
    if (v < lo || v > hi) return out_of_range(field, fmt::format("[{}, {}]", lo, hi));
    *out = v;
    if (present) *present = true;
    return status::ok();
}

status read_bool(const object& body, const char* field, bool* out) {
    element e;
    if (body[field].get(e) || e.is_null()) return status::ok();
    if (!e.is_bool()) return bad(fmt::format("'{}' must be a boolean", field));
    *out = e.get_bool().value();
    return status::ok();
}

status read_stop(const object& body, std::vector<std::string>* out) {
    element e;
    if (body["stop"].get(e) || e.is_null()) return status::ok();
    auto add = [&](element s, std::string_view where) -> status {
        if (!s.is_string()) return bad(fmt::format("'{}' must be a string", where));
        std::string_view v = s.get_string().value();
        if (v.empty()) {
            return bad_field(std::string(where), fmt::format("Invalid '{}': empty string. Expected a string with minimum "
                                                             "length 1, but got an empty string instead.", where));
        }
        out->emplace_back(v);
        return status::ok();
    };
    if (e.is_string()) return add(e, "stop");
    if (!e.is_array()) return bad("'stop' must be a string or an array of strings");
    simdjson::dom::array items = e.get_array().value();
    size_t i = 0;
    for (element s : items) {
        TANDEM_RETURN_IF_ERROR(add(s, fmt::format("stop[{}]", i++)));
    }
    if (out->size() > 16) return bad_field("stop", fmt::format("Stop string array too long: {}", out->size()));
    return status::ok();
}

status read_stop_token_ids(const object& body, std::vector<int32_t>* out) {
    element e;
    if (body["stop_token_ids"].get(e) || e.is_null()) return status::ok();
    if (!e.is_array()) return bad("'stop_token_ids' must be an array of integers");
    simdjson::dom::array ids = e.get_array().value();
    size_t i = 0;
    for (element t : ids) {
        if (!t.is_int64() || t.get_int64().value() < 0 ||
            t.get_int64().value() > std::numeric_limits<int32_t>::max()) {
            return bad(fmt::format("'stop_token_ids[{}]' must be a non-negative integer", i));
        }
        out->push_back(static_cast<int32_t>(t.get_int64().value()));
        ++i;
    }
    return status::ok();
}

// Chat: logprobs is a boolean and top_logprobs a count. Completions and /generate: logprobs is
// the count.
status read_logprobs(const object& body, api_kind kind, engine::sampling_params* p) {
    if (kind == api_kind::completion || kind == api_kind::native) {
        int64_t k = -1;
        TANDEM_RETURN_IF_ERROR(read_integer(body, "logprobs", 0, 20, &k));
        p->logprobs = static_cast<int32_t>(k);
        return status::ok();
    }
    bool want = false;
    TANDEM_RETURN_IF_ERROR(read_bool(body, "logprobs", &want));
    int64_t top = 0;
    bool top_given = false;
    TANDEM_RETURN_IF_ERROR(read_integer(body, "top_logprobs", 0, 20, &top, &top_given));
    if (top_given && !want && kind == api_kind::chat) {
        return bad_field("top_logprobs", "Invalid top_logprobs and logprobs value, logprobs must be set to true if "
                                         "top_logprobs is used.");
    }
    p->logprobs = want ? static_cast<int32_t>(top) : -1;
    return status::ok();
}

}  // namespace

result<generation_options> parse_generation_options(const object& body, api_kind kind,
                                                    int64_t default_max_tokens) {
    generation_options o;
    engine::sampling_params& p = o.sampling;
    element e;
    if (!body["model"].get(e) && !e.is_null()) {
        if (!e.is_string()) return bad("'model' must be a string");
        o.model = std::string(e.get_string().value());
    }
    TANDEM_RETURN_IF_ERROR(read_number(body, "temperature", 0.0, 2.0, &p.temperature));
    TANDEM_RETURN_IF_ERROR(read_number(body, "top_p", 0.0, 1.0, &p.top_p, nullptr, "(0, 1.0]"));
    if (p.top_p <= 0.0) return out_of_range("top_p", "(0, 1.0]");
    TANDEM_RETURN_IF_ERROR(read_integer(body, "top_k", -1, 1 << 30, &p.top_k));
    if (p.top_k < 0) p.top_k = 0;  // -1 means off, as in vLLM
    TANDEM_RETURN_IF_ERROR(read_number(body, "min_p", 0.0, 1.0, &p.min_p));
    TANDEM_RETURN_IF_ERROR(read_number(body, "repetition_penalty", 0.01, 10.0, &p.repetition_penalty));
    TANDEM_RETURN_IF_ERROR(read_number(body, "presence_penalty", -2.0, 2.0, &p.presence_penalty));
    TANDEM_RETURN_IF_ERROR(read_number(body, "frequency_penalty", -2.0, 2.0, &p.frequency_penalty));
    int64_t seed = 0;
    bool seed_given = false;
    TANDEM_RETURN_IF_ERROR(read_integer(body, "seed", std::numeric_limits<int64_t>::min(),
                                        std::numeric_limits<int64_t>::max(), &seed, &seed_given));
    if (seed_given) p.seed = static_cast<uint64_t>(seed);

    int64_t max_tokens = default_max_tokens;
    bool given = false;
    // Legacy completions take max_tokens 0 with echo: score the prompt, generate nothing (the
    // loglikelihood request of evaluation harnesses).
    const int64_t least = kind == api_kind::completion ? 0 : 1;
    TANDEM_RETURN_IF_ERROR(read_integer(body, "max_tokens", least, std::numeric_limits<int32_t>::max(),
                                        &max_tokens, &given));
    bool given_new = false;
    TANDEM_RETURN_IF_ERROR(read_integer(body, "max_completion_tokens", 1,
                                        std::numeric_limits<int32_t>::max(), &max_tokens, &given_new));
    p.max_tokens = max_tokens;
    o.max_tokens_given = given || given_new;

    TANDEM_RETURN_IF_ERROR(read_integer(body, "n", 1, 128, &o.n));
    TANDEM_RETURN_IF_ERROR(read_bool(body, "stream", &o.stream));
    if (!body["stream_options"].get(e) && !e.is_null()) {
        if (!e.is_object()) return bad("'stream_options' must be an object");
        object options = e.get_object().value();
        TANDEM_RETURN_IF_ERROR(read_bool(options, "include_usage", &o.include_usage));
    }
    TANDEM_RETURN_IF_ERROR(read_stop(body, &o.stop));
    TANDEM_RETURN_IF_ERROR(read_stop_token_ids(body, &p.stop_token_ids));
    TANDEM_RETURN_IF_ERROR(read_bool(body, "ignore_eos", &p.ignore_eos));
    TANDEM_RETURN_IF_ERROR(read_bool(body, "skip_special_tokens", &o.skip_special_tokens));
    TANDEM_RETURN_IF_ERROR(read_logprobs(body, kind, &p));
    if (kind == api_kind::completion) {
        TANDEM_RETURN_IF_ERROR(read_bool(body, "echo", &o.echo));
        if (o.echo && p.logprobs >= 0) p.prompt_logprobs = true;
        if (p.max_tokens == 0 && !o.echo) return bad("'max_tokens' may be 0 only with 'echo': true");
        o.echo_only = p.max_tokens == 0;
    }
    if (o.stream && o.n > 1 && kind == api_kind::native) return bad("'n' > 1 cannot stream here");
    return o;
}

}  // namespace tandem::api
