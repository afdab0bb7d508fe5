// model/weights.cpp — checkpoint → model_weights: resolve names, validate everything, dequantize.
//
// Two passes: `plan` resolves every slot to its source tensor(s) and collects every problem
// (missing, unexpected, wrong shape, wrong dtype); only when the list is empty does `convert`
// touch tensor data. MTP tensors are all-or-nothing: a checkpoint without any `mtp.*` tensor
// (e.g. one saved by transformers, which drops them) loads with MTP unavailable.
#include "model/weights.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "cpu/amx.h"
#include "model/dtype.h"
#include "model/safetensors.h"
#include "model/weights_spec.h"

namespace tandem::model {

namespace {

using detail::weight_kind;
using detail::weight_slot;

// How one slot is fed.
struct source {
    const tensor_view* data = nullptr;
    const tensor_view* scale = nullptr;  // FP8 block scale / FP4 per-32 scale
    bool fp4 = false;
    int64_t fused_offset = 0;            // elements into a fused HF expert tensor
};

bool is_float(dtype t) { return t == dtype::f32 || t == dtype::bf16 || t == dtype::f16; }

std::string shape_str(const std::vector<int64_t>& dims) {
    std::string s = "[";
    s += join_dims(dims, ", ");
    s += ']';
    return s;
}

float load_float(const uint8_t* p, dtype t) {
    switch (t) {
        case dtype::f32: { float f; std::memcpy(&f, p, 4); return f; }
        case dtype::bf16: { uint16_t v; std::memcpy(&v, p, 2); return bf16_to_float(v); }
        case dtype::f16: { uint16_t v; std::memcpy(&v, p, 2); return f16_to_float(v); }
        case dtype::f8_e8m0: return e8m0_to_float(*p);
        default: return std::nanf("");
    }
}

// One spelling for every naming scheme we meet: the upstream names (optionally `model.`-
// prefixed), transformers' internal module paths, and the hybrid that transformers'
// save_pretrained writes (its conversion rules partly reverted). The canonical form is the
// internal path without `model.`, obtained by applying transformers' "deepseek_v4" renaming
// rules in their order to the key with any `model.` prefix removed. The same function maps our
// upstream slot names, so a checkpoint key and a slot meet when their canonical forms agree.
std::string canonical_name(std::string k) {
    if (k.rfind("model.", 0) == 0) k.erase(0, 6);
    auto replace_all = [&](const std::string& from, const std::string& to) {
        for (size_t at = k.find(from); at != std::string::npos; at = k.find(from, at + to.size()))
            k.replace(at, from.size(), to);
    };
    auto replace_prefix = [&](const std::string& from, const std::string& to) {
        if (k.rfind(from, 0) == 0) k.replace(0, from.size(), to);
    };
    replace_all(".attn.", ".self_attn.");
    replace_all(".ffn.", ".mlp.");
    replace_all(".indexer.compressor.", ".compressor.indexer.");
    replace_prefix("embed.weight", "embed_tokens.weight");
    replace_prefix("head.weight", "lm_head.weight");
    replace_prefix("hc_head_fn", "hc_head.hc_fn");
    replace_prefix("hc_head_base", "hc_head.hc_base");
    replace_prefix("hc_head_scale", "hc_head.hc_scale");
    replace_all(".attn_norm.", ".input_layernorm.");
    replace_all(".ffn_norm.", ".post_attention_layernorm.");
    for (const char* site : {"attn", "ffn"})
        for (const char* part : {"fn", "base", "scale"})
            replace_all(fmt::format(".hc_{}_{}", site, part), fmt::format(".{}_hc.{}", site, part));
    replace_all(".attn_sink", ".sinks");
    replace_all(".indexer.weights_proj.", ".compressor.indexer.scorer.weights_proj.");
    replace_all(".indexer.wq_b.", ".compressor.indexer.q_b_proj.");
    replace_all(".norm.", ".kv_norm.");
    replace_all(".ape", ".position_bias");
    replace_all(".wq_a.", ".q_a_proj.");
    replace_all(".self_attn.wq_b.", ".self_attn.q_b_proj.");
    replace_all(".wkv.", ".kv_proj.");
    replace_all(".wgate.", ".gate_proj.");
    replace_all(".wo_a.", ".o_a_proj.");
    replace_all(".wo_b.", ".o_b_proj.");
    replace_all(".q_norm.", ".q_a_norm.");
    replace_all(".gate.bias", ".gate.e_score_correction_bias");
    replace_all(".shared_experts.w1.", ".shared_experts.gate_proj.");
    replace_all(".shared_experts.w2.", ".shared_experts.down_proj.");
    replace_all(".shared_experts.w3.", ".shared_experts.up_proj.");
    return k;
}

class planner {
public:
    planner(const model_config& c, const checkpoint& ck) : c_(c), ck_(ck) {
        for (const auto& [name, view] : ck.tensors()) {
            auto [it, fresh] = by_canonical_.emplace(canonical_name(name), view);
            if (!fresh)
                problems.push_back(fmt::format("tensors '{}' and '{}' name the same weight", it->second->name, name));
        }
    }

