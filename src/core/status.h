// core/status.h — Errors as values at boundaries.
//
// Anything that can fail for outside reasons (a file, a config key, a peer, a client) returns
// `status` or `result<T>` carrying a message a user can act on. Broken internal invariants are
// not statuses: they are TANDEM_CHECK failures (core/check.h). Nothing throws across a thread,
// a libuv callback or a CUDA call.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace tandem {

// The error codes map one-to-one onto the boundary that reports them (HTTP status, exit code).
enum class error_code {
    ok = 0,
    invalid_argument,   // bad input from a user: config key, request field (HTTP 400, exit 2)
    not_found,          // a file, tensor, model or route that does not exist (HTTP 404)
    out_of_range,       // a value outside its allowed range (HTTP 400, exit 2)
    too_large,          // a body, header or prompt over a limit (HTTP 413 / 400)
    unavailable,        // overloaded or shutting down; retry later (HTTP 503)
    deadline_exceeded,  // a wait ran past its deadline (HTTP 408 / 504)
    data_loss,          // corrupt or truncated data, checksum mismatch (HTTP 500)
    io_error,           // the operating system said no
    internal,           // a bug; the message says where
};

const char* error_code_name(error_code code);

class [[nodiscard]] status {
public:
    status() = default;
    status(error_code code, std::string message) : code_(code), message_(std::move(message)) {}

    static status ok() { return {}; }

    bool is_ok() const { return code_ == error_code::ok; }
    explicit operator bool() const { return is_ok(); }
    error_code code() const { return code_; }
    const std::string& message() const { return message_; }
    // The request field the error is about ("messages[2].content"), reported as OpenAI's
    // `param`; empty when no single field is to blame.
    const std::string& param() const { return param_; }

    // Prefixes context ("loading config.json: ") so messages read outside-in.
    status with_context(const std::string& context) const {
        if (is_ok()) return *this;
        status out{code_, context + ": " + message_};
        out.param_ = param_;
        return out;
    }
    status with_param(std::string param) const {
        status out = *this;
        out.param_ = std::move(param);
        return out;
    }

private:
    error_code code_ = error_code::ok;
    std::string message_;
    std::string param_;
};

inline status make_error(error_code code, std::string message) {
    return {code, std::move(message)};
}

template <typename T>
class [[nodiscard]] result {
public:
    result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
    result(status error) : error_(std::move(error)) {}  // NOLINT: implicit by design

    bool is_ok() const { return value_.has_value(); }
    explicit operator bool() const { return is_ok(); }
    const status& error() const { return error_; }

    T& value() & { return *value_; }
    const T& value() const& { return *value_; }
    T&& value() && { return std::move(*value_); }
    T* operator->() { return &*value_; }
    const T* operator->() const { return &*value_; }
    T& operator*() & { return *value_; }
    const T& operator*() const& { return *value_; }

private:
    std::optional<T> value_;
    status error_;
};

}  // namespace tandem

// Returns early from a function returning status/result<T> when `expr` is an error.
#define TANDEM_RETURN_IF_ERROR(expr)              \
    do {                                          \
        ::tandem::status tandem_st_ = (expr);     \
        if (!tandem_st_.is_ok()) return tandem_st_; \
    } while (0)
