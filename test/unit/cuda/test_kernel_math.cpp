// The CUDA kernels' per-element math (cuda/host/kernel_math.h), run on the host and compared BIT
// FOR BIT with the CPU reference. This is the coverage CI can give the GPU path: the same source
// lines run inside the kernels (cuda/kernels_*.cu, cuda/device_runtime.cu). What it cannot cover — the device libm and the
// device compiler — is tier 1/2 of the parity harness (test/cuda/cuda_parity.cpp) on a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../../cuda/attention_reference.h"
#include "../../cuda/fp64_oracle.h"              // the fp64 oracles the parity harness uses  // model/attention.cpp restated (its loops are file-local)
#include "../../cuda/moe_reference.h"        // model/moe.cpp restated (its helpers are file-local)
#include "cache/codec.h"
#include "cpu/kernels.h"
#include "cpu/thread_pool.h"
#include "cpu/weight_matrix.h"
#include "cuda/host/kernel_math.h"
#include "cuda/host/kernel_paths.h"
#include "cuda/host/kernel_views.h"
#include "model/forward.h"
#include "model/numerics.h"

using namespace tandem;
namespace km = tandem::kmath;

namespace {

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

km::weight_view to_view(const cpu::weight_matrix& m) { return cuda::weight_view_of(m); }

}  // namespace

TEST_CASE("kmath element codecs equal cache/codec bit for bit") {
    for (int c = 0; c < 256; ++c) {
        const float a = km::e4m3_to_f32(static_cast<uint8_t>(c)), b = cache::codec::e4m3_to_float(static_cast<uint8_t>(c));
        if (std::isnan(b)) CHECK(std::isnan(a));
        else CHECK(bits(a) == bits(b));
    }
    for (int c = 0; c < 16; ++c) CHECK(bits(km::e2m1_to_f32(static_cast<uint8_t>(c))) == bits(cache::codec::e2m1_to_float(static_cast<uint8_t>(c))));
    for (int c = 1; c < 255; ++c) CHECK(bits(km::ue8m0_to_f32(static_cast<uint8_t>(c))) == bits(cache::codec::ue8m0_to_float(static_cast<uint8_t>(c))));
    // Every bf16-representable float (all 65536 patterns) plus random fp32 values with low bits
    // set (rounding ties and near-ties) through every encoder.
    std::vector<float> probe;
    for (uint32_t hi = 0; hi < 65536; ++hi) probe.push_back(km::as_float(hi << 16));
    std::mt19937 rng(11);
    for (int i = 0; i < 200000; ++i) probe.push_back(km::as_float(rng()));
    for (float x : {448.0f, 464.0f, 480.0f, 0.015625f, 0.0146484375f, 6.0f, 5.0f, 0.25f, 0.75f, -0.0f}) probe.push_back(x);
    int64_t checked = 0;
    for (float x : probe) {
        if (std::isnan(x)) continue;
        CHECK(km::f32_to_e4m3(x) == cache::codec::float_to_e4m3(x));
        CHECK(km::f32_to_bf16(x) == cache::codec::float_to_bf16(x));
        CHECK(km::f32_to_e2m1(x) == cache::codec::float_to_e2m1(x));
        if (std::isfinite(x) && std::fabs(x) < 1e30f)
            CHECK(bits(km::pow2_block_scale(std::fabs(x), 1e-4f, 448.0f)) ==
                  bits(cache::codec::pow2_block_scale(std::fabs(x), 1e-4f, 448.0f)));
        ++checked;
    }
    CHECK(checked > 250000);
}

TEST_CASE("kmath fixed_dot reproduces cpu::dot's order exactly (lanes, pairwise sum, tail)") {
    for (int64_t n : {1, 3, 7, 8, 9, 15, 16, 17, 64, 127, 128, 129, 1000, 4096 + 5}) {
        auto a = random_floats(static_cast<size_t>(n), 1 + static_cast<uint32_t>(n));
        auto b = random_floats(static_cast<size_t>(n), 2 + static_cast<uint32_t>(n));
        CHECK(bits(km::fixed_dot(a.data(), b.data(), n)) == bits(cpu::dot(a.data(), b.data(), n)));
    }
    // The order matters: a plain ascending sum differs for some input (so the check above can fail).
    auto a = random_floats(1000, 5), b = random_floats(1000, 6);
    float naive = 0.0f;
    for (size_t i = 0; i < a.size(); ++i) naive = std::fma(a[i], b[i], naive);
    CHECK(bits(naive) != bits(km::fixed_dot(a.data(), b.data(), 1000)));
}

