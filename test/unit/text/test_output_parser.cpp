// Output parser: valid outputs give the same result under every split of the bytes; the
// production failure modes of spec §3–§4 are flagged and their text comes back as content.
#include <simdjson.h>

#include <doctest/doctest.h>

#include <random>

#include "text/json_value.h"
#include "text/output_parser.h"
#include "text/utf8.h"
#include "text_test_util.h"

namespace tandem::text {
namespace {

struct call {
    std::string name;
    std::string arguments;
    bool operator==(const call&) const = default;
};

struct parsed {
    std::string reasoning;
    std::string content;
    std::vector<call> calls;
    bool malformed = false;
    bool call_in_reasoning = false;
    bool operator==(const parsed&) const = default;
};

std::ostream& operator<<(std::ostream& os, const parsed& p) {
    os << "{reasoning=[" << p.reasoning << "] content=[" << p.content << "] calls=";
    for (const auto& c : p.calls) os << c.name << c.arguments << ";";
    return os << " malformed=" << p.malformed << "}";
}

// Feeds `chunks` and folds the events; checks every delta is valid UTF-8.
parsed run(const std::vector<std::string_view>& chunks, const output_parser_options& opt) {
    output_parser parser(opt);
    std::vector<output_event> events;
    for (std::string_view c : chunks) parser.push(c, &events);
    parser.finish(&events);
    parsed out;
    int64_t index = 0;
    for (const auto& e : events) {
        CHECK(utf8_is_valid(e.text));
        if (e.type == output_event::kind::reasoning) out.reasoning += e.text;
        if (e.type == output_event::kind::content) out.content += e.text;
        if (e.type == output_event::kind::tool_call) {
            CHECK(e.tool_index == index++);
            auto args = json_parse(e.arguments);  // arguments are always a JSON object
            CHECK((args.is_ok() && args->is_object()));
            out.calls.push_back({e.tool_name, e.arguments});
        }
    }
    out.malformed = parser.malformed();
    out.call_in_reasoning = parser.tool_call_in_reasoning();
    CHECK(parser.tool_call_count() == static_cast<int64_t>(out.calls.size()));
    return out;
}

// The result must not depend on how the bytes are split: whole, every byte alone, every
// two-piece split, and random multi-piece splits.
parsed parse_every_split(std::string_view text, const output_parser_options& opt = {}) {
    const parsed whole = run({text}, opt);
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
    CHECK(run(bytes, opt) == whole);
    for (size_t cut = 1; cut < text.size(); ++cut) {
        const parsed two = run({text.substr(0, cut), text.substr(cut)}, opt);
        if (!(two == whole)) {
            FAIL_CHECK("split at " << cut << " gives " << two << " instead of " << whole);
            break;
        }
    }
    std::mt19937 rng(static_cast<uint32_t>(text.size()));
    for (int round = 0; round < 20; ++round) {
        std::vector<std::string_view> pieces;
        size_t at = 0;
        while (at < text.size()) {
            size_t n = 1 + rng() % 7;
            pieces.push_back(text.substr(at, n));
            at += std::min(n, text.size() - at);
        }
        CHECK(run(pieces, opt) == whole);
    }
    return whole;
}

const std::string D = "｜DSML｜";

std::string param(std::string_view name, bool is_string, std::string_view value) {
    return "<" + D + "parameter name=\"" + std::string(name) + "\" string=\"" + (is_string ? "true" : "false") +
           "\">" + std::string(value) + "</" + D + "parameter>";
}
std::string invoke(std::string_view name, const std::vector<std::string>& params) {
    std::string s = "<" + D + "invoke name=\"" + std::string(name) + "\">\n";
    for (const auto& p : params) s += p + "\n";
    return s + "</" + D + "invoke>";
}
std::string block(const std::vector<std::string>& invokes, std::string_view tag = "tool_calls") {
    std::string s = "<" + D + std::string(tag) + ">\n";
    for (const auto& i : invokes) s += i + "\n";
    return s + "</" + D + std::string(tag) + ">";
}

output_parser_options thinking() {
    output_parser_options o;
    o.starts_in_reasoning = true;
    return o;
}

TEST_CASE("output parser: official V4 example (spec §2.7)") {
    const std::string text = "The user wants the weather.</think>\n\n" +
        block({invoke("get_weather", {param("location", true, "Beijing"), param("unit", true, "celsius")})});
    parsed p = parse_every_split(text, thinking());
    CHECK(p.reasoning == "The user wants the weather.");
    CHECK(p.content == "");
    REQUIRE(p.calls.size() == 1);
    CHECK(p.calls[0] == call{"get_weather", R"({"location": "Beijing", "unit": "celsius"})"});
    CHECK_FALSE(p.malformed);
}

TEST_CASE("output parser: quoted names, JSON values, empty key, parallel calls") {
    const std::string text = "Let me check.\n\n" + block({
        invoke("ship", {param("shipping address", true, "Paris\n日本"), param(" string= mode ", false, "{\"enabled\":true}"),
                        param("count", false, "2"), param("", true, "empty key")}),
        invoke("now", {}),
        invoke("raw", {param("text", true, "a < b && \"c\" </｜DSML｜invoke> \\ \t end"), param("obj", false, "{\n  \"k\": [1, 2.5, null]\n}")}),
    });
    parsed p = parse_every_split(text);
    CHECK(p.content == "Let me check.");
    REQUIRE(p.calls.size() == 3);
    CHECK(p.calls[0] == call{"ship", "{\"shipping address\": \"Paris\\n日本\", \" string= mode \": {\"enabled\":true}, \"count\": 2, \"\": \"empty key\"}"});
    CHECK(p.calls[1] == call{"now", "{}"});
    CHECK(p.calls[2].arguments == "{\"text\": \"a < b && \\\"c\\\" </｜DSML｜invoke> \\\\ \\t end\", \"obj\": {\n  \"k\": [1, 2.5, null]\n}}");
    CHECK_FALSE(p.malformed);
}

TEST_CASE("output parser: plain content, newlines, V3.2 block, stray </think>") {
    parsed p = parse_every_split("Hello\n\nworld 😀\n\n");
    CHECK(p.content == "Hello\n\nworld 😀\n\n");
    CHECK_FALSE(p.malformed);
    p = parse_every_split("a</think>b");
    CHECK(p.content == "ab");
    p = parse_every_split("ok\n\n" + block({invoke("f", {param("x", false, "1")})}, "function_calls"));
    CHECK(p.content == "ok");
    REQUIRE(p.calls.size() == 1);
    CHECK(p.calls[0].arguments == "{\"x\": 1}");
    p = parse_every_split("only reasoning, cut off", thinking());
    CHECK(p.reasoning == "only reasoning, cut off");
    CHECK(p.content.empty());
}

TEST_CASE("output parser: a call inside reasoning ends the reasoning") {
    const std::string text = "I should call f.\n\n" + block({invoke("f", {param("a", true, "x")})});
    parsed p = parse_every_split(text, thinking());
    CHECK(p.reasoning == "I should call f.");
    REQUIRE(p.calls.size() == 1);
    CHECK(p.call_in_reasoning);
    CHECK_FALSE(p.malformed);
}

TEST_CASE("output parser: bare invoke and a prompt-opened block") {
    parsed p = parse_every_split(std::string("x").append(invoke("f", {param("a", true, "1")})).append("y"));
    CHECK(p.content == "xy");
    REQUIRE(p.calls.size() == 1);
    CHECK(p.malformed);  // text after the call: kept, but the grammar allows only EOS there
    p = parse_every_split(block({invoke("f", {})}) + "\n\n");
    CHECK_FALSE(p.malformed);
    output_parser_options opened;
    opened.starts_in_tool_calls = true;
    p = parse_every_split(invoke("f", {}) + "\n</" + D + "tool_calls>", opened);
    REQUIRE(p.calls.size() == 1);
    CHECK(p.content.empty());
}

// Malformed block: no call, flagged, and every byte of the block back as content (newlines
// at the very start of content are formatting and dropped either way).
void check_returned_as_content(const std::string& before, const std::string& markup) {
    CAPTURE(markup);
    parsed p = parse_every_split(before + markup);
    CHECK(p.malformed);
    CHECK(p.calls.empty());
    std::string expected = before + markup;
    expected.erase(0, expected.find_first_not_of('\n'));
    CHECK(p.content == expected);
}

TEST_CASE("output parser: failure modes come back as content and are flagged") {
    const std::string open = "\n\n<" + D + "tool_calls>\n";
    const std::string close = "\n</" + D + "tool_calls>";
    // {} arguments: parameter tag without the DSML marker / without string=.
    check_returned_as_content("Sure.", open + "<" + D + "invoke name=\"f\">\n<parameter name=\"enabled\">true</" + D + "parameter>\n</" + D + "invoke>" + close);
    check_returned_as_content("Sure.", open + invoke("f", {"<" + D + "parameter name=\"enabled\">true</" + D + "parameter>"}) + close);
    // junk between tags
    check_returned_as_content("", open + "I will now call the tool.\n" + invoke("f", {}) + close);
    check_returned_as_content("", open + invoke("f", {param("a", true, "1") + " junk"}) + close);
    // a closing tag inside a value
    check_returned_as_content("", open + invoke("f", {param("a", true, "x</" + D + "parameter>y")}) + close);
    // a value cut off inside a closing tag: the next invoke must not be swallowed into it
    const std::string next = invoke("g", {param("x", true, "1")});
    const std::string head = "<" + D + "invoke name=\"f\">\n<" + D + "parameter name=\"a\" string=\"true\">v";
    for (const std::string& cut : {"</" + D + "invoke>", "</" + D + "para", "</" + D, "</" + D + "parameter",
                                   "<" + D + "parameter name=\"b\" string=\"true\">"}) {
        check_returned_as_content("", open + head + cut + "\n</" + D + "invoke>\n" + next + close);
    }
    check_returned_as_content("", open + invoke("f", {"<" + D + "parameter name=\"n\" string=\"false\">12</" + D + "invoke>"}) +
                                      "\n" + next + close);
    // string="false" that is not JSON, a bad string attribute, a duplicate key, an empty name
    check_returned_as_content("", open + invoke("f", {param("n", false, "not json")}) + close);
    check_returned_as_content("", open + invoke("f", {"<" + D + "parameter name=\"a\" string=\"yes\">1</" + D + "parameter>"}) + close);
    check_returned_as_content("", open + invoke("f", {param("a", true, "1"), param("a", true, "2")}) + close);
    check_returned_as_content("", open + invoke("", {}) + close);
    // an empty block, and truncation at every stage
    check_returned_as_content("t", open + "</" + D + "tool_calls>");
    const std::string full = open + invoke("f", {param("a", true, "value")}) + close;
    for (size_t cut : {open.size() - 3, open.size() + 5, open.size() + 20, open.size() + 40, full.size() - 30}) {
        check_returned_as_content("partial ", full.substr(0, cut));
    }
    // Cut after a complete invoke: the call stands, the unfinished rest is content.
    parsed p = parse_every_split("partial " + full.substr(0, full.size() - 3));
    CHECK(p.malformed);
    CHECK(p.calls.size() == 1);
    CHECK(p.content == "partial \n</" + D + "tool_cal");
}

TEST_CASE("output parser: the valid string=false example is not malformed") {
    parsed p = parse_every_split(block({invoke("f", {param("a", false, "false")})}));
    CHECK_FALSE(p.malformed);
    CHECK(p.calls.at(0).arguments == "{\"a\": false}");
}

TEST_CASE("output parser: glyph variants and plain XML stay content, flagged") {
    for (std::string variant : {"<|DSML|tool_calls>\n<|DSML|invoke name=\"f\">\n</|DSML|invoke>\n</|DSML|tool_calls>",
                                "<‖DSML‖tool_calls><‖DSML‖invoke name=\"f\"></‖DSML‖invoke></‖DSML‖tool_calls>",
                                "<｜｜DSML｜｜tool_calls>\n<｜｜DSML｜｜invoke name=\"f\">",
                                "<DSML｜tool_calls>\n<DSML｜invoke name=\"f\">",
                                "<tool_calls>\n<invoke name=\"f\">\n<parameter name=\"a\" string=\"true\">1</parameter>\n</invoke>\n</tool_calls>"}) {
        CAPTURE(variant);
        parsed p = parse_every_split("Calling.\n\n" + variant);
        CHECK(p.malformed);
        CHECK(p.calls.empty());
        CHECK(p.content == "Calling.\n\n" + variant);
    }
}

TEST_CASE("output parser: a malformed sibling keeps earlier calls and returns the rest") {
    const std::string good = invoke("a", {param("x", true, "1")});
    const std::string bad = "<" + D + "invoke name=\"b\">\noops\n</" + D + "invoke>";
    const std::string text = "<" + D + "tool_calls>\n" + good + "\n" + bad + "\n</" + D + "tool_calls>after";
    parsed p = parse_every_split(text);
    CHECK(p.malformed);
    REQUIRE(p.calls.size() == 1);
    CHECK(p.calls[0].name == "a");
    CHECK(p.content == "\n" + bad + "\n</" + D + "tool_calls>after");
}

TEST_CASE("output parser: unknown tools are refused when a tool list is given") {
    output_parser_options opt;
    opt.check_tool_names = true;
    opt.tool_names = {"known"};
    const std::string text = block({invoke("unknown", {})});
    parsed p = parse_every_split(text, opt);
    CHECK(p.malformed);
    CHECK(p.calls.empty());
    CHECK(p.content == text);
    p = parse_every_split(block({invoke("known", {})}), opt);
    CHECK(p.calls.size() == 1);
}

TEST_CASE("output parser: large values stream without quadratic rescans") {
    std::string big(200000, 'x');
    const std::string text = block({invoke("f", {param("blob", true, big)})});
    output_parser parser({});
    std::vector<output_event> events;
    for (size_t i = 0; i < text.size(); i += 3) parser.push(std::string_view(text).substr(i, 3), &events);
    parser.finish(&events);
    REQUIRE(events.size() == 1);
    CHECK(events[0].arguments.size() == big.size() + 12);
}

}  // namespace
}  // namespace tandem::text

