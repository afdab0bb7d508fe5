// cuda/host/device_runtime.h — The operations the device forward pass (device_forward.h) is written
// against: memory of one address space plus the phase-1 kernels over pointers into it.
//
// Why an interface and not the host-buffer ops of cuda_ops.h: the forward keeps weights, the cache
// pool and activations resident where they are computed, so every pointer here lives in the
// implementation's own address space — device memory for the CUDA implementation
// (cuda/device_runtime.cu), plain host memory for the emulation (device_runtime_emulated.cpp), which CI
// runs so the forward's plumbing (metadata, pool offsets, ring indexing, grouping) is tested
// without a GPU. Both implementations compute each output element with the same kernel_math.h
// function as the CPU reference, one element per (emulated) thread, so the emulation is bit-equal
// to the CPU and the device differs only where its libm does (expf/sinf/cosf; spec §5.6 tier 2).
//
// Pointer arguments are in this space unless named host_*. Shapes are row-major. Every call
// returns a status naming the op; nothing throws.
#pragma once

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "cuda/host/cuda_ops.h"
#include "cuda/host/kernel_paths.h"

namespace tandem::cuda {

class device_runtime {
public:
    virtual ~device_runtime() = default;
    virtual const char* name() const = 0;
    // What this space is, for the startup log ("NVIDIA H200, 139 GiB free" / "host emulation").
    virtual std::string describe() const = 0;

    // ---- memory --------------------------------------------------------------------------------
    virtual result<void*> alloc(int64_t bytes, const char* what) = 0;  // zero-filled
    virtual void free(void* p) = 0;
    virtual status upload(void* dst, const void* host_src, int64_t bytes) = 0;
    virtual status download(void* host_dst, const void* src, int64_t bytes) = 0;
    virtual status copy(void* dst, const void* src, int64_t bytes) = 0;
    // XXH3-64 (seed 0; libxxhash's XXH3_64bits) of `bytes` bytes at `src` in this space, computed
    // there (kmath::xxh3_64, cuda/host/xxh3.h): one kernel launch and an 8-byte download on a GPU.
    virtual result<uint64_t> checksum(const void* src, int64_t bytes) = 0;
    // Waits for every queued kernel; the first failure since the last call comes back here.
    virtual status synchronize() = 0;