TEST_CASE("kmath weight decoding and linear_output equal cpu::linear for every stored form") {
    cpu::thread_pool pool(1);
    const int64_t rows = 256, cols = 384, batch = 3;
    auto x = random_floats(static_cast<size_t>(batch * cols), 21);
    std::mt19937 rng(4);
    std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols * 4));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    // Keep fp8 bytes away from NaN codes and bf16/f32 bytes finite.
    std::vector<uint8_t> fp8(bytes.begin(), bytes.begin() + rows * cols);
    for (auto& b : fp8) if ((b & 0x7f) == 0x7f) b = 0x3e;
    std::vector<uint16_t> bf(static_cast<size_t>(rows * cols));
    auto wf = random_floats(bf.size(), 8, 0.05f);
    for (size_t i = 0; i < bf.size(); ++i) bf[i] = cache::codec::float_to_bf16(wf[i]);
    std::vector<uint8_t> e8m0_scales(64);
    for (auto& s : e8m0_scales) s = static_cast<uint8_t>(115 + rng() % 20);

    std::vector<cpu::weight_matrix> forms;
    cpu::weight_matrix m;
    m.rows = rows;
    m.cols = cols;
    m.form = cpu::weight_form::bf16;
    m.data = reinterpret_cast<const uint8_t*>(bf.data());
    forms.push_back(m);
    m = cpu::weight_matrix::from_f32(wf.data(), rows, cols);
    forms.push_back(m);
    m.form = cpu::weight_form::fp8_e4m3;  // DeepSeek's 128 x 128 UE8M0 tiles
    m.data = fp8.data();
    m.scale = cpu::scale_form::e8m0;
    m.scales = e8m0_scales.data();
    m.block_rows = m.block_cols = 128;
    m.scale_cols = (cols + 127) / 128;
    forms.push_back(m);
    m.form = cpu::weight_form::fp4_e2m1;  // packed, one UE8M0 per 1 x 32
    m.data = bytes.data();
    m.block_rows = 1;
    m.block_cols = 32;
    m.scale_cols = cols / 32;
    std::vector<uint8_t> fp4_scales(static_cast<size_t>(rows * cols / 32));
    for (auto& s : fp4_scales) s = static_cast<uint8_t>(118 + rng() % 12);
    m.scales = fp4_scales.data();
    forms.push_back(m);
    forms.push_back(m.slice_rows(100, 50));  // a view: scale tiles by absolute row

    for (const cpu::weight_matrix& w : forms) {
        const std::string form = cpu::weight_form_name(w.form);
        CAPTURE(form);
        const km::weight_view v = to_view(w);
        for (int64_t r = 0; r < w.rows; r += 37)
            for (int64_t c = 0; c < w.cols; c += 5) CHECK(bits(v.at(r, c)) == bits(w.at(r, c)));
        std::vector<float> want(static_cast<size_t>(batch * w.rows));
        cpu::linear(pool, x.data(), batch, cols, w, want.data(), w.rows);
        for (int64_t r = 0; r < batch; ++r)
            for (int64_t o = 0; o < w.rows; ++o)
                CHECK(bits(km::linear_output(&x[r * cols], v, o)) == bits(want[r * w.rows + o]));
    }
}

