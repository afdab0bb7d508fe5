// Anthropic Messages: request mapping onto the chat request, and the block writer's event
// sequence (every tool_use is a whole block; a kind change closes the open block).
#include <doctest/doctest.h>

#include <simdjson.h>

#include "api/messages_request.h"
#include "api/messages_writer.h"

using namespace tandem;
using namespace tandem::api;

namespace {

result<messages_request> read(const std::string& json) {
    static simdjson::dom::parser parser;
    simdjson::dom::element doc = parser.parse(json).value();
    return messages_request_from_json(json, doc.get_object().value());
}

text::output_event event(text::output_event::kind k, std::string text, std::string name = {},
                         std::string args = {}) {
    text::output_event e;
    e.type = k;
    e.text = std::move(text);
    e.tool_name = std::move(name);
    e.arguments = std::move(args);
    return e;
}

// The "event:" names of an SSE text, checking every data line is a JSON object of that type.
std::vector<std::string> event_names(const std::string& sse) {
    std::vector<std::string> names;
    simdjson::dom::parser parser;
    size_t at = 0;
    while ((at = sse.find("event: ", at)) != std::string::npos) {
        const size_t eol = sse.find('\n', at);
        names.push_back(sse.substr(at + 7, eol - at - 7));
        const size_t data_end = sse.find("\n\n", eol);
        const std::string data = sse.substr(eol + 7, data_end - eol - 7);  // after "data: "
        simdjson::dom::element doc;
        REQUIRE_MESSAGE(!parser.parse(data).get(doc), data);
        std::string_view type;
        CHECK(!doc["type"].get(type));
        CHECK(type == names.back());
        at = data_end;
    }
    return names;
}

}  // namespace

TEST_CASE("messages request: blocks map onto chat messages") {
    auto r = read(R"({"model":"m","max_tokens":5,"system":[{"type":"text","text":"a"},{"type":"text","text":"b"}],
        "stop_sequences":["END"],"temperature":0.5,"stream":true,
        "tools":[{"name":"get_w","description":"d","input_schema":{"type":"object"}}],
        "tool_choice":{"type":"auto"},
        "messages":[{"role":"user","content":"w?"},
          {"role":"assistant","content":[{"type":"thinking","thinking":"t1","signature":"s"},
            {"type":"thinking","thinking":"t2"},{"type":"text","text":"calling"},
            {"type":"tool_use","id":"tu_1","name":"get_w","input":{"city":"Paris","n":1.5}}]},
          {"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"x"},
            {"type":"image","source":{"type":"base64","media_type":"image/png","data":""}}]},{"type":"text","text":"thanks"}]}]})");
    REQUIRE(r);
    const auto& m = r->chat.messages;
    REQUIRE(m.size() == 5);
    CHECK((m[0].role == text::chat_role::system && m[0].content == "a\n\nb"));
    CHECK(m[2].reasoning_content == "t1\n\nt2");
    CHECK(m[2].content == "calling");
    REQUIRE(m[2].tool_calls.size() == 1);
    CHECK(m[2].tool_calls[0].arguments == R"({"city": "Paris", "n": 1.5})");
    CHECK((m[3].role == text::chat_role::tool && m[3].tool_call_id == "tu_1"));
    CHECK(m[3].content == "x\n\n[Unsupported Image]");
    CHECK((m[4].role == text::chat_role::user && m[4].content == "thanks"));
    CHECK(r->chat.tools.at(0) == R"({"name": "get_w", "description": "d", "parameters": {"type": "object"}})");
    CHECK(r->opts.stop == std::vector<std::string>{"END"});
    CHECK(r->opts.stream);
    CHECK(r->opts.sampling.max_tokens == 5);
    CHECK(r->chat.thinking);  // on unless disabled, as DeepSeek's API
    auto any = read(R"({"messages":[{"role":"user","content":"x"}],"thinking":{"type":"disabled"},
        "tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"any"}})");
    REQUIRE(any);
    CHECK(any->chat.tool_choice == text::tool_choice_kind::automatic);  // as DeepSeek's converter
    CHECK_FALSE(any->chat.thinking);
}

