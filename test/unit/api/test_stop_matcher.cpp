#include <doctest/doctest.h>

#include "api/stop_matcher.h"

using tandem::api::stop_matcher;

namespace {

// Feeds `text` in pieces of `piece` bytes and returns (emitted text, stopped).
std::pair<std::string, bool> run(std::vector<std::string> stops, const std::string& text, size_t piece) {
    stop_matcher m(std::move(stops));
    std::string out;
    for (size_t i = 0; i < text.size() && !m.stopped(); i += piece) {
        auto s = m.push(std::string_view(text).substr(i, piece));
        out += s.emit;
    }
    out += m.flush();
    return {out, m.stopped()};
}

}  // namespace

TEST_CASE("stop_matcher: output is cut before the stop string at every split") {
    for (size_t piece = 1; piece <= 12; ++piece) {
        auto [out, stopped] = run({"STOP", "\n\n"}, "hello STOP world", piece);
        CHECK(out == "hello ");
        CHECK(stopped);
        auto [out2, stopped2] = run({"STOP", "\n\n"}, "line\n\nmore", piece);
        CHECK(out2 == "line");
        CHECK(stopped2);
    }
}

TEST_CASE("stop_matcher: a partial match is held back, then released when it fails") {
    stop_matcher m({"STOP"});
    CHECK(m.push("abc ST").emit == "abc ");
    CHECK(m.push("O").emit == "");
    CHECK(m.push("x").emit == "STOx");
    CHECK(m.flush().empty());
    stop_matcher tail({"STOP"});
    CHECK(tail.push("end ST").emit == "end ");
    CHECK(tail.flush() == "ST");  // generation ended: nothing is lost
}

TEST_CASE("stop_matcher: the earliest of several stop strings wins; no stops is a pass-through") {
    auto [out, stopped] = run({"world", "lo"}, "hello world", 3);
    CHECK(out == "hel");
    CHECK(stopped);
    auto [plain, none] = run({}, "anything at all", 4);
    CHECK(plain == "anything at all");
    CHECK_FALSE(none);
}

TEST_CASE("stop_matcher: matched() names the stop string that ended the text") {
    stop_matcher m({"world", "lo"});
    CHECK(m.matched().empty());
    CHECK(m.push("hel").emit == "he");
    CHECK(m.push("lo world").stopped);
    CHECK(m.matched() == "lo");
}
