// Fuzz target: the safetensors header parser (model/safetensors.h) on a whole file in memory:
// 8-byte header length, JSON header, data. Properties: no crash or read outside the file (ASan);
// a refused file is data_loss with a message; an accepted one has every tensor inside the data
// section with bytes = elements × dtype size, and no two tensors overlapping.
#include <algorithm>
#include <vector>

#include "fuzz_support.h"
#include "model/safetensors.h"

using namespace tandem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // A copy of exactly `size` bytes, so ASan sees any read past the end of the "file".
    std::vector<uint8_t> file(data, data + size);
    auto f = model::safetensors_file::open_bytes(file, "fuzz.safetensors");
    if (!f) {
        FUZZ_CHECK(f.error().code() == error_code::data_loss && !f.error().message().empty(),
                   "{}", f.error().message());
        return 0;
    }
    const uint8_t* begin = file.data();
    const uint8_t* end = file.data() + file.size();
    std::vector<std::pair<const uint8_t*, const uint8_t*>> ranges;
    for (const auto& [name, t] : (*f)->tensors()) {
        FUZZ_CHECK(t.nbytes == t.numel() * model::dtype_size(t.type), "tensor '{}'", name);
        FUZZ_CHECK(t.data >= begin + 8 && t.data + t.nbytes <= end, "tensor '{}' outside the file", name);
        if (t.nbytes > 0) ranges.emplace_back(t.data, t.data + t.nbytes);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) FUZZ_CHECK(ranges[i - 1].second <= ranges[i].first);
    return 0;
}
