// bench/text/tokenizer_bench.cpp — Tokenizer throughput on given text files.
//
//   bench_text_tokenizer TOKENIZER_JSON [--chunk=BYTES] FILE...
// For each file: the best of several single-threaded encode() runs (cache warm, as in a
// server), the id count and an FNV-1a hash of the ids, so the driver (tokenizer_vs_hf.py) can
// check the ids equal HF's and print the speed ratio against HF measured in the same run.
// --chunk=N encodes each file as consecutive pieces of at most N bytes (cut back to a UTF-8
// boundary), as a server sees many short prompts, and concatenates their ids.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "text/tokenizer.h"

namespace {

uint64_t fnv1a64(const std::vector<tandem::text::token_id>& ids) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (auto id : ids) {
        auto u = static_cast<uint32_t>(id);
        for (int k = 0; k < 4; ++k) {
            h ^= (u >> (8 * k)) & 0xFF;
            h *= 0x100000001b3ULL;
        }
    }
    return h;
}

std::vector<tandem::text::token_id> encode_chunked(const tandem::text::tokenizer& tok,
                                                   const std::string& text, size_t chunk) {
    std::vector<tandem::text::token_id> ids;
    size_t at = 0;
    while (at < text.size()) {
        size_t end = std::min(text.size(), at + chunk);
        while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
        tok.encode_append(std::string_view(text).substr(at, end - at), &ids);
        at = end;
    }
    return ids;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
        std::printf("usage: %s TOKENIZER_JSON FILE...\n  encode each FILE with the tokenizer: MB/s and tokens/s\n", argv[0]);
        return 0;
    }
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s TOKENIZER_JSON FILE...\n", argv[0]);
        return 2;
    }
    auto tok = tandem::text::tokenizer::load_file(argv[1]);
    if (!tok) {
        std::fprintf(stderr, "error: %s\n", tok.error().message().c_str());
        return 1;
    }
    size_t chunk = 0;
    for (int i = 2; i < argc; ++i) {
        if (std::string(argv[i]).rfind("--chunk=", 0) == 0) {
            chunk = std::stoul(std::string(argv[i]).substr(8));
            continue;
        }
        std::ifstream in(argv[i], std::ios::binary);
        std::ostringstream buf;
        buf << in.rdbuf();
        const std::string text = buf.str();
        double best = 1e30;
        std::vector<tandem::text::token_id> ids;
        for (int run = 0; run < 5; ++run) {
            auto t0 = std::chrono::steady_clock::now();
            ids = chunk == 0 ? (*tok)->encode(text) : encode_chunked(**tok, text, chunk);
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::printf("%s\t%zu\t%.6f\t%zu\t%016llx\n", argv[i], text.size(), best, ids.size(),
                    static_cast<unsigned long long>(fnv1a64(ids)));
    }
    return 0;
}
