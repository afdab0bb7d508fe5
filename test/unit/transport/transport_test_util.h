// Shared helpers for the transport and pd tests: an event recorder with timed waits, hellos for
// a layout, and pools filled with random bytes.
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <random>
#include <vector>

#include "cache/page_pool.h"
#include "cache/test_helpers.h"
#include "topo/pd_protocol.h"
#include "transport/transport.h"

namespace tandem::transport::testing {

// Records every event a transport delivers (on its thread) for the test thread to wait on.
struct event_log {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::pair<peer_id, frame>> frames;
    std::vector<peer_id> ready;
    std::vector<std::pair<peer_id, status>> lost;

    transport_events events() {
        transport_events e;
        e.on_peer_ready = [this](peer_id p, const std::string&) { add([&] { ready.push_back(p); }); };
        e.on_frame = [this](peer_id p, frame&& f) { add([&] { frames.emplace_back(p, std::move(f)); }); };
        e.on_peer_lost = [this](peer_id p, const status& s) { add([&] { lost.emplace_back(p, s); }); };
        return e;
    }
    void add(const std::function<void()>& fn) {
        { std::lock_guard lock(mu); fn(); }
        cv.notify_all();
    }
    // Waits until `pred` (called under the lock) holds; false after `ms`.
    bool wait(const std::function<bool()>& pred, int ms = 5000) {
        std::unique_lock lock(mu);
        return cv.wait_for(lock, std::chrono::milliseconds(ms), pred);
    }
    size_t frame_count() { std::lock_guard lock(mu); return frames.size(); }
    size_t lost_count() { std::lock_guard lock(mu); return lost.size(); }
    size_t ready_count() { std::lock_guard lock(mu); return ready.size(); }
};

inline handshake_options pd_handshake(topo::pd_role role, const cache::layout_spec& layout,
                                      int64_t timeout_ms = 3000) {
    handshake_options h;
    topo::hello_msg mine = topo::make_hello(role, layout);
    h.hello = topo::encode_message(mine).payload;
    h.check = [mine](std::span<const std::byte> peer) { return topo::check_peer_hello(mine, peer); };
    h.timeout_ms = timeout_ms;
    return h;
}

inline cache::layout_spec tiny_layout(cache::index_k_dtype idx = cache::index_k_dtype::fp8) {
    auto model = cache::testing::load_model("tiny-ci-native.json");
    return cache::testing::make_layout(model, cache::kv_dtype::fp8, idx);
}

using cache::testing::make_pool;

// Fills every page of the sequence (every buffer) and its whole slot with random bytes.
inline void fill_random(cache::page_pool& pool, cache::slot_ref s, std::mt19937_64& rng) {
    const cache::layout_spec& l = pool.layout();
    for (const cache::page_ref& p : pool.page_table(s)) {
        for (int32_t bi = 0; bi < static_cast<int32_t>(l.buffers().size()); ++bi) {
            std::byte* dst = pool.page_bytes_for_write(p, bi);
            REQUIRE(dst != nullptr);
            for (int64_t i = 0; i < l.buffers()[bi].bytes_per_page; ++i) dst[i] = std::byte(rng());
        }
    }
    std::byte* slot = pool.slot_bytes_for_write(s);
    REQUIRE(slot != nullptr);
    for (int64_t i = 0; i < l.state_bytes_per_sequence(); ++i) slot[i] = std::byte(rng());
}

}  // namespace tandem::transport::testing
