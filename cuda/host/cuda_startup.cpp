#include "cuda/host/cuda_startup.h"

#include <fmt/format.h>

#include <algorithm>

#include "cache/plan_command.h"
#include "core/gpu_probe.h"
#include "core/log.h"
#include "cuda/host/cuda_ops.h"
#include "cuda/host/device_memory_plan.h"
#include "model/safetensors.h"

namespace tandem::cuda {

namespace {

// Per-step activations: the residual streams and a few working rows of the widest step
// (max_prefill_tokens rows). A generous estimate for phase 0's fit check; the device forward grows
// its own scratch buffers step by step (device_forward.cpp).
int64_t scratch_estimate(const config& cfg, const model::model_config& m) {
    const int64_t rows = std::max<int64_t>(cfg.scheduler.max_prefill_tokens, 1);
    const int64_t width = std::max<int64_t>({m.hc_mult * m.hidden_size, m.num_attention_heads * m.head_dim,
                                             m.vocab_size / 8, 1});
    return rows * width * int64_t{4} * 8;
}

// cache.memory_bytes = 0: each engine's pool budget from GPU 0's free memory (device_pool_budget),
// trimmed once by what the pool's page epochs and alignment add if the first plan overshoots.
result<int64_t> size_device_pool(const config& cfg, const model::checkpoint& ck) {
    result<model::model_config> m = model::load_model_config(cfg.model.path + "/config.json");
    if (!m) return m.error().with_context("model.path");
    result<int64_t> free_bytes = gpu0_free_bytes();
    if (!free_bytes) return free_bytes.error();
    result<int64_t> weight_bytes = device_weight_bytes(ck);
    if (!weight_bytes) return weight_bytes.error();
    const int engines = cache::engines_in_process(cfg);
    const int64_t scratch = scratch_estimate(cfg, *m);
    result<int64_t> budget =
        device_pool_budget(*free_bytes, *weight_bytes, scratch, engines, cfg.cache.memory_fraction);
    if (!budget) return budget.error();
    config sized = cfg;
    sized.cache.memory_bytes = *budget;
    result<cache::cache_plan> plan = cache::make_cache_plan(sized);
    if (!plan) return plan.error().with_context(fmt::format("cache.memory_bytes = 0 resolved to {} B from the GPU", *budget));
    cache::pool_geometry geometry(plan->layout, plan->split.num_pages, plan->split.num_slots);
    result<device_memory_plan> dp = plan_device_memory(ck, geometry, scratch, engines);
    if (!dp) return dp.error();
    const int64_t over = dp->total_bytes() - *free_bytes;
    const int64_t each = over > 0 ? *budget - (over + engines - 1) / engines - device_memory_plan::k_tensor_alignment : *budget;
    if (each <= 0)  // never 0: that would mean the host rule again
        return make_error(error_code::out_of_range,
                          fmt::format("cache.memory_bytes = 0: GPU 0's {:.1f} MiB free leave no pool after the weights "
                                      "and scratch",
                                      double(*free_bytes) / (1 << 20)));
    TANDEM_LOG_INFO("cache.memory_bytes = 0: each of {} engine(s) gets a {:.1f} MiB pool = cache.memory_fraction {} of "
                    "GPU 0's {:.1f} MiB free after the weights and scratch",
                    engines, double(each) / (1 << 20), cfg.cache.memory_fraction, double(*free_bytes) / (1 << 20));
    return each;
}

// Returns the pool budget it resolved for cache.memory_bytes = 0 (0 when the configured one stands).
result<int64_t> phase0_bring_up(const config& cfg) {
    result<model::checkpoint> ck = model::checkpoint::open_dir(cfg.model.path);
    if (!ck) return ck.error().with_context("model.path");
    int64_t resolved = 0;
    config sized = cfg;
    if (cfg.cache.memory_bytes <= 0) {
        result<int64_t> each = size_device_pool(cfg, *ck);
        if (!each) return each.error();
        resolved = sized.cache.memory_bytes = *each;
    }
    result<cache::cache_plan> plan = cache::make_cache_plan(sized);
    if (!plan) return plan.error();
    cache::pool_geometry geometry(plan->layout, plan->split.num_pages, plan->split.num_slots);
    // pd role both: two engines, each with its pool and scratch, over one upload of the weights.
    result<device_memory_plan> dp =
        plan_device_memory(*ck, geometry, scratch_estimate(cfg, plan->model), cache::engines_in_process(cfg));
    if (!dp) return dp.error();
    TANDEM_LOG_INFO("CUDA phase 0: planned {}", describe_device_memory(*dp));
    result<bringup_report> r = bring_up_device(*dp);
    if (!r) return r.error().with_context("backend.device = \"cuda\"");
    TANDEM_LOG_INFO("CUDA phase 0 on {}: {:.1f} MiB free before; weights {:.1f} MiB uploaded as stored in {:.2f} s "
                    "(read-back XXH3 {:016x} {}), pool {:.1f} MiB, scratch {:.1f} MiB",
                    r->gpu, double(r->free_bytes_before) / (1 << 20), double(r->weight_bytes) / (1 << 20),
                    r->upload_seconds, r->weights_xxh3, r->readback_equal ? "verified" : "MISMATCH",
                    double(r->pool_bytes) / (1 << 20), double(r->scratch_bytes) / (1 << 20));
    if (!r->readback_equal)
        return make_error(error_code::data_loss, "backend.device = \"cuda\": the weights read back from " + r->gpu +
                                                     " do not hash to what was uploaded");
    return resolved;
}

}  // namespace

result<device_choice> resolve_backend_at_startup(const config& cfg) {
    if (cfg.backend.test_emulate_device) {
        // Testing only: no probe, no phase 0 (they are about a real GPU); the engine builds the
        // device executor over the host emulation (device_engine.cpp).
        if (cfg.backend.device == "cuda") {
            TANDEM_LOG_WARN("backend.test_emulate_device = true: the device path runs over the host emulation "
                            "(host memory as the device) — testing only, no GPU is used");
            return device_choice{backend_device::cuda,
                                 "backend.device = \"cuda\" over the host emulation (backend.test_emulate_device)"};
        }
        TANDEM_LOG_WARN("backend.test_emulate_device = true has no effect unless backend.device = \"cuda\"");
    }
    const gpu_info gpu = gpu_probe();
    if (gpu.device_count > 0)
        TANDEM_LOG_INFO("CUDA: {} GPU(s): {}; NCCL {}", gpu.device_count, gpu.devices, gpu.nccl_version);
    else
        TANDEM_LOG_INFO("CUDA: {}", gpu.reason);
    const cuda_capability cap = cuda_backend_capability();
    int64_t device_pool_bytes = 0;
    if (cfg.backend.device == "cuda" && gpu.device_count > 0) {
        result<int64_t> resolved = phase0_bring_up(cfg);
        if (!resolved) return resolved.error();
        device_pool_bytes = *resolved;
    }
    result<device_choice> choice = choose_backend_device(cfg.backend.device, gpu, cap);
    if (choice && choice->device == backend_device::cuda) choice->device_pool_bytes = device_pool_bytes;
    return choice;
}

}  // namespace tandem::cuda