TEST_CASE("kmath RMSNorm and FP8 activation QDQ equal the CPU reference") {
    for (int64_t n : {7, 64, 256, 1000}) {
        auto x = random_floats(static_cast<size_t>(n), 30 + static_cast<uint32_t>(n), 3.0f);
        auto w = random_floats(static_cast<size_t>(n), 40 + static_cast<uint32_t>(n));
        std::vector<float> want(x.size()), want_unweighted(x.size());
        cpu::rms_norm(x.data(), w.data(), n, 1e-6, want.data());
        cpu::rms_norm(x.data(), nullptr, n, 1e-6, want_unweighted.data());
        const float r = km::rms_inverse(x.data(), n, 1e-6f);
        for (int64_t i = 0; i < n; ++i) {
            CHECK(bits(km::rms_apply(x[i], w.data(), i, r)) == bits(want[i]));
            CHECK(bits(km::rms_apply(x[i], nullptr, i, r)) == bits(want_unweighted[i]));
        }
    }
    auto x = random_floats(128 * 3 + 40, 77, 20.0f);
    x[5] = 0.0f;
    x[130] = 1e-7f;
    std::vector<float> want = x, got = x;
    model::act_quant_fp8(want.data(), static_cast<int64_t>(want.size()));
    for (size_t b0 = 0; b0 < got.size(); b0 += 128)
        km::qdq_e4m3_block(&got[b0], std::min<int64_t>(128, static_cast<int64_t>(got.size() - b0)), 1e-4f);
    for (size_t i = 0; i < x.size(); ++i) CHECK(bits(got[i]) == bits(want[i]));
}

TEST_CASE("kmath mHC pre (with Sinkhorn) and post equal model::hc_pre / hc_post on the host") {
    model::model_config c;
    c.hc_mult = 4;
    c.hidden_size = 96;
    c.hc_eps = 1e-6;
    c.rms_norm_eps = 1e-6;
    c.hc_sinkhorn_iters = 20;
    const int64_t n = c.hc_mult, d = c.hidden_size, nd = n * d, n_mix = (2 + n) * n;
    model::hc_weights hw;
    hw.fn.data = random_floats(static_cast<size_t>(n_mix * nd), 3, 0.02f);
    hw.fn.shape = {n_mix, nd};
    hw.base.data = random_floats(static_cast<size_t>(n_mix), 4);
    hw.scale.data = {0.7f, 1.3f, 0.9f};
    auto h = random_floats(static_cast<size_t>(nd), 5);
    std::vector<float> collapsed(static_cast<size_t>(d)), post(4), comb(16);
    model::hc_pre(c, hw, h.data(), collapsed.data(), post.data(), comb.data());

    const float r = km::rms_inverse(h.data(), nd, static_cast<float>(c.rms_norm_eps));
    std::vector<float> mix(static_cast<size_t>(n_mix)), pre(4), kpost(4), kcomb(16);
    for (int64_t j = 0; j < n_mix; ++j) {
        const float* f = hw.fn.ptr() + j * nd;
        mix[j] = km::fixed_dot_fn([f](int64_t i) { return f[i]; }, [&](int64_t i) { return h[i] * r; }, nd);
    }
    km::hc_pre_weights(n, static_cast<float>(c.hc_eps), c.hc_sinkhorn_iters, mix.data(), hw.base.ptr(), hw.scale.ptr(),
                       pre.data(), kpost.data(), kcomb.data());
    for (int i = 0; i < 4; ++i) CHECK(bits(kpost[i]) == bits(post[i]));
    for (int i = 0; i < 16; ++i) CHECK(bits(kcomb[i]) == bits(comb[i]));
    for (int64_t e = 0; e < d; ++e) CHECK(bits(km::hc_collapse(n, d, pre.data(), h.data(), e)) == bits(collapsed[e]));

    auto out = random_floats(static_cast<size_t>(d), 9);
    std::vector<float> h_new(static_cast<size_t>(nd));
    model::hc_post(n, d, out.data(), h.data(), post.data(), comb.data(), h_new.data());
    for (int64_t k = 0; k < n; ++k)
        for (int64_t e = 0; e < d; ++e)
            CHECK(bits(km::hc_post_element(n, d, out.data(), h.data(), post.data(), comb.data(), k, e)) ==
                  bits(h_new[k * d + e]));
}

