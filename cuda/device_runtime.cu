// cuda/device_runtime.cu — device_runtime (host/device_runtime.h) on GPU 0, for the device forward:
// device memory, copies, and each compute op as one launch of the phase-1 kernel in kernels_*.cu
// (through kernel_launch.h). This file defines no kernel, so the parity harness (which runs the
// same kernels through host/cuda_ops.h) tests exactly what the executor launches. Everything runs
// on the legacy default stream, so a cudaMemcpy after a launch sees its results and scratch reuse
// between ops is ordered. Launch errors come back per call; execution errors at synchronize().
#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "cuda/device_resources.h"
#include "cuda/host/device_runtime.h"
#include "cuda/kernel_launch.h"

namespace tandem::cuda {

namespace k = tandem::kmath;

namespace {

// The legacy default stream: a cudaMemcpy after a launch sees its results, and scratch reuse
// between ops is ordered without events.
constexpr cudaStream_t k_stream = 0;

class cuda_runtime final : public device_runtime {
public:
    explicit cuda_runtime(std::string gpu) : gpu_(std::move(gpu)) {}
    const char* name() const override { return "cuda"; }
    std::string describe() const override { return gpu_; }

    result<void*> alloc(int64_t bytes, const char* what) override {
        void* p = nullptr;
        TANDEM_CUDA_TRY(cudaMalloc(&p, static_cast<size_t>(bytes)), what);
        status st = cuda_status(cudaMemset(p, 0, static_cast<size_t>(bytes)), what);
        if (!st) {
            cudaFree(p);
            return st;
        }
        return p;
    }
    void free(void* p) override { cudaFree(p); }
    status upload(void* dst, const void* src, int64_t bytes) override {
        return bytes > 0 ? cuda_status(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice), "upload")
                         : status::ok();
    }
    status download(void* dst, const void* src, int64_t bytes) override {
        return bytes > 0 ? cuda_status(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost), "download")
                         : status::ok();
    }
    status copy(void* dst, const void* src, int64_t bytes) override {
        return bytes > 0 ? cuda_status(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, 0),
                                       "device copy")
                         : status::ok();
    }
    status synchronize() override { return cuda_status(cudaDeviceSynchronize(), "running the step's kernels"); }
    // One launch over the span, then the 8-byte result downloaded (the legacy stream orders it
    // after the launch and after every copy queued before). The result word is per instance, so
    // concurrent callers serialise on it.
    result<uint64_t> checksum(const void* src, int64_t bytes) override {
        std::lock_guard lock(checksum_mu_);
        if (checksum_out_.bytes() == 0) {
            result<device_memory> m = device_memory::alloc(8, "XXH3 result word");
            if (!m) return m.error();
            checksum_out_ = std::move(m.value());
        }
        TANDEM_RETURN_IF_ERROR(launch_xxh3(src, bytes, checksum_out_.get<uint64_t>(), k_stream));
        uint64_t h = 0;
        TANDEM_RETURN_IF_ERROR(cuda_status(cudaMemcpy(&h, checksum_out_.get(), 8, cudaMemcpyDeviceToHost), "device XXH3"));
        return h;
    }

    // ---- kernels: each one launch of its kernels_*.cu kernel (kernel_launch.h) ----
    status embed_expand(const k::weight_view& embed, const int32_t* ids, int64_t rows, int64_t hc, float* h) override {
        return launch_embed_expand(embed, ids, rows, hc, h, k_stream);
    }
    status linear(const float* x, int64_t ldx, int64_t rows, const k::weight_view& w, float* y, int64_t ldy) override {
        return launch_linear(x, ldx, rows, w, y, ldy, k_stream);
    }
    status act_quant_fp8(float* x, int64_t rows, int64_t n) override {
        return launch_qdq_fp8(x, rows, n, 128, 1e-4f, k_stream);  // model::act_quant_fp8's block and amax floor
    }
    status rms_norm(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y) override {
        return launch_rms_norm(x, rows, n, weight, eps, y, k_stream);
    }
    status rope(float* x, int64_t rows, int64_t heads, int64_t dim, const float* inv_freq, int64_t half, const int64_t* pos,
                bool inverse) override {
        return launch_rope(x, rows, heads, dim, inv_freq, half, pos, inverse, k_stream);
    }
    status official_sim(cuda::official_sim kind, float* x, int64_t rows, int64_t dim, int64_t nope) override {
        return launch_official_sim(kind, x, rows, dim, nope, k_stream);
    }
    status hc_pre(const hc_shape& s, int64_t rows, const float* h, const float* fn, const float* base, const float* scale,
                  float* collapsed, float* post, float* comb) override {
        return launch_hc_pre(s, rows, h, fn, base, scale, collapsed, post, comb, k_stream);
    }
    status hc_post(int64_t n, int64_t d, int64_t rows, const float* out, const float* h, const float* post, const float* comb,
                   float* h_new) override {
        return launch_hc_post(n, d, rows, out, h, post, comb, h_new, k_stream);
    }
    status hc_head(const hc_shape& s, int64_t rows, const float* h, const float* fn, const float* base, const float* scale,
                   float* x) override {
        return launch_hc_head(s, rows, h, fn, base, scale, x, k_stream);
    }
    status attention(const float* q, int64_t rows, int64_t heads, int64_t dim, const float* key_rows, const int32_t* key_index,
                     int64_t max_keys, const int32_t* n_keys, const float* sinks, float scale, float* out) override {
        return launch_attention(q, rows, heads, dim, key_rows, key_index, max_keys, n_keys, sinks, scale, out, k_stream);
    }
    status indexer_scores(const float* q, int64_t rows, int64_t heads, int64_t dim, const float* w, const float* key_rows,
                          const int32_t* key_index, int64_t max_keys, const int32_t* n_keys, float idx_scale,
                          float head_scale, float* scores) override {
        return launch_indexer_scores(q, rows, heads, dim, w, key_rows, key_index, max_keys, n_keys, idx_scale, head_scale,
                                     scores, k_stream);
    }
    status route(const float* logits, int64_t rows, int64_t experts, const float* bias, const int32_t* tid2eid,
                 const int32_t* token_ids, int32_t kk, bool official, float scale, int32_t* expert_out,
                 float* weight_out) override {
        const int64_t need = 2 * rows * experts * 4;
        if (route_scratch_.bytes() < need) {
            route_scratch_.reset();
            result<device_memory> m = device_memory::alloc(need, "K15 route scratch");
            if (!m) return m.error();
            route_scratch_ = std::move(m.value());
        }
        return launch_route(logits, rows, experts, bias, tid2eid, token_ids, kk, official, scale, route_scratch_.get<float>(),
                            expert_out, weight_out, k_stream);
    }
    status swiglu(const float* g, const float* u, int64_t n, float limit, float* out) override {
        return launch_swiglu(g, u, n, limit, out, k_stream);
    }
    status scale_rows(float* x, int64_t rows, int64_t n, const float* w) override {
        return launch_scale_rows(x, rows, n, w, k_stream);
    }
    status gather_rows(const float* src, int64_t width, const int32_t* index, int64_t rows, float* dst) override {
        return launch_gather_rows(src, width, index, rows, dst, k_stream);
    }
    status scatter_rows(const float* src, int64_t width, const int32_t* index, int64_t rows, float* dst) override {
        return launch_scatter_rows(src, width, index, rows, dst, k_stream);
    }
    status add(const float* a, const float* b, int64_t n, float* out) override { return launch_add(a, b, n, out, k_stream); }
    status moe_combine(const float* contrib, int64_t rows, int32_t slots, int64_t d, const float* shared, float* out) override {
        return launch_moe_combine(contrib, rows, slots, d, shared, out, k_stream);
    }
    status encode_rows(const k::row_codec& f, const float* values, int64_t n, uint8_t* const* dst) override {
        return launch_encode_rows(f, values, n, dst, k_stream);
    }
    status decode_rows(const k::row_codec& f, const uint8_t* const* src, int64_t n, float* values) override {
        return launch_decode_rows(f, src, n, nullptr, values, k_stream);
    }
    status kv_path(float* x, int64_t rows, int64_t dim, const float* norm_w, float eps, const float* inv_freq, int64_t half,
                   const int64_t* pos, bool official, int64_t nope, const k::row_codec& f, uint8_t* bytes) override {
        return launch_kv_path(x, rows, dim, norm_w, eps, inv_freq, half, pos, official, nope, f, bytes, k_stream);
    }
    status indexer_q_path(float* x, int64_t rows, int64_t heads, int64_t dim, const float* inv_freq, int64_t half,
                          const int64_t* pos, bool official) override {
        return launch_indexer_q_path(x, rows, heads, dim, inv_freq, half, pos, official, k_stream);
    }
    status decode_kept_rows(const k::row_codec& f, const uint8_t* const* src, int64_t n, const int32_t* keep,
                            float* values) override {
        return launch_decode_rows(f, src, n, keep, values, k_stream);
    }
    status compressor_update(const float* kv, const float* gate, const float* ape, float* const* rings, const int64_t* seq,
                             int64_t seqs, int64_t m, int64_t dim, bool overlap, float* pooled) override {
        return launch_compressor_update(kv, gate, ape, rings, seq, seqs, m, dim, overlap, pooled, k_stream);
    }
    status top_k(const float* scores, int64_t rows, int64_t ld, const int32_t* n_cand, int64_t kk, int32_t* sel,
                 int32_t* tied) override {
        return launch_top_k(scores, rows, ld, n_cand, kk, sel, tied, k_stream);
    }
    status place_selected(const int32_t* sel, int64_t rows, int64_t kk, const int32_t* at, const int32_t* base,
                          int32_t* key_index, int64_t ld, int32_t* keep) override {
        return launch_place_selected(sel, rows, kk, at, base, key_index, ld, keep, k_stream);
    }

private:
    std::string gpu_;
    device_memory route_scratch_;
    std::mutex checksum_mu_;
    device_memory checksum_out_;
};

}  // namespace

bool cuda_forward_built() { return true; }

result<std::unique_ptr<device_runtime>> make_cuda_runtime() {
    result<gpu0_info> gpu = select_gpu0("no usable GPU (cudaGetDeviceCount found none)");
    if (!gpu) return gpu.error();
    return std::unique_ptr<device_runtime>(
        new cuda_runtime(gpu->label + ", " + std::to_string(gpu->free_bytes >> 20) + " MiB free)"));
}

}  // namespace tandem::cuda