    // ---- kernels (spec §5.4 numbers) ----------------------------------------------------------
    // K1: h[r, j, :] = embed[ids[r], :] for j < hc.
    virtual status embed_expand(const kmath::weight_view& embed, const int32_t* ids, int64_t rows, int64_t hc,
                                float* h) = 0;
    // K4/K5/K6: y[r, ldy-strided][o] = Σ_k x[r, ldx-strided][k] · w(o, k), weights decoded as stored.
    virtual status linear(const float* x, int64_t ldx, int64_t rows, const kmath::weight_view& w, float* y,
                          int64_t ldy) = 0;
    // numerics "official": FP8 QDQ of each row of n in blocks of 128 (amax floor 1e-4), in place.
    virtual status act_quant_fp8(float* x, int64_t rows, int64_t n) = 0;
    // K3: y = weight ⊙ (x · rsqrt(mean(x²) + eps)) per row of n; weight may be null; y may be x.
    virtual status rms_norm(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y) = 0;
    // RoPE over the last 2·half dims of each [rows, heads, dim] head at pos[row] (inverse: undo).
    virtual status rope(float* x, int64_t rows, int64_t heads, int64_t dim, const float* inv_freq, int64_t half,
                        const int64_t* pos, bool inverse) = 0;
    // K8 / K10 official simulations per row of dim, in place.
    virtual status official_sim(cuda::official_sim kind, float* x, int64_t rows, int64_t dim, int64_t nope) = 0;
    // K8 kv path after its linear, per row of dim in place (kmath::kv_path_row): RMSNorm with
    // norm_w, RoPE at pos[row], official FP8 simulation over the first `nope` dims, storage round
    // trip through f (bytes: rows · f.bytes of scratch). One launch for the chain of five.
    virtual status kv_path(float* x, int64_t rows, int64_t dim, const float* norm_w, float eps, const float* inv_freq,
                           int64_t half, const int64_t* pos, bool official, int64_t nope, const kmath::row_codec& f,
                           uint8_t* bytes) = 0;
    // K10 indexer q path after its linear, per [rows, heads, dim] head in place
    // (kmath::indexer_q_head): RoPE at pos[row], then (official) Hadamard + FP4.
    virtual status indexer_q_path(float* x, int64_t rows, int64_t heads, int64_t dim, const float* inv_freq, int64_t half,
                                  const int64_t* pos, bool official) = 0;
    // K2: mHC pre → collapsed [rows, d], post [rows, n], comb [rows, n, n].
    virtual status hc_pre(const hc_shape& s, int64_t rows, const float* h, const float* fn, const float* base,
                          const float* scale, float* collapsed, float* post, float* comb) = 0;
    // K17: h_new [rows, n, d] (must not alias h).
    virtual status hc_post(int64_t n, int64_t d, int64_t rows, const float* out, const float* h, const float* post,
                           const float* comb, float* h_new) = 0;
    // K18 HC head: the final collapse without Sinkhorn: fn [n, n·d], base [n], scale [1] → x [rows, d].
    virtual status hc_head(const hc_shape& s, int64_t rows, const float* h, const float* fn, const float* base,
                           const float* scale, float* x) = 0;
    // K13: per (row, head): softmax with sink over the row's keys key_rows[key_index[row, j]]
    // (j < n_keys[row], width dim, K = V) → out [rows, heads, dim].
    virtual status attention(const float* q, int64_t rows, int64_t heads, int64_t dim, const float* key_rows,
                             const int32_t* key_index, int64_t max_keys, const int32_t* n_keys, const float* sinks,
                             float scale, float* out) = 0;
    // K11: scores [rows, max_keys] of the row's candidate index-K rows (same indexing as attention);
    // entries past n_keys[row] are 0.
    virtual status indexer_scores(const float* q, int64_t rows, int64_t heads, int64_t dim, const float* w,
                                  const float* key_rows, const int32_t* key_index, int64_t max_keys,
                                  const int32_t* n_keys, float idx_scale, float head_scale, float* scores) = 0;
    // K15: experts [rows, k] ascending with weights; tid2eid null → top-k of score + bias (bias may be null).
    virtual status route(const float* logits, int64_t rows, int64_t experts, const float* bias, const int32_t* tid2eid,
                         const int32_t* token_ids, int32_t k, bool official, float scale, int32_t* expert_out,
                         float* weight_out) = 0;
    // K5 epilogue, elementwise over n.
    virtual status swiglu(const float* g, const float* u, int64_t n, float limit, float* out) = 0;
    // x[r, :] *= w[r] over rows of n.
    virtual status scale_rows(float* x, int64_t rows, int64_t n, const float* w) = 0;
    // dst[i, :] = src[index[i], :] / dst[index[i], :] = src[i, :], rows of `width` floats.
    virtual status gather_rows(const float* src, int64_t width, const int32_t* index, int64_t rows, float* dst) = 0;
    virtual status scatter_rows(const float* src, int64_t width, const int32_t* index, int64_t rows, float* dst) = 0;
    // out = a + b, elementwise over n.
    virtual status add(const float* a, const float* b, int64_t n, float* out) = 0;
    // K16: out [rows, d] = Σ_slots contrib [rows, slots, d] (ascending slot) + shared.
    virtual status moe_combine(const float* contrib, int64_t rows, int32_t slots, int64_t d, const float* shared,
                               float* out) = 0;
    // K8/K9 store and the attention read path over scattered rows: dst/src are arrays (in this
    // space) of n row addresses (pool rows or scratch).
    virtual status encode_rows(const kmath::row_codec& f, const float* values, int64_t n, uint8_t* const* dst) = 0;
    virtual status decode_rows(const kmath::row_codec& f, const uint8_t* const* src, int64_t n, float* values) = 0;
    // decode_rows for the rows i with keep[i] != 0 only (the others are left as they were): the
    // compressed rows some query of the step attends to.
    virtual status decode_kept_rows(const kmath::row_codec& f, const uint8_t* const* src, int64_t n, const int32_t* keep,
                                    float* values) = 0;
    // K9 for one compressor over the whole step, one launch: sequence s (seq [s, 4] = row0, rows,
    // start position, first emission index) feeds its rows of kv / gate [T, cd] through rings[s]
    // in token order (kmath::compressor_feed_feature); each window it closes is pooled into
    // pooled [emission, dim]. ape [m, cd] is the position bias.
    virtual status compressor_update(const float* kv, const float* gate, const float* ape, float* const* rings,
                                     const int64_t* seq, int64_t seqs, int64_t m, int64_t dim, bool overlap,
                                     float* pooled) = 0;
    // K12: per row r, the k best of scores[r · ld + 0 .. n_cand[r]) ascending into sel [rows, k]
    // (−1 padded when n_cand[r] < k) and tied[r] = 1 when the k-th boundary is an exact tie (the
    // caller must then run the CPU's selection: kmath::top_k_row).
    virtual status top_k(const float* scores, int64_t rows, int64_t ld, const int32_t* n_cand, int64_t k, int32_t* sel,
                         int32_t* tied) = 0;
    // K12 epilogue, for rows with at[r] ≥ 0: key_index[r · ld + at[r] + j] = base[r] + sel[r · k + j]
    // and keep[that key] = 1, for each j with sel ≥ 0 (the attention's compressed keys, and the
    // rows decode_kept_rows must decode).
    virtual status place_selected(const int32_t* sel, int64_t rows, int64_t k, const int32_t* at, const int32_t* base,
                                  int32_t* key_index, int64_t ld, int32_t* keep) = 0;
};

// The host emulation (always available; what CI tests). flag_every_top_k_row_tied (tests only)
// makes K12 report every scored row as tied at its boundary, so the executor's host fallback runs
// on every row: the logits must not change.
struct emulation_options {
    bool flag_every_top_k_row_tied = false;
};
std::unique_ptr<device_runtime> make_emulated_runtime(emulation_options opt = {});
// GPU 0 (unavailable without CUDA or without a usable GPU, with the reason).
result<std::unique_ptr<device_runtime>> make_cuda_runtime();
// Whether this build has the CUDA implementation (nvcc found at configure time).
bool cuda_forward_built();

// A buffer of one device_runtime space; frees itself.
class device_buffer {
public:
    device_buffer() = default;
    device_buffer(device_runtime* ops, void* p, int64_t bytes) : ops_(ops), p_(p), bytes_(bytes) {}
    ~device_buffer() { reset(); }
    device_buffer(device_buffer&& o) noexcept : ops_(o.ops_), p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; }
    device_buffer& operator=(device_buffer&& o) noexcept {
        if (this != &o) {
            reset();
            ops_ = o.ops_, p_ = o.p_, bytes_ = o.bytes_;
            o.p_ = nullptr;
        }
        return *this;
    }
    device_buffer(const device_buffer&) = delete;
    device_buffer& operator=(const device_buffer&) = delete;

    static result<device_buffer> alloc(device_runtime& ops, int64_t bytes, const char* what) {
        if (bytes <= 0) return device_buffer(&ops, nullptr, 0);
        result<void*> p = ops.alloc(bytes, what);
        if (!p) return p.error();
        return device_buffer(&ops, *p, bytes);
    }
    template <typename T = void>
    T* get() const { return static_cast<T*>(p_); }
    int64_t bytes() const { return bytes_; }
    void reset() {
        if (p_ && ops_) ops_->free(p_);
        p_ = nullptr;
        bytes_ = 0;
    }

private:
    device_runtime* ops_ = nullptr;
    void* p_ = nullptr;
    int64_t bytes_ = 0;
};

}  // namespace tandem::cuda