TEST_CASE("kmath HC head weights + collapse equal model::hc_head_collapse bit for bit") {
    model::model_config c;
    c.hc_mult = 4;
    c.hidden_size = 96;
    c.hc_eps = 1e-6;
    c.rms_norm_eps = 1e-6;
    const int64_t n = c.hc_mult, d = c.hidden_size, nd = n * d;
    model::hc_weights hw;
    hw.fn.data = random_floats(static_cast<size_t>(n * nd), 31, 0.02f);
    hw.fn.shape = {n, nd};
    hw.base.data = random_floats(static_cast<size_t>(n), 32);
    hw.scale.data = {0.8f};
    for (uint32_t seed : {33u, 34u, 35u}) {
        auto h = random_floats(static_cast<size_t>(nd), seed, seed == 35u ? 40.0f : 1.0f);
        std::vector<float> want(static_cast<size_t>(d));
        model::hc_head_collapse(c, hw, h.data(), want.data());
        float pre[8];
        km::hc_head_weights(n, d, static_cast<float>(c.rms_norm_eps), static_cast<float>(c.hc_eps), h.data(), hw.fn.ptr(),
                            hw.base.ptr(), hw.scale.ptr(), pre);
        for (int64_t e = 0; e < d; ++e) CHECK(bits(km::hc_collapse(n, d, pre, h.data(), e)) == bits(want[e]));
    }
}

TEST_CASE("kmath RoPE equals model::rope_table::apply, forward and inverse") {
    model::rope_config rc;
    rc.theta = 10000.0;
    rc.partial_rotary_factor = 1.0;
    model::rope_table t = model::make_rope_table(rc, 64);
    REQUIRE(t.inv_freq.size() == 32);
    for (int64_t pos : {0, 1, 17, 4095, 1000003}) {
        for (bool inverse : {false, true}) {
            auto x = random_floats(64, 50 + static_cast<uint32_t>(pos));
            std::vector<float> want = x;
            t.apply(want.data(), pos, inverse);
            for (size_t i = 0; i < 32; ++i) km::rope_pair(x.data(), static_cast<int64_t>(i), t.inv_freq[i], pos, inverse);
            for (size_t i = 0; i < 64; ++i) CHECK(bits(x[i]) == bits(want[i]));
        }
    }
}

TEST_CASE("kmath attention with sink matches an fp64 oracle within fp32 rounding") {
    const int64_t D = 64, K = 300;
    auto q = random_floats(static_cast<size_t>(D), 61);
    auto keys = random_floats(static_cast<size_t>(K * D), 62);
    const float scale = 0.125f, sink = 0.5f;
    std::vector<float> logits(static_cast<size_t>(K));
    for (int64_t j = 0; j < K; ++j) logits[j] = km::fixed_dot(q.data(), &keys[j * D], D) * scale;
    const float denom = km::attention_softmax(logits.data(), K, sink);
    const oracle::attention_result want =
        oracle::attention(q.data(), [&](int64_t j) { return &keys[j * D]; }, K, D, scale, sink);
    CHECK(std::fabs(denom - want.denom) <= 1e-5 * want.denom);
    for (int64_t e = 0; e < D; ++e) {
        const float o = km::attention_output_element(logits.data(), denom, K, [&](int64_t j) { return &keys[j * D]; }, e);
        CHECK(std::fabs(o - want.out[e]) <= 64 * 0x1p-24 * (want.magnitude[e] + 1e-30) * 4);
    }
    // The sink takes probability mass: with a huge sink every output goes to ~0.
    std::vector<float> l2(static_cast<size_t>(K), 0.0f);
    const float d2 = km::attention_softmax(l2.data(), K, 80.0f);
    CHECK(km::attention_output_element(l2.data(), d2, K, [&](int64_t j) { return &keys[j * D]; }, 0) == doctest::Approx(0.0).epsilon(1e-20));
}


