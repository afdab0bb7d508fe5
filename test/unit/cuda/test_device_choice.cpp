// backend.device resolution (cuda/host/device_choice.h) against probe results.
#include <doctest/doctest.h>

#include "cuda/host/device_choice.h"

using namespace tandem;
using namespace tandem::cuda;

namespace {
gpu_info no_gpu() {
    gpu_info g;
    g.built_with_cuda = true;
    g.reason = "no GPU present";
    return g;
}
gpu_info one_gpu() {
    gpu_info g;
    g.built_with_cuda = true;
    g.device_count = 1;
    g.devices = "NVIDIA H200 (sm_90, 139 GiB)";
    return g;
}
cuda_capability ready() { return {true, true, ""}; }
cuda_capability built_unverified() { return {true, false, "its GPU check has not passed"}; }
cuda_capability not_built() { return {false, false, "this build has no CUDA forward"}; }
}  // namespace

TEST_CASE("backend.device = cpu never touches the GPU, even when one is present") {
    auto c = choose_backend_device("cpu", one_gpu(), ready());
    REQUIRE(c.is_ok());
    CHECK(c->device == backend_device::cpu);
}

TEST_CASE("backend.device = auto picks CUDA only when a GPU is present and the CUDA forward passed its GPU check") {
    auto a = choose_backend_device("auto", one_gpu(), ready());
    REQUIRE(a.is_ok());
    CHECK(a->device == backend_device::cuda);
    CHECK(a->reason.find("H200") != std::string::npos);

    auto b = choose_backend_device("auto", no_gpu(), ready());
    REQUIRE(b.is_ok());
    CHECK(b->device == backend_device::cpu);
    CHECK(b->reason.find("no GPU present") != std::string::npos);  // the log says why not

    auto c = choose_backend_device("auto", one_gpu(), built_unverified());
    REQUIRE(c.is_ok());
    CHECK(c->device == backend_device::cpu);
    CHECK(c->reason.find("GPU check has not passed") != std::string::npos);
    // This build's own answer: no GPU check has run green anywhere yet, so auto stays on the CPU.
    CHECK_FALSE(cuda_backend_capability().gpu_verified);
    auto d = choose_backend_device("auto", one_gpu(), cuda_backend_capability());
    REQUIRE(d.is_ok());
    CHECK(d->device == backend_device::cpu);
}

TEST_CASE("backend.device = cuda refuses clearly instead of falling back") {
    auto a = choose_backend_device("cuda", no_gpu(), ready());
    REQUIRE_FALSE(a.is_ok());
    CHECK(a.error().message().find("backend.device") != std::string::npos);
    CHECK(a.error().message().find("no GPU present") != std::string::npos);

    auto b = choose_backend_device("cuda", one_gpu(), not_built());
    REQUIRE_FALSE(b.is_ok());
    CHECK(b.error().message().find("no CUDA forward") != std::string::npos);

    // Built but not yet verified on a GPU: the user asked for it, so it runs, and says so.
    auto u = choose_backend_device("cuda", one_gpu(), built_unverified());
    REQUIRE(u.is_ok());
    CHECK(u->device == backend_device::cuda);
    CHECK(u->reason.find("has not run green") != std::string::npos);

    auto c = choose_backend_device("cuda", one_gpu(), ready());
    REQUIRE(c.is_ok());
    CHECK(c->device == backend_device::cuda);
}

TEST_CASE("an unknown backend.device is an error naming the key") {
    auto a = choose_backend_device("tpu", one_gpu(), ready());
    REQUIRE_FALSE(a.is_ok());
    CHECK(a.error().code() == error_code::invalid_argument);
    CHECK(a.error().message().find("backend.device: 'tpu'") != std::string::npos);
}
