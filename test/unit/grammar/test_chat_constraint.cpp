// Chat requests → grammars over DeepSeek-V4's real vocabulary: the canonical DSML tandem's own
// encoder writes is accepted, the output parser reads back every output the grammar allows,
// JSON outputs match their schema, and reasoning stays free until </think>.
#include <doctest/doctest.h>

#include "../text/text_test_util.h"
#include "grammar/chat_constraint.h"
#include "grammar/grammar.h"
#include "grammar_test_util.h"
#include "text/chat.h"
#include "text/json_value.h"
#include "text/output_parser.h"

using namespace tandem;
using namespace tandem::grammar;
using namespace tandem::grammar::testing;

namespace {

constexpr int32_t k_vocab = 129280;

struct real_vocab {
    std::shared_ptr<const text::tokenizer> tok = text::testing::reference_tokenizer();
    int32_t eos = tok->added_token_id("<｜end▁of▁sentence｜>").value();
    compiler c{vocabulary_from_tokenizer(*tok, k_vocab, eos), 2};
};

real_vocab& shared_vocab() {
    static real_vocab v;
    return v;
}

const char* k_weather_tool = R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object",)"
    R"("properties":{"city":{"type":"string","enum":["Paris","Tokyo"]},"days":{"type":"integer","minimum":1,"maximum":7},)"
    R"("unit":{"enum":["celsius","fahrenheit"]}},"required":["city","days"]}}})";
const char* k_time_tool = R"({"type":"function","function":{"name":"get_time","parameters":{"type":"object",)"
    R"("properties":{"utc":{"type":"boolean"}},"required":["utc"]}}})";

text::chat_request chat_from(const std::string& extra) {
    auto req = text::chat_request_from_openai_json(
        R"({"messages":[{"role":"user","content":"weather as json please"}])" + extra + "}");
    REQUIRE_MESSAGE(req.is_ok(), req.error().message());
    return *req;
}

// The structural tag of a request, compiled against the real vocabulary.
std::shared_ptr<const compiled> grammar_for(const text::chat_request& req, bool* starts_in_reasoning = nullptr) {
    auto prompt = text::render_chat(req);
    REQUIRE_MESSAGE(prompt.is_ok(), prompt.error().message());
    if (starts_in_reasoning) *starts_in_reasoning = prompt->generation_starts_in_reasoning;
    auto spec = chat_constraint(req, *prompt);
    REQUIRE_MESSAGE(spec.is_ok(), spec.error().message());
    REQUIRE(spec->has_value());
    auto g = shared_vocab().c.compile(**spec);
    REQUIRE_MESSAGE(g.is_ok(), g.error().message());
    return *g;
}

bool accepts_text(const std::shared_ptr<const compiled>& g, const std::string& text, bool then_eos) {
    matcher m(g);
    // Server-written text: the markup becomes its added tokens, as the model would emit them.
    for (int32_t t : shared_vocab().tok->encode_with_added_tokens(text)) {
        if (!m.accept(t)) return false;
    }
    return !then_eos || m.accept(shared_vocab().eos);
}

std::string decode(const std::vector<int32_t>& ids) {
    auto s = shared_vocab().tok->decode(ids);
    REQUIRE(s.is_ok());
    return *s;
}

std::vector<text::output_event> parse(const std::string& out, text::output_parser_options opt, bool* malformed) {
    text::output_parser p(opt);
    std::vector<text::output_event> events;
    p.push(out, &events);
    p.finish(&events);
    *malformed = p.malformed();
    return events;
}

void check_weather_args(const std::string& arguments) {
    auto args = text::json_parse(arguments);
    REQUIRE_MESSAGE(args.is_ok(), arguments);
    const text::json_value* city = args->find("city");
    const text::json_value* days = args->find("days");
    REQUIRE(city != nullptr);
    CHECK((city->text == "Paris" || city->text == "Tokyo"));
    REQUIRE(days != nullptr);
    REQUIRE(days->type == text::json_value::kind::number);
    CHECK((std::stoi(days->text) >= 1 && std::stoi(days->text) <= 7));
    if (const text::json_value* unit = args->find("unit")) {
        CHECK((unit->text == "celsius" || unit->text == "fahrenheit"));
    }
}

}  // namespace