TEST_CASE("kmath MoE routing: top-k order, ties and weights equal model/moe.cpp's") {
    std::mt19937 rng(99);
    for (int trial = 0; trial < 200; ++trial) {
        const int32_t E = trial % 2 ? 256 : 16, k = trial % 2 ? 6 : 2;
        auto logits = random_floats(static_cast<size_t>(E), 1000 + static_cast<uint32_t>(trial), 3.0f);
        // Plant exact ties (and values past the softplus threshold) in some trials.
        if (trial % 3 == 0)
            for (int i = 0; i < 8; ++i) logits[rng() % E] = logits[0];
        if (trial % 5 == 0) logits[rng() % E] = 25.0f;
        std::vector<float> s(static_cast<size_t>(E)), biased(s.size());
        auto bias = random_floats(static_cast<size_t>(E), 7, 0.1f);
        for (int32_t e = 0; e < E; ++e) {
            s[e] = moe_cpu::sqrt_softplus(logits[e]);
            CHECK(bits(km::sqrt_softplus(logits[e])) == bits(s[e]));
            biased[e] = trial % 3 == 0 ? s[e] : s[e] + bias[e];  // unbiased: ties survive
        }
        const std::vector<int32_t> want = moe_cpu::top_k(biased, k);
        int32_t got[16];
        km::route_top_k(biased.data(), E, k, got);
        for (int32_t i = 0; i < k; ++i) CHECK(got[i] == want[i]);

        for (bool official : {false, true}) {
            float sum = 0.0f;
            for (int32_t e : want) sum += s[e];
            const float denom = official ? sum : sum + 1e-20f;
            std::vector<std::pair<int32_t, float>> rt;
            for (int32_t e : want) rt.emplace_back(e, s[e] / denom * 2.5f);
            std::sort(rt.begin(), rt.end());
            int32_t ex[16];
            float wt[16];
            km::route_weights(s.data(), want.data(), k, official, 2.5f, ex, wt);
            for (int32_t i = 0; i < k; ++i) {
                CHECK(ex[i] == rt[static_cast<size_t>(i)].first);
                CHECK(bits(wt[i]) == bits(rt[static_cast<size_t>(i)].second));
            }
        }
    }
}

TEST_CASE("kmath SwiGLU (clamped) and the MoE combine order equal model/moe.cpp's") {
    auto g = random_floats(4096, 31, 8.0f), u = random_floats(4096, 32, 8.0f);
    g[0] = 10.0f;
    g[1] = 1e9f;
    u[2] = -1e9f;
    for (size_t i = 0; i < g.size(); ++i) CHECK(bits(km::swiglu(g[i], u[i], 10.0f)) == bits(moe_cpu::swiglu(g[i], u[i], 10.0f)));
    const int32_t slots = 6;
    auto contrib = random_floats(static_cast<size_t>(slots * 64), 33), shared = random_floats(64, 34);
    for (int64_t j = 0; j < 64; ++j) {
        float acc = 0.0f;
        for (int32_t sl = 0; sl < slots; ++sl) acc += contrib[sl * 64 + j];
        const float want = acc + shared[j];
        const float* c = &contrib[j];
        CHECK(bits(km::moe_combine_element([c](int32_t sl) { return c[sl * 64]; }, slots, shared[j])) == bits(want));
    }
}

