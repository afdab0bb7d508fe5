// grammar/model_compiler.cpp — One grammar compiler per served model, made on first use, so a
// server that never sees a constrained request pays nothing for it.
#include <algorithm>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "core/log.h"
#include "grammar/grammar.h"
#include "text/tokenizer.h"

namespace tandem::grammar {

result<std::shared_ptr<compiler>> compiler_for_model(const std::string& model_dir,
                                                     int32_t model_vocab, int32_t eos) {
    static std::mutex mu;
    static std::map<std::tuple<std::string, int32_t, int32_t>, std::shared_ptr<compiler>> made;
    std::lock_guard lock(mu);
    auto key = std::make_tuple(model_dir, model_vocab, eos);
    if (auto it = made.find(key); it != made.end()) return it->second;
    const std::string path = model_dir + "/tokenizer.json";
    auto tok = text::tokenizer::load_file(path);
    if (!tok) return tok.error().with_context("grammar vocabulary");
    // Compilation runs on the caller's thread (HTTP loop, transport loop); xgrammar may spread
    // one compilation over a few threads of its own.
    const int threads = static_cast<int>(std::min(4u, std::max(1u, std::thread::hardware_concurrency())));
    auto c = std::make_shared<compiler>(vocabulary_from_tokenizer(**tok, model_vocab, eos), threads);
    TANDEM_LOG_INFO("grammar: compiler ready for {} ({} ids)", path, model_vocab);
    made.emplace(key, c);
    return c;
}

}  // namespace tandem::grammar
