// Fuzz target: the output parser (text/output_parser.h) over generated text: reasoning, content
// and DSML tool-call blocks. Input: an options byte, a byte seeding how the text is cut into
// deltas, then the text. Properties: no crash; the same events (joined per kind) whether the
// text arrives at once or in pieces, and every text delta valid UTF-8, when the text is valid
// UTF-8 (the detokenizer only hands it that); every tool call a known name when names are checked,
// with arguments that are a JSON object.
#include <simdjson.h>

#include <string>
#include <vector>

#include "fuzz_support.h"
#include "text/output_parser.h"
#include "text/utf8.h"

using namespace tandem;

namespace {

struct outcome {
    std::string reasoning, content, calls;
    int64_t malformed = 0;
};

outcome run(const text::output_parser_options& opt, std::string_view text, uint8_t cut_seed) {
    const bool valid_text = text::utf8_is_valid(text);
    text::output_parser parser(opt);
    std::vector<text::output_event> events;
    uint32_t cut = cut_seed;
    size_t at = 0;
    while (at < text.size()) {
        cut = cut * 1103515245u + 12345u;  // a fixed sequence of piece sizes per seed
        size_t n = cut_seed == 0 ? text.size() : 1 + (cut >> 16) % 23;
        parser.push(text.substr(at, n), &events);
        at += n;
    }
    parser.finish(&events);
    outcome o;
    simdjson::dom::parser json;
    for (const auto& e : events) {
        switch (e.type) {
            case text::output_event::kind::reasoning:
                FUZZ_CHECK(!valid_text || text::utf8_is_valid(e.text));
                o.reasoning += e.text;
                break;
            case text::output_event::kind::content:
                FUZZ_CHECK(!valid_text || text::utf8_is_valid(e.text));
                o.content += e.text;
                break;
            case text::output_event::kind::tool_call: {
                simdjson::dom::element args;
                FUZZ_CHECK(!valid_text || (!json.parse(e.arguments).get(args) && args.is_object()),
                           "arguments are not a JSON object: {}", e.arguments);
                if (opt.check_tool_names) {
                    bool known = false;
                    for (const auto& n : opt.tool_names) known = known || n == e.tool_name;
                    FUZZ_CHECK(known, "unknown tool '{}'", e.tool_name);
                }
                o.calls += std::to_string(e.tool_index) + ' ' + e.tool_name + ' ' + e.arguments + '\n';
                break;
            }
        }
    }
    o.malformed = parser.malformed_count();
    return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz::input_reader in(data, size);
    uint8_t flags = in.byte();
    uint8_t cut_seed = in.byte();
    text::output_parser_options opt;
    opt.starts_in_reasoning = flags & 1;
    opt.starts_in_tool_calls = flags & 2;
    if (flags & 4) {
        opt.check_tool_names = true;
        opt.tool_names = {"get_weather", "search"};
    }
    std::string_view text = in.rest();
    outcome whole = run(opt, text, 0);
    outcome pieces = run(opt, text, cut_seed | 1);
    // The parser's input is the detokenizer's output, always valid UTF-8; other bytes must not
    // crash it, but how it cuts them around a held-back partial character is not specified.
    if (!text::utf8_is_valid(text)) return 0;
    FUZZ_CHECK(whole.reasoning == pieces.reasoning, "reasoning differs when cut");
    FUZZ_CHECK(whole.content == pieces.content, "content differs when cut");
    FUZZ_CHECK(whole.calls == pieces.calls, "tool calls differ when cut");
    FUZZ_CHECK(whole.malformed == pieces.malformed);
    return 0;
}