TEST_CASE("kmath attention, indexer scores and compressor pooling equal model/attention.cpp's loops bit for bit") {
    // Attention (one token, one head) against attend()'s loop over cpu::dots / cpu::axpy.
    for (int64_t K : {1, 7, 64, 300}) {
        const int64_t D = 128;
        auto q = random_floats(static_cast<size_t>(D), 70 + static_cast<uint32_t>(K));
        auto keys = random_floats(static_cast<size_t>(K * D), 71 + static_cast<uint32_t>(K));
        std::vector<const float*> kp;
        for (int64_t j = 0; j < K; ++j) kp.push_back(&keys[j * D]);
        const float scale = 1.0f / std::sqrt(static_cast<float>(D)), sink = 0.3f;
        std::vector<float> want(static_cast<size_t>(D));
        attention_cpu::attend(q.data(), kp, D, scale, sink, want.data());
        std::vector<float> logits(static_cast<size_t>(K));
        for (int64_t j = 0; j < K; ++j) logits[j] = km::fixed_dot(q.data(), kp[j], D) * scale;
        const float denom = km::attention_softmax(logits.data(), K, sink);
        for (int64_t e = 0; e < D; ++e)
            CHECK(bits(km::attention_output_element(logits.data(), denom, K, [&](int64_t j) { return kp[j]; }, e)) == bits(want[e]));
    }
    // Indexer scores: 64 heads × 128 dims, ReLU zeros included.
    const int64_t Hi = 64, Di = 128;
    auto qi = random_floats(static_cast<size_t>(Hi * Di), 80), iw = random_floats(static_cast<size_t>(Hi), 81);
    const float idx_scale = 1.0f / std::sqrt(128.0f), head_scale = 1.0f / 8.0f;
    for (int row = 0; row < 20; ++row) {
        auto key = random_floats(static_cast<size_t>(Di), 82 + static_cast<uint32_t>(row));
        CHECK(bits(km::indexer_score(qi.data(), key.data(), Hi, Di, iw.data(), idx_scale, head_scale)) ==
              bits(attention_cpu::indexer_score(qi.data(), key.data(), Hi, Di, iw.data(), idx_scale, head_scale)));
    }
    // Compressor pooling: CSA (overlap, 2m slots, the previous window still at −inf scores as in a
    // fresh ring) and HCA.
    for (bool overlap : {true, false}) {
        const int64_t m = overlap ? 4 : 8, D = 64, cd = (overlap ? 2 : 1) * D, F = 2 * cd, slots = overlap ? 2 * m : m;
        for (bool fresh : {false, true}) {
            auto ring = random_floats(static_cast<size_t>(slots * F), 90 + static_cast<uint32_t>(m), 2.0f);
            if (fresh && overlap)
                for (int64_t j = 0; j < m; ++j)
                    for (int64_t e = 0; e < cd; ++e) ring[j * F + cd + e] = -INFINITY;
            std::vector<float> want(static_cast<size_t>(D));
            attention_cpu::pool_window(m, D, overlap, ring.data(), want.data());
            for (int64_t e = 0; e < D; ++e) CHECK(bits(km::compressor_pool_feature(ring.data(), m, D, overlap, e)) == bits(want[e]));
        }
    }
}

TEST_CASE("kmath official simulations (K8 kv FP8, K10 indexer Hadamard + FP4) equal model/numerics") {
    for (int64_t dim : {128, 64}) {
        auto x = random_floats(static_cast<size_t>(dim * 6), 100 + static_cast<uint32_t>(dim), 5.0f);
        for (int64_t i = 0; i < dim; ++i) x[i] = 0.0f;  // an all-zero row: the amax floor
        x[dim + 3] = 1e-30f;
        std::vector<float> want = x, got = x;
        for (int64_t r = 0; r < 6; ++r) {
            model::indexer_fp4_sim(&want[r * dim], dim);
            km::indexer_fp4_sim(&got[r * dim], dim);
        }
        for (size_t i = 0; i < x.size(); ++i) CHECK(bits(got[i]) == bits(want[i]));
    }
    auto kv = random_floats(512 * 4, 110, 3.0f);
    std::vector<float> want = kv, got = kv;
    for (int64_t r = 0; r < 4; ++r) {
        model::kv_fp8_sim(&want[r * 512], 448, 512);
        km::kv_fp8_sim(&got[r * 512], 448, 512);
    }
    for (size_t i = 0; i < kv.size(); ++i) CHECK(bits(got[i]) == bits(want[i]));
}

