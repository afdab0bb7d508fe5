// render_chat() and tokenize_prompt() against deepseek-recipe on a generated corpus of OpenAI
// bodies (tools/text/gen_chat_golden.py): the prompt text and the token ids must be identical,
// and requests the official API rejects must be rejected with its message.
#include <simdjson.h>

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>

#include "text/chat.h"
#include "text_test_util.h"

namespace tandem::text {
namespace {

TEST_CASE("chat: render_chat matches deepseek-recipe on the stored corpus") {
    auto tok = testing::reference_tokenizer();
    simdjson::dom::parser parser;
    // TANDEM_CHAT_CORPUS points the test at another corpus of the same format (for exploring).
    const char* other = std::getenv("TANDEM_CHAT_CORPUS");
    simdjson::dom::element root =
        parser.load(other ? std::string(other) : testing::source_path("test/golden/text/chat_recipe_cases.json"));
    int64_t index = 0, rendered = 0, rejected = 0;
    for (simdjson::dom::element c : root["cases"].get_array()) {
        CAPTURE(index);
        const std::string_view body = c["body"];
        auto req = chat_request_from_openai_json(body);
        std::string_view expected_prompt;
        if (c["prompt"].get(expected_prompt)) {  // the reference rejects this request
            status why = req.is_ok() ? render_chat(*req).error() : req.error();
            if (why.is_ok()) FAIL_CHECK("accepted a request the reference rejects: " << body);
            // ...with the same message (the reference's error is an OpenAI error body).
            std::string_view error;
            simdjson::dom::parser error_parser;
            if (!c["error"].get(error) && error.starts_with("{")) {
                std::string_view want = error_parser.parse(error)["error"]["message"];
                CHECK_MESSAGE(why.message() == want, body);
            }
            ++rejected;
            ++index;
            continue;
        }
        REQUIRE_MESSAGE(req.is_ok(), req.error().message() << " in " << body);
        auto prompt = render_chat(*req);
        REQUIRE_MESSAGE(prompt.is_ok(), prompt.error().message() << " in " << body);
        if (prompt->text != expected_prompt) {
            const std::string& got = prompt->text;
            size_t at = 0;
            while (at < got.size() && at < expected_prompt.size() && got[at] == expected_prompt[at]) ++at;
            const size_t from = at > 60 ? at - 60 : 0;
            if (const char* dump = std::getenv("TANDEM_CHAT_DUMP")) {
                std::ofstream(std::string(dump) + "/" + std::to_string(index) + ".got") << got;
            }
            FAIL_CHECK("prompt differs at byte " << at << "\n got: ..." << got.substr(from, 160)
                       << "\nwant: ..." << expected_prompt.substr(from, 160) << "\nbody: " << body.substr(0, 300));
        } else {
            std::vector<token_id> want;
            for (simdjson::dom::element v : c["ids"].get_array()) want.push_back(static_cast<token_id>(int64_t(v)));
            auto ids = tokenize_prompt(*prompt, *tok);
            REQUIRE(ids.is_ok());
            if (*ids != want) FAIL_CHECK("token ids differ for body " << body);
        }
        ++rendered;
        ++index;
    }
    if (other == nullptr) {
        CHECK(rendered > 150);
        CHECK(rejected > 10);
    }
}

}  // namespace
}  // namespace tandem::text
