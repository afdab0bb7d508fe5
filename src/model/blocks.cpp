// model/blocks.cpp — RoPE tables and mHC (pre/post/Sinkhorn/head).
//
// Op order follows HF transformers' modeling_deepseek_v4.py (the golden reference) so fp32
// results agree to rounding: e.g. the HC input norm is one unweighted RMSNorm over all n·d
// values, `post` has no eps, the Sinkhorn loop starts with a column normalization, and the comb
// matrix is used transposed.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "cpu/kernels.h"
#include "model/forward.h"

namespace tandem::model {

// ---- RoPE ---------------------------------------------------------------------------------

rope_table make_rope_table(const rope_config& r, int64_t head_dim) {
    rope_table t;
    int64_t dim = static_cast<int64_t>(static_cast<double>(head_dim) * r.partial_rotary_factor);
    int64_t half = dim / 2;
    t.inv_freq.resize(static_cast<size_t>(half));
    const float base = static_cast<float>(r.theta);
    std::vector<float> extrap(static_cast<size_t>(half)), interp(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
        // fp32 like torch: base ** (arange(0, dim, 2) / dim), then 1 / that.
        float pos_freq = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
        extrap[static_cast<size_t>(i)] = 1.0f / pos_freq;
        interp[static_cast<size_t>(i)] = 1.0f / (static_cast<float>(r.factor) * pos_freq);
    }
    if (r.type != "yarn") {
        t.inv_freq = extrap;
        return t;
    }
    auto correction_dim = [&](double rotations) {
        return (static_cast<double>(dim) *
                std::log(static_cast<double>(r.original_max_position_embeddings) / (rotations * 2.0 * M_PI))) /
               (2.0 * std::log(r.theta));
    };
    double low = std::max(std::floor(correction_dim(r.beta_fast)), 0.0);
    double high = std::min(std::ceil(correction_dim(r.beta_slow)), static_cast<double>(dim - 1));
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < half; ++i) {
        float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
        ramp = std::clamp(ramp, 0.0f, 1.0f);
        float extrap_factor = 1.0f - ramp;
        size_t k = static_cast<size_t>(i);
        t.inv_freq[k] = interp[k] * (1.0f - extrap_factor) + extrap[k] * extrap_factor;
    }
    return t;
}

namespace {

// Pair i's cosine and sine at position p (the sine negated for the inverse), and its rotation:
// apply(), angles() and rotate() all go through these two, so they agree bit for bit.
void angle_of(float p, float inv_freq, bool inverse, float& cs, float& sn) {
    const float angle = p * inv_freq;
    cs = std::cos(angle);
    sn = inverse ? -std::sin(angle) : std::sin(angle);
}
void rotate_pair(float* x, size_t i, float cs, float sn) {
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * cs + (-b) * sn;
    x[2 * i + 1] = b * cs + a * sn;
}

}  // namespace

void rope_table::angles(int64_t pos, bool inverse, float* cs, float* sn) const {
    for (size_t i = 0; i < inv_freq.size(); ++i) angle_of(static_cast<float>(pos), inv_freq[i], inverse, cs[i], sn[i]);
}

void rope_table::rotate(float* x, const float* cs, const float* sn) const {
    for (size_t i = 0; i < inv_freq.size(); ++i) rotate_pair(x, i, cs[i], sn[i]);
}

void rope_table::apply(float* x, int64_t pos, bool inverse) const {
    for (size_t i = 0; i < inv_freq.size(); ++i) {
        float cs, sn;
        angle_of(static_cast<float>(pos), inv_freq[i], inverse, cs, sn);
        rotate_pair(x, i, cs, sn);
    }
}

// ---- mHC ----------------------------------------------------------------------------------

namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// out[e] = Σ_j w[j] · h[j·d + e], from 0.0f in ascending j, each product and sum rounded — the
// operations per element of a loop over j inside one over e, but through cpu::axpys (AVX2, out in
// registers across j): that loop, with its runtime n and stride d, stayed scalar (2.5% of
// `small`'s prefill).
void weighted_sum_of_streams(int64_t n, int64_t d, const float* w, const float* h, float* out) {
    constexpr int64_t k_max_streams = 16;
    const float* rows[k_max_streams];
    std::fill(out, out + d, 0.0f);
    for (int64_t j0 = 0; j0 < n; j0 += k_max_streams) {
        const int64_t count = std::min(k_max_streams, n - j0);
        for (int64_t j = 0; j < count; ++j) rows[j] = h + (j0 + j) * d;
        cpu::axpys(w + j0, rows, count, out, d);
    }
}

// mix[j] = fn[j] · rmsnorm(flatten(h)) for j < rows_of_fn.
void hc_mix(const model_config& c, const tensor& fn, const float* h, float* mix) {
    thread_local std::vector<float> xn;
    xn.resize(static_cast<size_t>(c.hc_mult * c.hidden_size));
    hc_norm_input(c, h, xn.data());
    hc_mix_range(c, fn, xn.data(), 0, fn.shape[0], mix);
}

}  // namespace

