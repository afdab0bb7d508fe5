// bench/cuda/weight_read_counter.h — A device_runtime that forwards every call to another and
// counts the weight bytes its linear calls read (values + scales of the rows each call covers).
// The decode benchmark's roofline: one step's counted bytes ÷ the measured copy bandwidth is the
// least time any kernel could take to read them — exact per step, whatever the routing picked
// (each expert with rows is one linear call per matrix; a weight read by several rows of a batch
// counts once, as an ideal kernel reads it).
#pragma once

#include <memory>
#include <string>

#include "cuda/host/device_runtime.h"

namespace tandem::cuda {

class weight_read_counter final : public device_runtime {
public:
    explicit weight_read_counter(std::unique_ptr<device_runtime> inner) : in_(std::move(inner)) {}
    int64_t bytes = 0;  // since the last reset by the caller

    const char* name() const override { return in_->name(); }
    std::string describe() const override { return in_->describe(); }
    result<void*> alloc(int64_t b, const char* what) override { return in_->alloc(b, what); }
    void free(void* p) override { in_->free(p); }
    status upload(void* d, const void* s, int64_t b) override { return in_->upload(d, s, b); }
    status download(void* d, const void* s, int64_t b) override { return in_->download(d, s, b); }
    status copy(void* d, const void* s, int64_t b) override { return in_->copy(d, s, b); }
    status synchronize() override { return in_->synchronize(); }
    result<uint64_t> checksum(const void* s, int64_t b) override { return in_->checksum(s, b); }

    status linear(const float* x, int64_t ldx, int64_t rows, const kmath::weight_view& w, float* y, int64_t ldy) override {
        if (rows > 0) bytes += w.rows * w.row_bytes() + scale_bytes(w);
        return in_->linear(x, ldx, rows, w, y, ldy);
    }

