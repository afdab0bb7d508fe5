// grammar/grammar.cpp — The xgrammar wrapper: compiler, compiled grammar, matcher.
//
// xgrammar reports errors by throwing (std::exception subclasses); nothing may throw across
// our boundaries, so every call that can fail is caught here and becomes a status.
#include "grammar/grammar.h"

#include <dlpack/dlpack.h>
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <optional>

#include "core/check.h"
#include "text/tokenizer.h"

namespace tandem::grammar {

namespace {

// The markup tokens the output parser reads (text/detokenizer.cpp shows the same three).
constexpr std::string_view k_markup[] = {"<think>", "</think>", "｜DSML｜"};

}  // namespace

vocabulary vocabulary_from_tokenizer(const text::tokenizer& tok, int32_t model_vocab, int32_t eos) {
    vocabulary v;
    v.token_bytes.resize(static_cast<size_t>(model_vocab));
    std::vector<int32_t> markup;
    for (std::string_view m : k_markup) {
        if (auto id = tok.added_token_id(m)) markup.push_back(*id);
    }
    const int32_t n = std::min(model_vocab, tok.id_count());
    for (int32_t id = 0; id < n; ++id) {
        if (!tok.contains(id)) continue;
        const bool shown = !tok.is_added(id) ||
                           std::find(markup.begin(), markup.end(), id) != markup.end();
        if (shown && id != eos) v.token_bytes[static_cast<size_t>(id)] = std::string(tok.token_bytes(id));
    }
    if (eos >= 0 && eos < model_vocab) v.stop_tokens.push_back(eos);
    return v;
}

int64_t mask_words(int32_t vocab) { return (static_cast<int64_t>(vocab) + 31) / 32; }

class compiled {
public:
    explicit compiled(xgrammar::CompiledGrammar g, int32_t vocab) : grammar(std::move(g)), vocab(vocab) {}
    xgrammar::CompiledGrammar grammar;
    int32_t vocab;
};

struct compiler::impl {
    int32_t vocab;
    xgrammar::TokenizerInfo info;
    xgrammar::GrammarCompiler engine;

    impl(const vocabulary& v, int threads)
        : vocab(static_cast<int32_t>(v.token_bytes.size())),
          info(v.token_bytes, xgrammar::VocabType::RAW, vocab, v.stop_tokens, false),
          engine(info, threads, /*cache_enabled=*/true, /*max_memory_bytes=*/256LL << 20) {}
};

compiler::compiler(const vocabulary& vocab, int threads)
    : impl_(std::make_unique<impl>(vocab, std::max(1, threads))) {}
compiler::~compiler() = default;

int32_t compiler::vocab_size() const { return impl_->vocab; }

result<std::shared_ptr<const compiled>> compiler::compile(std::string_view structural_tag_json) {
    try {
        xgrammar::CompiledGrammar g =
            impl_->engine.CompileStructuralTag(std::string(structural_tag_json));
        return std::shared_ptr<const compiled>(std::make_shared<compiled>(std::move(g), impl_->vocab));
    } catch (const std::exception& e) {
        return make_error(error_code::invalid_argument, std::string("grammar: ") + e.what());
    }
}

struct matcher::impl {
    std::shared_ptr<const compiled> grammar;
    xgrammar::GrammarMatcher engine;
    std::vector<int32_t> bits;
    int64_t shape[1];
    DLTensor tensor{};

    explicit impl(std::shared_ptr<const compiled> g)
        : grammar(std::move(g)),
          engine(grammar->grammar, std::nullopt, /*terminate_without_stop_token=*/false),
          bits(static_cast<size_t>(mask_words(grammar->vocab)), 0) {
        shape[0] = static_cast<int64_t>(bits.size());
        tensor.data = bits.data();
        tensor.device = DLDevice{kDLCPU, 0};
        tensor.ndim = 1;
        tensor.dtype = DLDataType{kDLInt, 32, 1};
        tensor.shape = shape;
        tensor.strides = nullptr;
        tensor.byte_offset = 0;
    }
};

matcher::matcher(std::shared_ptr<const compiled> grammar)
    : impl_(std::make_unique<impl>(std::move(grammar))) {}
matcher::~matcher() = default;
matcher::matcher(matcher&&) noexcept = default;
matcher& matcher::operator=(matcher&&) noexcept = default;

std::span<const uint32_t> matcher::next_mask() {
    // A terminated matcher has no next token: the request ended at its stop token.
    TANDEM_CHECK(!impl_->engine.IsTerminated());
    impl_->engine.FillNextTokenBitmask(&impl_->tensor);
    return {reinterpret_cast<const uint32_t*>(impl_->bits.data()), impl_->bits.size()};
}

bool matcher::accept(int32_t token) {
    if (token < 0 || token >= impl_->grammar->vocab || impl_->engine.IsTerminated()) return false;
    try {
        return impl_->engine.AcceptToken(token);
    } catch (const std::exception&) {
        return false;
    }
}

bool matcher::terminated() const { return impl_->engine.IsTerminated(); }

int32_t matcher::vocab_size() const { return impl_->grammar->vocab; }

}  // namespace tandem::grammar
