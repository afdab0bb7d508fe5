// cuda/ops_none.cpp — host/cuda_ops.h in a build without CUDA: every op answers `unavailable`,
// so the parity harness reports SKIP and the server says why the GPU is not used.
#include "cuda/host/cuda_ops.h"
#include "cuda/host/device_runtime.h"

namespace tandem::cuda {

namespace {
status no_cuda() {
    return make_error(error_code::unavailable,
                      "tandem was built without CUDA (meson option cuda=disabled or nvcc not found)");
}
}  // namespace

status op_embed_expand(const kmath::weight_view&, std::span<const int32_t>, int64_t, std::span<float>) { return no_cuda(); }
status op_linear(std::span<const float>, int64_t, const kmath::weight_view&, std::span<float>) { return no_cuda(); }
status op_rms_norm(std::span<const float>, int64_t, int64_t, const float*, float, std::span<float>) { return no_cuda(); }
status op_qdq_fp8(std::span<float>, int64_t, float) { return no_cuda(); }
status op_rope(std::span<float>, int64_t, int64_t, int64_t, std::span<const float>, std::span<const int64_t>, bool) {
    return no_cuda();
}
status op_hc_pre(const hc_shape&, std::span<const float>, std::span<const float>, std::span<const float>,
                 std::span<const float>, std::span<float>, std::span<float>, std::span<float>) {
    return no_cuda();
}
status op_hc_post(int64_t, int64_t, std::span<const float>, std::span<const float>, std::span<const float>,
                  std::span<const float>, std::span<float>) {
    return no_cuda();
}
status op_attention(std::span<const float>, int64_t, int64_t, int64_t, std::span<const float>, int64_t,
                    std::span<const int32_t>, std::span<const float>, float, std::span<float>) {
    return no_cuda();
}
status op_argmax(std::span<const float>, int64_t, int64_t, std::span<int32_t>) { return no_cuda(); }
status op_route(std::span<const float>, int64_t, int64_t, std::span<const float>, std::span<const int32_t>,
                std::span<const int32_t>, int32_t, bool, float, std::span<int32_t>, std::span<float>) {
    return no_cuda();
}
status op_swiglu(std::span<const float>, std::span<const float>, float, std::span<float>) { return no_cuda(); }
status op_moe_combine(std::span<const float>, int64_t, int32_t, int64_t, std::span<const float>, std::span<float>) {
    return no_cuda();
}
status op_encode_rows(const kmath::row_codec&, std::span<const float>, std::span<uint8_t>) { return no_cuda(); }
status op_decode_rows(const kmath::row_codec&, std::span<const uint8_t>, std::span<float>) { return no_cuda(); }
status op_indexer_scores(std::span<const float>, int64_t, int64_t, int64_t, std::span<const float>, std::span<const float>,
                         int64_t, std::span<const int32_t>, float, float, std::span<float>) {
    return no_cuda();
}
status op_compressor_pool(std::span<const float>, int64_t, int64_t, int64_t, bool, std::span<float>) { return no_cuda(); }
status op_official_sim(official_sim, std::span<float>, int64_t, int64_t) { return no_cuda(); }
status op_top_k(std::span<const float>, int64_t, int64_t, std::span<const int32_t>, int64_t, std::span<int32_t>,
                std::span<int32_t>) {
    return no_cuda();
}
status op_hc_head(const hc_shape&, std::span<const float>, std::span<const float>, std::span<const float>,
                  std::span<const float>, std::span<float>) {
    return no_cuda();
}
status op_gather_rows(std::span<const float>, int64_t, std::span<const int32_t>, std::span<float>) { return no_cuda(); }
status op_scatter_rows(std::span<const float>, int64_t, std::span<const int32_t>, std::span<float>) { return no_cuda(); }
status op_scale_rows(std::span<float>, int64_t, std::span<const float>) { return no_cuda(); }
status op_add(std::span<const float>, std::span<const float>, std::span<float>) { return no_cuda(); }
status op_kv_path(std::span<float>, int64_t, std::span<const float>, float, std::span<const float>, std::span<const int64_t>,
                  bool, int64_t, const kmath::row_codec&, std::span<uint8_t>) {
    return no_cuda();
}
status op_indexer_q_path(std::span<float>, int64_t, int64_t, std::span<const float>, std::span<const int64_t>, bool) {
    return no_cuda();
}
result<bandwidth_result> measure_bandwidth(int64_t, int64_t, int64_t, int) { return no_cuda(); }
result<double> measure_copy_gb_per_s(int) { return no_cuda(); }
result<bringup_report> bring_up_device(const device_memory_plan&) { return no_cuda(); }
result<int64_t> gpu0_free_bytes() { return no_cuda(); }
result<std::unique_ptr<device_runtime>> make_cuda_runtime() { return no_cuda(); }
bool cuda_forward_built() { return false; }

}  // namespace tandem::cuda
