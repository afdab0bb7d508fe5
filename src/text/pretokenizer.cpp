// text/pretokenizer.cpp — PCRE2 wrapper for the Split chain.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/pretokenizer.h"

#include <pcre2.h>

#include "text/unicode_additions.inc"

namespace tandem::text {

namespace {

// Unicode White_Space (PropList.txt): the set Oniguruma's \s matches in UTF-8 mode.
constexpr std::string_view white_space_ranges =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

// Per-thread PCRE2 scratch: match data and a JIT stack big enough for 1 MB pieces.
struct pcre2_scratch {
    pcre2_match_data* match_data = pcre2_match_data_create(1, nullptr);
    pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    pcre2_match_context* context = pcre2_match_context_create(nullptr);
    pcre2_scratch() { pcre2_jit_stack_assign(context, nullptr, jit_stack); }
    ~pcre2_scratch() {
        pcre2_match_context_free(context);
        pcre2_jit_stack_free(jit_stack);
        pcre2_match_data_free(match_data);
    }
};

pcre2_scratch& thread_scratch() {
    thread_local pcre2_scratch scratch;
    return scratch;
}

std::string_view additions_for(char major_class) {
    switch (major_class) {
        case 'L': return unicode_additions::l_class;
        case 'M': return unicode_additions::m_class;
        case 'N': return unicode_additions::n_class;
        case 'P': return unicode_additions::p_class;
        case 'S': return unicode_additions::s_class;
    }
    return {};
}

}  // namespace

result<std::string> translate_onig_pattern(std::string_view p) {
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < p.size(); ++i) {
        char c = p[i];
        if (c == '\\' && i + 1 < p.size()) {
            char e = p[i + 1];
            ++i;
            if (e == 's') {
                if (in_class) out.append(white_space_ranges);
                else out.append("[").append(white_space_ranges).append("]");
            } else if (e == 'S') {
                if (in_class) {
                    return make_error(error_code::invalid_argument,
                                      "pre_tokenizer regex uses \\S inside a character class, "
                                      "which is not supported");
                }
                out.append("[^").append(white_space_ranges).append("]");
            } else if (e == 'p' && i + 3 < p.size() && p[i + 1] == '{' && p[i + 3] == '}' &&
                       std::string_view("LMNPS").find(p[i + 2]) != std::string_view::npos) {
                // \p{X} plus the code points Unicode 15-16 added to X (see unicode_additions.inc).
                const std::string_view extra = additions_for(p[i + 2]);
                out.append(in_class ? "" : "[").append("\\p{").push_back(p[i + 2]);
                out.append("}").append(extra).append(in_class ? "" : "]");
                i += 3;
            } else {
                out.push_back('\\');
                out.push_back(e);
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            out.push_back(c);
            // A ']' right after '[' or '[^' is a literal member.
            if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
            if (i + 1 < p.size() && p[i + 1] == ']') out.append("\\]"), ++i;
            continue;
        }
        if (in_class && c == ']') in_class = false;
        out.push_back(c);
    }
    return out;
}

struct split_chain::stage {
    pcre2_code* code = nullptr;
    ~stage() { pcre2_code_free(code); }
};

split_chain::split_chain() = default;
split_chain::~split_chain() = default;
split_chain::split_chain(split_chain&&) noexcept = default;
split_chain& split_chain::operator=(split_chain&&) noexcept = default;

int64_t split_chain::stage_count() const { return static_cast<int64_t>(stages_.size()); }

status split_chain::add_stage(std::string_view onig_pattern) {
    auto translated = translate_onig_pattern(onig_pattern);
    if (!translated) return translated.error();
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    auto st = std::make_unique<stage>();
    st->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated->data()), translated->size(),
                             PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
    if (st->code == nullptr) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return make_error(error_code::invalid_argument,
                          "pre_tokenizer regex does not compile at offset " +
                              std::to_string(err_offset) + ": " +
                              reinterpret_cast<const char*>(msg));
    }
    // JIT is an optimisation: when unavailable, pcre2_match falls back to the interpreter.
    pcre2_jit_compile(st->code, PCRE2_JIT_COMPLETE);
    stages_.push_back(std::move(st));
    return status::ok();
}

namespace {

// Appends the Isolated split of text[span] by `code` to `out`: every match and every gap
// between matches becomes its own piece.
void split_piece(const pcre2_code* code, std::string_view text, text_span span,
                 std::vector<text_span>* out) {
    pcre2_scratch& scratch = thread_scratch();
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data() + span.begin);
    const auto length = static_cast<PCRE2_SIZE>(span.end - span.begin);
    PCRE2_SIZE pos = 0;
    PCRE2_SIZE gap_begin = 0;
    while (pos < length) {
        int rc = pcre2_match(code, subject, length, pos, PCRE2_NO_UTF_CHECK, scratch.match_data,
                             scratch.context);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
            // A JIT resource limit (not seen up to 8 MiB pieces): retry with the interpreter,
            // which keeps its backtracking frames on the heap.
            rc = pcre2_match(code, subject, length, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                             scratch.match_data, scratch.context);
        }
        if (rc < 0) break;  // no further match: the rest of the piece is one gap
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.match_data);
        PCRE2_SIZE m_begin = ov[0];
        PCRE2_SIZE m_end = ov[1];
        if (m_end == m_begin) {  // empty match: step one character and keep searching
            pos = m_end + 1;
            while (pos < length && (subject[pos] & 0xC0) == 0x80) ++pos;
            continue;
        }
        if (m_begin > gap_begin) {
            out->push_back({span.begin + static_cast<int64_t>(gap_begin),
                            span.begin + static_cast<int64_t>(m_begin)});
        }
        out->push_back({span.begin + static_cast<int64_t>(m_begin),
                        span.begin + static_cast<int64_t>(m_end)});
        pos = gap_begin = m_end;
    }
    if (gap_begin < length) {
        out->push_back({span.begin + static_cast<int64_t>(gap_begin), span.end});
    }
}

}  // namespace

void split_chain::split(std::string_view text, std::vector<text_span>* out) const {
    out->clear();
    if (text.empty()) return;
    out->push_back({0, static_cast<int64_t>(text.size())});
    std::vector<text_span> next;
    for (const auto& st : stages_) {
        next.clear();
        next.reserve(out->size() * 2);
        for (const text_span& piece : *out) split_piece(st->code, text, piece, &next);
        out->swap(next);
    }
}

}  // namespace tandem::text
