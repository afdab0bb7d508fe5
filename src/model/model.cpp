// model/model.cpp — loading, batch assembly and the block loop of the forward pass.
#include "model/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "core/log.h"
#include "cpu/amx.h"
#include "cpu/kernels.h"
#include "model/forward.h"
#include "model/numerics.h"
#include "model/safetensors.h"

namespace tandem::model {

// ---- model_impl: shared helpers -------------------------------------------------------------

void model_impl::linear(const std::vector<float>& x, int64_t rows, const tensor& wt, std::vector<float>& y) const {
    const int64_t out = wt.mat.rows, in = wt.mat.cols;
    fit(y, rows * out);
    if (opt.numerics == numerics_mode::official && wt.act_quant) {
        thread_local std::vector<float> xq;  // grown once: a steady step allocates nothing
        xq.assign(x.begin(), x.begin() + rows * in);
        for (int64_t r = 0; r < rows; ++r) act_quant_fp8(&xq[r * in], in);
        cpu::linear(*pool, xq.data(), rows, in, wt.mat, y.data(), out);
        return;
    }
    cpu::linear(*pool, x.data(), rows, in, wt.mat, y.data(), out);
}

linear_set::linear_set(model_impl& m) : m_(m) { m_.linear_buf.jobs.clear(); }

const float* linear_set::quantized(const std::vector<float>& x, int64_t rows, int64_t width) {
    linear_set_buffers& lb = m_.linear_buf;
    for (size_t i = 0; i < quantized_used_; ++i)
        if (lb.quantized_src[i] == x.data()) return lb.quantized[i].data();
    if (lb.quantized.size() <= quantized_used_) {
        lb.quantized.resize(quantized_used_ + 1);
        lb.quantized_src.resize(quantized_used_ + 1);
    }
    std::vector<float>& q = lb.quantized[quantized_used_];
    lb.quantized_src[quantized_used_++] = x.data();
    q.assign(x.begin(), x.begin() + rows * width);
    for (int64_t r = 0; r < rows; ++r) act_quant_fp8(&q[r * width], width);
    return q.data();
}

void linear_set::add(const std::vector<float>& x, int64_t rows, const tensor& wt, std::vector<float>& y) {
    const int64_t out = wt.mat.rows, in = wt.mat.cols;
    fit(y, rows * out);
    const bool quantize = m_.opt.numerics == numerics_mode::official && wt.act_quant;
    m_.linear_buf.jobs.push_back({quantize ? quantized(x, rows, in) : x.data(), rows, in, wt.mat, y.data(), out});
}

void linear_set::add(const cpu::linear_job& job) { m_.linear_buf.jobs.push_back(job); }

void linear_set::run() {
    cpu::linear_group(*m_.pool, m_.linear_buf.jobs);
    m_.linear_buf.jobs.clear();
    quantized_used_ = 0;
}

// Rows from which run_layer computes the mHC mixes as a linear rather than as dot groups.
constexpr int64_t k_mix_linear_rows = 8;

void model_impl::run_layer(const cache::layer_view& view, const batch& b, std::vector<float>& h) {
    const int64_t layer = view.layer();
    const int64_t T = b.rows, n = cfg.hc_mult, d = cfg.hidden_size;
    const layer_weights& lw = w.layers[static_cast<size_t>(layer)];
    std::vector<float>& x = step.x;
    std::vector<float>& post = step.post;
    std::vector<float>& comb = step.comb;
    std::vector<float>& sub = step.sub;
    fit(x, T * d);
    fit(post, T * n);
    fit(comb, T * n * n);
    // mHC pre in three phases (see hc_pre): the mixes, a dot over n·d fp32 weights each, are
    // split into groups of four over (row, group) units, so one decode row's 24 dots (~400 KB of
    // weights) run on every thread instead of one; from k_mix_linear_rows rows on, one linear.
    const int64_t mixes = (2 + n) * n, groups = (mixes + 3) / 4;
    std::vector<float>& xn = step.hc_xn;
    std::vector<float>& mix = step.hc_mix;
    fit(xn, T * n * d);
    fit(mix, T * mixes);
    auto pre = [&](const hc_weights& hw, const tensor& norm) {
        pool->parallel_for(T, 1, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) hc_norm_input(cfg, &h[r * n * d], &xn[r * n * d]);
        });
        if (T >= k_mix_linear_rows) {
            // Many rows: the mixes as a linear over the fp32 fn rows, a few rows per job (each a
            // unit of its own): each fn vector is loaded once per job's rows of fmas instead of
            // once per row (dots), and the linear's per-output order is dots' (lanes k mod 8 in
            // ascending k, then the same lane sum): the same bits.
            // A decode step: the rows split evenly over the threads (4 to 12 a job, the few-row
            // tile's range), so each thread reads fn (393 KB of fp32 at `small`'s n · d, one of 16
            // a step, from memory) once; jobs of 4 rows read it once per job — a batch-16 step of
            // `small` spent 3.0-3.1% of its samples in the mixes that way, 2.7-2.8% this way.
            // Splitting the outputs over the threads instead (each reads half of fn) cost more: a
            // job of 16 rows takes the scratch GEMM, 8-row jobs repack x for every slice.
            // Prefill: 32 or 16 rows a job once there are enough rows for two jobs per thread,
            // so its jobs take the scratch GEMM (whose FMA blocks run at ~0.8 of the peak) instead
            // of the few-row tile (two operations per fma: the broadcast of each fp32 weight run to
            // both halves): `small`'s 512-token prefill spent 3.7% of its samples there.
            int64_t per_job = std::clamp<int64_t>((T + pool->size() - 1) / pool->size(), 4, 12);
            for (const int64_t rows : {32, 16})
                if (T >= 2 * rows * pool->size()) {
                    per_job = rows;
                    break;
                }
            const cpu::weight_matrix fn = cpu::weight_matrix::from_f32(hw.fn.ptr(), mixes, n * d);
            linear_set jobs(*this);
            for (int64_t r = 0; r < T; r += per_job)
                jobs.add(cpu::linear_job{&xn[r * n * d], std::min<int64_t>(per_job, T - r), n * d, fn, &mix[r * mixes],
                                         mixes});
            jobs.run();
        } else {
            pool->parallel_for(T * groups, 1, [&](int64_t u0, int64_t u1) {
                for (int64_t u = u0; u < u1; ++u) {
                    const int64_t r = u / groups, j0 = (u % groups) * 4;
                    hc_mix_range(cfg, hw.fn, &xn[r * n * d], j0, std::min(mixes, j0 + 4), &mix[r * mixes + j0]);
                }
            });
        }
        pool->parallel_for(T, 1, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
                hc_pre_from_mix(cfg, hw, &h[r * n * d], &mix[r * mixes], &x[r * d], &post[r * n], &comb[r * n * n]);
                cpu::rms_norm(&x[r * d], norm.ptr(), d, cfg.rms_norm_eps, &x[r * d]);
            }
        });
    };
    auto post_mix = [&] {
        pool->parallel_for(T, 1, [&](int64_t r0, int64_t r1) {
            thread_local std::vector<float> h_new;
            h_new.resize(static_cast<size_t>(n * d));
            for (int64_t r = r0; r < r1; ++r) {
                hc_post(n, d, &sub[r * d], &h[r * n * d], &post[r * n], &comb[r * n * n], h_new.data());
                std::copy(h_new.begin(), h_new.end(), &h[r * n * d]);
            }
        });
    };
    pre(lw.hc_attn, lw.attn_norm);
    attention(view, b, x, sub);
    post_mix();
    pre(lw.hc_ffn, lw.ffn_norm);
    moe(layer, b, x, sub);
    post_mix();
}

