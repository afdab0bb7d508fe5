// cache/plan_command.cpp — `tandem plan`: the cache layout and capacity for a config.
#include "cache/plan_command.h"

#include "cache/host_tier.h"
#include "cache/snapshot.h"
#include "model/file_bytes.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "core/json_writer.h"

namespace tandem::cache {

namespace {

const char* attention_short(model::attention_type t) {
    switch (t) {
        case model::attention_type::sliding: return "sliding";
        case model::attention_type::csa: return "csa";
        case model::attention_type::hca: return "hca";
    }
    return "?";
}

// Layers of one attention type share sizes, so the plan shows one line per (kind, type).
struct buffer_group {
    std::string name;
    int64_t ratio = 0;
    int64_t layers = 0;
    int64_t bytes_per_row = 0;
    int64_t rows_per_page = 0;
    int64_t bytes_per_page = 0;
    double bytes_per_token = 0;  // contribution of all these layers
};

struct state_group {
    std::string name;
    int64_t layers = 0;
    int64_t rows = 0;
    int64_t bytes_per_row = 0;
    int64_t bytes_per_layer = 0;
};

std::vector<buffer_group> group_buffers(const layout_spec& l) {
    std::map<std::string, buffer_group> groups;
    std::vector<std::string> order;
    for (const buffer_layout& b : l.buffers()) {
        std::string name = buffer_kind_name(b.kind);
        if (b.kind == buffer_kind::compressed_kv) {
            name += std::string("_") + attention_short(l.layers()[b.layer].attention);
        }
        auto [it, fresh] = groups.try_emplace(name);
        buffer_group& g = it->second;
        if (fresh) {
            order.push_back(name);
            g = {name, b.ratio, 0, b.row.bytes, b.rows_per_page, b.bytes_per_page, 0};
        }
        ++g.layers;
        g.bytes_per_token += static_cast<double>(b.bytes_per_page) / static_cast<double>(l.page_size());
    }
    std::vector<buffer_group> out;
    for (const std::string& n : order) out.push_back(groups[n]);
    return out;
}

std::vector<state_group> group_states(const layout_spec& l) {
    std::map<std::string, state_group> groups;
    std::vector<std::string> order;
    for (const state_layout& s : l.states()) {
        std::string name = state_kind_name(s.kind);
        if (s.kind == state_kind::attn_compressor) {
            name += std::string("_") + attention_short(l.layers()[s.layer].attention);
        }
        auto [it, fresh] = groups.try_emplace(name);
        if (fresh) {
            order.push_back(name);
            it->second = {name, 0, s.rows, s.bytes_per_row, s.bytes};
        }
        ++it->second.layers;
    }
    std::vector<state_group> out;
    for (const std::string& n : order) out.push_back(groups[n]);
    return out;
}

std::string human(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        ++u;
    }
    return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, units[u]);
}

// Tokens and sequences the budget holds beyond the configured split.
struct capacity {
    int64_t sequences_fixed_state_only = 0;  // budget / slot bytes
    int64_t full_context_bytes = 0;          // one sequence at max_position_embeddings
    int64_t full_context_sequences = 0;      // how many of those fit
};

capacity compute_capacity(const cache_plan& p) {
    const layout_spec& l = p.layout;
    const int64_t slot = pool_geometry(l, 0, 1).slot_stride();
    const int64_t pages = (p.model.max_position_embeddings + l.page_size() - 1) / l.page_size();
    capacity c;
    c.sequences_fixed_state_only = p.memory_bytes / slot;
    c.full_context_bytes = slot + pages * l.page_group_bytes();
    c.full_context_sequences = p.memory_bytes / c.full_context_bytes;
    return c;
}

}  // namespace

std::string model_config_path(const config& cfg) {
    const std::string& p = cfg.model.path;
    if (p.size() >= 5 && p.compare(p.size() - 5, 5, ".json") == 0) return p;
    return p + "/config.json";
}

