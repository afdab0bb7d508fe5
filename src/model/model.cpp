// model/model.cpp — loading, batch assembly and the block loop of the forward pass.
#include "model/model.h"

#include <fmt/format.h>

#include <filesystem>

#include "cpu/kernels.h"
#include "model/forward.h"
#include "model/safetensors.h"

namespace tandem::model {

// ---- model_impl: shared helpers -------------------------------------------------------------

void model_impl::linear(const std::vector<float>& x, int64_t rows, const tensor& wt, std::vector<float>& y) const {
    const int64_t out = wt.shape[0], in = wt.shape[1];
    y.resize(static_cast<size_t>(rows * out));
    cpu::linear(*pool, x.data(), rows, in, wt.ptr(), in, out, y.data(), out);
}

void model_impl::init_state(sequence_state& s) const {
    s.length = 0;
    s.layers.assign(static_cast<size_t>(cfg.num_hidden_layers), layer_state{});
    for (auto& ls : s.layers) ls.window.assign(static_cast<size_t>(cfg.sliding_window * cfg.head_dim), 0.0f);
}

void model_impl::run_layer(int64_t layer, const batch& b, std::vector<float>& h) {
    const int64_t T = b.rows, n = cfg.hc_mult, d = cfg.hidden_size;
    const layer_weights& lw = w.layers[static_cast<size_t>(layer)];
    std::vector<float> x(static_cast<size_t>(T * d)), post(static_cast<size_t>(T * n)),
        comb(static_cast<size_t>(T * n * n)), sub;
    auto pre = [&](const hc_weights& hw, const tensor& norm) {
        pool->parallel_for(T, 1, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
                hc_pre(cfg, hw, &h[r * n * d], &x[r * d], &post[r * n], &comb[r * n * n]);
                cpu::rms_norm(&x[r * d], norm.ptr(), d, cfg.rms_norm_eps, &x[r * d]);
            }
        });
    };
    auto post_mix = [&] {
        pool->parallel_for(T, 1, [&](int64_t r0, int64_t r1) {
            std::vector<float> h_new(static_cast<size_t>(n * d));
            for (int64_t r = r0; r < r1; ++r) {
                hc_post(n, d, &sub[r * d], &h[r * n * d], &post[r * n], &comb[r * n * n], h_new.data());
                std::copy(h_new.begin(), h_new.end(), &h[r * n * d]);
            }
        });
    };
    pre(lw.hc_attn, lw.attn_norm);
    attention(layer, b, x, sub);
    post_mix();
    pre(lw.hc_ffn, lw.ffn_norm);
    moe(layer, b, x, sub);
    post_mix();
}

void model_impl::run_head(const std::vector<float>& h, const std::vector<int64_t>& rows, std::vector<float>& logits) {
    const int64_t n = cfg.hc_mult, d = cfg.hidden_size, R = static_cast<int64_t>(rows.size());
    std::vector<float> x(static_cast<size_t>(R * d));
    for (int64_t i = 0; i < R; ++i) {
        hc_head_collapse(cfg, w.hc_head, &h[rows[i] * n * d], &x[i * d]);
        cpu::rms_norm(&x[i * d], w.norm.ptr(), d, cfg.rms_norm_eps, &x[i * d]);
    }
    linear(x, R, w.head, logits);
}

// ---- model ----------------------------------------------------------------------------------

model::model(std::unique_ptr<model_impl> impl) : impl_(std::move(impl)) {}
model::~model() = default;

const model_config& model::config() const { return impl_->cfg; }

sequence_handle model::new_sequence() const {
    auto* s = new sequence_state();
    impl_->init_state(*s);
    return sequence_handle(s, [](sequence_state* p) { delete p; });
}

int64_t model::sequence_length(const sequence_state& s) { return s.length; }

result<std::unique_ptr<model>> model::load(const std::string& dir, const model_options& opt) {
    namespace fs = std::filesystem;
    auto cfg = load_model_config((fs::path(dir) / "config.json").string());
    if (!cfg) return cfg.error();
    auto ck = checkpoint::open_dir(dir);
    if (!ck) return ck.error();
    auto weights = load_weights(*cfg, *ck);
    if (!weights) return weights.error().with_context(dir);
    auto impl = std::make_unique<model_impl>();
    impl->cfg = std::move(cfg.value());
    impl->w = std::move(weights.value());
    impl->opt = opt;
    impl->pool = std::make_unique<cpu::thread_pool>(opt.threads);
    impl->rope_main = make_rope_table(impl->cfg.rope_main, impl->cfg.head_dim);
    impl->rope_compress = make_rope_table(impl->cfg.rope_compress, impl->cfg.head_dim);
    if (opt.numerics == numerics_mode::official)
        return make_error(error_code::invalid_argument, "numerics = \"official\" is not implemented yet (use \"hf\")");
    return std::unique_ptr<model>(new model(std::move(impl)));
}

result<forward_output> model::forward(std::span<const forward_item> items) {
    model_impl& m = *impl_;
    const model_config& c = m.cfg;
    batch b;
    for (size_t i = 0; i < items.size(); ++i) {
        const forward_item& it = items[i];
        if (!it.state || it.tokens.empty())
            return make_error(error_code::invalid_argument, fmt::format("batch item {}: no state or no tokens", i));
        if (it.start_pos != it.state->length)
            return make_error(error_code::invalid_argument,
                              fmt::format("batch item {}: start_pos {} but the sequence holds {} tokens", i,
                                          it.start_pos, it.state->length));
        batch_seq s{b.rows, static_cast<int64_t>(it.tokens.size()), it.start_pos, it.state};
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
    std::vector<float> h(static_cast<size_t>(b.rows * n * d));
    for (int64_t r = 0; r < b.rows; ++r)
        for (int64_t j = 0; j < n; ++j) std::copy_n(&m.w.embed.data[b.token[r] * d], d, &h[(r * n + j) * d]);
    for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) m.run_layer(layer, b, h);
    std::vector<int64_t> head_rows;
    for (size_t i = 0; i < items.size(); ++i) {
        const batch_seq& s = b.seqs[i];
        if (items[i].all_logits)
            for (int64_t r = s.row0; r < s.row0 + s.rows; ++r) head_rows.push_back(r);
        else
            head_rows.push_back(s.row0 + s.rows - 1);
    }
    std::vector<float> logits;
    m.run_head(h, head_rows, logits);
    forward_output out;
    size_t at = 0;
    for (size_t i = 0; i < items.size(); ++i) {
        size_t rows = items[i].all_logits ? items[i].tokens.size() : 1;
        auto begin = logits.begin() + static_cast<int64_t>(at * c.vocab_size);
        out.logits.emplace_back(begin, begin + static_cast<int64_t>(rows * c.vocab_size));
        at += rows;
        items[i].state->length += static_cast<int64_t>(items[i].tokens.size());
    }
    return out;
}

}  // namespace tandem::model
