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

status phase0_bring_up(const config& cfg) {
    result<cache::cache_plan> plan = cache::make_cache_plan(cfg);
    if (!plan) return plan.error();
    result<model::checkpoint> ck = model::checkpoint::open_dir(cfg.model.path);
    if (!ck) return ck.error().with_context("model.path");
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
    return status::ok();
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
    if (cfg.backend.device == "cuda" && gpu.device_count > 0) TANDEM_RETURN_IF_ERROR(phase0_bring_up(cfg));
    return choose_backend_device(cfg.backend.device, gpu, cap);
}

}  // namespace tandem::cuda