namespace {

// memory_bytes when > 0, else fraction × (available − reserved_bytes); `available` is MemAvailable,
// read once by the caller (only when memory_bytes is 0).
result<int64_t> pool_budget(int64_t memory_bytes, double memory_fraction, int64_t reserved_bytes, int64_t available) {
    if (memory_bytes > 0) return memory_bytes;
    if (!(memory_fraction > 0.0 && memory_fraction <= 1.0)) {
        return make_error(error_code::invalid_argument,
                          "cache.memory_fraction: must be in (0, 1] when cache.memory_bytes = 0");
    }
    if (available <= 0)
        return make_error(error_code::unavailable,
                          "cache.memory_bytes is 0 and MemAvailable is not in /proc/meminfo: "
                          "set cache.memory_bytes");
    if (available <= reserved_bytes)
        return make_error(error_code::out_of_range,
                          fmt::format("MemAvailable {} ({}) does not exceed the forward pass's step buffers {} ({}) "
                                      "at the largest step: lower scheduler.max_prefill_tokens, "
                                      "scheduler.max_prompt_logprob_tokens or scheduler.max_running_requests, "
                                      "or set cache.memory_bytes",
                                      available, human(static_cast<double>(available)), reserved_bytes,
                                      human(static_cast<double>(reserved_bytes))));
    return static_cast<int64_t>(static_cast<double>(available - reserved_bytes) * memory_fraction);
}

int64_t available_unless_fixed(int64_t memory_bytes) {
    return memory_bytes > 0 ? 0 : model::memory_available_bytes();
}

}  // namespace

result<int64_t> resolve_memory_budget(int64_t memory_bytes, double memory_fraction, int64_t reserved_bytes) {
    return pool_budget(memory_bytes, memory_fraction, reserved_bytes, available_unless_fixed(memory_bytes));
}

int engines_in_process(const config& cfg) {
    return cfg.topology.mode == "pd" && cfg.topology.role == "both" ? 2 : 1;
}

result<memory_budget> resolve_memory_budget(const config& cfg, const model::model_config& model, const layout_spec& layout) {
    if (cfg.backend.device == "cuda" && !cfg.backend.test_emulate_device) {
        // The device backend's pool and scratch are in GPU memory, which phase 0 sizes at startup
        // (cuda::plan_device_memory; serve writes the pool into cache.memory_bytes before anything
        // plans). The CPU forward's step buffers do not exist there, and host MemAvailable says
        // nothing about the GPU. (The testing-only host emulation keeps the host rule: its "device"
        // is host memory.)
        if (cfg.cache.memory_bytes <= 0)
            return make_error(error_code::invalid_argument,
                              "cache.memory_bytes = 0 with backend.device = \"cuda\": the pool is sized at startup "
                              "from GPU 0's free memory (cache.memory_fraction of what the weights and scratch "
                              "leave), which planning cannot see without the GPU; set cache.memory_bytes to plan "
                              "a budget");
        memory_budget b;
        b.step.engines = engines_in_process(cfg);
        b.pool_bytes = cfg.cache.memory_bytes;
        return b;
    }
    const int64_t available = available_unless_fixed(cfg.cache.memory_bytes);
    // Contexts fill the pool the budget would give without the reservation: more than the
    // reduced pool holds, so the reservation is an upper bound.
    auto unreserved = pool_budget(cfg.cache.memory_bytes, cfg.cache.memory_fraction, 0, available);
    if (!unreserved) return unreserved.error();
    const int64_t context = static_cast<int64_t>(static_cast<double>(*unreserved) / std::max(layout.bytes_per_token(), 1.0));
    memory_budget b;
    step_reservation& step = b.step;
    const model::step_limits limits{cfg.scheduler.max_prefill_tokens, cfg.scheduler.max_running_requests,
                                    cfg.scheduler.max_prompt_logprob_tokens,
                                    cfg.verify.sample_rate > 0 ? cfg.verify.max_chunk_tokens : 0};
    step.largest_step = model::largest_step(model, limits, context);
    const auto numerics = cfg.model.numerics == "official" ? model::numerics_mode::official : model::numerics_mode::hf;
    const int threads = cfg.backend.threads > 0 ? static_cast<int>(cfg.backend.threads)
                                                : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    step.buffers = model::step_buffer_bound(model, step.largest_step, numerics, threads);
    step.engines = engines_in_process(cfg);
    step.reserved = cfg.cache.memory_bytes <= 0;
    auto pool = pool_budget(cfg.cache.memory_bytes, cfg.cache.memory_fraction, step.engines * step.buffers.total(), available);
    if (!pool) return pool.error();
    // cache.memory_bytes is each engine's; a fraction of the memory is shared by the engines.
    b.pool_bytes = step.reserved ? *pool / step.engines : *pool;
    return b;
}

result<layout_options> layout_options_from(const config& cfg) {
    layout_options o;
    auto kv = parse_kv_dtype(cfg.cache.kv_dtype);
    if (!kv.is_ok()) return kv.error();
    auto idx = parse_index_k_dtype(cfg.cache.index_k_dtype);
    if (!idx.is_ok()) return idx.error();
    o.kv = *kv;
    o.index_k = *idx;
    o.page_size = cfg.cache.page_size;
    return o;
}

