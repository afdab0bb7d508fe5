// The CUDA check: runs a real kernel on the GPU and compares with the CPU, then the device XXH3
// kernel (cuda/kernels_checksum.cu, what pd on one device verifies spans with) against libxxhash
// over every XXH3 length class, and a device-to-device copy (what moves pd's pages) checked by it.
// On a machine without a GPU (or a build without CUDA) it exits 77, which meson reports as SKIP —
// never as a pass.
#include <cstdio>
#include <random>
#include <vector>

#include <xxhash.h>

#include "core/gpu_probe.h"
#include "cuda/host/device_runtime.h"

namespace {

// Device XXH3 == host XXH3 at lengths of every class (and an unaligned start), and a D2D copy
// lands the same bytes (same device hash at the destination).
tandem::status xxh3_and_copy_check() {
    auto rt = tandem::cuda::make_cuda_runtime();
    if (!rt) return rt.error();
    constexpr int64_t n = 300000;
    std::vector<uint8_t> host(n);
    std::mt19937_64 rng(17);
    for (uint8_t& b : host) b = static_cast<uint8_t>(rng());
    auto src = tandem::cuda::device_buffer::alloc(**rt, n, "XXH3 source");
    auto dst = tandem::cuda::device_buffer::alloc(**rt, n, "XXH3 destination");
    if (!src) return src.error();
    if (!dst) return dst.error();
    if (auto st = (*rt)->upload(src->get(), host.data(), n); !st) return st;
    int checked = 0;
    for (int64_t len : {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1024, 1025, 4096, 65536 + 33, 299999}) {
        for (int64_t off : {0, 1}) {
            if (off + len > n) continue;
            auto h = (*rt)->checksum(src->get<uint8_t>() + off, len);
            if (!h) return h.error();
            if (*h != XXH3_64bits(host.data() + off, static_cast<size_t>(len)))
                return tandem::make_error(tandem::error_code::data_loss,
                                          "device XXH3 differs from libxxhash at length " + std::to_string(len) +
                                              " offset " + std::to_string(off));
            ++checked;
        }
    }
    if (auto st = (*rt)->copy(dst->get(), src->get(), n); !st) return st;
    auto landed = (*rt)->checksum(dst->get(), n);
    if (!landed) return landed.error();
    if (*landed != XXH3_64bits(host.data(), n))
        return tandem::make_error(tandem::error_code::data_loss, "a device-to-device copy landed different bytes");
    std::printf("device XXH3 equal to libxxhash at %d lengths; D2D copy of %lld bytes verified\n", checked,
                static_cast<long long>(n));
    return tandem::status::ok();
}

}  // namespace

int main() {
    tandem::gpu_info info = tandem::gpu_probe();
    if (info.device_count == 0) {
        std::printf("SKIP: %s\n", info.reason.c_str());
        return 77;
    }
    std::printf("GPUs: %s; NCCL %d\n", info.devices.c_str(), info.nccl_version);
    tandem::status st = tandem::gpu_self_test();
    std::printf("%s\n", st ? "CUDA self-test passed" : st.message().c_str());
    if (!st) return 1;
    st = xxh3_and_copy_check();
    if (!st) std::printf("device XXH3 / D2D check failed: %s\n", st.message().c_str());
    return st ? 0 : 1;
}