    const tensor_view* lookup(const std::string& name) {
        auto it = by_canonical_.find(canonical_name(name));
        if (it == by_canonical_.end()) return nullptr;
        used_.insert(it->second->name);
        return it->second;
    }

    // Scale tensor of a quantized weight `<base>.weight`: `<base>.scale` or `<base>.weight_scale_inv`.
    const tensor_view* lookup_scale(const std::string& weight_name) {
        std::string base = weight_name.substr(0, weight_name.size() - std::string(".weight").size());
        if (const tensor_view* s = lookup(base + ".scale")) return s;
        return lookup(base + ".weight_scale_inv");
    }

    void check_scale(const weight_slot& s, const tensor_view* sc, std::vector<int64_t> want) {
        if (!sc) {
            problems.push_back(fmt::format("'{}': {} weight without its scale tensor", s.name, "quantized"));
        } else if (sc->type != dtype::f8_e8m0 && sc->type != dtype::f32) {
            problems.push_back(fmt::format("'{}': scale dtype {} (want F8_E8M0 or F32)", sc->name, dtype_name(sc->type)));
        } else if (sc->shape != want) {
            problems.push_back(fmt::format("'{}': shape {} (want {})", sc->name, shape_str(sc->shape), shape_str(want)));
        }
    }

    source plan_slot(const weight_slot& s) {
        source src;
        const tensor_view* t = lookup(s.name);
        if (!t && s.kind == weight_kind::expert) return plan_fused_expert(s);
        if (!t) {
            problems.push_back(fmt::format("missing tensor '{}'{}", s.name,
                                           s.hf_name.empty() ? "" : fmt::format(" (or '{}')", s.hf_name)));
            return src;
        }
        src.data = t;
        const int64_t block = c_.quantization.present && c_.quantization.block_rows > 0 ? c_.quantization.block_rows : 128;
        switch (s.kind) {
            case weight_kind::index:
                if (t->type != dtype::i64 && t->type != dtype::i32)
                    problems.push_back(fmt::format("'{}': dtype {} (want I64 or I32)", t->name, dtype_name(t->type)));
                break;
            case weight_kind::vector:
                if (!is_float(t->type))
                    problems.push_back(fmt::format("'{}': dtype {} (want F32, BF16 or F16)", t->name, dtype_name(t->type)));
                break;
            case weight_kind::linear:
            case weight_kind::expert:
                if (t->type == dtype::f8_e4m3 && s.shape.size() == 2) {
                    src.scale = lookup_scale(t->name);
                    check_scale(s, src.scale, {(s.shape[0] + block - 1) / block, (s.shape[1] + block - 1) / block});
                } else if (t->type == dtype::i8 && s.kind == weight_kind::expert) {
                    src.fp4 = true;
                    src.scale = lookup_scale(t->name);
                    check_scale(s, src.scale, {s.shape[0], (s.shape[1] + 31) / 32});
                    if (t->shape != std::vector<int64_t>{s.shape[0], s.shape[1] / 2} || s.shape[1] % 2)
                        problems.push_back(fmt::format("'{}': packed FP4 shape {} (want [{}, {}])", t->name,
                                                       shape_str(t->shape), s.shape[0], s.shape[1] / 2));
                    return src;
                } else if (!is_float(t->type)) {
                    problems.push_back(fmt::format("'{}': dtype {} (want F32, BF16, F16 or F8_E4M3{})", t->name,
                                                   dtype_name(t->type), s.kind == weight_kind::expert ? " or I8/FP4" : ""));
                }
                break;
        }
        if (t->shape != s.shape)
            problems.push_back(fmt::format("'{}': shape {} (want {})", t->name, shape_str(t->shape), shape_str(s.shape)));
        return src;
    }