result<cache_plan> make_cache_plan(const model::model_config& model, const std::string& origin,
                                   const layout_spec& layout, int64_t memory_bytes, int64_t max_sequences) {
    auto split = plan_pool_split(layout, {memory_bytes, max_sequences});
    if (!split.is_ok()) return split.error();
    return cache_plan{origin, model, layout, memory_bytes, *split, {}, 0, 0, {}};
}

namespace {

// What would fit instead, found by asking plan_pool_split itself (so no sizing rule is
// restated here): the most slots this budget holds, and the least budget for these slots.
std::string describe_misfit(const layout_spec& layout, int64_t memory_bytes, int64_t slots,
                            const status& why) {
    auto fits = [&](int64_t bytes, int64_t n) { return plan_pool_split(layout, {bytes, n}).is_ok(); };
    std::string out = why.message();
    int64_t lo = 0, hi = slots;  // lo fits (or is 0), hi does not
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (fits(memory_bytes, mid) ? lo : hi) = mid;
    }
    if (lo > 0) out += fmt::format("; it holds {} sequence slot(s): set scheduler.max_running_requests <= {}", lo, lo);
    int64_t need = memory_bytes;
    while (need < (int64_t{1} << 56) && !fits(need, slots)) need *= 2;
    int64_t below = need / 2;  // does not fit
    while (need - below > 1) {
        const int64_t mid = below + (need - below) / 2;
        (fits(mid, slots) ? need : below) = mid;
    }
    out += fmt::format("; {} slot(s) need cache.memory_bytes >= {} ({})", slots, need,
                       human(static_cast<double>(need)));
    return out;
}

}  // namespace

result<cache_plan> make_cache_plan(const config& cfg, bool report_misfit) {
    auto opt = layout_options_from(cfg);
    if (!opt.is_ok()) return opt.error();
    const std::string path = model_config_path(cfg);
    auto model = model::load_model_config(path);
    if (!model.is_ok()) return model.error();
    auto layout = layout_spec::create(*model, *opt);
    if (!layout.is_ok()) return layout.error();
    auto budget = resolve_memory_budget(cfg, *model, *layout);
    if (!budget.is_ok()) return budget.error();
    const int64_t pool_bytes = budget->pool_bytes;
    auto plan = make_cache_plan(*model, path, *layout, pool_bytes, cfg.scheduler.max_running_requests);
    if (plan.is_ok()) plan->step = budget->step;
    if (plan.is_ok() && cfg.cache.prefix_cache) {
        plan->host_memory_bytes = cfg.cache.host_memory_bytes;
        plan->snapshot_memory_bytes = cfg.cache.snapshot_memory_bytes > 0
                                          ? cfg.cache.snapshot_memory_bytes
                                          : pool_bytes / 8;
    }
    if (plan.is_ok() || !report_misfit || plan.error().code() != error_code::out_of_range) return plan;
    cache_plan misfit{path, *model, *layout, pool_bytes, {}, {}, 0, 0, budget->step};
    misfit.does_not_fit = describe_misfit(*layout, pool_bytes, cfg.scheduler.max_running_requests, plan.error());
    return misfit;
}

namespace {

// One boundary snapshot of the prefix cache (snapshot.h), at the first boundary holding a full
// window, with its header.
struct snapshot_size {
    int64_t total = 0;
    int64_t per_kind[k_state_kinds] = {};
};

snapshot_size compute_snapshot_size(const layout_spec& l) {
    snapshot_size s;
    const int64_t b = align_up(std::max(l.window_rows(), l.page_size()), l.page_size());
    for (const snapshot_part& part : snapshot_parts(l, b)) s.per_kind[static_cast<int>(part.kind)] += part.bytes;
    s.total = snapshot_payload_bytes(l, b) + static_cast<int64_t>(sizeof(snapshot_header));
    return s;
}

}  // namespace

