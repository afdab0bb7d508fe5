// `tandem make-model`: presets, determinism, files written, argument errors.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "cpu/amx.h"
#include "model/make_model_command.h"
#include "model/weights.h"
#include "model_test_util.h"

using namespace tandem::model;
using namespace tandem::model::testing;
namespace fs = std::filesystem;

namespace {
std::string slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}
}  // namespace

TEST_CASE("make-model: tiny is deterministic, HF-shaped, and carries the tokenizer files") {
    temp_dir tok("tok"), a("mm_a"), b("mm_b"), c("mm_c");
    std::ofstream(tok.path / "tokenizer.json") << R"({"model": {"type": "BPE"}})";
    std::ofstream(tok.path / "tokenizer_config.json") << R"({"add_bos_token": false})";
    REQUIRE(run_make_model_command("tiny", a.str(), 7, tok.str()) == 0);
    REQUIRE(run_make_model_command("tiny", b.str(), 7, tok.str()) == 0);
    REQUIRE(run_make_model_command("tiny", c.str(), 8, "") == 0);
    CHECK(slurp(a.path / "model.safetensors") == slurp(b.path / "model.safetensors"));
    CHECK(slurp(a.path / "model.safetensors") != slurp(c.path / "model.safetensors"));
    CHECK(slurp(a.path / "tokenizer.json") == slurp(tok.path / "tokenizer.json"));
    CHECK(fs::exists(a.path / "tokenizer_config.json"));
    CHECK(fs::exists(a.path / "generation_config.json"));
    CHECK_FALSE(fs::exists(c.path / "tokenizer.json"));
    auto cfg = load_model_config((a.path / "config.json").string());
    REQUIRE(cfg.is_ok());
    CHECK(cfg->vocab_size == 129280);
    CHECK(cfg->sliding_window == 8);
    CHECK(cfg->index_topk == 4);
    bool sliding = false, csa = false, hca = false, hash = false, routed = false;
    for (const auto& l : cfg->layers) {
        if (l.is_mtp) continue;
        sliding |= l.attention == attention_type::sliding;
        csa |= l.attention == attention_type::csa;
        hca |= l.attention == attention_type::hca;
        hash |= l.mlp == mlp_type::hash_moe;
        routed |= l.mlp == mlp_type::moe;
    }
    CHECK((sliding && csa && hca && hash && routed));
    CHECK(slurp(a.path / "config.json").find("\"layer_types\"") != std::string::npos);
}

TEST_CASE("make-model: argument errors exit 2") {
    temp_dir out("mm_err");
    CHECK(run_make_model_command("huge", out.str(), 0, "") == 2);
    CHECK(run_make_model_command("tiny", "", 0, "") == 2);
    CHECK(run_make_model_command("tiny", out.str(), 0, (out.path / "no_such_dir").string()) == 2);
}

TEST_CASE("make-model: every preset's config is valid and its tensor list consistent") {
    for (const auto& name : preset_names()) {
        CAPTURE(name);
        auto cfg = preset_config(name);
        REQUIRE(cfg.is_ok());
        auto reparsed = parse_model_config(to_hf_config_json(*cfg), name);
        REQUIRE_MESSAGE(reparsed.is_ok(), reparsed.error().message());
        CHECK(expected_weights(*reparsed).size() == expected_weights(*cfg).size());
    }
}

TEST_CASE("model: options from the config keys") {
    auto ok = model_options_from("official", 3);
    REQUIRE(ok.is_ok());
    CHECK(ok->numerics == numerics_mode::official);
    CHECK(ok->threads == 3);
    auto bad = model_options_from("fast", 0);
    REQUIRE_FALSE(bad.is_ok());
    CHECK(bad.error().message().find("model.numerics") != std::string::npos);
    CHECK_FALSE(model_options_from("hf", -1).is_ok());
    CHECK(ok->pages == weight_pages::huge);  // the default
    CHECK(model_options_from("hf", 0, "mapped")->pages == weight_pages::mapped);
    auto bad_pages = model_options_from("hf", 0, "tiny");
    REQUIRE_FALSE(bad_pages.is_ok());
    CHECK(bad_pages.error().message().find("model.weight_pages") != std::string::npos);
    CHECK_FALSE(ok->amx_matmul);  // the default: exact
    CHECK(model_options_from("hf", 0, "huge", "amx")->amx_matmul);
    auto bad_matmul = model_options_from("hf", 0, "huge", "fast");
    REQUIRE_FALSE(bad_matmul.is_ok());
    CHECK(bad_matmul.error().message().find("backend.cpu_matmul") != std::string::npos);
    // What the outputs depend on: the tiles' bits differ from the exact kernels', so pd's model
    // fingerprint and the prefix cache's key must tell the two apart.
    CHECK(numerics_identity("hf", "exact") == "hf");
    CHECK(numerics_identity("hf", "amx") != numerics_identity("hf", "exact"));
    CHECK(numerics_identity("official", "amx") != numerics_identity("hf", "amx"));
}

TEST_CASE("model: backend.cpu_matmul = \"amx\" loads on tiles where the CPU has them, else is a startup error naming "
          "the key") {
    temp_dir dir("amx_load");
    make_checkpoint("tiny-bf16", 2, dir.str());
    model_options o;
    o.amx_matmul = true;
    auto m = model::load(dir.str(), o);
    if (tandem::cpu::amx_bf16_available()) {
        REQUIRE_MESSAGE(m.is_ok(), m.error().message());
        CHECK((*m)->memory().amx_tile_bytes > 0);
        CHECK((*m)->memory().describe().find("AMX tiles") != std::string::npos);
    } else {
        REQUIRE_FALSE(m.is_ok());
        CHECK(m.error().message().find("backend.cpu_matmul") != std::string::npos);
        CHECK(m.error().message().find("AMX-BF16") != std::string::npos);
    }
    // fp32 weights never take the tiles (they are not bf16): nothing is marked.
    temp_dir f32("amx_load_f32");
    make_checkpoint("tiny", 2, f32.str());
    auto plain = model::load(f32.str(), o);
    if (tandem::cpu::amx_bf16_available()) {
        REQUIRE(plain.is_ok());
        CHECK((*plain)->memory().amx_tile_bytes == 0);
    }
}