void model_impl::run_head(const std::vector<float>& h, const std::vector<int64_t>& rows, std::vector<float>& logits) {
    const int64_t n = cfg.hc_mult, d = cfg.hidden_size, R = static_cast<int64_t>(rows.size());
    std::vector<float>& x = step.x;
    fit(x, R * d);
    for (int64_t i = 0; i < R; ++i) {
        hc_head_collapse(cfg, w.hc_head, &h[rows[i] * n * d], &x[i * d]);
        cpu::rms_norm(&x[i * d], w.norm.ptr(), d, cfg.rms_norm_eps, &x[i * d]);
    }
    linear(x, R, w.head, logits);
}

// ---- model ----------------------------------------------------------------------------------

std::string numerics_identity(const std::string& numerics, const std::string& cpu_matmul) {
    return cpu_matmul == "amx" ? numerics + "+amx" : numerics;
}

result<model_options> model_options_from(const std::string& numerics, int64_t threads, const std::string& pages,
                                         const std::string& cpu_matmul) {
    model_options o;
    if (cpu_matmul == "amx") o.amx_matmul = true;
    else if (cpu_matmul != "exact")
        return make_error(error_code::invalid_argument,
                          fmt::format("backend.cpu_matmul: '{}' is not one of exact, amx", cpu_matmul));
    auto p = weight_pages_from(pages);
    if (!p) return p.error();
    o.pages = *p;
    if (numerics == "hf") o.numerics = numerics_mode::hf;
    else if (numerics == "official") o.numerics = numerics_mode::official;
    else
        return make_error(error_code::invalid_argument,
                          fmt::format("model.numerics: '{}' is not one of hf, official", numerics));
    if (threads < 0 || threads > 4096)
        return make_error(error_code::out_of_range, fmt::format("backend.threads: {} outside [0, 4096]", threads));
    o.threads = static_cast<int>(threads);
    return o;
}

