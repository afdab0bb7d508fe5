#include "cuda/host/device_memory_plan.h"

#include <cstdio>

namespace tandem::cuda {

namespace {

std::string mib(int64_t bytes) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return buf;
}

}  // namespace

const device_tensor* device_memory_plan::find(const std::string& name) const {
    for (const device_tensor& t : tensors)
        if (t.name == name) return &t;
    return nullptr;
}

namespace {

// The weight slab: every tensor as stored, in checkpoint name order, each start aligned.
status place_weights(const model::checkpoint& ck, device_memory_plan& p) {
    int64_t at = 0;
    for (const auto& [name, view] : ck.tensors()) {
        if (view->nbytes < 0)
            return make_error(error_code::data_loss, "tensor " + name + ": negative byte count");
        at = cache::align_up(at, device_memory_plan::k_tensor_alignment);
        p.tensors.push_back({name, view, at, view->nbytes});
        at += view->nbytes;
        p.stored_weight_bytes += view->nbytes;
    }
    p.weight_bytes = cache::align_up(at, device_memory_plan::k_tensor_alignment);
    return status::ok();
}

}  // namespace

result<int64_t> device_weight_bytes(const model::checkpoint& ck) {
    device_memory_plan p;
    TANDEM_RETURN_IF_ERROR(place_weights(ck, p));
    return p.weight_bytes;
}

result<int64_t> device_pool_budget(int64_t free_bytes, int64_t weight_bytes, int64_t scratch_bytes, int engines,
                                   double fraction) {
    if (engines < 1 || !(fraction > 0 && fraction <= 1))
        return make_error(error_code::invalid_argument, "device pool budget: engines < 1 or fraction outside (0, 1]");
    const int64_t left = free_bytes - weight_bytes - engines * scratch_bytes;
    if (left <= 0)
        return make_error(error_code::out_of_range,
                          "cache.memory_bytes = 0 sizes the pool from the GPU's free memory, but " + mib(free_bytes) +
                              " free holds no pool after the weights (" + mib(weight_bytes) + ") and " +
                              std::to_string(engines) + " × scratch (" + mib(scratch_bytes) + ")");
    return static_cast<int64_t>(fraction * static_cast<double>(left)) / engines;
}

result<device_memory_plan> plan_device_memory(const model::checkpoint& ck, const cache::pool_geometry& geometry,
                                              int64_t scratch_bytes, int engines) {
    if (scratch_bytes < 0) return make_error(error_code::invalid_argument, "device scratch bytes < 0");
    if (engines < 1) return make_error(error_code::invalid_argument, "device engines < 1");
    device_memory_plan p;
    p.engines = engines;
    TANDEM_RETURN_IF_ERROR(place_weights(ck, p));
    p.arena_bytes = geometry.total_bytes();
    p.num_pages = geometry.num_pages();
    p.epoch_offset = cache::align_up(p.arena_bytes, device_memory_plan::k_tensor_alignment);
    p.pool_bytes = cache::align_up(p.epoch_offset + p.num_pages * int64_t{sizeof(uint32_t)},
                                   device_memory_plan::k_tensor_alignment);
    p.scratch_bytes = cache::align_up(scratch_bytes, device_memory_plan::k_tensor_alignment);
    return p;
}

status check_device_fit(const device_memory_plan& plan, int64_t free_bytes, const std::string& gpu) {
    if (plan.total_bytes() <= free_bytes) return status::ok();
    const int64_t n = plan.engines;
    const std::string times = n > 1 ? std::to_string(n) + " × " : "";
    std::string why = "the model and cache pool" + std::string(n > 1 ? "s" : "") + " do not fit on " + gpu +
                      ": weights " + mib(plan.weight_bytes) + " + " + times + "pool " + mib(plan.pool_bytes) + " + " +
                      times + "scratch " + mib(plan.scratch_bytes) + " = " + mib(plan.total_bytes()) + ", but only " +
                      mib(free_bytes) + " is free";
    if (n > 1) why += " (pd role both: two engines, each with its own pool, sharing one copy of the weights)";
    if (plan.weight_bytes + n * plan.scratch_bytes > free_bytes)
        why += "; the weights alone do not fit (a model this size needs more GPUs, which this backend does not "
               "support yet)";
    else
        why += "; lower cache.memory_bytes" + std::string(n > 1 ? " (each engine's)" : "") + " to at most " +
               mib((free_bytes - plan.weight_bytes) / n - plan.scratch_bytes - (plan.pool_bytes - plan.arena_bytes));
    return make_error(error_code::out_of_range, why);
}

std::string describe_device_memory(const device_memory_plan& plan) {
    const std::string each = plan.engines > 1 ? " each for " + std::to_string(plan.engines) + " engines" : "";
    return "weights " + mib(plan.weight_bytes) + " (" + std::to_string(plan.tensors.size()) +
           " tensors as stored, one copy), pool " + mib(plan.pool_bytes) + " (" + std::to_string(plan.num_pages) +
           " pages + epochs)" + each + ", scratch " + mib(plan.scratch_bytes) + each;
}

}  // namespace tandem::cuda
