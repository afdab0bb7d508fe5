#include "api/metrics_routes.h"

#include <utility>

#include "core/prometheus_text.h"
#include "engine/prefix_cache_metrics_text.h"

namespace tandem::api {
namespace {

using enum metric_type;

void render_http_metrics(prometheus_text w, const http::server_stats& s) {
    w.families({
        {gauge, "connections_open", "Open HTTP connections", s.connections_open.load()},
        {counter, "connections_total", "Accepted HTTP connections", s.connections_total.load()},
        {counter, "connections_rejected_total",
         "Connections refused with 503 over server.max_connections", s.connections_rejected.load()},
        {counter, "requests_total", "HTTP requests parsed", s.requests_total.load()},
        {gauge, "requests_in_flight", "HTTP requests being answered", s.requests_in_flight.load()},
        {counter, "bad_requests_total",
         "Requests refused before routing (malformed, over limits, timed out)",
         s.bad_requests.load()},
    });
}

void render_engine_metrics(prometheus_text w, const engine::engine_metrics& m) {
    const engine::engine_stats& s = m.stats;
    w.families({
        {gauge, "queue_depth", "Requests waiting for admission", s.queued},
        {gauge, "running_requests", "Requests prefilling or decoding", s.running},
        {gauge, "pages_total", "KV pool pages", s.pages_total},
        {gauge, "pages_free", "KV pool pages on the free list", s.pages_free},
        {gauge, "pages_used", "KV pool pages in use", s.pages_total - s.pages_free},
        {counter, "preemptions_total", "Requests preempted for pages", s.preemptions},
        {counter, "requests_finished_total", "Requests that finished", s.requests_finished},
        {counter, "requests_aborted_total", "Requests aborted", s.requests_aborted},
        {counter, "requests_failed_total", "Requests that failed", s.requests_failed},
        {counter, "rejected_queue_full_total", "Requests answered 503 because the queue was full",
         s.rejected_queue_full},
        {counter, "request_late_end_events_total",
         "End events (abort, timeout, failure) that reached an already-ended request and were "
         "dropped",
         s.late_end_events},
        {counter, "prompt_tokens_total", "Prompt tokens processed", s.prompt_tokens},
        {counter, "generated_tokens_total", "Tokens generated", s.generated_tokens},
        {counter, "steps_total", "Scheduler steps", s.steps},
    });
    if (s.prefix.enabled) {
        engine::render_prefix_cache_metrics(w.with_prefix("prefix_cache_"), s.prefix);
    }
    w.histogram("time_to_first_token_seconds", "Time from admission to the first token",
                m.time_to_first_token);
    w.histogram("inter_token_latency_seconds", "Time between consecutive tokens of a request",
                m.inter_token_latency);
    w.histogram("e2e_request_latency_seconds", "Time from admission to the final token",
                m.end_to_end_latency);
    w.histogram("step_seconds", "Duration of one lockstep scheduler step", m.step_time);
    w.histogram("batch_size", "Sequences per step", m.batch_size);
}

void render_verify_metrics(prometheus_text w, const engine::verify_report& v) {
    using namespace engine;
    w.families({
        {gauge, "enabled", "1 when verify.sample_rate > 0", v.enabled},
        {counter, "sampled_total",
         "Requests selected for shadow verification that ended (checked or skipped)", v.sampled},
        {counter, "checks_total", "Shadow verifications completed (recomputed and compared)",
         v.checks},
        {counter, "tokens_recomputed_total", "Tokens recomputed by shadow verification",
         v.tokens_recomputed},
        {gauge, "inflight", "Shadow verifications pending or computing", v.inflight},
    });
    auto path_name = [](size_t p) { return verify_path_name(static_cast<verify_path>(p)); };
    auto skip_name = [](size_t r) { return verify_skip_name(static_cast<verify_skip>(r)); };
    w.counters_by("divergences_total",
                  "Recomputed logits differed from the served ones, by the path that fed the "
                  "state",
                  "path",
                  prometheus_text::by_index(k_verify_paths, path_name,
                                            [&](size_t p) { return v.divergences[p]; }));
    w.counters_by("skipped_total", "Sampled requests not checked, by reason", "reason",
                  prometheus_text::by_index(k_verify_skips, skip_name,
                                            [&](size_t r) { return v.skipped[r]; }));
}

}  // namespace

void handle_metrics(app_state& app, const http::request&, const http::responder& out) {
    std::string text;
    prometheus_text w(text, "tandem_");
    w.families({
        {gauge, "up", "1 while serving, 0 while starting or stopping",
         app.state() == serving_state::serving ? 1 : 0},
        {counter, "tool_call_parse_failures_total",
         "Responses whose tool-call markup was malformed (returned as content)",
         app.tool_call_parse_failures.load()},
    });
    if (const http::server* srv = app.server()) {
        render_http_metrics(w.with_prefix("http_"), srv->stats());
    }
    if (engine::engine* e = app.engine()) {
        render_engine_metrics(w, e->metrics());
        render_verify_metrics(w.with_prefix("verify_"), e->verification());
    }
    if (topo::deployment* d = app.deployment()) text += d->render_metrics();
    out.send({200, {}, std::move(text), "text/plain; version=0.0.4"});
}

}  // namespace tandem::api
