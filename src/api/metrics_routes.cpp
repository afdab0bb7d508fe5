#include "api/metrics_routes.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

namespace tandem::api {
namespace {

void metric(std::string& out, const char* name, const char* type, const char* help, int64_t value) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help, type, value);
}

void render_prefix_cache_metrics(std::string& text, const engine::prefix_cache_counters& p) {
    metric(text, "tandem_prefix_cache_lookup_tokens_total", "counter",
           "Tokens admitted requests needed (prompt + earlier output)", p.lookup_tokens);
    metric(text, "tandem_prefix_cache_hit_tokens_total", "counter",
           "Of those, tokens restored from the prefix cache instead of computed", p.hit_tokens);
    const double ratio = p.lookup_tokens > 0 ? static_cast<double>(p.hit_tokens) /
                                                   static_cast<double>(p.lookup_tokens)
                                             : 0.0;
    text += fmt::format("# HELP tandem_prefix_cache_hit_ratio hit tokens / lookup tokens\n"
                        "# TYPE tandem_prefix_cache_hit_ratio gauge\n"
                        "tandem_prefix_cache_hit_ratio {:.6f}\n",
                        ratio);
    metric(text, "tandem_prefix_cache_pages", "gauge", "Pool pages the prefix cache holds",
           p.cached_pages);
    metric(text, "tandem_prefix_cache_snapshots", "gauge", "Boundary snapshots held",
           p.snapshots);
    metric(text, "tandem_prefix_cache_snapshot_bytes", "gauge", "Bytes of boundary snapshots held",
           p.snapshot_bytes);
    metric(text, "tandem_prefix_cache_evicted_pages_total", "counter",
           "History pages evicted (history family)", p.evicted_pages);
    metric(text, "tandem_prefix_cache_evicted_snapshots_total", "counter",
           "Snapshots evicted (snapshot family)", p.evicted_snapshots);
    metric(text, "tandem_prefix_cache_restore_failures_total", "counter",
           "Snapshots that failed verification (the request recomputed instead)",
           p.restore_failures);
    if (!p.host_enabled) return;
    metric(text, "tandem_prefix_cache_host_bytes_total", "gauge",
           "Host-tier capacity in bytes (whole pages)", p.host_bytes_total);
    metric(text, "tandem_prefix_cache_host_bytes_used", "gauge",
           "Host-tier bytes holding history pages", p.host_bytes_used);
    metric(text, "tandem_prefix_cache_host_loaded_pages_total", "counter",
           "Pages loaded back from the host tier into the pool (host hits)", p.host_loaded_pages);
    metric(text, "tandem_prefix_cache_evicted_to_host_total", "counter",
           "Pool copies evicted while their host copy stayed", p.evicted_to_host);
    metric(text, "tandem_prefix_cache_host_evictions_total", "counter",
           "Host copies dropped (host tier full, flush)", p.host_evictions);
    text += p.host_load_seconds.render_prometheus(
        "tandem_prefix_cache_host_load_seconds",
        "Host-tier load latency: queued to last layer landed (pages + snapshot)");
}

void labelled(std::string& out, const char* name, const char* help, const char* label,
              const std::vector<std::pair<const char*, int64_t>>& values) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n", name, help);
    for (const auto& [v, n] : values) out += fmt::format("{}{{{}=\"{}\"}} {}\n", name, label, v, n);
}

void verify_metrics(std::string& text, const engine::verify_report& v) {
    metric(text, "tandem_verify_enabled", "gauge", "1 when verify.sample_rate > 0", v.enabled);
    metric(text, "tandem_verify_sampled_total", "counter",
           "Requests selected for shadow verification that ended (checked or skipped)", v.sampled);
    metric(text, "tandem_verify_checks_total", "counter",
           "Shadow verifications completed (recomputed and compared)", v.checks);
    metric(text, "tandem_verify_tokens_recomputed_total", "counter",
           "Tokens recomputed by shadow verification", v.tokens_recomputed);
    metric(text, "tandem_verify_inflight", "gauge", "Shadow verifications pending or computing",
           v.inflight);
    std::vector<std::pair<const char*, int64_t>> paths, skips;
    for (int p = 0; p < engine::k_verify_paths; ++p) {
        paths.emplace_back(engine::verify_path_name(static_cast<engine::verify_path>(p)),
                           v.divergences[p]);
    }
    for (int s = 0; s < engine::k_verify_skips; ++s) {
        skips.emplace_back(engine::verify_skip_name(static_cast<engine::verify_skip>(s)),
                           v.skipped[s]);
    }
    labelled(text, "tandem_verify_divergences_total",
             "Recomputed logits differed from the served ones, by the path that fed the state",
             "path", paths);
    labelled(text, "tandem_verify_skipped_total", "Sampled requests not checked, by reason",
             "reason", skips);
}

}  // namespace

