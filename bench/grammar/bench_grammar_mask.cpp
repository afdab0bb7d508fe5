// bench/grammar/bench_grammar_mask.cpp — What constrained decoding adds to a decode step.
//
// Baseline, measured in the same run: one decode step of the model at batch B (B sequences, one
// new token each, CPU forward pass). Against it: the grammar work the scheduler does for the
// same step when all B requests are constrained — per request, the next-token mask (xgrammar),
// applying it to the logits row, and accepting the sampled token. The grammars are the ones the
// API builds (grammar/chat_constraint.h): a JSON schema (response_format) and a forced DSML tool
// call, half the batch each; tokens are drawn at random among the allowed ones, so the matchers
// walk through whole outputs (and restart when one completes).
//
//   build/bench/grammar/bench_grammar_mask [--preset small | --model DIR] [--batch 64]
//       [--steps 3] [--mask-steps 200] [--threads N] [--tokenizer models/tokenizer/tokenizer.json]
//
// Prints the mask cost per step and per token, and its ratio to the decode step (goal: < 5%).
// The mask is also measured over the full 129,280-id vocabulary (DeepSeek-V4's), against the
// same decode step, as an upper bound for real checkpoints.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cache/layout.h"
#include "cache/page_pool.h"
#include "engine/sampler.h"
#include "grammar/chat_constraint.h"
#include "grammar/grammar.h"
#include "model/make_model.h"
#include "model/model.h"
#include "text/chat.h"
#include "text/tokenizer.h"

namespace {

using clock_type = std::chrono::steady_clock;
namespace model = tandem::model;
namespace cache = tandem::cache;
namespace grammar = tandem::grammar;
namespace text = tandem::text;

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "%s\n", what.c_str());
    std::exit(1);
}

const char* k_schema_request = R"({"messages":[{"role":"user","content":"weather as json"}],
  "thinking":{"type":"disabled"},"response_format":{"type":"json_schema","json_schema":{"name":"w",
  "schema":{"type":"object","properties":{"city":{"type":"string","maxLength":40},
  "days":{"type":"integer","minimum":1,"maximum":14},"metric":{"type":"boolean"},
  "alerts":{"type":"array","items":{"type":"string","maxLength":20},"maxItems":4}},
  "required":["city","days","metric"],"additionalProperties":false}}}})";
const char* k_tool_request = R"({"messages":[{"role":"user","content":"weather?"}],
  "thinking":{"type":"disabled"},"tool_choice":"required","tools":[{"type":"function","function":{
  "name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":40},
  "days":{"type":"integer","minimum":1,"maximum":14}},"required":["city"]}}},{"type":"function",
  "function":{"name":"get_time","parameters":{"type":"object","properties":{"utc":{"type":"boolean"}}}}}]})";

std::string spec_of(const char* body) {
    auto req = text::chat_request_from_openai_json(body);
    if (!req) die(req.error().message());
    auto prompt = text::render_chat(*req);
    if (!prompt) die(prompt.error().message());
    auto spec = grammar::chat_constraint(*req, *prompt);
    if (!spec || !spec->has_value()) die("no grammar for the benchmark request");
    return **spec;
}

// Seconds per step of the grammar work for `batch` constrained requests over `vocab` ids.
double mask_seconds_per_step(const text::tokenizer& tok, int32_t vocab, int32_t eos, int batch,
                             int steps, double* compile_s) {
    auto t0 = clock_type::now();
    grammar::compiler compiler(grammar::vocabulary_from_tokenizer(tok, vocab, eos), 2);
    auto json = compiler.compile(spec_of(k_schema_request));
    auto tools = compiler.compile(spec_of(k_tool_request));
    if (!json || !tools) die("compile failed");
    *compile_s = seconds_since(t0);
    std::vector<grammar::matcher> matchers;
    for (int i = 0; i < batch; ++i) matchers.emplace_back(i % 2 ? *json : *tools);
    std::vector<float> logits(static_cast<size_t>(vocab));
    std::mt19937_64 rng(7);
    for (float& l : logits) l = std::uniform_real_distribution<float>(-4, 4)(rng);
    std::vector<float> row(logits.size());
    std::vector<int32_t> allowed;
    double measured = 0;
    for (int s = 0; s < steps; ++s) {
        for (int i = 0; i < batch; ++i) {
            grammar::matcher& m = matchers[static_cast<size_t>(i)];
            // Timed: what the scheduler does per constrained request and token.
            auto t1 = clock_type::now();
            auto mask = m.next_mask();
            row = logits;
            tandem::engine::apply_token_mask(row, mask);
            measured += seconds_since(t1);
            // Untimed: picking a random allowed token, so the walk covers whole outputs.
            allowed.clear();
            for (size_t w = 0; w < mask.size(); ++w) {
                for (uint32_t bits = mask[w]; bits != 0; bits &= bits - 1) {
                    const int32_t t = static_cast<int32_t>(w * 32) + __builtin_ctz(bits);
                    if (t < vocab) allowed.push_back(t);
                }
            }
            const int32_t pick = allowed[rng() % allowed.size()];
            auto t2 = clock_type::now();
            if (!m.accept(pick)) die("the grammar refused a token its mask allowed");
            measured += seconds_since(t2);
            if (m.terminated()) m = grammar::matcher(i % 2 ? *json : *tools);
        }
    }
    return measured / steps;
}

}  // namespace

const char* k_usage =
    "usage: bench_grammar_mask [--preset small | --model DIR] [--batch 64] [--steps 3] [--mask-steps 200]\n"
    "                          [--threads N] [--tokenizer models/tokenizer/tokenizer.json]\n"
    "  constrained decoding's mask work per decode step, as a ratio of the step (goal < 0.05)\n";

