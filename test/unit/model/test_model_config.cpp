// Tests for model/model_config: both HF forms, the official ModelArgs names, the writer round
// trip, and errors that name the key and the file.
#include <doctest/doctest.h>

#include <string>

#include "model/model_config.h"
#include "tandem_build_config.h"

using namespace tandem;
using namespace tandem::model;

namespace {

std::string config_path(const char* name) {
    return std::string(TANDEM_SOURCE_ROOT) + "/test/golden/model/configs/" + name;
}

model_config load_ok(const char* name) {
    auto r = load_model_config(config_path(name));
    REQUIRE_MESSAGE(r.is_ok(), r.error().message());
    return *r;
}

// A minimal native config; tests replace one piece at a time.
std::string tiny_native(const std::string& extra = "", const std::string& drop = "") {
    std::string fields[] = {
        R"("vocab_size": 1000)", R"("hidden_size": 64)", R"("num_hidden_layers": 2)",
        R"("num_attention_heads": 4)", R"("head_dim": 32)", R"("q_lora_rank": 32)",
        R"("o_groups": 2)", R"("o_lora_rank": 16)", R"("index_n_heads": 2)",
        R"("index_head_dim": 16)", R"("index_topk": 2)", R"("n_routed_experts": 4)",
        R"("num_experts_per_tok": 2)", R"("moe_intermediate_size": 64)",
        R"("layer_types": ["heavily_compressed_attention", "compressed_sparse_attention"])",
        R"("mlp_layer_types": ["moe", "moe"])", R"("partial_rotary_factor": 0.25)",
        R"("sliding_window": 8)", R"("hc_mult": 2)", R"("hc_sinkhorn_iters": 3)",
        R"("num_nextn_predict_layers": 0)"};
    std::string s = "{";
    bool first = true;
    for (const std::string& f : fields) {
        if (!drop.empty() && f.find("\"" + drop + "\"") == 0) continue;
        s += (first ? "" : ", ") + f;
        first = false;
    }
    if (!extra.empty()) s += ", " + extra;
    return s + "}";
}

}  // namespace

TEST_CASE("model_config: DeepSeek-V4-Flash upstream form") {
    model_config c = load_ok("deepseek-v4-flash.json");
    CHECK(c.vocab_size == 129280);
    CHECK(c.hidden_size == 4096);
    CHECK(c.num_hidden_layers == 43);
    CHECK(c.num_layers_total() == 44);
    CHECK(c.num_attention_heads == 64);
    CHECK(c.head_dim == 512);
    CHECK(c.rope_head_dim == 64);
    CHECK(c.nope_head_dim == 448);
    CHECK(c.q_lora_rank == 1024);
    CHECK(c.o_groups == 8);
    CHECK(c.index_topk == 512);
    CHECK(c.count_layers(attention_type::sliding, false) == 2);
    CHECK(c.count_layers(attention_type::csa, false) == 21);
    CHECK(c.count_layers(attention_type::hca, false) == 20);
    CHECK(c.count_layers(attention_type::sliding, true) == 3);  // + MTP
    CHECK(c.layers[2].attention == attention_type::csa);
    CHECK(c.layers[2].compress_ratio == 4);
    CHECK(c.layers[3].compress_ratio == 128);
    CHECK(c.layers[43].is_mtp);
    CHECK(c.layers[43].attention == attention_type::sliding);
    CHECK(c.layers[43].mlp == mlp_type::moe);
    CHECK(c.num_hash_layers == 3);
    CHECK(c.layers[2].mlp == mlp_type::hash_moe);
    CHECK(c.layers[3].mlp == mlp_type::moe);
    CHECK(c.rope_main.type == "default");
    CHECK(c.rope_main.theta == 10000.0);
    CHECK(c.rope_compress.type == "yarn");
    CHECK(c.rope_compress.theta == 160000.0);
    CHECK(c.rope_compress.factor == 16.0);
    CHECK(c.rope_compress.original_max_position_embeddings == 65536);
    CHECK(c.rope_compress.beta_fast == 32.0);
    CHECK(c.rope_compress.beta_slow == 1.0);
    CHECK(c.rope_compress.attention_factor == 1.0);
    CHECK(c.routed_scaling_factor == 1.5);
    CHECK(c.scoring_func == "sqrtsoftplus");
    CHECK(c.expert_dtype == "fp4");
    CHECK(c.quantization.present);
    CHECK(c.quantization.block_rows == 128);
    CHECK(c.quantization.scale_fmt == "ue8m0");
    CHECK(c.eos_token_ids == std::vector<int64_t>{1});
    CHECK(c.torch_dtype == "bfloat16");
}

