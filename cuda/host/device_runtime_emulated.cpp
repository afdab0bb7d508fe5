// cuda/host/device_runtime_emulated.cpp — device_runtime in host memory: each kernel's grid as host loops
// with the same per-element function (kernel_math.h / kernel_codec.h) the CUDA kernels call. CI
// runs the whole device forward on it against the CPU model (test_device_forward.cpp).
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda/host/device_runtime.h"
#include "cuda/host/xxh3.h"

namespace tandem::cuda {

namespace k = tandem::kmath;

namespace {

class emulated_runtime final : public device_runtime {
public:
    explicit emulated_runtime(emulation_options opt) : opt_(opt) {}
    const char* name() const override { return "host emulation"; }
    std::string describe() const override { return "host emulation of the CUDA kernels (no GPU)"; }

    result<void*> alloc(int64_t bytes, const char* what) override {
        void* p = std::calloc(static_cast<size_t>(bytes), 1);
        if (!p) return make_error(error_code::out_of_range, std::string(what) + ": out of host memory");
        return p;
    }
    void free(void* p) override { std::free(p); }
    status upload(void* dst, const void* src, int64_t bytes) override { return copy(dst, src, bytes); }
    status download(void* dst, const void* src, int64_t bytes) override { return copy(dst, src, bytes); }
    status copy(void* dst, const void* src, int64_t bytes) override {
        if (bytes > 0) std::memmove(dst, src, static_cast<size_t>(bytes));
        return status::ok();
    }
    status synchronize() override { return status::ok(); }
    result<uint64_t> checksum(const void* src, int64_t bytes) override { return k::xxh3_64(src, bytes); }

    status embed_expand(const k::weight_view& embed, const int32_t* ids, int64_t rows, int64_t hc, float* h) override {
        const int64_t d = embed.cols;
        for (int64_t t = 0; t < rows; ++t) {
            if (ids[t] < 0 || ids[t] >= embed.rows) return make_error(error_code::out_of_range, "K1 embed: token id outside the vocabulary");
            for (int64_t e = 0; e < d; ++e) {
                const float v = embed.at(ids[t], e);
                for (int64_t j = 0; j < hc; ++j) h[(t * hc + j) * d + e] = v;
            }
        }
        return status::ok();
    }

    status linear(const float* x, int64_t ldx, int64_t rows, const k::weight_view& w, float* y, int64_t ldy) override {
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t o = 0; o < w.rows; ++o) y[r * ldy + o] = k::linear_output(x + r * ldx, w, o);
        return status::ok();
    }

    status act_quant_fp8(float* x, int64_t rows, int64_t n) override {
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t b0 = 0; b0 < n; b0 += 128) k::qdq_e4m3_block(x + r * n + b0, n - b0 < 128 ? n - b0 : 128, 1e-4f);
        return status::ok();
    }

    status rms_norm(const float* x, int64_t rows, int64_t n, const float* weight, float eps, float* y) override {
        for (int64_t r = 0; r < rows; ++r) {
            const float inv = k::rms_inverse(x + r * n, n, eps);
            for (int64_t i = 0; i < n; ++i) y[r * n + i] = k::rms_apply(x[r * n + i], weight, i, inv);
        }
        return status::ok();
    }