void handle_metrics(app_state& app, const http::request&, const http::responder& out) {
    std::string text;
    metric(text, "tandem_up", "gauge", "1 while serving, 0 while starting or stopping",
           app.state() == serving_state::serving ? 1 : 0);
    metric(text, "tandem_tool_call_parse_failures_total", "counter",
           "Responses whose tool-call markup was malformed (returned as content)",
           app.tool_call_parse_failures.load());
    if (const http::server* srv = app.server()) {
        const http::server_stats& s = srv->stats();
        metric(text, "tandem_http_connections_open", "gauge", "Open HTTP connections",
               s.connections_open.load());
        metric(text, "tandem_http_connections_total", "counter", "Accepted HTTP connections",
               s.connections_total.load());
        metric(text, "tandem_http_connections_rejected_total", "counter",
               "Connections refused with 503 over server.max_connections",
               s.connections_rejected.load());
        metric(text, "tandem_http_requests_total", "counter", "HTTP requests parsed",
               s.requests_total.load());
        metric(text, "tandem_http_requests_in_flight", "gauge", "HTTP requests being answered",
               s.requests_in_flight.load());
        metric(text, "tandem_http_bad_requests_total", "counter",
               "Requests refused before routing (malformed, over limits, timed out)",
               s.bad_requests.load());
    }
    if (engine::engine* e = app.engine()) {
        engine::engine_metrics m = e->metrics();
        const engine::engine_stats& s = m.stats;
        metric(text, "tandem_queue_depth", "gauge", "Requests waiting for admission", s.queued);
        metric(text, "tandem_running_requests", "gauge", "Requests prefilling or decoding", s.running);
        metric(text, "tandem_pages_total", "gauge", "KV pool pages", s.pages_total);
        metric(text, "tandem_pages_free", "gauge", "KV pool pages on the free list", s.pages_free);
        metric(text, "tandem_pages_used", "gauge", "KV pool pages in use", s.pages_total - s.pages_free);
        metric(text, "tandem_preemptions_total", "counter", "Requests preempted for pages",
               s.preemptions);
        metric(text, "tandem_requests_finished_total", "counter", "Requests that finished",
               s.requests_finished);
        metric(text, "tandem_requests_aborted_total", "counter", "Requests aborted",
               s.requests_aborted);
        metric(text, "tandem_requests_failed_total", "counter", "Requests that failed",
               s.requests_failed);
        metric(text, "tandem_rejected_queue_full_total", "counter",
               "Requests answered 503 because the queue was full", s.rejected_queue_full);
        metric(text, "tandem_request_late_end_events_total", "counter",
               "End events (abort, timeout, failure) that reached an already-ended request and "
               "were dropped", s.late_end_events);
        metric(text, "tandem_prompt_tokens_total", "counter", "Prompt tokens processed",
               s.prompt_tokens);
        metric(text, "tandem_generated_tokens_total", "counter", "Tokens generated",
               s.generated_tokens);
        metric(text, "tandem_steps_total", "counter", "Scheduler steps", s.steps);
        if (s.prefix.enabled) render_prefix_cache_metrics(text, s.prefix);
        text += m.time_to_first_token.render_prometheus(
            "tandem_time_to_first_token_seconds", "Time from admission to the first token");
        text += m.inter_token_latency.render_prometheus(
            "tandem_inter_token_latency_seconds", "Time between consecutive tokens of a request");
        text += m.end_to_end_latency.render_prometheus(
            "tandem_e2e_request_latency_seconds", "Time from admission to the final token");
        text += m.step_time.render_prometheus("tandem_step_seconds",
                                              "Duration of one lockstep scheduler step");
        text += m.batch_size.render_prometheus("tandem_batch_size", "Sequences per step");
        verify_metrics(text, e->verification());
    }
    if (topo::deployment* d = app.deployment()) text += d->render_metrics();
    out.send({200, {}, std::move(text), "text/plain; version=0.0.4"});
}

}  // namespace tandem::api