namespace tandem::text {
namespace {

TEST_CASE("output parser: agrees with deepseek-recipe's stream processor on well-formed output") {
    simdjson::dom::parser json;
    simdjson::dom::element root = json.load(testing::source_path("test/golden/text/parser_recipe_cases.json"));
    int64_t index = 0;
    std::mt19937 rng(3);
    for (simdjson::dom::element c : root["cases"].get_array()) {
        CAPTURE(index);
        ++index;
        const std::string_view text = c["text"];
        output_parser_options opt;
        opt.starts_in_reasoning = bool(c["thinking"]);
        parsed want;
        want.reasoning = std::string(std::string_view(c["expected"]["reasoning"]));
        want.content = std::string(std::string_view(c["expected"]["content"]));
        for (simdjson::dom::element call_json : c["expected"]["calls"].get_array()) {
            want.calls.push_back({std::string(std::string_view(call_json["name"])),
                                  std::string(std::string_view(call_json["arguments"]))});
        }
        // whole, and one random split into small pieces
        parsed whole = run({text}, opt);
        whole.call_in_reasoning = false;
        CHECK(whole == want);
        std::vector<std::string_view> pieces;
        for (size_t at = 0; at < text.size();) {
            const size_t n = std::min<size_t>(1 + rng() % 5, text.size() - at);
            pieces.push_back(text.substr(at, n));
            at += n;
        }
        parsed split = run(pieces, opt);
        split.call_in_reasoning = false;
        CHECK(split == want);
    }
    CHECK(index == 300);
}

}  // namespace
}  // namespace tandem::text