    // transformers-internal fused experts: gate_up_proj [E, 2I, d], down_proj [E, d, I].
    source plan_fused_expert(const weight_slot& s) {
        source src;
        std::string base = fmt::format("model.layers.{}.mlp.experts.", s.layer);
        std::string name = base + (s.which == 2 ? "down_proj" : "gate_up_proj");
        const tensor_view* t = lookup(name);
        if (!t) {
            problems.push_back(fmt::format("missing tensor '{}' (or the fused '{}')", s.name, name));
            return src;
        }
        int64_t E = c_.n_routed_experts, I = c_.moe_intermediate_size, d = c_.hidden_size;
        std::vector<int64_t> want = s.which == 2 ? std::vector<int64_t>{E, d, I} : std::vector<int64_t>{E, 2 * I, d};
        if (t->shape != want || !is_float(t->type)) {
            if (s.expert == 0 && s.which != 3)
                problems.push_back(fmt::format("'{}': {} {} (want a float tensor {})", name, dtype_name(t->type),
                                               shape_str(t->shape), shape_str(want)));
            return src;
        }
        src.data = t;
        src.fused_offset = s.expert * (2 * I * d) + (s.which == 3 ? I * d : 0);
        if (s.which == 2) src.fused_offset = s.expert * d * I;
        return src;
    }

    void check_unexpected() {
        for (const auto& [name, view] : ck_.tensors()) {
            if (used_.count(name)) continue;
            // convert.py leaves duplicates of the shared embedding/head under mtp.*; they are unused.
            if (name.rfind("mtp.", 0) == 0 &&
                (name.find("emb") != std::string::npos ||
                 (name.size() >= 11 && name.compare(name.size() - 11, 11, "head.weight") == 0)))
                continue;
            problems.push_back(fmt::format("unexpected tensor '{}' ({} {})", name, dtype_name(view->type),
                                           shape_str(view->shape)));
        }
    }

