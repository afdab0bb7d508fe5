// topo/pd_metrics_text.cpp — The pd families in exposition order; labels for results and causes.
#include "topo/pd_metrics_text.h"

#include "core/prometheus_text.h"
#include "engine/prefix_cache_metrics_text.h"

namespace tandem::topo {

namespace {

using enum metric_type;

// `w` is prefixed with the side's transport prefix (tandem_pd_decode_transport_ …).
void transport_metrics(prometheus_text w, const pd_counters& ep, const transport::peer_stats& t) {
    w.families({
        {counter, "bytes_sent_total", "Bytes this side's transport sent (frames included)",
         t.bytes_sent},
        {counter, "bytes_received_total", "Bytes this side's transport received",
         t.bytes_received},
        {counter, "frames_sent_total", "Frames sent", t.frames_sent},
        {counter, "frames_received_total", "Verified frames received", t.frames_received},
        {counter, "frame_checksum_failures_total",
         "Frames whose payload checksum failed (dropped)", t.checksum_failures},
        {counter, "malformed_links_total", "Links closed for an untrustworthy frame header",
         t.malformed},
        {counter, "connects_total", "Links that completed the handshake", t.connects},
        {counter, "disconnects_total", "Links lost, for any reason", t.disconnects},
        {counter, "malformed_messages_total", "Frames whose pd payload did not decode (dropped)",
         ep.malformed},
        {counter, "unexpected_messages_total",
         "Well-formed messages this role does not take (dropped)", ep.unexpected},
        {counter, "frames_dropped_total",
         "Frames not delivered: before the handshake, or an unknown control kind",
         t.frames_dropped},
    });
    w.counters_by("dropped_messages_total",
                  "Malformed and unexpected messages by frame kind (only kinds seen)", "kind",
                  prometheus_text::by_index(
                      k_pd_kind_slots, pd_kind_slot_label,
                      [&](size_t k) { return ep.dropped_by_kind[k]; }, /*only_nonzero=*/true));
}

}  // namespace

void render_decode_metrics(std::string& out, const pd_decode_metrics& m, const pd_counters& ep,
                           const transport::peer_stats& t) {
    prometheus_text w(out, "tandem_pd_");
    w.counters_by("transfers_total",
                  "Prefill transfers by outcome (aborted: the request ended while it was in "
                  "flight)",
                  "result", {{"ok", m.transfers_ok}, {"failed", m.transfers_failed},
                             {"aborted", m.transfers_aborted}});
    w.counter("transfer_bytes_total",
              "State bytes received in PAGE_WRITE / STATE_WRITE, or copied device to device for PAGE_SPAN",
              m.bytes_received);
    w.families({
        {counter, "spans_copied_total",
         "History spans that did not travel in frames, verified where they landed: PAGE_SPANs copied "
         "device to device (pd on one device) or PAGE_BUFFERs received on the buffer channel (nccl)",
         m.spans_copied},
        {counter, "span_bytes_copied_total", "Bytes of those spans", m.bytes_copied},
    });
    w.histogram("transfer_seconds", "Prefill job sent to state landed verified, per request",
                m.transfer_seconds);
    const double secs = m.transfer_seconds.sum;
    w.families({
        {gauge, "transfer_throughput_bytes_per_second",
         "State bytes received over the summed transfer time of completed transfers",
         secs > 0 ? static_cast<int64_t>(static_cast<double>(m.bytes_received) / secs) : 0},
        {counter, "checksum_failures_total", "Transfers failed by a state checksum mismatch",
         m.checksum_failures},
        {counter, "stale_writes_rejected_total",
         "Writes naming a stale (page, epoch), rejected unapplied", m.stale_writes_rejected},
        {counter, "unexpected_writes_total",
         "Writes the transfer plan does not contain, or from the wrong peer", m.unexpected_writes},
        {counter, "late_writes_total", "Writes for requests no longer transferring (dropped)",
         m.late_writes},
    });
    w.counters_by("aborts_total", "Transfers aborted by the decode side, by cause", "cause",
                  {{"client", m.aborts_client}, {"deadline", m.aborts_deadline},
                   {"shutdown", m.aborts_shutdown}, {"error", m.aborts_error},
                   {"preempted", m.aborts_preempted}, {"peer_lost", m.aborts_peer_lost}});
    w.families({
        {counter, "abort_acks_total", "ABORT_ACKs that freed quarantined pages", m.abort_acks},
        {counter, "unknown_abort_acks_total", "ABORT_ACKs for requests not in quarantine",
         m.unknown_acks},
        {counter, "unknown_aborts_total",
         "ABORTs from a prefill peer for requests not transferring (dropped)", m.unknown_aborts},
        {counter, "abort_leases_expired_total",
         "Quarantines ended by the lease (transport.abort_lease_ms), not by an ACK",
         m.leases_expired},
        {gauge, "prefill_peers_ready", "Prefill peers connected and ready", m.peers_ready},
        {gauge, "transfers_in_flight", "Requests whose state is in transit", m.in_flight},
        {gauge, "quarantined_requests",
         "Aborted transfers whose pages wait for ABORT_ACK or the lease", m.quarantined},
    });
    transport_metrics(w.with_prefix("decode_transport_"), ep, t);
}

void render_prefill_metrics(std::string& out, const pd_prefill_metrics& m, const pd_counters& ep,
                            const transport::peer_stats& t, const engine::engine_stats& eng) {
    prometheus_text w(out, "tandem_pd_");
    w.counters_by("jobs_total", "Prefill jobs by outcome", "result",
                  {{"ok", m.jobs_ok}, {"failed", m.jobs_failed}, {"aborted", m.jobs_aborted}});
    w.families({
        {counter, "jobs_received_total", "PREFILL_JOBs received", m.jobs_received},
        {gauge, "jobs_in_flight", "Prefill jobs not yet finished", m.jobs_in_flight},
        {gauge, "prefill_queue_depth", "Prefill jobs waiting for the prefill scheduler",
         eng.queued},
        {gauge, "prefill_running", "Prefill jobs being computed", eng.running},
        {counter, "bytes_sent_total", "State bytes sent to decode peers", m.bytes_sent},
        {counter, "aborts_received_total", "ABORTs received from decode peers",
         m.aborts_received},
        {counter, "spans_named_total",
         "History spans sent without their bytes in frames: PAGE_SPANs (named in this pool) or "
         "PAGE_BUFFERs (bytes on the buffer channel)",
         m.spans_named},
        {counter, "span_bytes_named_total", "Bytes of those spans", m.bytes_named},
        {counter, "spans_released_total", "SPANS_RELEASED received from decode peers", m.spans_released},
        {gauge, "held_source_pages",
         "Page references held for named spans the decode side has not released", m.holds.pages_held},
        {counter, "span_holds_expired_total",
         "Requests whose held pages were freed by the lease, not by SPANS_RELEASED", m.holds.expired},
        {gauge, "decode_peers_ready", "Decode peers connected", m.peers_ready},
    });
    if (eng.prefix.enabled) {  // the prefill engine's prefix cache
        engine::render_prefix_cache_metrics(w.with_prefix("prefill_cache_"), eng.prefix);
    }
    transport_metrics(w.with_prefix("prefill_transport_"), ep, t);
}

}  // namespace tandem::topo