model::model(std::unique_ptr<model_impl> impl) : impl_(std::move(impl)) {}
model::~model() = default;

const model_config& model::config() const { return impl_->cfg; }

const weight_memory& model::memory() const { return impl_->w.memory; }

int64_t model::step_buffer_bytes() const {
    const model_impl& m = *impl_;
    const step_scratch& s = m.step;
    int64_t bytes = held_bytes_of(s.b.token, s.b.pos, s.b.seqs, s.h, s.x, s.post, s.comb, s.sub, s.hc_xn, s.hc_mix,
                                  s.head_rows, s.logits, m.linear_buf.jobs, m.linear_buf.quantized_src,
                                  m.linear_buf.quantized);
    for (const std::vector<float>& q : m.linear_buf.quantized) bytes += held_bytes(q);
    if (m.attn_scratch) bytes += held_bytes(*m.attn_scratch);
    if (m.moe_buf) bytes += held_bytes(*m.moe_buf);
    return bytes;
}

result<std::unique_ptr<model>> model::load(const std::string& dir, const model_options& opt) {
    namespace fs = std::filesystem;
    auto cfg = load_model_config((fs::path(dir) / "config.json").string());
    if (!cfg) return cfg.error();
    const auto t_read = std::chrono::steady_clock::now();
    auto ck = checkpoint::open_dir(dir, opt.pages);
    if (!ck) return ck.error();
    if (ck->copied_bytes() > 0)  // not when open_dir fell back to the mapping (too little memory)
        TANDEM_LOG_INFO("read {} into memory ({:.1f} MiB) in {:.2f} s", dir, double(ck->copied_bytes()) / (1 << 20),
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_read).count());
    // Progress for large checkpoints: one line per tenth of the bytes converted.
    const auto t0 = std::chrono::steady_clock::now();
    int last_tenth = 0;
    auto progress = [&](int64_t done, int64_t total) {
        if (total < (int64_t{256} << 20)) return;
        const int tenth = static_cast<int>(done * 10 / total);
        if (tenth == last_tenth) return;
        last_tenth = tenth;
        TANDEM_LOG_INFO("loading weights: {:.1f} / {:.1f} GiB ({}%)", double(done) / (1 << 30),
                        double(total) / (1 << 30), tenth * 10);
    };
    if (opt.amx_matmul && !cpu::amx_bf16_available())
        return make_error(error_code::invalid_argument,
                          "backend.cpu_matmul = \"amx\": this CPU has no AMX-BF16 tiles (or the kernel did not "
                          "grant them to this process); use \"exact\"");
    auto weights = load_weights(*cfg, *ck, progress, opt.amx_matmul);
    if (!weights) return weights.error().with_context(dir);
    TANDEM_LOG_INFO("loaded {} ({} tensors, {:.1f} MiB) in {:.2f} s; {} kernels{}", dir, ck->tensors().size(),
                    double(ck->total_bytes()) / (1 << 20),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), cpu::kernel_isa(),
                    opt.amx_matmul ? ", BF16 / FP8 / FP4 matrices on AMX tiles (backend.cpu_matmul = \"amx\")" : "");
    TANDEM_LOG_INFO("weights: {}", weights->memory.describe());
    const int64_t di = cfg->index_head_dim;
    if (opt.numerics == numerics_mode::official && cfg->index_n_heads > 0 && (di & (di - 1)) != 0)
        return make_error(error_code::invalid_argument,
                          fmt::format("numerics = \"official\" needs a power-of-two index_head_dim for the "
                                      "Hadamard rotation (config has {})", di));
    auto impl = std::make_unique<model_impl>(std::move(cfg.value()),
                                             std::make_shared<const model_weights>(std::move(weights.value())), opt);
    return std::unique_ptr<model>(new model(std::move(impl)));
}

std::unique_ptr<model> model::sharing_weights() const {
    return std::unique_ptr<model>(new model(std::make_unique<model_impl>(impl_->cfg, impl_->weights, impl_->opt)));
}

model_impl::model_impl(model_config c, std::shared_ptr<const model_weights> ws, const model_options& o)
    : cfg(std::move(c)), weights(std::move(ws)), w(*weights), opt(o),
      pool(std::make_unique<cpu::thread_pool>(o.threads)),
      rope_main(make_rope_table(cfg.rope_main, cfg.head_dim)),
      rope_compress(make_rope_table(cfg.rope_compress, cfg.head_dim)) {}

