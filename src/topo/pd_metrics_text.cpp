// topo/pd_metrics_text.cpp — One metric family per line group; labels for results and causes.
#include "topo/pd_metrics_text.h"

#include <fmt/format.h>

#include <initializer_list>
#include <utility>

namespace tandem::topo {

namespace {

void family(std::string& out, const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n", name, help, type);
}

void single(std::string& out, const char* name, const char* type, const char* help, int64_t v) {
    family(out, name, type, help);
    out += fmt::format("{} {}\n", name, v);
}

// One family with one label whose values are listed with their counts.
void labelled(std::string& out, const char* name, const char* help, const char* label,
              std::initializer_list<std::pair<const char*, int64_t>> values) {
    family(out, name, "counter", help);
    for (const auto& [value, count] : values) {
        out += fmt::format("{}{{{}=\"{}\"}} {}\n", name, label, value, count);
    }
}

void transport_metrics(std::string& out, const char* side, const pd_counters& ep,
                       const transport::peer_stats& t) {
    const std::string prefix = fmt::format("tandem_pd_{}_transport_", side);
    auto c = [&](const char* what, const char* help, int64_t v) {
        single(out, (prefix + what).c_str(), "counter", help, v);
    };
    c("bytes_sent_total", "Bytes this side's transport sent (frames included)", t.bytes_sent);
    c("bytes_received_total", "Bytes this side's transport received", t.bytes_received);
    c("frames_sent_total", "Frames sent", t.frames_sent);
    c("frames_received_total", "Verified frames received", t.frames_received);
    c("frame_checksum_failures_total", "Frames whose payload checksum failed (dropped)",
      t.checksum_failures);
    c("malformed_links_total", "Links closed for an untrustworthy frame header", t.malformed);
    c("connects_total", "Links that completed the handshake", t.connects);
    c("disconnects_total", "Links lost, for any reason", t.disconnects);
    c("malformed_messages_total", "Frames whose pd payload did not decode (dropped)", ep.malformed);
    c("unexpected_messages_total", "Well-formed messages this role does not take (dropped)",
      ep.unexpected);
}

}  // namespace

void render_decode_metrics(std::string& out, const pd_decode_metrics& m, const pd_counters& ep,
                           const transport::peer_stats& t) {
    labelled(out, "tandem_pd_transfers_total",
             "Prefill transfers by outcome (aborted: the request ended while it was in flight)",
             "result", {{"ok", m.transfers_ok}, {"failed", m.transfers_failed},
                        {"aborted", m.transfers_aborted}});
    single(out, "tandem_pd_transfer_bytes_total", "counter",
           "State bytes received in PAGE_WRITE / STATE_WRITE", m.bytes_received);
    out += m.transfer_seconds.render_prometheus(
        "tandem_pd_transfer_seconds", "Prefill job sent to state landed verified, per request");
    const double secs = m.transfer_seconds.sum;
    single(out, "tandem_pd_transfer_throughput_bytes_per_second", "gauge",
           "State bytes received over the summed transfer time of completed transfers",
           secs > 0 ? static_cast<int64_t>(static_cast<double>(m.bytes_received) / secs) : 0);
    single(out, "tandem_pd_checksum_failures_total", "counter",
           "Transfers failed by a state checksum mismatch", m.checksum_failures);
    single(out, "tandem_pd_stale_writes_rejected_total", "counter",
           "Writes naming a stale (page, epoch), rejected unapplied", m.stale_writes_rejected);
    single(out, "tandem_pd_unexpected_writes_total", "counter",
           "Writes the transfer plan does not contain, or from the wrong peer", m.unexpected_writes);
    single(out, "tandem_pd_late_writes_total", "counter",
           "Writes for requests no longer transferring (dropped)", m.late_writes);
    labelled(out, "tandem_pd_aborts_total", "Transfers aborted by the decode side, by cause",
             "cause", {{"client", m.aborts_client}, {"deadline", m.aborts_deadline},
                       {"shutdown", m.aborts_shutdown}, {"error", m.aborts_error},
                       {"preempted", m.aborts_preempted}, {"peer_lost", m.aborts_peer_lost}});
    single(out, "tandem_pd_abort_acks_total", "counter", "ABORT_ACKs that freed quarantined pages",
           m.abort_acks);
    single(out, "tandem_pd_unknown_abort_acks_total", "counter",
           "ABORT_ACKs for requests not in quarantine", m.unknown_acks);
    single(out, "tandem_pd_unknown_aborts_total", "counter",
           "ABORTs from a prefill peer for requests not transferring (dropped)", m.unknown_aborts);
    single(out, "tandem_pd_abort_leases_expired_total", "counter",
           "Quarantines ended by the lease (transport.abort_lease_ms), not by an ACK",
           m.leases_expired);
    single(out, "tandem_pd_prefill_peers_ready", "gauge", "Prefill peers connected and ready",
           m.peers_ready);
    single(out, "tandem_pd_transfers_in_flight", "gauge", "Requests whose state is in transit",
           m.in_flight);
    single(out, "tandem_pd_quarantined_requests", "gauge",
           "Aborted transfers whose pages wait for ABORT_ACK or the lease", m.quarantined);
    transport_metrics(out, "decode", ep, t);
}

void render_prefill_metrics(std::string& out, const pd_prefill_metrics& m, const pd_counters& ep,
                            const transport::peer_stats& t, const engine::engine_stats& eng) {
    labelled(out, "tandem_pd_jobs_total", "Prefill jobs by outcome", "result",
             {{"ok", m.jobs_ok}, {"failed", m.jobs_failed}, {"aborted", m.jobs_aborted}});
    single(out, "tandem_pd_jobs_received_total", "counter", "PREFILL_JOBs received",
           m.jobs_received);
    single(out, "tandem_pd_jobs_in_flight", "gauge", "Prefill jobs not yet finished",
           m.jobs_in_flight);
    single(out, "tandem_pd_prefill_queue_depth", "gauge",
           "Prefill jobs waiting for the prefill scheduler", eng.queued);
    single(out, "tandem_pd_prefill_running", "gauge", "Prefill jobs being computed", eng.running);
    single(out, "tandem_pd_bytes_sent_total", "counter", "State bytes sent to decode peers",
           m.bytes_sent);
    single(out, "tandem_pd_aborts_received_total", "counter", "ABORTs received from decode peers",
           m.aborts_received);
    single(out, "tandem_pd_decode_peers_ready", "gauge", "Decode peers connected", m.peers_ready);
    if (eng.prefix.enabled) {  // the prefill engine's prefix cache
        single(out, "tandem_pd_prefill_cache_lookup_tokens_total", "counter",
               "Prompt tokens prefill jobs needed", eng.prefix.lookup_tokens);
        single(out, "tandem_pd_prefill_cache_hit_tokens_total", "counter",
               "Of those, tokens restored from the prefill engine's prefix cache",
               eng.prefix.hit_tokens);
        single(out, "tandem_pd_prefill_cache_pages", "gauge",
               "Prefill pool pages the prefix cache holds", eng.prefix.cached_pages);
        single(out, "tandem_pd_prefill_cache_snapshots", "gauge", "Boundary snapshots held",
               eng.prefix.snapshots);
        single(out, "tandem_pd_prefill_cache_evicted_pages_total", "counter",
               "History pages evicted", eng.prefix.evicted_pages);
        single(out, "tandem_pd_prefill_cache_evicted_snapshots_total", "counter",
               "Snapshots evicted", eng.prefix.evicted_snapshots);
        if (eng.prefix.host_enabled) {
            single(out, "tandem_pd_prefill_cache_host_bytes_used", "gauge",
                   "Host-tier bytes holding history pages", eng.prefix.host_bytes_used);
            single(out, "tandem_pd_prefill_cache_host_loaded_pages_total", "counter",
                   "Pages loaded back from the host tier", eng.prefix.host_loaded_pages);
            single(out, "tandem_pd_prefill_cache_evicted_to_host_total", "counter",
                   "Pool copies evicted while their host copy stayed", eng.prefix.evicted_to_host);
            out += eng.prefix.host_load_seconds.render_prometheus(
                "tandem_pd_prefill_cache_host_load_seconds", "Host-tier load latency");
        }
    }
    transport_metrics(out, "prefill", ep, t);
}

}  // namespace tandem::topo
