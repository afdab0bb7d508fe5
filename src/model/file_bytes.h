// model/file_bytes.h — A checkpoint file's bytes in memory, read-only: mapped from the page cache,
// or copied once into anonymous memory advised for transparent huge pages.
//
// Owns: the mapping or the copy and its lifetime. Copies are shared within the process: a second
// open of the same file (same device, inode, size, modification and change times, and the same
// first and last 64 KiB) while the first is alive returns the same bytes — pd's role "both"
// loads the model once per engine and keeps one copy. A file rewritten in place, to the same
// size, within one tick of the file clock and with both ends unchanged would be missed; a
// loaded model never sees its file change anyway (the copy is taken once).
//
// Why copy at all: the kernels stream every weight once per decode token, and over a file mapping
// that is one 4 KiB page — one TLB miss and page walk, a two-level one in a VM — per 4 KiB of
// weights. On a Xeon 6 VM here a bf16 GEMV over V4-Flash's 1 GiB head read 18.7 GB/s from the
// mapping and 31.2 GB/s from a copy in 2 MiB pages (the machine's read bandwidth: 29 GB/s). The
// price: the whole file is read at startup (a mapping faults pages in as tokens touch them), its
// pages count in the process's RSS and cannot be dropped by the kernel, and the page cache may
// keep a second copy (reclaimable) until memory is needed. `mapped` keeps the lazy, shared
// mapping (model.weight_pages).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace tandem::model {

enum class weight_pages { huge, mapped };

// "huge" | "mapped"; errors name model.weight_pages.
result<weight_pages> weight_pages_from(const std::string& name);
const char* weight_pages_name(weight_pages p);

// What a load of `total` checkpoint bytes gets when `wanted` is asked for: huge only while the
// copies fit in 90% of `available` bytes of memory (0: unknown, taken as fitting). Why: the copy
// is committed as it is read, and one larger than the memory left would end in the OOM killer
// mid-load instead of an error; the mapping serves it (slower) from the page cache instead.
weight_pages pages_that_fit(weight_pages wanted, int64_t total, int64_t available);

// MemAvailable from /proc/meminfo in bytes, 0 when it cannot be read.
int64_t memory_available_bytes();

class file_bytes {
public:
    static result<std::shared_ptr<const file_bytes>> open(const std::string& path, weight_pages mode);
    ~file_bytes();
    file_bytes(const file_bytes&) = delete;
    file_bytes& operator=(const file_bytes&) = delete;

    const uint8_t* data() const { return data_; }
    int64_t size() const { return size_; }
    weight_pages mode() const { return mode_; }
    // Bytes of the copy the kernel backs with huge pages (AnonHugePages of its range in
    // /proc/self/smaps); 0 for a mapping or where THP is off.
    int64_t huge_page_bytes() const;

private:
    file_bytes() = default;

    const uint8_t* data_ = nullptr;
    const uint8_t* base_ = nullptr;  // the mapping, or a copy's first page (data_ up to 63 bytes in)
    int64_t size_ = 0;
    // What munmap takes at base_: the mapping's size, or the copy's whole huge pages; 0 for an
    // empty file (data_ then points at a static byte).
    int64_t mapped_bytes_ = 0;
    weight_pages mode_ = weight_pages::mapped;
};

}  // namespace tandem::model
