// topo/pd_decode.h — The decode side of pd: the scheduler's remote_prefill over a pd transport.
//
// Owns: choosing a prefill peer for each job (the ready peer with the fewest transfers in
// flight), the PREFILL_JOB, one transfer_tracker per request (every write verified by checksum
// and (page, epoch) before it lands; PREFILL_DONE's count and whole checksum checked), transfer
// deadlines, and the quarantine of aborted transfers' pages until ABORT_ACK or the lease
// (invariants 2–4). The scheduler still owns the request and its sequence otherwise.
// Spans that do not travel in frames — PAGE_SPAN (pd on one device: copied from the prefill's
// pool) and PAGE_BUFFER (nccl: received on the buffer channel, one receive or discard per frame)
// — are verified where they landed; once no further such span of a job will be taken (done,
// failed, aborted) SPANS_RELEASED tells the prefill side to drop its holds on the source pages.
//
// Threading: transport handlers (any transport thread) only queue the message and wake the
// scheduler; everything that touches the pool runs in poll()/start()/release() on the scheduler
// thread. unavailable() and metrics() are safe from any thread.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/histogram.h"
#include "engine/pool_capacity.h"
#include "engine/remote_prefill.h"
#include "topo/pd_endpoint.h"
#include "topo/pd_landed_fault.h"
#include "topo/pd_transfer.h"

namespace tandem::topo {

struct decode_link_options {
    int64_t transfer_timeout_ms = 120000;  // transport.transfer_timeout_ms: no progress this long
    int64_t abort_lease_ms = 10000;       // transport.abort_lease_ms
    // verify.fault_corrupt_kind (tests and drills only): corrupt landed writes of this kind.
    std::optional<landed_corruption> corrupt_landed = std::nullopt;
    // pd on one device (inproc, both pools in one device space): the prefill engine's pool, which
    // PAGE_SPANs name and this side copies from device to device. Null: PAGE_SPAN is not accepted
    // (counted and dropped by the endpoint), as over tcp.
    std::shared_ptr<engine::pool_sequences> span_source = nullptr;
};

// Counters for /metrics (a scrape may mix two polls).
struct pd_decode_metrics {
    int64_t transfers_ok = 0, transfers_failed = 0, transfers_aborted = 0;
    int64_t bytes_received = 0;  // carried in PAGE_WRITE / STATE_WRITE, or copied for PAGE_SPAN
    int64_t spans_copied = 0;    // PAGE_SPANs landed device to device, verified
    int64_t bytes_copied = 0;    // their bytes (also in bytes_received)
    int64_t checksum_failures = 0;
    int64_t stale_writes_rejected = 0;
    int64_t unexpected_writes = 0;  // a write the plan does not contain, or from the wrong peer
    int64_t late_writes = 0;        // for a request no longer transferring (dropped)
    int64_t aborts_client = 0, aborts_deadline = 0, aborts_shutdown = 0, aborts_error = 0,
            aborts_preempted = 0, aborts_peer_lost = 0;
    int64_t abort_acks = 0, unknown_acks = 0, leases_expired = 0;
    int64_t unknown_aborts = 0;  // ABORTs from a prefill peer for requests not transferring
    int64_t peers_ready = 0;
    int64_t in_flight = 0;
    int64_t quarantined = 0;  // aborted requests whose pages wait for ABORT_ACK or the lease
    histogram_snapshot transfer_seconds;
};

class decode_link final : public engine::remote_prefill {
  public:
    decode_link(std::shared_ptr<engine::pool_sequences> seqs, decode_link_options opt);
    ~decode_link() override;

    // The transport once it exists, then the handlers to give pd_endpoint::events. The
    // transport must be stopped before this object is destroyed. `buffers` (transport.kind =
    // "nccl"): the channel PAGE_BUFFER bytes arrive on; null: PAGE_BUFFER is not accepted.
    pd_handlers handlers();
    void attach(transport::transport* t, const pd_endpoint* endpoint, transport::buffer_channel* buffers = nullptr);

    void set_wake(std::function<void()> wake) override;
    std::optional<std::string> unavailable() const override;
    status start(const engine::remote_prefill_job& job) override;
    void release(engine::request_id id, engine::sequence_id sequence,
                 engine::release_cause cause) override;
    void poll(std::vector<engine::remote_prefill_result>& out) override;
    bool busy() const override;