    std::vector<std::string> problems;

private:
    const model_config& c_;
    const checkpoint& ck_;
    std::set<std::string> used_;
    std::map<std::string, const tensor_view*> by_canonical_;
};

cpu::weight_form form_of(dtype t) {
    switch (t) {
        case dtype::bf16: return cpu::weight_form::bf16;
        case dtype::f16: return cpu::weight_form::f16;
        case dtype::f8_e4m3: return cpu::weight_form::fp8_e4m3;
        case dtype::i8: return cpu::weight_form::fp4_e2m1;
        default: return cpu::weight_form::f32;
    }
}

// The kernels fold 2^120 into an FP8 block scale (cpu/weight_matrix.h), so a scale must stay
// below 2^8; real checkpoints' scales are amax/448 of weights far below 1. NaN scales are refused.
std::string check_scales(const tensor_view& sc, bool fp8) {
    const int64_t n = sc.numel();
    for (int64_t i = 0; i < n; ++i) {
        float v;
        if (sc.type == dtype::f8_e8m0) {
            if (sc.data[i] == 255) return fmt::format("'{}': scale {} is the E8M0 NaN code 0xff", sc.name, i);
            v = e8m0_to_float(sc.data[i]);
        } else {
            std::memcpy(&v, sc.data + 4 * i, 4);
        }
        if (!std::isfinite(v) || (fp8 && std::fabs(v) >= 256.0f))
            return fmt::format("'{}': scale {} = {} (want finite{})", sc.name, i, v, fp8 ? ", |scale| < 256" : "");
    }
    return {};
}

// Fills a slot. Matrices become views of the mapped bytes; vectors and index tables are copied.
std::string convert_slot(const weight_slot& s, const source& src, int64_t block, bool amx_tiles, weight_memory& mem) {
    const tensor_view& t = *src.data;
    if (s.kind == weight_kind::index) {
        s.index_target->resize(static_cast<size_t>(t.numel()));
        for (int64_t i = 0; i < t.numel(); ++i) {
            int64_t v = 0;
            if (t.type == dtype::i64) std::memcpy(&v, t.data + 8 * i, 8);
            else { int32_t v32; std::memcpy(&v32, t.data + 4 * i, 4); v = v32; }
            (*s.index_target)[static_cast<size_t>(i)] = static_cast<int32_t>(v);
        }
        mem.converted_bytes += t.numel() * 4;
        return {};
    }
    tensor& out = *s.target;
    out.shape = s.shape;
    int64_t n = 1;
    for (int64_t dim : s.shape) n *= dim;
    if (s.kind == weight_kind::vector) {
        out.data.resize(static_cast<size_t>(n));
        const int64_t es = dtype_size(t.type);
        for (int64_t i = 0; i < n; ++i) out.data[static_cast<size_t>(i)] = load_float(t.data + i * es, t.type);
        mem.converted_bytes += n * 4;
        return {};
    }
    out.act_quant = (src.fp4 || t.type == dtype::f8_e4m3) && s.name.find("wo_a") == std::string::npos;
    cpu::weight_matrix& m = out.mat;
    m.form = form_of(t.type);
    m.rows = s.shape[0];
    m.cols = s.shape[1];
    m.data = t.data + src.fused_offset * dtype_size(t.type);
    if (src.scale) {
        if (std::string bad = check_scales(*src.scale, !src.fp4); !bad.empty()) return bad;
        m.scale = src.scale->type == dtype::f8_e8m0 ? cpu::scale_form::e8m0 : cpu::scale_form::f32;
        m.scales = src.scale->data;
        m.scale_cols = src.scale->shape[1];
        m.block_rows = src.fp4 ? 1 : block;
        m.block_cols = src.fp4 ? 32 : block;
        mem.scale_bytes += src.scale->nbytes;
    }
    mem.in_place_bytes[static_cast<int>(m.form)] += m.value_bytes();
    // The embedding is read row by row, never multiplied: no tiles for it.
    if (amx_tiles && cpu::amx_fits(m) && s.name != "embed.weight") cpu::mark_for_tiles(m);
    if (m.amx_tiles) mem.amx_tile_bytes += m.value_bytes();
    return {};
}

}  // namespace

int64_t weight_memory::in_place_total() const {
    int64_t sum = scale_bytes;
    for (int64_t b : in_place_bytes) sum += b;
    return sum;
}

std::string weight_memory::describe() const {
    auto mib = [](int64_t b) { return double(b) / (1 << 20); };
    std::string forms;
    for (int f = 0; f < 5; ++f)
        if (in_place_bytes[f] > 0)
            forms += fmt::format("{}{} {:.1f}", forms.empty() ? "" : ", ",
                                 cpu::weight_form_name(static_cast<cpu::weight_form>(f)), mib(in_place_bytes[f]));
    const std::string where =
        copied_bytes > 0 ? fmt::format("the checkpoint's files copied into memory ({:.1f} MiB, {:.1f} MiB of it in huge "
                                       "pages)", mib(copied_bytes), mib(huge_page_bytes))
                         : std::string("the mapped checkpoint");
    const std::string tiles =
        amx_tile_bytes > 0 ? fmt::format("; {:.1f} MiB of BF16 / FP8 / FP4 matrices multiplied on AMX tiles", mib(amx_tile_bytes)) : "";
    return fmt::format("{:.1f} MiB used in place from {} ({}; scales {:.1f}), {:.1f} MiB "
                       "converted (fp32 vectors, routing tables); checkpoint {:.1f} MiB{}",
                       mib(in_place_total()), where, forms, mib(scale_bytes), mib(converted_bytes), mib(checkpoint_bytes),
                       tiles);
}

std::vector<weight_entry> expected_weights(const model_config& cfg) {
    model_weights scratch;
    std::vector<weight_entry> out;
    for (const auto& s : detail::enumerate_weights(cfg, scratch)) out.push_back({s.name, s.shape});
    return out;
}

result<model_weights> load_weights(const model_config& cfg, const checkpoint& ck, const load_progress& progress,
                                   bool amx_tiles) {
    model_weights w;
    std::vector<weight_slot> slots = detail::enumerate_weights(cfg, w);
    planner p(cfg, ck);
    bool have_mtp = false;
    for (const auto& [name, v] : ck.tensors())
        if (name.rfind("mtp.", 0) == 0 || name.rfind("model.mtp.", 0) == 0) have_mtp = true;
    std::vector<source> sources(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) {
        if (slots[i].mtp && !have_mtp) continue;
        sources[i] = p.plan_slot(slots[i]);
    }
    p.check_unexpected();
    if (!p.problems.empty()) {
        std::string msg = fmt::format("{} problem(s) with the checkpoint tensors:", p.problems.size());
        for (const auto& s : p.problems) msg += "\n  - " + s;
        return make_error(error_code::invalid_argument, msg);
    }
    if (!have_mtp) w.layers.resize(static_cast<size_t>(cfg.num_hidden_layers));
    const int64_t block = cfg.quantization.present && cfg.quantization.block_rows > 0 ? cfg.quantization.block_rows : 128;
    if (block % 8 != 0)
        return make_error(error_code::invalid_argument,
                          fmt::format("quantization_config: FP8 weight block {} is not a multiple of 8", block));
    w.storage = std::make_shared<const checkpoint>(ck);
    w.memory.checkpoint_bytes = ck.total_bytes();
    w.memory.copied_bytes = ck.copied_bytes();
    w.memory.huge_page_bytes = ck.huge_page_bytes();
    std::vector<std::string> bad_scales;
    int64_t total = 0, done = 0;
    for (const auto& s : sources) total += s.data ? s.data->nbytes : 0;
    for (size_t i = 0; i < slots.size(); ++i) {
        if (!sources[i].data) continue;
        if (std::string bad = convert_slot(slots[i], sources[i], block, amx_tiles, w.memory); !bad.empty())
            bad_scales.push_back(std::move(bad));
        done += sources[i].data->nbytes;
        if (progress) progress(done, total);
    }
    if (!bad_scales.empty()) {
        std::string msg = fmt::format("{} problem(s) with the checkpoint's quantization scales:", bad_scales.size());
        for (const auto& b : bad_scales) msg += "\n  - " + b;
        return make_error(error_code::invalid_argument, msg);
    }
    for (size_t li = 0; li < w.layers.size(); ++li) {
        const auto& tid = w.layers[li].moe.tid2eid;
        for (int32_t e : tid)
            if (e < 0 || e >= cfg.n_routed_experts)
                return make_error(error_code::invalid_argument,
                                  fmt::format("layers.{}.ffn.gate.tid2eid holds expert id {} outside [0, {})", li, e,
                                              cfg.n_routed_experts));
    }
    return w;
}

}  // namespace tandem::model