    status rope(float* x, int64_t rows, int64_t heads, int64_t dim, const float* inv_freq, int64_t half, const int64_t* pos,
                bool inverse) override {
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t h = 0; h < heads; ++h)
                for (int64_t i = 0; i < half; ++i)
                    k::rope_pair(x + (r * heads + h) * dim + dim - 2 * half, i, inv_freq[i], pos[r], inverse);
        return status::ok();
    }

    status official_sim(cuda::official_sim kind, float* x, int64_t rows, int64_t dim, int64_t nope) override {
        for (int64_t r = 0; r < rows; ++r) {
            if (kind == official_sim::kv_fp8) k::kv_fp8_sim(x + r * dim, nope, dim);
            else k::indexer_fp4_sim(x + r * dim, dim);
        }
        return status::ok();
    }

    status hc_pre(const hc_shape& s, int64_t rows, const float* h, const float* fn, const float* base, const float* scale,
                  float* collapsed, float* post, float* comb) override {
        if (s.n < 1 || s.n > 8) return make_error(error_code::invalid_argument, "K2 hc_pre: hc_mult outside [1, 8]");
        const int64_t nd = s.n * s.d, n_mix = (2 + s.n) * s.n;
        float mix[80], pre[8];
        for (int64_t t = 0; t < rows; ++t) {
            const float* ht = h + t * nd;
            const float inv = k::rms_inverse(ht, nd, s.norm_eps);
            for (int64_t j = 0; j < n_mix; ++j) {
                const float* f = fn + j * nd;
                mix[j] = k::fixed_dot_fn([f](int64_t i) { return f[i]; }, [ht, inv](int64_t i) { return ht[i] * inv; }, nd);
            }
            k::hc_pre_weights(s.n, s.hc_eps, s.sinkhorn_iters, mix, base, scale, pre, post + t * s.n, comb + t * s.n * s.n);
            for (int64_t e = 0; e < s.d; ++e) collapsed[t * s.d + e] = k::hc_collapse(s.n, s.d, pre, ht, e);
        }
        return status::ok();
    }

    status hc_post(int64_t n, int64_t d, int64_t rows, const float* out, const float* h, const float* post, const float* comb,
                   float* h_new) override {
        for (int64_t t = 0; t < rows; ++t)
            for (int64_t kk = 0; kk < n; ++kk)
                for (int64_t e = 0; e < d; ++e)
                    h_new[(t * n + kk) * d + e] = k::hc_post_element(n, d, out + t * d, h + t * n * d, post + t * n,
                                                                     comb + t * n * n, kk, e);
        return status::ok();
    }

    status hc_head(const hc_shape& s, int64_t rows, const float* h, const float* fn, const float* base, const float* scale,
                   float* x) override {
        if (s.n < 1 || s.n > 8) return make_error(error_code::invalid_argument, "K18 hc_head: hc_mult outside [1, 8]");
        const int64_t nd = s.n * s.d;
        float pre[8];
        for (int64_t t = 0; t < rows; ++t) {
            const float* ht = h + t * nd;
            k::hc_head_weights(s.n, s.d, s.norm_eps, s.hc_eps, ht, fn, base, scale, pre);
            for (int64_t e = 0; e < s.d; ++e) x[t * s.d + e] = k::hc_collapse(s.n, s.d, pre, ht, e);
        }
        return status::ok();
    }

    status attention(const float* q, int64_t rows, int64_t heads, int64_t dim, const float* key_rows, const int32_t* key_index,
                     int64_t max_keys, const int32_t* n_keys, const float* sinks, float scale, float* out) override {
        std::vector<float> logits(static_cast<size_t>(max_keys));
        for (int64_t t = 0; t < rows; ++t) {
            const int64_t nk = n_keys[t];
            if (nk < 0 || nk > max_keys) return make_error(error_code::out_of_range, "K13 attention: key count outside [0, max_keys]");
            const int32_t* idx = key_index + t * max_keys;
            auto key = [key_rows, idx, dim](int64_t j) { return key_rows + int64_t{idx[j]} * dim; };
            for (int64_t h = 0; h < heads; ++h) {
                const float* qh = q + (t * heads + h) * dim;
                for (int64_t j = 0; j < nk; ++j) logits[j] = k::fixed_dot(qh, key(j), dim) * scale;
                const float denom = k::attention_softmax(logits.data(), nk, sinks[h]);
                for (int64_t e = 0; e < dim; ++e)
                    out[(t * heads + h) * dim + e] = k::attention_output_element(logits.data(), denom, nk, key, e);
            }
        }
        return status::ok();
    }

    status indexer_scores(const float* q, int64_t rows, int64_t heads, int64_t dim, const float* w, const float* key_rows,
                          const int32_t* key_index, int64_t max_keys, const int32_t* n_keys, float idx_scale,
                          float head_scale, float* scores) override {
        for (int64_t t = 0; t < rows; ++t)
            for (int64_t j = 0; j < max_keys; ++j)
                scores[t * max_keys + j] =
                    j < n_keys[t] ? k::indexer_score(q + t * heads * dim, key_rows + int64_t{key_index[t * max_keys + j]} * dim,
                                                     heads, dim, w + t * heads, idx_scale, head_scale)
                                  : 0.0f;
        return status::ok();
    }

    status route(const float* logits, int64_t rows, int64_t experts, const float* bias, const int32_t* tid2eid,
                 const int32_t* token_ids, int32_t kk, bool official, float scale, int32_t* expert_out,
                 float* weight_out) override {
        if (kk < 1 || kk > 16 || kk > experts) return make_error(error_code::invalid_argument, "K15 route: k outside [1, min(16, experts)]");
        std::vector<float> s(static_cast<size_t>(experts)), b(s.size());
        int32_t sel[16];
        for (int64_t t = 0; t < rows; ++t) {
            for (int64_t e = 0; e < experts; ++e) {
                s[e] = k::sqrt_softplus(logits[t * experts + e]);
                b[e] = !tid2eid && bias ? s[e] + bias[e] : s[e];
            }
            if (tid2eid) {
                for (int32_t i = 0; i < kk; ++i) sel[i] = tid2eid[int64_t{token_ids[t]} * kk + i];
            } else {
                k::route_top_k(b.data(), static_cast<int32_t>(experts), kk, sel);
            }
            k::route_weights(s.data(), sel, kk, official, scale, expert_out + t * kk, weight_out + t * kk);
        }
        return status::ok();
    }

    status swiglu(const float* g, const float* u, int64_t n, float limit, float* out) override {
        for (int64_t i = 0; i < n; ++i) out[i] = k::swiglu(g[i], u[i], limit);
        return status::ok();
    }

    status scale_rows(float* x, int64_t rows, int64_t n, const float* w) override {
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < n; ++i) x[r * n + i] *= w[r];
        return status::ok();
    }

    status gather_rows(const float* src, int64_t width, const int32_t* index, int64_t rows, float* dst) override {
        for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * width, src + int64_t{index[r]} * width, size_t(width) * 4);
        return status::ok();
    }

    status scatter_rows(const float* src, int64_t width, const int32_t* index, int64_t rows, float* dst) override {
        for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + int64_t{index[r]} * width, src + r * width, size_t(width) * 4);
        return status::ok();
    }

    status add(const float* a, const float* b, int64_t n, float* out) override {
        for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
        return status::ok();
    }

    status moe_combine(const float* contrib, int64_t rows, int32_t slots, int64_t d, const float* shared, float* out) override {
        for (int64_t t = 0; t < rows; ++t)
            for (int64_t j = 0; j < d; ++j) {
                const float* c = contrib + t * slots * d + j;
                out[t * d + j] = k::moe_combine_element([c, d](int32_t sl) { return c[sl * d]; }, slots, shared[t * d + j]);
            }
        return status::ok();
    }

    status encode_rows(const k::row_codec& f, const float* values, int64_t n, uint8_t* const* dst) override {
        for (int64_t r = 0; r < n; ++r) k::encode_row(f, values + r * f.dims, dst[r]);
        return status::ok();
    }

    status decode_rows(const k::row_codec& f, const uint8_t* const* src, int64_t n, float* values) override {
        for (int64_t r = 0; r < n; ++r) k::decode_row(f, src[r], values + r * f.dims);
        return status::ok();
    }

    status kv_path(float* x, int64_t rows, int64_t dim, const float* norm_w, float eps, const float* inv_freq, int64_t half,
                   const int64_t* pos, bool official, int64_t nope, const k::row_codec& f, uint8_t* bytes) override {
        for (int64_t r = 0; r < rows; ++r)
            k::kv_path_row(x + r * dim, dim, norm_w, eps, inv_freq, half, pos[r], official, nope, f, bytes + r * f.bytes);
        return status::ok();
    }

    status indexer_q_path(float* x, int64_t rows, int64_t heads, int64_t dim, const float* inv_freq, int64_t half,
                          const int64_t* pos, bool official) override {
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t h = 0; h < heads; ++h) k::indexer_q_head(x + (r * heads + h) * dim, dim, inv_freq, half, pos[r], official);
        return status::ok();
    }

    status decode_kept_rows(const k::row_codec& f, const uint8_t* const* src, int64_t n, const int32_t* keep,
                            float* values) override {
        for (int64_t r = 0; r < n; ++r)
            if (keep[r]) k::decode_row(f, src[r], values + r * f.dims);
        return status::ok();
    }

    status compressor_update(const float* kv, const float* gate, const float* ape, float* const* rings, const int64_t* seq,
                             int64_t seqs, int64_t m, int64_t dim, bool overlap, float* pooled) override {
        const int64_t cd = (overlap ? 2 : 1) * dim;
        for (int64_t s = 0; s < seqs; ++s) {
            const int64_t* q = seq + 4 * s;  // row0, rows, start, emit0
            for (int64_t e = 0; e < dim; ++e)
                k::compressor_feed_feature(kv + q[0] * cd, gate + q[0] * cd, ape, rings[s], q[1], q[2], m, dim, overlap,
                                           pooled + q[3] * dim, e);
        }
        return status::ok();
    }

    status top_k(const float* scores, int64_t rows, int64_t ld, const int32_t* n_cand, int64_t kk, int32_t* sel,
                 int32_t* tied) override {
        for (int64_t r = 0; r < rows; ++r) {
            if (n_cand[r] < 0 || n_cand[r] > ld) return make_error(error_code::out_of_range, "K12 top-k: candidate count outside [0, ld]");
            tied[r] = k::top_k_row(scores + r * ld, n_cand[r], kk, sel + r * kk) ? 1 : 0;
            if (opt_.flag_every_top_k_row_tied && n_cand[r] > kk) tied[r] = 1;
        }
        return status::ok();
    }

    status place_selected(const int32_t* sel, int64_t rows, int64_t kk, const int32_t* at, const int32_t* base,
                          int32_t* key_index, int64_t ld, int32_t* keep) override {
        for (int64_t r = 0; r < rows; ++r) {
            if (at[r] < 0) continue;
            for (int64_t j = 0; j < kk; ++j) {
                const int32_t id = sel[r * kk + j];
                if (id < 0) continue;
                key_index[r * ld + at[r] + j] = base[r] + id;
                keep[base[r] + id] = 1;
            }
        }
        return status::ok();
    }

private:
    emulation_options opt_;
};

}  // namespace

std::unique_ptr<device_runtime> make_emulated_runtime(emulation_options opt) { return std::make_unique<emulated_runtime>(opt); }

}  // namespace tandem::cuda