    pd_decode_metrics metrics() const;

  private:
    struct inbound {
        enum class what { message, peer_lost } kind = what::message;
        transport::peer_id peer = 0;
        pd_message msg;
        status why;
    };
    // Keyed by job id: the id on the wire, fresh for every attempt, so a request re-sent after a
    // preemption can never be confused with its aborted first attempt (whose writes, failure or
    // ACK may still be on the way).
    struct transfer {
        engine::request_id request = 0;
        transport::peer_id peer = 0;
        engine::sequence_id sequence = -1;
        std::unique_ptr<transfer_tracker> tracker;
        double started_s = 0.0;
        int64_t progress_ms = 0;   // when the job was sent or its last write arrived
        bool reported = false;     // a failure went to the scheduler; waiting for release()
        bool writer_gone = false;  // no write can follow (done, failed, or the peer is lost)
        bool spans_released = false;  // SPANS_RELEASED sent (span_source only)
    };

    void post(inbound&& in);
    void wake();
    void handle(inbound& in, std::vector<engine::remote_prefill_result>& out);
    void on_write_result(uint64_t id, transfer& t, const receive_stats& before, const status& st,
                         std::vector<engine::remote_prefill_result>& out);
    void count_rejections(const receive_stats& before, const receive_stats& after);
    void on_done(transport::peer_id peer, prefill_done_msg& done,
                 std::vector<engine::remote_prefill_result>& out);
    void fail(uint64_t id, transfer& t, status why, bool writer_gone,
              std::vector<engine::remote_prefill_result>& out,
              engine::release_cause cause = engine::release_cause::error);
    void on_peer_lost(transport::peer_id peer, const status& why,
                      std::vector<engine::remote_prefill_result>& out);
    void expire(std::vector<engine::remote_prefill_result>& out);
    void note_finished(transport::peer_id peer, uint64_t job);
    // From here on no PAGE_SPAN of this job is copied: tell the prefill side to drop its holds.
    void release_spans(uint64_t id, transfer& t);
    template <typename W> void apply_write(transport::peer_id peer, const W& w, int64_t bytes,
                                           std::vector<engine::remote_prefill_result>& out);
    void apply_buffer(transport::peer_id peer, const page_buffer_msg& w,
                      std::vector<engine::remote_prefill_result>& out);
    transfer* find(uint64_t id, transport::peer_id peer);
    std::optional<transport::peer_id> pick_peer() const;
    void publish();

    std::shared_ptr<engine::pool_sequences> seqs_;
    decode_link_options opt_;
    transport::transport* transport_ = nullptr;
    const pd_endpoint* endpoint_ = nullptr;
    transport::buffer_channel* buffers_ = nullptr;

    // Shared with transport threads.
    mutable std::mutex mu_;
    std::vector<inbound> inbox_;
    std::function<void()> wake_;
    std::map<transport::peer_id, std::string> ready_;  // peer → name
    std::string last_loss_;                          // why the last peer went away

    // Scheduler thread only.
    std::unordered_map<uint64_t, transfer> transfers_;               // job id → transfer
    std::unordered_map<engine::request_id, uint64_t> job_of_;        // request → its job id
    uint64_t next_job_ = 1;
    std::unordered_map<uint64_t, transport::peer_id> quarantine_peer_;  // aborted job → peer
    // Per peer: the newest job that peer finished (done or failed) and when. A job sent after it
    // was waiting behind it, so that finish counts as progress of the queue it waits in.
    struct finished_job {
        uint64_t job = 0;
        int64_t at_ms = 0;
    };
    std::unordered_map<transport::peer_id, finished_job> last_finished_;
    abort_book aborts_;
    std::vector<inbound> draining_;

    struct counters {
        std::atomic<int64_t> ok{0}, failed{0}, aborted{0}, bytes{0}, checksum{0}, stale{0},
            unexpected{0}, late{0}, acks{0}, unknown_acks{0}, unknown_aborts{0}, leases{0}, in_flight{0},
            quarantined{0}, spans{0}, span_bytes{0};
        std::atomic<int64_t> by_cause[engine::k_release_causes] = {};
    };
    counters c_;
    histogram transfer_seconds_{histogram::latency_seconds_bounds()};
};

}  // namespace tandem::topo