std::string render_plan_text(const cache_plan& p) {
    const layout_spec& l = p.layout;
    const model::model_config& m = p.model;
    std::string s = fmt::format(
        "model {}: {} layers + {} MTP ({} sliding, {} csa, {} hca incl. MTP)\n",
        p.model_config_path, m.num_hidden_layers, m.num_nextn_predict_layers,
        m.count_layers(model::attention_type::sliding, true),
        m.count_layers(model::attention_type::csa, true),
        m.count_layers(model::attention_type::hca, true));
    s += fmt::format("cache layout {}: kv {}, index_k {}, page {} tokens\n", l.fingerprint_hex(),
                     kv_dtype_name(l.options().kv), index_k_dtype_name(l.options().index_k),
                     l.page_size());
    s += fmt::format("  {:<20} {:>6} {:>6} {:>10} {:>10} {:>10} {:>12}\n", "history buffer",
                     "layers", "ratio", "bytes/row", "rows/page", "bytes/page", "bytes/token");
    for (const buffer_group& g : group_buffers(l)) {
        s += fmt::format("  {:<20} {:>6} {:>6} {:>10} {:>10} {:>10} {:>12.4f}\n", g.name, g.layers,
                         g.ratio, g.bytes_per_row, g.rows_per_page, g.bytes_per_page,
                         g.bytes_per_token);
    }
    s += fmt::format("  history per page (all layers and kinds): {} B; per token: {:.4f} B "
                     "({} per 1M tokens)\n",
                     l.page_group_bytes(), l.bytes_per_token(),
                     human(l.bytes_per_token() * 1048576.0));
    s += fmt::format("  {:<20} {:>6} {:>6} {:>10} {:>12}\n", "fixed per sequence", "layers",
                     "rows", "bytes/row", "bytes/layer");
    for (const state_group& g : group_states(l)) {
        s += fmt::format("  {:<20} {:>6} {:>6} {:>10} {:>12}\n", g.name, g.layers, g.rows,
                         g.bytes_per_row, g.bytes_per_layer);
    }
    s += fmt::format("  fixed state per sequence: {} B ({})\n", l.state_bytes_per_sequence(),
                     human(static_cast<double>(l.state_bytes_per_sequence())));
    const snapshot_size snap = compute_snapshot_size(l);
    s += fmt::format("  prefix-cache boundary snapshot: {} B ({}; window {} B, attn Ca {} B, index "
                     "Ca {} B) = {:.0f} tokens of history\n",
                     snap.total, human(static_cast<double>(snap.total)), snap.per_kind[0],
                     snap.per_kind[1], snap.per_kind[2],
                     static_cast<double>(snap.total) / l.bytes_per_token());
    if (p.snapshot_memory_bytes > 0) {
        s += fmt::format("  snapshot budget {} B ({}): {} snapshots (host memory, besides the pool)\n",
                         p.snapshot_memory_bytes, human(static_cast<double>(p.snapshot_memory_bytes)),
                         p.snapshot_memory_bytes / std::max<int64_t>(snap.total, 1));
    }
    if (p.host_memory_bytes > 0) {
        const int64_t pages = host_tier_pages(l, p.host_memory_bytes);
        s += fmt::format("  host tier {} B ({}): {} pages = {} tokens of history (every layer and "
                         "kind; snapshots stay in the snapshot budget)\n",
                         p.host_memory_bytes, human(static_cast<double>(p.host_memory_bytes)), pages,
                         pages * l.page_size());
    } else if (p.snapshot_memory_bytes > 0) {
        s += "  host tier: off (cache.host_memory_bytes = 0)\n";
    }
    if (p.step.buffers.total() > 0) {
        const model::step_memory& b = p.step.buffers;
        s += fmt::format("CPU forward step buffers (besides the pool; {}): "
                         "{} B ({}) at the largest step of {} tokens over {} sequences, contexts {} tokens: "
                         "activations {}, decoded context {}, logits {}, per-thread scratch {}\n",
                         p.step.reserved ? "taken out of MemAvailable before cache.memory_fraction"
                                                 : "not part of cache.memory_bytes: leave room for them",
                         b.total(), human(static_cast<double>(b.total())), p.step.largest_step.tokens,
                         p.step.largest_step.sequences, p.step.largest_step.context_tokens,
                         human(static_cast<double>(b.activations)), human(static_cast<double>(b.context)),
                         human(static_cast<double>(b.logits)), human(static_cast<double>(b.per_thread)));
    }
    const capacity c = compute_capacity(p);
    if (!p.does_not_fit.empty()) {
        s += fmt::format("budget {} B ({}) DOES NOT FIT: {}\n", p.memory_bytes,
                         human(static_cast<double>(p.memory_bytes)), p.does_not_fit);
    } else {
        if (p.step.engines > 1)
            s += fmt::format("{} engines in this process (pd, role both): the budget below is each one's\n", p.step.engines);
        s += fmt::format("budget {} B ({}): {} sequence slots + {} pages = {} tokens of history\n",
                     p.memory_bytes, human(static_cast<double>(p.memory_bytes)), p.split.num_slots,
                         p.split.num_pages, p.split.tokens);
    }
    s += fmt::format("  fixed state alone fits {} sequences; a full-context sequence ({} tokens) "
                     "needs {} -> {} of them fit\n",
                     c.sequences_fixed_state_only, m.max_position_embeddings,
                     human(static_cast<double>(c.full_context_bytes)), c.full_context_sequences);
    return s;
}