int main(int argc, char** argv) {
    std::string dir, preset = "small", tok_path = "models/tokenizer/tokenizer.json";
    int threads = 0, batch = 64, steps = 3, mask_steps = 200;
    for (int i = 1; i < argc; i += 2) {
        std::string k = argv[i];
        if (k == "--help" || k == "-h") {
            std::fputs(k_usage, stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            std::fprintf(stderr, "%s needs a value\n%s", k.c_str(), k_usage);
            return 2;
        }
        std::string v = argv[i + 1];
        if (k == "--model") dir = v;
        else if (k == "--preset") preset = v;
        else if (k == "--threads") threads = std::atoi(v.c_str());
        else if (k == "--batch") batch = std::atoi(v.c_str());
        else if (k == "--steps") steps = std::atoi(v.c_str());
        else if (k == "--mask-steps") mask_steps = std::atoi(v.c_str());
        else if (k == "--tokenizer") tok_path = v;
        else { std::fprintf(stderr, "unknown option %s\n%s", k.c_str(), k_usage); return 2; }
    }
    auto tok = text::tokenizer::load_file(tok_path);
    if (!tok) die(tok.error().message() + " (run tools/setup_model.sh, or pass --tokenizer)");
    const int32_t eos = (*tok)->added_token_id("<｜end▁of▁sentence｜>").value_or(1);

    std::filesystem::path tmp;
    if (dir.empty()) {
        tmp = std::filesystem::temp_directory_path() / ("tandem_bench_grammar_" + preset);
        auto cfg = model::preset_config(preset);
        if (!cfg) die(cfg.error().message());
        model::make_model_options opt;
        opt.bf16 = cfg->torch_dtype == "bfloat16";
        opt.quantize = cfg->quantization.present;
        std::printf("generating preset %s ...\n", preset.c_str());
        if (auto st = model::write_random_checkpoint(*cfg, tmp.string(), opt); !st) die(st.message());
        dir = tmp.string();
    }
    auto m = model::model::load(dir, model::model_options{model::numerics_mode::hf, threads});
    if (!m) die(m.error().message());
    const auto& c = (*m)->config();
    const int32_t vocab = static_cast<int32_t>(c.vocab_size);
    auto layout = cache::layout_spec::create(c, cache::layout_options{cache::kv_dtype::bf16, cache::index_k_dtype::bf16, 256});
    if (!layout) die(layout.error().message());
    auto pool = cache::page_pool::create(*layout, cache::pool_options{int64_t{2} << 30, batch});
    if (!pool) die(pool.error().message());

    // Baseline: B sequences with a short prompt each, then decode steps of B tokens.
    const int64_t prompt = 8;
    std::vector<cache::slot_ref> slots;
    std::vector<std::vector<int32_t>> toks(static_cast<size_t>(batch));
    for (int i = 0; i < batch; ++i) {
        slots.push_back((*pool)->alloc_sequence(static_cast<cache::owner_id>(i + 1)));
        (*pool)->reset_sequence_state(slots.back());
        (*pool)->ensure_capacity(slots.back(), prompt + steps + 1);
        for (int64_t p = 0; p < prompt + steps + 1; ++p) {
            toks[static_cast<size_t>(i)].push_back(static_cast<int32_t>(2 + (i * 131 + p * 7919) % (vocab - 2)));
        }
    }
    std::vector<model::forward_item> items;
    for (int i = 0; i < batch; ++i) {
        items.push_back({std::span<const int32_t>(toks[static_cast<size_t>(i)].data(), size_t(prompt)), 0,
                         slots[static_cast<size_t>(i)], model::logit_rows::last});
    }
    if (!(*m)->forward(**pool, items)) die("prefill failed");
    auto t0 = clock_type::now();
    for (int s = 0; s < steps; ++s) {
        for (int i = 0; i < batch; ++i) {
            items[static_cast<size_t>(i)] = {std::span<const int32_t>(&toks[static_cast<size_t>(i)][size_t(prompt + s)], 1),
                                             prompt + s, slots[static_cast<size_t>(i)], model::logit_rows::last};
        }
        if (!(*m)->forward(**pool, items)) die("decode failed");
    }
    const double step_s = seconds_since(t0) / steps;

    double compile_model_s = 0, compile_full_s = 0;
    const double mask_s = mask_seconds_per_step(**tok, vocab, eos, batch, mask_steps, &compile_model_s);
    const double full_s = mask_seconds_per_step(**tok, (*tok)->id_count(), eos, batch, mask_steps, &compile_full_s);

    std::printf("model %s: vocab %d, batch %d, threads %s\n", dir.c_str(), vocab, batch,
                threads > 0 ? std::to_string(threads).c_str() : "all");
    std::printf("baseline: decode step at batch %d = %.1f ms (mean of %d)\n", batch, step_s * 1e3, steps);
    std::printf("grammar masks, model vocab %d: %.3f ms per step = %.1f us per token = %.4f of the decode step"
                " (compile of 2 grammars %.0f ms)\n",
                vocab, mask_s * 1e3, mask_s / batch * 1e6, mask_s / step_s, compile_model_s * 1e3);
    std::printf("grammar masks, full vocab %d: %.3f ms per step = %.1f us per token = %.4f of the decode step"
                " (compile of 2 grammars %.0f ms)\n",
                (*tok)->id_count(), full_s * 1e3, full_s / batch * 1e6, full_s / step_s, compile_full_s * 1e3);
    std::printf("goal: < 0.05 of the decode step: %s\n", mask_s / step_s < 0.05 ? "met" : "NOT met");
    if (!tmp.empty()) std::filesystem::remove_all(tmp);
    return 0;
}
