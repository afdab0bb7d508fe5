// cuda/kernels_checksum.cu — XXH3-64 over device bytes: what pd between two device pools checksums a
// span with where it lies (at the source) and where it landed (at the receiver), so no span is read
// back to the host to be verified. The hash is kmath::xxh3_64 (cuda/host/xxh3.h), the same source
// the host emulation runs and the unit test compares with libxxhash bit for bit.
//
// One thread hashes one whole span (XXH3's accumulation is sequential over stripes); the batched
// launcher gives each span its own block. Correct first: a span of a page buffer (tens to hundreds
// of KiB) costs one thread's sequential pass; a faster kernel would give each of the 8 independent
// accumulator lanes its own thread and keep the value.
#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#include "cuda/host/xxh3.h"
#include "cuda/kernel_launch.h"

namespace tandem::cuda {

namespace {

__global__ void xxh3_one(const void* src, int64_t bytes, uint64_t* out) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *out = kmath::xxh3_64(src, bytes);
}

__global__ void xxh3_spans(const uint8_t* const* src, const int64_t* bytes, int64_t n, uint64_t* out) {
    const int64_t i = blockIdx.x;
    if (i < n && threadIdx.x == 0) out[i] = kmath::xxh3_64(src[i], bytes[i]);
}

}  // namespace

status launch_xxh3(const void* src, int64_t bytes, uint64_t* out, cudaStream_t stream) {
    if (bytes < 0) return make_error(error_code::invalid_argument, "device XXH3: negative length");
    xxh3_one<<<1, 1, 0, stream>>>(src, bytes, out);
    return cuda_status(cudaGetLastError(), "device XXH3 launch");
}

status launch_xxh3_spans(const uint8_t* const* src, const int64_t* bytes, int64_t n, uint64_t* out,
                         cudaStream_t stream) {
    if (n <= 0) return status::ok();
    if (n > 0x7fffffff) return make_error(error_code::invalid_argument, "device XXH3: too many spans for one launch");
    xxh3_spans<<<static_cast<unsigned>(n), 1, 0, stream>>>(src, bytes, n, out);
    return cuda_status(cudaGetLastError(), "device XXH3 launch (spans)");
}

}  // namespace tandem::cuda