TEST_CASE("grammar vocabulary: markup keeps its bytes, other added tokens and EOS are hidden") {
    real_vocab& rv = shared_vocab();
    vocabulary v = vocabulary_from_tokenizer(*rv.tok, k_vocab, rv.eos);
    REQUIRE(v.token_bytes.size() == static_cast<size_t>(k_vocab));
    CHECK(v.stop_tokens == std::vector<int32_t>{rv.eos});
    CHECK(v.token_bytes[static_cast<size_t>(rv.eos)].empty());
    CHECK(v.token_bytes[static_cast<size_t>(*rv.tok->added_token_id("<｜User｜>"))].empty());
    CHECK(v.token_bytes[static_cast<size_t>(*rv.tok->added_token_id("</think>"))] == "</think>");
    CHECK(v.token_bytes[static_cast<size_t>(*rv.tok->added_token_id("｜DSML｜"))] == "｜DSML｜");
    const int32_t hello = rv.tok->encode("hello")[0];
    CHECK(v.token_bytes[static_cast<size_t>(hello)] == std::string(rv.tok->token_bytes(hello)));
    // A smaller model vocabulary keeps only its ids.
    CHECK(vocabulary_from_tokenizer(*rv.tok, 32768, rv.eos).token_bytes.size() == 32768);
}

TEST_CASE("chat constraint: none for free requests, 400s for bad schemas") {
    text::chat_request free = chat_from("");
    auto prompt = text::render_chat(free);
    REQUIRE(prompt.is_ok());
    auto none = chat_constraint(free, *prompt);
    REQUIRE(none.is_ok());
    CHECK_FALSE(none->has_value());
    // Non-strict tools under tool_choice auto stay free too.
    text::chat_request tools = chat_from(std::string(R"(,"tools":[)") + k_weather_tool + "]");
    auto tools_prompt = text::render_chat(tools);
    REQUIRE(tools_prompt.is_ok());
    CHECK_FALSE(chat_constraint(tools, *tools_prompt)->has_value());

    // (The request parser refuses such a schema first; the grammar refuses it on its own too.)
    text::chat_request bad = chat_from(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}})");
    bad.response_schema = "[1]";
    auto bad_prompt = text::render_chat(bad);
    REQUIRE(bad_prompt.is_ok());
    auto refused = chat_constraint(bad, *bad_prompt);
    REQUIRE_FALSE(refused.is_ok());
    CHECK(refused.error().code() == error_code::invalid_argument);
    CHECK(refused.error().message().find("response_format.json_schema.schema") != std::string::npos);
}

TEST_CASE("chat constraint: a forced call accepts tandem's canonical DSML and nothing else") {
    text::chat_request req = chat_from(std::string(R"(,"thinking":{"type":"disabled"},"tool_choice":"required","tools":[)") +
                                       k_weather_tool + "," + k_time_tool + "]");
    auto g = grammar_for(req);
    const std::string weather =
        "<｜DSML｜invoke name=\"get_weather\">\n"
        "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n";
    const std::string time =
        "<｜DSML｜invoke name=\"get_time\">\n"
        "<｜DSML｜parameter name=\"utc\" string=\"false\">true</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n";
    const std::string end = "</｜DSML｜tool_calls>";
    CHECK(accepts_text(g, weather + end, true));
    CHECK(accepts_text(g, weather + time + end, true));  // parallel calls
    CHECK_FALSE(accepts_text(g, end, false));            // at least one call
    CHECK_FALSE(accepts_text(g, "Sure! " + weather, false));
    CHECK_FALSE(accepts_text(g, "<｜DSML｜invoke name=\"get_news\">\n", false));
    std::string wrong_enum = weather;
    wrong_enum.replace(wrong_enum.find("Paris"), 5, "Rome");
    CHECK_FALSE(accepts_text(g, wrong_enum, false));
    std::string wrong_type = weather;
    wrong_type.replace(wrong_type.find(">3<"), 3, ">\"3\"<");
    CHECK_FALSE(accepts_text(g, wrong_type, false));
    CHECK_FALSE(accepts_text(g, weather + end + "\nmore", false));  // only EOS after the block

    // The parser reads the same text as the calls it is.
    text::output_parser_options opt;
    opt.starts_in_tool_calls = true;
    bool malformed = true;
    auto events = parse(weather + time + end, opt, &malformed);
    CHECK_FALSE(malformed);
    REQUIRE(events.size() == 2);
    CHECK(events[0].tool_name == "get_weather");
    CHECK(events[0].arguments == R"({"city": "Paris", "days": 3})");
    CHECK(events[1].tool_name == "get_time");
}

