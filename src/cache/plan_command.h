// cache/plan_command.h — `tandem plan`: capacity planning from config.json alone (no weights).
//
// Owns: turning (tandem config, model config.json) into a cache_plan — the LayoutSpec plus how
// the memory budget splits into sequence slots and pages — and rendering it as text (also the
// summary the server logs at startup) or JSON. Sizes all come from layout_spec.
//
// Budget: cache.memory_bytes, or (when 0) cache.memory_fraction of what MemAvailable in
// /proc/meminfo leaves beside the CPU forward's step buffers at the largest step the scheduler
// can build (model/step_memory.h). Sequence slots: scheduler.max_running_requests (every running request holds
// one slot for its window rings and compressor state).
#pragma once

#include <string>

#include "cache/layout.h"
#include "cache/page_pool.h"
#include "core/config.h"
#include "core/status.h"
#include "model/model_config.h"
#include "model/step_memory.h"

namespace tandem::cache {

// The CPU forward's step buffers at the largest step, beside the pool(s).
struct step_reservation {
    model::step_shape largest_step;
    model::step_memory buffers;
    bool reserved = false;  // taken out of MemAvailable before cache.memory_fraction
    int engines = 1;        // engines of the process, each with a pool and these buffers (pd role both: 2)
};

struct cache_plan {
    std::string model_config_path;
    model::model_config model;
    layout_spec layout;
    int64_t memory_bytes = 0;  // the resolved budget
    pool_split split;          // slots and pages the budget holds (all 0 when it does not fit)
    // Set when the budget cannot hold the configured sequence slots and one page: why, and
    // what would fit. Only `tandem plan` builds such a plan; the server refuses to start.
    std::string does_not_fit;
    // Prefix cache (make_cache_plan(cfg) fills these from [cache]; 0 when off or unknown).
    int64_t host_memory_bytes = 0;      // cache.host_memory_bytes
    int64_t snapshot_memory_bytes = 0;  // resolved snapshot budget
    step_reservation step;  // make_cache_plan(cfg) fills it
};

// Each engine's pool budget and, beside it, the step buffers.
struct memory_budget {
    int64_t pool_bytes = 0;
    step_reservation step;
};

// Engines this process runs, each with its own pool and step buffers: 2 for pd with role both.
int engines_in_process(const config& cfg);

// <model.path>/config.json, or model.path itself when it names a .json file.
std::string model_config_path(const config& cfg);
// memory_bytes when > 0, else fraction x (MemAvailable (/proc/meminfo) - reserved_bytes); errors
// when MemAvailable does not exceed reserved_bytes.
result<int64_t> resolve_memory_budget(int64_t memory_bytes, double memory_fraction, int64_t reserved_bytes = 0);
// The budget of each engine for this configuration and model: with cache.memory_fraction the
// step buffers of the largest step (scheduler.max_prefill_tokens + max_running_requests rows,
// contexts filling the pool; model::largest_step) are reserved first, for every engine of the
// process, and the engines split the rest (pd role both: two pools of half); with cache.memory_bytes that is each engine's
// pool and the step buffers are only reported (that budget is the operator's).
result<memory_budget> resolve_memory_budget(const config& cfg, const model::model_config& model, const layout_spec& layout);
// The layout options from the [cache] section (errors name the key).
result<layout_options> layout_options_from(const config& cfg);

// `report_misfit`: a budget too small for the configuration is described in does_not_fit
// instead of failing (the plan command); other errors still fail.
result<cache_plan> make_cache_plan(const config& cfg, bool report_misfit = false);
// The same from an already-parsed model (tests, and the server once it loaded the model).
result<cache_plan> make_cache_plan(const model::model_config& model, const std::string& origin,
                                   const layout_spec& layout, int64_t memory_bytes, int64_t max_sequences);

// Human-readable summary; the server logs this at startup.
std::string render_plan_text(const cache_plan& plan);
// Machine-readable: per buffer kind bytes_per_row / rows_per_page / bytes_per_page, top-level
// bytes_per_token and fingerprint, fixed state, and what the budget holds.
std::string render_plan_json(const cache_plan& plan);

// The subcommand: prints the plan to stdout (with what does not fit, if anything); errors to
// stderr. Exit code 0, or 2 for a bad configuration / model config.
int run_plan_command(const config& cfg, bool json);

}  // namespace tandem::cache