std::string render_plan_json(const cache_plan& p) {
    const layout_spec& l = p.layout;
    const model::model_config& m = p.model;
    json_writer w;
    w.begin_object();
    w.key("model_config").value(p.model_config_path);
    w.key("layers").value(l.num_layers());
    w.key("kv_dtype").value(kv_dtype_name(l.options().kv));
    w.key("index_k_dtype").value(index_k_dtype_name(l.options().index_k));
    w.key("page_size").value(l.page_size());
    w.key("fingerprint").value(l.fingerprint_hex());
    w.key("bytes_per_token").value(l.bytes_per_token());
    w.key("bytes_per_page").value(l.page_group_bytes());
    w.key("buffer_kinds").begin_object();
    for (const buffer_group& g : group_buffers(l)) {
        w.key(g.name).begin_object();
        w.key("layers").value(g.layers).key("ratio").value(g.ratio);
        w.key("bytes_per_row").value(g.bytes_per_row).key("rows_per_page").value(g.rows_per_page);
        w.key("bytes_per_page").value(g.bytes_per_page).key("bytes_per_token").value(g.bytes_per_token);
        w.end_object();
    }
    w.end_object();
    w.key("state_kinds").begin_object();
    for (const state_group& g : group_states(l)) {
        w.key(g.name).begin_object();
        w.key("layers").value(g.layers).key("rows").value(g.rows);
        w.key("bytes_per_row").value(g.bytes_per_row).key("bytes_per_layer").value(g.bytes_per_layer);
        w.end_object();
    }
    w.end_object();
    w.key("state_bytes_per_sequence").value(l.state_bytes_per_sequence());
    const snapshot_size snap = compute_snapshot_size(l);
    w.key("snapshot").begin_object();
    w.key("bytes").value(snap.total);
    for (int k = 0; k < k_state_kinds; ++k) {
        w.key(state_kind_name(static_cast<state_kind>(k))).value(snap.per_kind[k]);
    }
    w.end_object();
    w.key("prefix_cache").begin_object();
    w.key("snapshot_memory_bytes").value(p.snapshot_memory_bytes);
    w.key("snapshots").value(p.snapshot_memory_bytes / std::max<int64_t>(snap.total, 1));
    w.key("host_memory_bytes").value(p.host_memory_bytes);
    w.key("host_pages").value(host_tier_pages(l, p.host_memory_bytes));
    w.key("host_tokens").value(host_tier_pages(l, p.host_memory_bytes) * l.page_size());
    w.end_object();
    w.key("step_buffers").begin_object();
    w.key("bytes").value(p.step.buffers.total());
    w.key("activations").value(p.step.buffers.activations).key("context").value(p.step.buffers.context);
    w.key("logits").value(p.step.buffers.logits).key("per_thread").value(p.step.buffers.per_thread);
    w.key("tokens").value(p.step.largest_step.tokens).key("sequences").value(p.step.largest_step.sequences);
    w.key("context_tokens").value(p.step.largest_step.context_tokens);
    w.key("reserved").value(p.step.reserved);
    w.end_object();
    const capacity c = compute_capacity(p);
    w.key("budget").begin_object();
    w.key("memory_bytes").value(p.memory_bytes);
    w.key("engines").value(int64_t{p.step.engines});
    w.key("fits").value(p.does_not_fit.empty());
    if (!p.does_not_fit.empty()) w.key("does_not_fit").value(p.does_not_fit);
    w.key("sequence_slots").value(p.split.num_slots);
    w.key("pages").value(p.split.num_pages);
    w.key("tokens").value(p.split.tokens);
    w.key("sequences_fixed_state_only").value(c.sequences_fixed_state_only);
    w.key("max_position_embeddings").value(m.max_position_embeddings);
    w.key("full_context_sequence_bytes").value(c.full_context_bytes);
    w.key("full_context_sequences").value(c.full_context_sequences);
    w.end_object();
    w.end_object();
    return w.take() + "\n";
}

int run_plan_command(const config& cfg, bool json) {
    constexpr int k_exit_config = 2;
    auto plan = make_cache_plan(cfg, true);
    if (!plan.is_ok()) {
        std::fprintf(stderr, "tandem plan: %s\n", plan.error().message().c_str());
        return k_exit_config;
    }
    const std::string out = json ? render_plan_json(*plan) : render_plan_text(*plan);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}

}  // namespace tandem::cache
