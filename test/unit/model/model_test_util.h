// Test helpers for model/: temp dirs, generated checkpoints, golden data.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cache/layout.h"
#include "cache/page_pool.h"
#include "model/make_model.h"
#include "model/model.h"
#include "tandem_build_config.h"

namespace tandem::model::testing {

namespace cache = tandem::cache;

struct temp_dir {
    std::filesystem::path path;
    explicit temp_dir(const std::string& tag) {
        path = std::filesystem::temp_directory_path() /
               ("tandem_model_" + tag + "_" + std::to_string(reinterpret_cast<uintptr_t>(this)));
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    std::string str() const { return path.string(); }
};

// Writes the preset checkpoint with `seed` exactly like `tandem make-model` does.
inline void make_checkpoint(const std::string& preset, uint64_t seed, const std::string& dir,
                            tensor_naming naming = tensor_naming::upstream) {
    auto cfg = preset_config(preset);
    REQUIRE(cfg.is_ok());
    make_model_options opt;
    opt.seed = seed;
    opt.naming = naming;
    opt.bf16 = cfg->torch_dtype == "bfloat16";
    opt.quantize = cfg->quantization.present;
    status st = write_random_checkpoint(*cfg, dir, opt);
    REQUIRE_MESSAGE(st.is_ok(), st.message());
}

// A model plus a cache pool laid out for it: what the engine will hold.
struct session {
    std::unique_ptr<model> m;
    std::unique_ptr<cache::page_pool> pool;

    session(const std::string& dir, int threads, cache::kv_dtype kv = cache::kv_dtype::fp32,
            cache::index_k_dtype ik = cache::index_k_dtype::fp32, numerics_mode numerics = numerics_mode::hf,
            int64_t memory = int64_t{256} << 20, bool amx_matmul = false, int64_t max_sequences = 8) {
        model_options o{numerics, threads};
        o.amx_matmul = amx_matmul;
        auto r = model::load(dir, o);
        REQUIRE_MESSAGE(r.is_ok(), r.error().message());
        m = std::move(r.value());
        auto layout = cache::layout_spec::create(m->config(), cache::layout_options{kv, ik, 128});
        REQUIRE_MESSAGE(layout.is_ok(), layout.error().message());
        auto p = cache::page_pool::create(*layout, cache::pool_options{memory, max_sequences});
        REQUIRE_MESSAGE(p.is_ok(), p.error().message());
        pool = std::move(p.value());
    }

    cache::slot_ref new_sequence() {
        cache::slot_ref s = pool->alloc_sequence(1);
        REQUIRE(s.valid());
        pool->reset_sequence_state(s);
        return s;
    }

    // Runs items after making sure every slot has the pages it needs.
    result<forward_output> forward(std::vector<forward_item> items) {
        for (const auto& it : items)
            REQUIRE(pool->ensure_capacity(it.slot, it.start_pos + int64_t(it.tokens.size())));
        return m->forward(*pool, items);
    }

    std::vector<float> run(cache::slot_ref s, std::span<const int32_t> tokens, int64_t start, bool all) {
        auto out = forward({forward_item{tokens, start, s, all ? logit_rows::all : logit_rows::last}});
        REQUIRE_MESSAGE(out.is_ok(), out.error().message());
        return std::move(out->logits[0]);
    }

    // Token-by-token decode of tokens[from, end) on s (which already holds tokens[0, from)), its
    // first step batched with other's whole prefill in sequence o: the decoded tokens' logits, one
    // row each, concatenated — for the batch-invariance checks against a full prefill.
    std::vector<float> decode_beside_prefill(cache::slot_ref s, std::span<const int32_t> tokens, size_t from,
                                             cache::slot_ref o, std::span<const int32_t> other) {
        std::vector<float> tail;
        for (size_t t = from; t < tokens.size(); ++t) {
            std::vector<forward_item> items = {{tokens.subspan(t, 1), int64_t(t), s, logit_rows::last}};
            if (t == from) items.push_back({other, 0, o, logit_rows::last});
            auto out = forward(items);
            REQUIRE(out.is_ok());
            tail.insert(tail.end(), out->logits[0].begin(), out->logits[0].end());
        }
        return tail;
    }
};

struct golden_prompt {
    std::vector<int32_t> tokens;
    std::vector<int32_t> argmax;
    std::vector<float> max_abs, top2_gap, sampled, last_row;
};

struct golden_set {
    std::vector<int32_t> vocab_ids;
    std::vector<golden_prompt> prompts;
};

template <typename T>
std::vector<T> read_array(const std::vector<char>& bin, simdjson::dom::element e) {
    int64_t off = 0, count = 0;
    REQUIRE(e["offset"].get_int64().get(off) == simdjson::SUCCESS);
    REQUIRE(e["count"].get_int64().get(count) == simdjson::SUCCESS);
    REQUIRE(off + count * int64_t(sizeof(T)) <= int64_t(bin.size()));
    std::vector<T> v(static_cast<size_t>(count));
    std::memcpy(v.data(), bin.data() + off, v.size() * sizeof(T));
    return v;
}

inline golden_set load_golden(const std::string& stem) {
    std::string base = std::string(TANDEM_SOURCE_ROOT) + "/test/golden/model/" + stem;
    std::ifstream f(base + ".bin", std::ios::binary);
    REQUIRE_MESSAGE(f.good(), base << ".bin missing");
    std::vector<char> bin((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    simdjson::dom::parser parser;
    simdjson::padded_string json;
    REQUIRE(simdjson::padded_string::load(base + ".json").get(json) == simdjson::SUCCESS);
    simdjson::dom::element root;
    REQUIRE(parser.parse(json).get(root) == simdjson::SUCCESS);
    auto field = [](simdjson::dom::element obj, const char* key) {
        simdjson::dom::element e;
        REQUIRE_MESSAGE(obj[key].get(e) == simdjson::SUCCESS, key);
        return e;
    };
    golden_set g;
    g.vocab_ids = read_array<int32_t>(bin, field(root, "vocab_ids"));
    simdjson::dom::array prompts;
    REQUIRE(field(root, "prompts").get_array().get(prompts) == simdjson::SUCCESS);
    for (simdjson::dom::element p : prompts) {
        golden_prompt gp;
        simdjson::dom::array toks;
        REQUIRE(field(p, "tokens").get_array().get(toks) == simdjson::SUCCESS);
        for (simdjson::dom::element t : toks) gp.tokens.push_back(static_cast<int32_t>(int64_t(t)));
        gp.argmax = read_array<int32_t>(bin, field(p, "argmax"));
        gp.max_abs = read_array<float>(bin, field(p, "max_abs"));
        gp.top2_gap = read_array<float>(bin, field(p, "top2_gap"));
        gp.sampled = read_array<float>(bin, field(p, "sampled"));
        simdjson::dom::element lr;
        if (p["last_row"].get(lr) == simdjson::SUCCESS) gp.last_row = read_array<float>(bin, lr);
        g.prompts.push_back(std::move(gp));
    }
    return g;
}

}  // namespace tandem::model::testing