TEST_CASE("model_config: DeepSeek-V4-Pro upstream form") {
    model_config c = load_ok("deepseek-v4-pro.json");
    CHECK(c.hidden_size == 7168);
    CHECK(c.num_hidden_layers == 61);
    CHECK(c.count_layers(attention_type::sliding, false) == 0);
    CHECK(c.count_layers(attention_type::csa, false) == 30);
    CHECK(c.count_layers(attention_type::hca, false) == 31);
    CHECK(c.layers[0].attention == attention_type::hca);
    CHECK(c.layers[61].attention == attention_type::sliding);
    CHECK(c.index_topk == 1024);
    CHECK(c.routed_scaling_factor == 2.5);
    CHECK(c.n_routed_experts == 384);
    CHECK(c.q_lora_rank == 1536);
}

TEST_CASE("model_config: transformers-native tiny CI form") {
    model_config c = load_ok("tiny-ci-native.json");
    CHECK(c.num_hidden_layers == 4);
    CHECK(c.layers.size() == 5);
    CHECK(c.layers[2].attention == attention_type::csa);
    CHECK(c.layers[3].attention == attention_type::hca);
    CHECK(c.layers[3].compress_ratio == 128);
    CHECK(c.num_hash_layers == 3);
    CHECK(c.index_n_heads == 2);
    CHECK(c.torch_dtype == "float32");
    CHECK(c.rope_head_dim == 64);
    CHECK(c.rope_compress.type == "yarn");
    CHECK(c.rope_compress.original_max_position_embeddings == 65536);
}

TEST_CASE("model_config: the HF tester shape (rope 8, no MTP)") {
    auto r = parse_model_config(tiny_native(), "inline");
    REQUIRE_MESSAGE(r.is_ok(), r.error().message());
    CHECK(r->rope_head_dim == 8);
    CHECK(r->nope_head_dim == 24);
    CHECK(r->num_layers_total() == 2);
    CHECK(r->num_hash_layers == 0);
    CHECK(r->hc_mult == 2);
    CHECK(r->rope_compress.type == "default");
}

TEST_CASE("model_config: official inference/config.json names") {
    const std::string j = R"({
      "vocab_size": 129280, "dim": 4096, "moe_inter_dim": 2048, "n_layers": 43, "n_hash_layers": 3,
      "n_heads": 64, "n_routed_experts": 256, "n_shared_experts": 1, "n_activated_experts": 6,
      "score_func": "sqrtsoftplus", "route_scale": 1.5, "swiglu_limit": 10.0, "q_lora_rank": 1024,
      "head_dim": 512, "rope_head_dim": 64, "o_groups": 8, "o_lora_rank": 1024, "window_size": 128,
      "compress_ratios": [0, 0, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4,
                          128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4,
                          128, 4, 128, 4, 128, 4, 0],
      "compress_rope_theta": 160000.0, "original_seq_len": 65536, "rope_theta": 10000.0,
      "rope_factor": 16, "beta_fast": 32, "beta_slow": 1, "index_n_heads": 64,
      "index_head_dim": 128, "index_topk": 512, "hc_mult": 4, "hc_sinkhorn_iters": 20,
      "dtype": "fp8", "scale_fmt": "ue8m0", "expert_dtype": "fp4"})";
    auto r = parse_model_config(j, "inference/config.json");
    REQUIRE_MESSAGE(r.is_ok(), r.error().message());
    model_config flash = load_ok("deepseek-v4-flash.json");
    CHECK(r->layers == flash.layers);
    CHECK(r->rope_main == flash.rope_main);
    CHECK(r->rope_compress == flash.rope_compress);
    CHECK(r->quantization == flash.quantization);
    CHECK(r->hidden_size == 4096);
    CHECK(r->moe_intermediate_size == 2048);
    CHECK(r->num_experts_per_tok == 6);
    CHECK(r->torch_dtype == "bfloat16");
}

TEST_CASE("model_config: the native writer round-trips") {
    for (const char* name : {"deepseek-v4-flash.json", "deepseek-v4-pro.json", "tiny-ci-native.json"}) {
        CAPTURE(name);
        model_config c = load_ok(name);
        std::string text = to_hf_config_json(c);
        auto back = parse_model_config(text, "written");
        REQUIRE_MESSAGE(back.is_ok(), back.error().message());
        CHECK(*back == c);
        CHECK(text.find("\"layer_types\"") != std::string::npos);
        CHECK(text.find("\"compress_ratios\"") == std::string::npos);
    }
    auto tester = parse_model_config(tiny_native(R"("eos_token_id": [1, 7])"), "inline");
    REQUIRE(tester.is_ok());
    auto back = parse_model_config(to_hf_config_json(*tester), "written");
    REQUIRE(back.is_ok());
    CHECK(*back == *tester);
    CHECK(back->eos_token_ids == std::vector<int64_t>{1, 7});
}

