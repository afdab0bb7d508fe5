// topo/pd_prefill.h — The prefill side of pd: PREFILL_JOBs in, prefilled state out.
//
// Each job becomes a request on the prefill engine's own scheduler (so chunked prefill,
// batching, capacity, preemption and the queue limit all apply) that samples exactly one token
// with the sampling parameters and seed the decode side sent. When that token is sampled, the
// scheduler calls back while the sequence still holds the prompt's state; the state is sent as
// PAGE_WRITE / STATE_WRITE (one per page and buffer kind, checksummed, naming the decode side's
// (page, epoch)), then PREFILL_DONE with the token and its logprobs. Every write of a job is
// sent before its final event, so once the final event has run no write can follow: ABORT_ACK is
// sent from there (or at once for a job already finished), which is what lets the decode side
// reuse the pages (invariant 2). When the decode side can reach this pool's device (pd on one
// device) or a buffer channel joins them (nccl), history pages go as PAGE_SPAN / PAGE_BUFFER
// instead, and the named source pages are held (pd_holds.h) until SPANS_RELEASED or a lost link.
//
// Threading: job/abort handlers run on the transport thread and only submit/abort on the
// scheduler; the state is read and sent on the scheduler thread. metrics() from any thread.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "engine/pool_capacity.h"
#include "engine/scheduler.h"
#include "topo/pd_endpoint.h"
#include "topo/pd_holds.h"
#include "topo/pd_transfer.h"

namespace tandem::topo {

struct pd_prefill_metrics {
    int64_t jobs_received = 0;
    int64_t jobs_ok = 0, jobs_failed = 0, jobs_aborted = 0;
    int64_t jobs_in_flight = 0;
    int64_t bytes_sent = 0;  // state bytes (PAGE_WRITE / STATE_WRITE payloads)
    int64_t bytes_named = 0;  // history bytes named by PAGE_SPAN (copied device to device)
    int64_t spans_named = 0;
    int64_t spans_released = 0;  // SPANS_RELEASED received
    span_hold_stats holds;
    int64_t aborts_received = 0;
    int64_t peers_ready = 0;
};

class prefill_server {
  public:
    // `model_dir`: where the served model's tokenizer is, for jobs under an output grammar.
    // `holds`: non-null when the decode side shares this pool's device space (pd on one device,
    // inproc): history pages then go as PAGE_SPANs naming their bytes, held until released. It
    // must also be the scheduler's service (scheduler_options::service), which drives it.
    prefill_server(engine::scheduler& eng, std::shared_ptr<engine::pool_sequences> seqs,
                   std::string model_dir, std::shared_ptr<span_holds> holds = nullptr);

    pd_handlers handlers();
    // `buffers` (transport.kind = "nccl", with holds): history spans are posted there and
    // announced by PAGE_BUFFER instead of named by PAGE_SPAN.
    void attach(transport::transport* t, const pd_endpoint* endpoint, transport::buffer_channel* buffers = nullptr);
    pd_prefill_metrics metrics() const;

  private:
    struct job {
        transport::peer_id peer = 0;
        prefill_job_msg msg;          // the decode side's destination pages and slot
        engine::request_id local = 0;  // 0 until submit() returned
        bool abort_requested = false;  // under mu_
        bool spans_released = false;   // under mu_: the decode side copies nothing more of it
        bool shipped = false;          // scheduler thread: every write was sent
        std::unique_ptr<transfer_sender> sender;  // scheduler thread
        sent_transfer sent;
    };
    using job_key = std::pair<transport::peer_id, uint64_t>;

    void on_job(transport::peer_id peer, prefill_job_msg&& msg);
    // The job's engine parameters, its grammar compiled; an unusable grammar fails the job.
    result<engine::sampling_params> job_params(const prefill_sampling& s);
    void on_abort(transport::peer_id peer, const abort_msg& msg);
    void on_peer_lost(transport::peer_id peer);
    void on_spans_released(transport::peer_id peer, const spans_released_msg& msg);
    // Scheduler thread: complete pages after each chunk, everything else when done.
    status ship(job& j, engine::sequence_id seq, int64_t computed, bool done);
    void on_final(const std::shared_ptr<job>& j, engine::token_event&& ev);  // scheduler thread
    status send(transport::peer_id peer, const pd_message& m);

    engine::scheduler& eng_;
    std::shared_ptr<engine::pool_sequences> seqs_;
    std::string model_dir_;
    std::shared_ptr<span_holds> holds_;
    transport::transport* transport_ = nullptr;
    const pd_endpoint* endpoint_ = nullptr;
    transport::buffer_channel* buffers_ = nullptr;

    mutable std::mutex mu_;
    std::map<job_key, std::shared_ptr<job>> jobs_;
    std::map<transport::peer_id, std::string> peers_;

    std::atomic<int64_t> received_{0}, ok_{0}, failed_{0}, aborted_{0}, bytes_{0},
        aborts_received_{0}, bytes_named_{0}, spans_named_{0}, spans_released_{0};
};

}  // namespace tandem::topo
