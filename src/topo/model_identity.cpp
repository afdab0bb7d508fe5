// topo/model_identity.cpp — Sampled fingerprint of a checkpoint directory.
#include "topo/model_identity.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

namespace tandem::topo {

namespace {

constexpr int64_t k_windows = 16;
constexpr int64_t k_window_bytes = 64 * 1024;

status hash_file(XXH3_state_t* st, const std::filesystem::path& path, bool whole) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error(error_code::io_error, "cannot read " + path.string());
    std::error_code ec;
    const auto size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
    if (ec) return make_error(error_code::io_error, "cannot stat " + path.string());
    const std::string name = path.filename().string();
    XXH3_64bits_update(st, name.data(), name.size());
    XXH3_64bits_update(st, &size, sizeof size);
    std::vector<char> buf(static_cast<size_t>(whole ? size : std::min(size, k_window_bytes)));
    const int64_t windows = whole ? 1 : k_windows;
    for (int64_t w = 0; w < windows; ++w) {
        const int64_t len = static_cast<int64_t>(buf.size());
        const int64_t at = windows == 1 ? 0 : (size - len) * w / (windows - 1);
        in.seekg(at);
        in.read(buf.data(), len);
        if (in.gcount() != len) return make_error(error_code::io_error, "short read of " + path.string());
        XXH3_64bits_update(st, buf.data(), buf.size());
    }
    return status::ok();
}

}  // namespace

result<model_identity> identify_model(const std::string& model_dir, const std::string& numerics) {
    namespace fs = std::filesystem;
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(), XXH3_freeState);
    XXH3_64bits_reset(st.get());
    XXH3_64bits_update(st.get(), numerics.data(), numerics.size());
    TANDEM_RETURN_IF_ERROR(hash_file(st.get(), fs::path(model_dir) / "config.json", true));
    std::vector<fs::path> shards;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(model_dir, ec)) {
        if (e.path().extension() == ".safetensors") shards.push_back(e.path());
    }
    if (ec) return make_error(error_code::io_error, "cannot list " + model_dir);
    std::sort(shards.begin(), shards.end());
    for (const fs::path& p : shards) TANDEM_RETURN_IF_ERROR(hash_file(st.get(), p, false));
    model_identity id;
    id.fingerprint = XXH3_64bits_digest(st.get());
    id.description = fmt::format("{} ({} safetensors file{}, numerics {})", model_dir, shards.size(),
                                 shards.size() == 1 ? "" : "s", numerics);
    return id;
}

}  // namespace tandem::topo
