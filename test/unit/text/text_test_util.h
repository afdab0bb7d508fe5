// Shared helpers for the text unit tests: the reference tokenizer and golden files.
//
// The tokenizer is models/tokenizer/tokenizer.json, written by etc/setup.sh through
// tools/text/export_tokenizer.py (6.4 MB, too big for test/golden). A missing file FAILS the
// tests with instructions; it never skips them.
#pragma once

#include <doctest/doctest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "tandem_build_config.h"
#include "text/tokenizer.h"

namespace tandem::text::testing {

inline std::string source_path(const std::string& rel) {
    return std::string(TANDEM_SOURCE_ROOT) + "/" + rel;
}

inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "cannot read " << path);
    std::ostringstream buf;
    buf << in.rdbuf();
    return buf.str();
}

inline std::shared_ptr<const tokenizer> reference_tokenizer() {
    static std::shared_ptr<const tokenizer> tok = [] {
        const std::string path = source_path("models/tokenizer/tokenizer.json");
        auto loaded = tokenizer::load_file(path);
        if (!loaded) {
            FAIL("DeepSeek-V4 tokenizer not found (" << loaded.error().message()
                 << "). Run etc/setup.sh, or: .venv/bin/python tools/text/export_tokenizer.py");
        }
        return std::move(loaded).value();
    }();
    REQUIRE(tok != nullptr);
    return tok;
}

inline std::string from_hex(std::string_view hex) {
    std::string out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
    }
    return out;
}

}  // namespace tandem::text::testing