TEST_CASE("model_config: errors name the key and the origin") {
    auto missing = parse_model_config(tiny_native("", "hidden_size"), "my/config.json");
    REQUIRE_FALSE(missing.is_ok());
    CHECK(missing.error().code() == error_code::invalid_argument);
    CHECK(missing.error().message().find("my/config.json") != std::string::npos);
    CHECK(missing.error().message().find("hidden_size") != std::string::npos);

    auto no_layers = parse_model_config(tiny_native("", "layer_types"), "x.json");
    REQUIRE_FALSE(no_layers.is_ok());
    CHECK(no_layers.error().message().find("layer_types") != std::string::npos);

    auto bad_type = parse_model_config(tiny_native(R"("num_hidden_layers": "two")",
                                                   "num_hidden_layers"), "x.json");
    REQUIRE_FALSE(bad_type.is_ok());
    CHECK(bad_type.error().message().find("expected an integer") != std::string::npos);

    std::string unknown_kind = tiny_native(R"("layer_types": ["sliding_attention", "dense"])",
                                           "layer_types");
    auto unk = parse_model_config(unknown_kind, "x.json");
    REQUIRE_FALSE(unk.is_ok());
    CHECK(unk.error().message().find("dense") != std::string::npos);

    auto ratio = parse_model_config(tiny_native(R"("compress_ratios": [0, 16])", "layer_types"),
                                    "x.json");
    REQUIRE_FALSE(ratio.is_ok());
    CHECK(ratio.error().message().find("compress_ratios") != std::string::npos);

    auto rope = parse_model_config(tiny_native(R"("qk_rope_head_dim": 16)"), "x.json");
    REQUIRE_FALSE(rope.is_ok());
    CHECK(rope.error().message().find("partial_rotary_factor") != std::string::npos);

    auto groups = parse_model_config(tiny_native(R"("o_groups": 3)", "o_groups"), "x.json");
    REQUIRE_FALSE(groups.is_ok());
    CHECK(groups.error().message().find("o_groups") != std::string::npos);

    auto yarn = parse_model_config(
        tiny_native(R"("rope_scaling": {"type": "longrope"})"), "x.json");
    REQUIRE_FALSE(yarn.is_ok());
    CHECK(yarn.error().message().find("rope_scaling.rope_type") != std::string::npos);

    auto other = parse_model_config(tiny_native(R"("model_type": "deepseek_v3")"), "x.json");
    REQUIRE_FALSE(other.is_ok());

    auto not_json = parse_model_config("{ nope", "x.json");
    REQUIRE_FALSE(not_json.is_ok());
    CHECK(not_json.error().message().find("x.json") != std::string::npos);

    auto no_file = load_model_config("/nonexistent/config.json");
    REQUIRE_FALSE(no_file.is_ok());
    CHECK(no_file.error().code() == error_code::not_found);
}

TEST_CASE("model_config: unknown keys and nulls are ignored") {
    auto r = parse_model_config(
        tiny_native(R"("kv_lora_rank": null, "first_k_dense_replace": 2, "n_group": null,
                       "rope_interleave": true, "some_future_key": {"a": [1, 2]})"),
        "x.json");
    REQUIRE_MESSAGE(r.is_ok(), r.error().message());
    auto legacy2 = parse_model_config(
        R"({"vocab_size": 1000, "hidden_size": 8, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 512,
            "q_lora_rank": 1024, "o_lora_rank": 1024, "o_groups": 8,
            "compress_ratios": [0, 0, 4, 128],
            "compress_rope_parameters": {"type": "yarn", "factor": 16,
              "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1,
              "rope_theta": 160000, "partial_rotary_factor": 0.125},
            "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 2048,
            "num_hash_layers": 3, "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512,
            "dtype": "bfloat16", "kv_lora_rank": null, "qk_nope_head_dim": 448})",
        "trl/config.json");
    REQUIRE_MESSAGE(legacy2.is_ok(), legacy2.error().message());
    CHECK(legacy2->num_layers_total() == 5);
    CHECK(legacy2->layers[4].attention == attention_type::sliding);  // no MTP entry: sliding
    CHECK(legacy2->layers[3].attention == attention_type::hca);
    CHECK(legacy2->rope_compress.type == "yarn");
    CHECK(legacy2->rope_compress.factor == 16.0);
    CHECK(legacy2->rope_head_dim == 64);
}