void hc_norm_input(const model_config& c, const float* h, float* xn) {
    cpu::rms_norm(h, nullptr, c.hc_mult * c.hidden_size, c.rms_norm_eps, xn);
}

void hc_mix_range(const model_config& c, const tensor& fn, const float* xn, int64_t j0, int64_t j1, float* mix) {
    const int64_t nd = c.hc_mult * c.hidden_size;
    // dots runs four independent fma chains where one dot per mix waited on a single chain of
    // n·d / 8 fmas; each mix keeps dot's order whichever group of four it falls in (and
    // fma(a, b) == fma(b, a)), so neither the grouping nor the range split changes a bit.
    const float* rows[4];
    for (int64_t j = j0; j < j1; j += 4) {
        const int64_t count = std::min<int64_t>(4, j1 - j);
        for (int64_t i = 0; i < count; ++i) rows[i] = fn.ptr() + (j + i) * nd;
        cpu::dots(xn, rows, count, nd, mix + (j - j0));
    }
}

void hc_pre(const model_config& c, const hc_weights& hw, const float* h, float* collapsed, float* post, float* comb) {
    thread_local std::vector<float> mix;  // per thread, grown once: no allocation per row
    mix.resize(static_cast<size_t>((2 + c.hc_mult) * c.hc_mult));
    hc_mix(c, hw.fn, h, mix.data());
    hc_pre_from_mix(c, hw, h, mix.data(), collapsed, post, comb);
}

void hc_pre_from_mix(const model_config& c, const hc_weights& hw, const float* h, const float* mix, float* collapsed,
                     float* post, float* comb) {
    const int64_t n = c.hc_mult, d = c.hidden_size;
    const float eps = static_cast<float>(c.hc_eps);
    thread_local std::vector<float> pre;  // per thread, grown once: no allocation per row
    pre.resize(static_cast<size_t>(n));
    const float* base = hw.base.ptr();
    const float* scale = hw.scale.ptr();
    for (int64_t j = 0; j < n; ++j) {
        pre[j] = sigmoid(mix[j] * scale[0] + base[j]) + eps;
        post[j] = 2.0f * sigmoid(mix[n + j] * scale[1] + base[n + j]);
    }
    for (int64_t j = 0; j < n; ++j) {  // row softmax (over k) + eps
        float* row = comb + j * n;
        float mx = -INFINITY;
        for (int64_t k = 0; k < n; ++k) {
            row[k] = mix[2 * n + j * n + k] * scale[2] + base[2 * n + j * n + k];
            mx = std::max(mx, row[k]);
        }
        float sum = 0.0f;
        for (int64_t k = 0; k < n; ++k) sum += (row[k] = std::exp(row[k] - mx));
        for (int64_t k = 0; k < n; ++k) row[k] = row[k] / sum + eps;
    }
    auto normalize_cols = [&] {
        for (int64_t k = 0; k < n; ++k) {
            float s = 0.0f;
            for (int64_t j = 0; j < n; ++j) s += comb[j * n + k];
            for (int64_t j = 0; j < n; ++j) comb[j * n + k] /= (s + eps);
        }
    };
    normalize_cols();
    for (int64_t it = 0; it + 1 < c.hc_sinkhorn_iters; ++it) {
        for (int64_t j = 0; j < n; ++j) {
            float s = 0.0f;
            for (int64_t k = 0; k < n; ++k) s += comb[j * n + k];
            for (int64_t k = 0; k < n; ++k) comb[j * n + k] /= (s + eps);
        }
        normalize_cols();
    }
    weighted_sum_of_streams(n, d, pre.data(), h, collapsed);
}

void hc_post(int64_t n, int64_t d, const float* out, const float* h_res, const float* post, const float* comb,
             float* h_new) {
    // Per element: mixed = Σ_j comb[j, k] · h_res[j, e] in ascending j from 0.0f, then
    // post[k]·out[e] + mixed — each product and sum rounded, through the AVX2 axpys / axpy (the
    // sum's operands commute, so mixed + post·out is the same bits).
    thread_local std::vector<float> column;
    column.resize(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) {
        for (int64_t j = 0; j < n; ++j) column[static_cast<size_t>(j)] = comb[j * n + k];
        float* row = h_new + k * d;
        weighted_sum_of_streams(n, d, column.data(), h_res, row);
        cpu::axpy(post[k], out, row, d);
    }
}

void hc_head_collapse(const model_config& c, const hc_weights& hw, const float* h, float* x) {
    const int64_t n = c.hc_mult, d = c.hidden_size;
    thread_local std::vector<float> mix, pre;
    mix.resize(static_cast<size_t>(n));
    pre.resize(static_cast<size_t>(n));
    hc_mix(c, hw.fn, h, mix.data());
    for (int64_t j = 0; j < n; ++j)
        pre[j] = sigmoid(mix[j] * hw.scale.ptr()[0] + hw.base.ptr()[j]) + static_cast<float>(c.hc_eps);
    weighted_sum_of_streams(n, d, pre.data(), h, x);
}

}  // namespace tandem::model