TEST_CASE("messages request: Anthropic's rules are 400s naming the field") {
    const std::string tools = R"("tools":[{"name":"f","input_schema":{}}],)";
    const std::string call = R"({"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]})";
    struct bad { std::string body, field; };
    for (const bad& b : std::vector<bad>{
             {R"({"messages":[]})", "messages"},
             {R"({"messages":[{"role":"user","content":[]}]})", "messages.0"},
             {R"({"messages":[{"role":"system","content":"x"}]})", "messages.0.role"},
             {"{" + tools + R"("messages":[{"role":"user","content":"x"},)" + call + R"(,{"role":"user","content":"no"}]})", "messages.2"},
             {"{" + tools + R"("messages":[{"role":"user","content":"x"},)" + call +
                  R"(,{"role":"user","content":[{"type":"text","text":"t"},{"type":"tool_result","tool_use_id":"a"}]}]})",
              "messages.2.content.1"},
             {R"({"tools":[{"name":"bad name","input_schema":{}}],"messages":[{"role":"user","content":"x"}]})", "tools.0.name"},
             {R"({"tools":[{"type":"web_search_20250305","name":"s"}],"messages":[{"role":"user","content":"x"}]})", "tools.0"},
             {R"({"thinking":{"type":"sometimes"},"messages":[{"role":"user","content":"x"}]})", "thinking.type"},
             {R"({"output_config":{"effort":"huge"},"messages":[{"role":"user","content":"x"}]})", "output_config.effort"},
             {R"({"stop_sequences":[""],"messages":[{"role":"user","content":"x"}]})", "stop_sequences.0"},
         }) {
        CAPTURE(b.body);
        auto r = read(b.body);
        REQUIRE_FALSE(r);
        CHECK(r.error().code() == error_code::invalid_argument);
        CHECK(r.error().param() == b.field);
    }
}

TEST_CASE("messages writer: blocks in model order, Anthropic's stream events") {
    using k = text::output_event::kind;
    const std::vector<text::output_event> first = {event(k::reasoning, "th"), event(k::reasoning, "ink"),
                                                   event(k::content, "Hello")};
    const std::vector<text::output_event> second = {event(k::tool_call, "", "f", R"({"a": 1})"),
                                                    event(k::content, " after")};
    messages_writer s("msg_1", "m", "toolu_x_", true);
    std::string sse = s.start(7);  // one call per statement: the order of + operands is unspecified
    sse += s.apply(first);
    sse += s.apply(second);
    sse += s.finish(false, "", 9);
    CHECK(event_names(sse) == std::vector<std::string>{
              "message_start", "ping",
              "content_block_start", "content_block_delta", "content_block_delta", "content_block_delta",
              "content_block_stop",                                   // thinking, with its signature
              "content_block_start", "content_block_delta", "content_block_stop",  // text
              "content_block_start", "content_block_delta", "content_block_stop",  // tool_use
              "content_block_start", "content_block_delta", "content_block_stop",  // text
              "message_delta", "message_stop"});
    CHECK(sse.find(R"("delta":{"type":"input_json_delta","partial_json":"{\"a\": 1}"})") != std::string::npos);
    CHECK(sse.find(R"("stop_reason":"tool_use")") != std::string::npos);
    CHECK(sse.find(R"("signature_delta","signature":"msg_1")") != std::string::npos);

    messages_writer whole("msg_1", "m", "toolu_x_", false);
    CHECK(whole.apply(first).empty());
    CHECK(whole.apply(second).empty());
    const std::string body = whole.message(false, "", 7, 9);
    simdjson::dom::parser parser;
    simdjson::dom::element doc = parser.parse(body).value();
    simdjson::dom::array content = doc["content"].get_array().value();
    REQUIRE(content.size() == 4);
    CHECK(content.at(0)["thinking"].get_string().value() == "think");
    CHECK(content.at(1)["text"].get_string().value() == "Hello");
    CHECK(content.at(2)["id"].get_string().value() == "toolu_x_0");
    CHECK(content.at(2)["input"]["a"].get_int64().value() == 1);
    CHECK(doc["usage"]["output_tokens"].get_int64().value() == 9);
    CHECK(whole.stop_reason(false, "END") == "stop_sequence");
    CHECK(whole.stop_reason(true, "") == "max_tokens");
    messages_writer plain("m2", "m", "t", false);
    (void)plain.apply(first);
    CHECK(plain.stop_reason(false, "") == "end_turn");
}