TEST_CASE("kmath compressor ring update (one thread per feature over a whole step) equals run_compressor's loop") {
    // Several windows closed inside one call, a start in mid-window, CSA (overlap) and HCA.
    for (bool overlap : {true, false}) {
        const int64_t m = overlap ? 4 : 8, D = 32, cd = (overlap ? 2 : 1) * D, F = 2 * cd, slots = overlap ? 2 * m : m;
        for (int64_t start : {int64_t{0}, int64_t{3}, int64_t{13}}) {
            const int64_t n = 3 * m + 2;
            CAPTURE(overlap);
            CAPTURE(start);
            auto kv = random_floats(static_cast<size_t>(n * cd), 200 + static_cast<uint32_t>(start));
            auto gate = random_floats(static_cast<size_t>(n * cd), 210 + static_cast<uint32_t>(start), 2.0f);
            auto ape = random_floats(static_cast<size_t>(m * cd), 220);
            auto ring0 = random_floats(static_cast<size_t>(slots * F), 230, 2.0f);
            if (overlap)
                for (int64_t j = 0; j < m; ++j)
                    for (int64_t e = 0; e < cd; ++e) ring0[j * F + cd + e] = -INFINITY;  // a fresh "previous" window
            std::vector<float> ring_cpu = ring0, ring_k = ring0, pooled_cpu;
            attention_cpu::feed_ring(m, D, overlap, kv.data(), gate.data(), ape.data(), n, start, ring_cpu.data(), pooled_cpu);
            std::vector<float> pooled_k(pooled_cpu.size() + D, 12345.0f);
            for (int64_t e = 0; e < D; ++e)
                km::compressor_feed_feature(kv.data(), gate.data(), ape.data(), ring_k.data(), n, start, m, D, overlap,
                                            pooled_k.data(), e);
            REQUIRE(pooled_cpu.size() >= static_cast<size_t>(3 * D));
            for (size_t i = 0; i < pooled_cpu.size(); ++i) CHECK(bits(pooled_k[i]) == bits(pooled_cpu[i]));
            for (size_t i = pooled_cpu.size(); i < pooled_k.size(); ++i) CHECK(pooled_k[i] == 12345.0f);  // no extra emission
            for (size_t i = 0; i < ring_cpu.size(); ++i) CHECK(bits(ring_k[i]) == bits(ring_cpu[i]));
        }
    }
}

TEST_CASE("kmath fused K8 kv path and K10 indexer q path equal the chains they replace") {
    model::rope_config rc;
    rc.theta = 10000.0;
    rc.partial_rotary_factor = 1.0;
    const model::rope_table t = model::make_rope_table(rc, 64);
    const int64_t D = 512, R = 64, half = static_cast<int64_t>(t.inv_freq.size());
    REQUIRE(half == R / 2);
    auto w = random_floats(static_cast<size_t>(D), 300);
    for (auto kd : {cache::kv_dtype::fp8, cache::kv_dtype::bf16, cache::kv_dtype::fp32}) {
        const cache::row_format fmt = *cache::make_kv_row_format(kd, D, R);
        for (bool official : {false, true})
            for (int64_t pos : {0, 7, 100003}) {
                CAPTURE(fmt.name);
                CAPTURE(official);
                auto x = random_floats(static_cast<size_t>(D), 310 + static_cast<uint32_t>(pos), 3.0f);
                std::vector<float> want(x.size());
                cpu::rms_norm(x.data(), w.data(), D, 1e-6, want.data());  // the chain, as project() runs it
                t.apply(&want[D - R], pos, false);
                if (official) model::kv_fp8_sim(want.data(), D - R, D);
                std::vector<std::byte> row(static_cast<size_t>(fmt.bytes));
                cache::codec::encode_row(fmt, want, row.data());
                cache::codec::decode_row(fmt, row.data(), want);
                std::vector<uint8_t> scratch(static_cast<size_t>(fmt.bytes));
                km::kv_path_row(x.data(), D, w.data(), 1e-6f, t.inv_freq.data(), half, pos, official, D - R,
                                cuda::row_codec_of(fmt), scratch.data());
                for (int64_t i = 0; i < D; ++i) CHECK(bits(x[i]) == bits(want[i]));
                CHECK(std::memcmp(scratch.data(), row.data(), row.size()) == 0);
            }
    }
    const int64_t Di = 128;
    for (bool official : {false, true})
        for (int64_t pos : {0, 5, 65539}) {
            auto q = random_floats(static_cast<size_t>(Di), 320 + static_cast<uint32_t>(pos), 2.0f);
            std::vector<float> want = q;
            t.apply(&want[Di - R], pos, false);
            if (official) model::indexer_fp4_sim(want.data(), Di);
            km::indexer_q_head(q.data(), Di, t.inv_freq.data(), half, pos, official);
            for (int64_t i = 0; i < Di; ++i) CHECK(bits(q[i]) == bits(want[i]));
        }
}
