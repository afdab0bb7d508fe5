// topo/pd_holds.h — The prefill side's holds on source pages that PAGE_SPANs name (pd with both
// engines' pools on one device).
//
// A PAGE_SPAN names bytes in the prefill pool instead of carrying them, so those bytes must stay
// as they are until the decode engine has copied them (design invariant 2 from the other side: a
// page that a peer may still read is not reused). Each named page gets one more reference
// (page_pool::retain_page) per request, taken when the page is first named and dropped when
//   - the decode side sends SPANS_RELEASED for the request (it will copy nothing more of it:
//     the transfer completed, failed or was aborted), or
//   - the link to that decode side is lost (nothing it asked for will be copied any more), or
//   - the hold's lease runs out (lease_ms after the request's newest hold) — a backstop for a
//     wedged decode side only; a copy made after that could read reused bytes, and its landed
//     checksum then refuses them (data_loss: the request fails, never decodes).
// While anything is held the prefill scheduler polls (scheduler_service::busy) instead of sleeping,
// so a lease is noticed even when no request arrives.
//
// Threading: hold() and poll() run on the prefill scheduler thread (the pool's owner); release()
// and release_peer() come from the transport thread and only queue the release and wake that
// thread. busy() and stats() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "cache/page_pool.h"
#include "engine/pool_capacity.h"
#include "engine/scheduler.h"
#include "transport/transport.h"

namespace tandem::topo {

struct span_hold_stats {
    int64_t requests_held = 0;  // requests with at least one held page (gauge)
    int64_t pages_held = 0;     // references held (gauge; a page named by two requests counts twice)
    int64_t released = 0;       // requests whose holds ended by SPANS_RELEASED or a lost link
    int64_t expired = 0;        // requests whose holds ended by the lease (a wedged decode side)
};

class span_holds final : public engine::scheduler_service {
  public:
    // `clock_ms`: monotonic milliseconds (tests pass their own).
    span_holds(std::shared_ptr<engine::pool_sequences> seqs, int64_t lease_ms,
               std::function<int64_t()> clock_ms = nullptr);
    ~span_holds() override;

    // Scheduler thread: one more reference on `page` for (peer, request) until released.
    void hold(transport::peer_id peer, uint64_t request, cache::page_ref page);
    // Any thread: queue the release and wake the scheduler.
    void release(transport::peer_id peer, uint64_t request);
    void release_peer(transport::peer_id peer);

    void set_wake(std::function<void()> wake) override;
    void poll() override;
    bool busy() const override { return requests_held_.load() > 0 || pending_n_.load() > 0; }
    span_hold_stats stats() const;

  private:
    using key = std::pair<transport::peer_id, uint64_t>;
    struct held {
        std::vector<cache::page_ref> pages;
        int64_t lease_deadline_ms = 0;
    };
    struct pending {
        transport::peer_id peer = 0;
        uint64_t request = 0;
        bool whole_peer = false;
    };
    void drop(std::map<key, held>::iterator it);
    void publish();
    int64_t now_ms() const;

    std::shared_ptr<engine::pool_sequences> seqs_;
    int64_t lease_ms_;
    std::function<int64_t()> clock_ms_;

    std::map<key, held> holds_;  // scheduler thread

    mutable std::mutex mu_;
    std::vector<pending> pending_;
    std::function<void()> wake_;

    std::atomic<int64_t> requests_held_{0}, pages_held_{0}, released_{0}, expired_{0}, pending_n_{0};
};

}  // namespace tandem::topo