TEST_CASE("chat constraint: every output a forced-call grammar allows parses into valid calls") {
    text::chat_request req = chat_from(std::string(R"(,"thinking":{"type":"disabled"},"tool_choice":{"type":"function","function":{"name":"get_weather"}},"tools":[)") +
                                       k_weather_tool + "," + k_time_tool + "]");
    auto g = grammar_for(req);
    text::output_parser_options opt;
    opt.starts_in_tool_calls = true;
    opt.check_tool_names = true;
    opt.tool_names = {"get_weather"};  // named: the prompt shows only this tool
    for (uint64_t seed = 1; seed <= 12; ++seed) {
        matcher m(g);
        bool ended = false;
        auto ids = random_walk(m, seed, 3000, &ended);
        REQUIRE_MESSAGE(ended, "seed " << seed << ": " << decode(ids));
        bool malformed = true;
        auto events = parse(decode(ids), opt, &malformed);
        CHECK_MESSAGE(!malformed, decode(ids));
        REQUIRE_FALSE(events.empty());
        for (const auto& ev : events) {
            REQUIRE(ev.type == text::output_event::kind::tool_call);
            CHECK(ev.tool_name == "get_weather");
            check_weather_args(ev.arguments);
        }
    }
}

TEST_CASE("chat constraint: json_schema outputs parse and match; json_object is an object") {
    text::chat_request req = chat_from(
        R"(,"thinking":{"type":"disabled"},"response_format":{"type":"json_schema","json_schema":{"name":"w","strict":true,"schema":)"
        R"({"type":"object","properties":{"city":{"type":"string","enum":["Paris","Tokyo"]},"days":{"type":"integer","minimum":1,"maximum":7}},)"
        R"("required":["city","days"],"additionalProperties":false}}})");
    auto g = grammar_for(req);
    CHECK(accepts_text(g, R"({"city": "Tokyo", "days": 7})", true));
    CHECK_FALSE(accepts_text(g, R"({"city": "Tokyo", "days": 8})", false));
    CHECK_FALSE(accepts_text(g, R"({"city": "Tokyo"})", true));
    for (uint64_t seed = 1; seed <= 12; ++seed) {
        matcher m(g);
        bool ended = false;
        auto ids = random_walk(m, seed, 300, &ended);
        REQUIRE_MESSAGE(ended, "seed " << seed << ": " << decode(ids));
        check_weather_args(decode(ids));
    }
    auto obj = grammar_for(chat_from(R"(,"thinking":{"type":"disabled"},"response_format":{"type":"json_object"})"));
    CHECK(accepts_text(obj, R"({"anything": [1, {"x": null}]})", true));
    CHECK_FALSE(accepts_text(obj, R"([1, 2])", false));
    CHECK_FALSE(accepts_text(obj, R"("text")", false));
    CHECK_FALSE(accepts_text(obj, "{\"a\":      1}", false));  // whitespace runs are capped
}

TEST_CASE("chat constraint: with thinking on, reasoning is free until </think>") {
    bool in_reasoning = false;
    auto g = grammar_for(chat_from(R"(,"response_format":{"type":"json_object"})"), &in_reasoning);
    REQUIRE(in_reasoning);
    CHECK(accepts_text(g, "Let me think: {not json} at all.\n</think>{\"a\": 1}", true));
    CHECK(accepts_text(g, "</think>{}", true));
    CHECK_FALSE(accepts_text(g, "reasoning</think>not json", false));
    CHECK_FALSE(accepts_text(g, "reasoning", true));  // EOS inside reasoning
    CHECK_FALSE(accepts_text(g, "x<think>", false));
    // DeepSeek's API refuses thinking with a forced tool_choice; render_chat says so (400).
    auto forced = text::chat_request_from_openai_json(
        std::string(R"({"messages":[{"role":"user","content":"hi"}],"tool_choice":"required","tools":[)") + k_time_tool + "]}");
    REQUIRE(forced.is_ok());
    CHECK_FALSE(text::render_chat(*forced).is_ok());
}

TEST_CASE("chat constraint: strict tools under auto allow free text or one valid block") {
    std::string strict_tool = k_time_tool;
    strict_tool.insert(strict_tool.find("\"parameters\""), "\"strict\":true,");
    text::chat_request req = chat_from(R"(,"thinking":{"type":"disabled"},"tools":[)" + strict_tool + "]");
    auto g = grammar_for(req);
    const std::string call = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_time\">\n"
                             "<｜DSML｜parameter name=\"utc\" string=\"false\">false</｜DSML｜parameter>\n"
                             "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
    CHECK(accepts_text(g, "Just text, no call.", true));
    CHECK(accepts_text(g, "Checking." + call, true));
    CHECK(accepts_text(g, call, true));
    std::string bad = call;
    bad.replace(bad.find(">false<"), 7, ">maybe<");
    CHECK_FALSE(accepts_text(g, bad, false));
    CHECK_FALSE(accepts_text(g, call + "\nafter", false));
    text::output_parser_options opt;
    bool malformed = true;
    auto events = parse("Checking." + call, opt, &malformed);
    CHECK_FALSE(malformed);
    REQUIRE(events.size() == 2);
    CHECK(events[1].tool_name == "get_time");
    CHECK(events[1].arguments == R"({"utc": false})");
}
