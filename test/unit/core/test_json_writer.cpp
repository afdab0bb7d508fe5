#include <doctest/doctest.h>

#include <limits>

#include "core/json_writer.h"

using namespace tandem;

TEST_CASE("json_writer: nesting and commas") {
    json_writer w;
    w.begin_object().key("a").value(1).key("b").begin_array().value("x").value(true).null()
        .end_array().key("c").begin_object().end_object().end_object();
    CHECK(w.str() == R"({"a":1,"b":["x",true,null],"c":{}})");
}

TEST_CASE("json_writer: escapes quotes, controls and invalid UTF-8") {
    std::string out;
    json_escape_into(out, "q\"b\\n\n\x01");
    CHECK(out == R"("q\"b\\n\n\u0001")");
    out.clear();
    json_escape_into(out, "ok \xC3\xA9 \xF0\x9F\x98\x80");  // é and an emoji pass through
    CHECK(out == "\"ok \xC3\xA9 \xF0\x9F\x98\x80\"");
    out.clear();
    json_escape_into(out, "bad \xC3 \xED\xA0\x80 end");  // truncated sequence and a surrogate
    CHECK(out == "\"bad \xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD end\"");
}

TEST_CASE("json_writer: non-finite numbers stay valid JSON") {
    json_writer w;
    w.begin_array().value(0.5).value(std::numeric_limits<double>::quiet_NaN()).end_array();
    CHECK(w.str() == "[0.5,0]");
}
