// transport/nccl_none.cpp — The nccl transport in a build without CUDA: creation says why not.
#include "transport/nccl.h"

namespace tandem::transport {

result<std::unique_ptr<nccl_transport>> nccl_transport::create(std::unique_ptr<transport>,
                                                               nccl_options) {
    return make_error(error_code::unavailable,
                      "transport.kind = \"nccl\" needs a build with CUDA and NCCL (meson -Dcuda=enabled)");
}

}  // namespace tandem::transport
