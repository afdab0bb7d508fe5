// http/exchange.h — The state one request shares between the loop thread and its handler
// (internal to the http module).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <uv.h>

namespace tandem::http {

// A thread-safe queue of closures drained on the loop thread. It outlives the server so that a
// handler finishing late can still post into it harmlessly: after close() posts are dropped.
class mailbox {
public:
    void attach(uv_async_t* async) { async_ = async; }
    bool post(std::function<void()> fn);
    // Runs every queued closure; uv_async_send coalesces wake-ups, so this drains all of them.
    void drain();
    void close();

private:
    std::mutex mu_;
    std::vector<std::function<void()>> queue_;
    uv_async_t* async_ = nullptr;
    bool closed_ = false;
};

struct connection;

class exchange {
public:
    std::shared_ptr<mailbox> box;
    uint64_t connection_id = 0;
    uint64_t sequence = 0;  // which request on the connection this is
    std::string request_id;
    std::atomic<bool> cancelled{false};
    // Loop-thread only:
    std::function<void()> on_cancel;
    void* owner = nullptr;  // server::impl*
};

}  // namespace tandem::http
