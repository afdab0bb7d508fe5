// The nccl transport. Without a usable GPU, creation must fail with the reason (asserted here on
// every CI machine). With two GPUs, two ranks in one process (control over inproc) move device
// bytes with NCCL and the receiver verifies them by checksum; with fewer it is skipped (NCCL
// cannot put two ranks of one communicator on one GPU).
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "core/gpu_probe.h"
#include "tandem_build_config.h"
#include "transport/nccl.h"
#include "transport_test_util.h"

#if TANDEM_WITH_CUDA
#include <cuda_runtime.h>
#endif

using namespace tandem;
using namespace tandem::transport;
using namespace tandem::transport::testing;

TEST_CASE("nccl: without a usable GPU, creation fails saying why") {
    if (gpu_probe().device_count > 0) return;  // covered by the two-GPU case below
    auto layout = tiny_layout();
    auto pair = make_inproc_pair(pd_handshake(topo::pd_role::decode, layout),
                                 pd_handshake(topo::pd_role::prefill, layout));
    auto t = nccl_transport::create(std::move(pair.a), nccl_options{0, true});
    REQUIRE_FALSE(t.is_ok());
    CHECK(t.error().code() == error_code::unavailable);
    CHECK_FALSE(t.error().message().empty());
}

#if TANDEM_WITH_CUDA
TEST_CASE("nccl: two GPUs move device bytes in posting order, verified by checksum") {
    if (gpu_probe().device_count < 2) {
        MESSAGE("skipped: needs two GPUs");
        return;
    }
    event_log ea, eb;
    auto layout = tiny_layout();
    auto pair = make_inproc_pair(pd_handshake(topo::pd_role::decode, layout),
                                 pd_handshake(topo::pd_role::prefill, layout));
    auto a = nccl_transport::create(std::move(pair.a), nccl_options{0, true});
    auto b = nccl_transport::create(std::move(pair.b), nccl_options{1, false});
    REQUIRE(a.is_ok());
    REQUIRE(b.is_ok());
    REQUIRE((*a)->start(ea.events()).is_ok());
    REQUIRE((*b)->start(eb.events()).is_ok());
    REQUIRE(ea.wait([&] { return ea.ready.size() == 1; }, 60000));
    REQUIRE(eb.wait([&] { return eb.ready.size() == 1; }, 60000));
    const int64_t n = 3 << 20;
    std::vector<std::byte> host(n);
    for (int64_t i = 0; i < n; ++i) host[i] = std::byte(i * 131 % 251);
    void *src = nullptr, *dst = nullptr;
    cudaSetDevice(1);
    REQUIRE(cudaMalloc(&src, n) == cudaSuccess);
    REQUIRE(cudaMemcpy(src, host.data(), n, cudaMemcpyHostToDevice) == cudaSuccess);
    cudaSetDevice(0);
    REQUIRE(cudaMalloc(&dst, n) == cudaSuccess);
    REQUIRE(cudaMemset(dst, 0, n) == cudaSuccess);
    // Two spans, posted in the same order on both sides.
    REQUIRE((*b)->send_buffer(1, src, n / 3).is_ok());
    REQUIRE((*b)->send_buffer(1, static_cast<std::byte*>(src) + n / 3, n - n / 3).is_ok());
    REQUIRE((*a)->recv_buffer(1, dst, n / 3).is_ok());
    REQUIRE((*a)->recv_buffer(1, static_cast<std::byte*>(dst) + n / 3, n - n / 3).is_ok());
    std::thread sender([&] { CHECK((*b)->flush(1, 30000).is_ok()); });
    CHECK((*a)->flush(1, 30000).is_ok());
    sender.join();
    auto want = (*b)->checksum_device(src, n);
    auto got = (*a)->checksum_device(dst, n);
    REQUIRE(want.is_ok());
    REQUIRE(got.is_ok());
    CHECK(*want == *got);
    // A receive nobody sends to cannot finish: flush's deadline aborts it instead of hanging.
    REQUIRE((*a)->recv_buffer(1, dst, 1024).is_ok());
    status st = (*a)->flush(1, 200);
    CHECK(st.code() == error_code::deadline_exceeded);
    CHECK((*a)->ready_peers().empty());
    (*a)->stop();
    (*b)->stop();
    cudaFree(dst);
    cudaSetDevice(1);
    cudaFree(src);
}
#endif
