// render_messages_official() against DeepSeek's published encoder fixtures
// (tools/text/official_fixtures.py) and hand-checked properties of both renderers.
#include <simdjson.h>

#include <doctest/doctest.h>

#include <cstdlib>

#include "text/chat.h"
#include "text_test_util.h"

namespace tandem::text {
namespace {

TEST_CASE("chat: official encoder matches the published golden fixtures") {
    simdjson::dom::parser parser;
    // TANDEM_OFFICIAL_CORPUS points the test at another corpus of the same format (exploring).
    const char* other = std::getenv("TANDEM_OFFICIAL_CORPUS");
    simdjson::dom::element root = parser.load(
        other ? std::string(other) : testing::source_path("test/golden/text/dsv4_official_cases.json"));
    int64_t checked = 0;
    for (simdjson::dom::element c : root["cases"].get_array()) {
        const std::string name{std::string_view(c["name"])};
        CAPTURE(name);
        auto messages = chat_messages_from_json(simdjson::to_string(c["messages"]));
        REQUIRE_MESSAGE(messages.is_ok(), messages.error().message());
        official_options opt;
        bool flag = false;
        if (!c["options"]["thinking"].get(flag)) opt.thinking = flag;
        if (!c["options"]["drop_thinking"].get(flag)) opt.drop_thinking = flag;
        std::string_view effort;
        if (!c["options"]["effort"].get(effort)) {  // encoding_dsv4.py's "max" is our high
            opt.effort = effort == "max" ? reasoning_effort::high : reasoning_effort::unset;
        }
        auto prompt = render_messages_official(*messages, opt);
        REQUIRE_MESSAGE(prompt.is_ok(), prompt.error().message());
        CHECK(prompt->text == std::string_view(c["expected"]));
        ++checked;
    }
    if (other == nullptr) CHECK(checked == 10);
}

TEST_CASE("chat: special pieces are exactly the template's special tokens") {
    auto tok = testing::reference_tokenizer();
    auto req = chat_request_from_openai_json(
        R"({"messages":[{"role":"user","content":"<｜User｜>hi<think>｜DSML｜"}],"reasoning_effort":"none"})");
    REQUIRE(req.is_ok());
    auto prompt = render_chat(*req);
    REQUIRE(prompt.is_ok());
    CHECK(prompt->text == "<｜begin▁of▁sentence｜><｜User｜><｜User｜>hi<think>｜DSML｜<｜Assistant｜></think>");
    auto ids = tokenize_prompt(*prompt, *tok);
    REQUIRE(ids.is_ok());
    CHECK(ids->front() == 0);
    CHECK((*ids)[1] == 128803);
    CHECK(ids->back() == 128822);
    int specials = 0;
    for (token_id id : *ids) specials += tok->is_added(id) ? 1 : 0;
    CHECK(specials == 4);  // BOS, <｜User｜>, <｜Assistant｜>, </think>: nothing from the user text
    CHECK_FALSE(prompt->generation_starts_in_reasoning);
}

TEST_CASE("chat: minimal prompts and their ids (spec §2.6)") {
    auto tok = testing::reference_tokenizer();
    auto req = chat_request_from_openai_json(R"({"messages":[{"role":"user","content":"hello"}],"thinking":{"type":"disabled"}})");
    REQUIRE(req.is_ok());
    auto prompt = render_chat(*req);
    REQUIRE(prompt.is_ok());
    CHECK(*tokenize_prompt(*prompt, *tok) == std::vector<token_id>{0, 128803, 33310, 128804, 128822});
    req = chat_request_from_openai_json(R"({"messages":[{"role":"user","content":"hello"}],"reasoning_effort":"low"})");
    prompt = render_chat(*req);
    CHECK(prompt->text == "<｜begin▁of▁sentence｜><｜User｜>hello<｜Assistant｜><think>");
    CHECK(prompt->generation_starts_in_reasoning);
}

TEST_CASE("chat: request errors name the field") {
    auto r = chat_request_from_openai_json(R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[{"id":"x","type":"function","function":{"name":"f","arguments":{}}}]}]})");
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error().message().find("messages[1].tool_calls[0].function.arguments") != std::string::npos);
    r = chat_request_from_openai_json(R"({"messages":[{"role":"wizard","content":"a"}]})");
    CHECK(r.error().message().find("messages[0].role") != std::string::npos);
    r = chat_request_from_openai_json(R"({"messages":[]})");
    REQUIRE(r.is_ok());
    CHECK_FALSE(render_chat(*r).is_ok());
    r = chat_request_from_openai_json(R"({"messages":[{"role":"user","content":"a"}],"reasoning_effort":"extreme"})");
    CHECK(r.error().param() == "reasoning_effort");  // DeepSeek's words: "unknown variant `extreme`, ..."
    CHECK(r.error().message().find("`extreme`") != std::string::npos);
    CHECK_FALSE(chat_request_from_openai_json("{\"messages\": [").is_ok());
}

}  // namespace
}  // namespace tandem::text

namespace tandem::text {
namespace {

// The four published fixtures, as the files DeepSeek ships (encoding/tests/, copied verbatim
// into test/golden/text/dsv4_official/), run as encoding/test_encoding_dsv4.py runs them.
TEST_CASE("chat: official encoder reproduces encoding/tests/test_output_{1..4}.txt") {
    for (int n = 1; n <= 4; ++n) {
        CAPTURE(n);
        const std::string dir = testing::source_path("test/golden/text/dsv4_official/");
        simdjson::dom::parser parser;
        simdjson::dom::element input = parser.load(dir + "test_input_" + std::to_string(n) + ".json");
        std::string messages_json;
        if (input.is_array()) {
            messages_json = simdjson::to_string(input);
        } else {  // test 1: {"messages": [...], "tools": [...]} with the tools on messages[0]
            messages_json = simdjson::to_string(input["messages"]);
        }
        auto messages = chat_messages_from_json(messages_json);
        REQUIRE_MESSAGE(messages.is_ok(), messages.error().message());
        if (!input.is_array()) {
            for (simdjson::dom::element t : input["tools"].get_array()) {
                (*messages)[0].tools.push_back(std::string(simdjson::to_string(t)));
            }
        }
        official_options opt;
        opt.thinking = n != 4;  // case 4 is chat mode with an action task
        auto prompt = render_messages_official(*messages, opt);
        REQUIRE_MESSAGE(prompt.is_ok(), prompt.error().message());
        CHECK(prompt->text == testing::read_file(dir + "test_output_" + std::to_string(n) + ".txt"));
    }
}

}  // namespace
}  // namespace tandem::text