namespace {

// The pool must be laid out for this model: same layers, kinds and row widths.
status check_pool_layout(const model_config& c, const cache::layout_spec& l) {
    if (l.num_layers() != c.num_layers_total() || l.window_rows() != c.sliding_window ||
        l.kv_row().dims != c.head_dim || (c.index_n_heads > 0 && l.index_k_row().dims != c.index_head_dim))
        return make_error(error_code::invalid_argument,
                          fmt::format("cache pool layout ({}) does not belong to this model", l.describe()));
    return status::ok();
}

}  // namespace

result<forward_output> model::forward(cache::page_pool& pool, std::span<const forward_item> items) {
    return forward(cache::layer_gate(pool), items);  // nothing in flight: every layer is ready
}

int64_t logit_row_count(const forward_item& it) {
    switch (it.logits) {
        case logit_rows::none: return 0;
        case logit_rows::last: return 1;
        case logit_rows::all: return static_cast<int64_t>(it.tokens.size());
    }
    return 0;
}

result<forward_output> model::forward(const cache::layer_gate& gate, std::span<const forward_item> items) {
    std::vector<float>& logits = impl_->step.logits;
    TANDEM_RETURN_IF_ERROR(forward_into(gate, items, logits));
    const int64_t vocab = impl_->cfg.vocab_size;
    forward_output out;
    out.logits.reserve(items.size());
    int64_t at = 0;
    for (const forward_item& it : items) {
        const int64_t rows = logit_row_count(it);
        const auto begin = logits.begin() + at * vocab;
        out.logits.emplace_back(begin, begin + rows * vocab);
        at += rows;
    }
    return out;
}

status model::forward_into(const cache::layer_gate& gate, std::span<const forward_item> items,
                           std::vector<float>& logits) {
    model_impl& m = *impl_;
    const model_config& c = m.cfg;
    TANDEM_RETURN_IF_ERROR(check_pool_layout(c, gate.layout()));
    batch& b = m.step.b;  // reused: a steady decode step allocates only its output
    b.rows = 0;
    b.token.clear();
    b.pos.clear();
    b.seqs.clear();
    for (size_t i = 0; i < items.size(); ++i) {
        const forward_item& it = items[i];
        if (it.tokens.empty() || it.start_pos < 0)
            return make_error(error_code::invalid_argument, fmt::format("batch item {}: no tokens", i));
        if (!gate.is_current(it.slot))
            return make_error(error_code::invalid_argument, fmt::format("batch item {}: stale sequence slot", i));
        const int64_t end = it.start_pos + static_cast<int64_t>(it.tokens.size());
        if (gate.capacity_tokens(it.slot) < end)
            return make_error(error_code::out_of_range,
                              fmt::format("batch item {}: the slot's pages cover fewer than {} tokens "
                                          "(call ensure_capacity first)", i, end));
        batch_seq s{b.rows, static_cast<int64_t>(it.tokens.size()), it.start_pos, it.slot};
        for (size_t k = 0; k < it.tokens.size(); ++k) {
            int32_t tok = it.tokens[k];
            if (tok < 0 || tok >= c.vocab_size)
                return make_error(error_code::out_of_range,
                                  fmt::format("batch item {}: token id {} outside [0, {})", i, tok, c.vocab_size));
            b.token.push_back(tok);
            b.pos.push_back(it.start_pos + static_cast<int64_t>(k));
        }
        b.rows += s.rows;
        b.seqs.push_back(s);
    }
    const int64_t n = c.hc_mult, d = c.hidden_size;
    std::vector<float>& h = m.step.h;
    fit(h, b.rows * n * d);
    for (int64_t r = 0; r < b.rows; ++r) {
        m.w.embed.mat.decode_row(b.token[r], &h[r * n * d]);
        for (int64_t j = 1; j < n; ++j) std::copy_n(&h[r * n * d], d, &h[(r * n + j) * d]);
    }
    for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
        result<cache::layer_view> view = gate.wait(static_cast<int32_t>(layer));
        if (!view) return view.error();
        m.run_layer(*view, b, h);
    }
    // Layers the pass does not run (MTP) are still the sequence's state: a snapshot captured
    // after this step reads their window, so their loads must have landed too.
    for (int64_t layer = c.num_hidden_layers; layer < gate.layout().num_layers(); ++layer) {
        result<cache::layer_view> view = gate.wait(static_cast<int32_t>(layer));
        if (!view) return view.error();
    }
    std::vector<int64_t>& head_rows = m.step.head_rows;
    head_rows.clear();
    for (size_t i = 0; i < items.size(); ++i) {
        const batch_seq& s = b.seqs[i];
        const int64_t n = logit_row_count(items[i]);
        for (int64_t r = s.row0 + s.rows - n; r < s.row0 + s.rows; ++r) head_rows.push_back(r);
    }
    if (head_rows.empty()) fit(logits, 0);
    else m.run_head(h, head_rows, logits);
    return status::ok();
}

}  // namespace tandem::model