    status embed_expand(const kmath::weight_view& e, const int32_t* ids, int64_t rows, int64_t hc, float* h) override {
        return in_->embed_expand(e, ids, rows, hc, h);
    }
    status act_quant_fp8(float* x, int64_t rows, int64_t n) override { return in_->act_quant_fp8(x, rows, n); }
    status rms_norm(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y) override {
        return in_->rms_norm(x, rows, n, w, eps, y);
    }
    status rope(float* x, int64_t rows, int64_t heads, int64_t dim, const float* f, int64_t half, const int64_t* pos,
                bool inverse) override {
        return in_->rope(x, rows, heads, dim, f, half, pos, inverse);
    }
    status official_sim(cuda::official_sim kind, float* x, int64_t rows, int64_t dim, int64_t nope) override {
        return in_->official_sim(kind, x, rows, dim, nope);
    }
    status hc_pre(const hc_shape& s, int64_t rows, const float* h, const float* fn, const float* base, const float* scale,
                  float* collapsed, float* post, float* comb) override {
        return in_->hc_pre(s, rows, h, fn, base, scale, collapsed, post, comb);
    }
    status hc_post(int64_t n, int64_t d, int64_t rows, const float* out, const float* h, const float* post, const float* comb,
                   float* h_new) override {
        return in_->hc_post(n, d, rows, out, h, post, comb, h_new);
    }
    status hc_head(const hc_shape& s, int64_t rows, const float* h, const float* fn, const float* base, const float* scale,
                   float* x) override {
        return in_->hc_head(s, rows, h, fn, base, scale, x);
    }
    status attention(const float* q, int64_t rows, int64_t heads, int64_t dim, const float* keys, const int32_t* idx,
                     int64_t max_keys, const int32_t* n_keys, const float* sinks, float scale, float* out) override {
        return in_->attention(q, rows, heads, dim, keys, idx, max_keys, n_keys, sinks, scale, out);
    }
    status indexer_scores(const float* q, int64_t rows, int64_t heads, int64_t dim, const float* w, const float* keys,
                          const int32_t* idx, int64_t max_keys, const int32_t* n_keys, float idx_scale, float head_scale,
                          float* scores) override {
        return in_->indexer_scores(q, rows, heads, dim, w, keys, idx, max_keys, n_keys, idx_scale, head_scale, scores);
    }
    status route(const float* logits, int64_t rows, int64_t experts, const float* bias, const int32_t* tid2eid,
                 const int32_t* token_ids, int32_t k, bool official, float scale, int32_t* e, float* w) override {
        return in_->route(logits, rows, experts, bias, tid2eid, token_ids, k, official, scale, e, w);
    }
    status swiglu(const float* g, const float* u, int64_t n, float limit, float* out) override {
        return in_->swiglu(g, u, n, limit, out);
    }
    status scale_rows(float* x, int64_t rows, int64_t n, const float* w) override { return in_->scale_rows(x, rows, n, w); }
    status gather_rows(const float* s, int64_t width, const int32_t* i, int64_t rows, float* d) override {
        return in_->gather_rows(s, width, i, rows, d);
    }
    status scatter_rows(const float* s, int64_t width, const int32_t* i, int64_t rows, float* d) override {
        return in_->scatter_rows(s, width, i, rows, d);
    }
    status add(const float* a, const float* b, int64_t n, float* out) override { return in_->add(a, b, n, out); }
    status moe_combine(const float* c, int64_t rows, int32_t slots, int64_t d, const float* shared, float* out) override {
        return in_->moe_combine(c, rows, slots, d, shared, out);
    }
    status encode_rows(const kmath::row_codec& f, const float* v, int64_t n, uint8_t* const* dst) override {
        return in_->encode_rows(f, v, n, dst);
    }
    status decode_rows(const kmath::row_codec& f, const uint8_t* const* src, int64_t n, float* v) override {
        return in_->decode_rows(f, src, n, v);
    }
    status kv_path(float* x, int64_t rows, int64_t dim, const float* w, float eps, const float* inv_freq, int64_t half,
                   const int64_t* pos, bool official, int64_t nope, const kmath::row_codec& f, uint8_t* bytes) override {
        return in_->kv_path(x, rows, dim, w, eps, inv_freq, half, pos, official, nope, f, bytes);
    }
    status indexer_q_path(float* x, int64_t rows, int64_t heads, int64_t dim, const float* inv_freq, int64_t half,
                          const int64_t* pos, bool official) override {
        return in_->indexer_q_path(x, rows, heads, dim, inv_freq, half, pos, official);
    }
    status decode_kept_rows(const kmath::row_codec& f, const uint8_t* const* src, int64_t n, const int32_t* keep,
                            float* v) override {
        return in_->decode_kept_rows(f, src, n, keep, v);
    }
    status compressor_update(const float* kv, const float* gate, const float* ape, float* const* rings, const int64_t* seq,
                             int64_t seqs, int64_t m, int64_t dim, bool overlap, float* pooled) override {
        return in_->compressor_update(kv, gate, ape, rings, seq, seqs, m, dim, overlap, pooled);
    }
    status top_k(const float* s, int64_t rows, int64_t ld, const int32_t* n, int64_t k, int32_t* sel, int32_t* tied) override {
        return in_->top_k(s, rows, ld, n, k, sel, tied);
    }
    status place_selected(const int32_t* sel, int64_t rows, int64_t k, const int32_t* at, const int32_t* base,
                          int32_t* key_index, int64_t ld, int32_t* keep) override {
        return in_->place_selected(sel, rows, k, at, base, key_index, ld, keep);
    }

private:
    static int64_t scale_bytes(const kmath::weight_view& w) {
        if (w.scale == kmath::sform::none) return 0;
        const int64_t blocks = (w.row0 + w.rows + w.block_rows - 1) / w.block_rows - w.row0 / w.block_rows;
        return blocks * w.scale_cols * (w.scale == kmath::sform::f32 ? 4 : 1);
    }
    std::unique_ptr<device_runtime> in_;
};

}  // namespace tandem::cuda
