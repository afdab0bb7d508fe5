// cache/transfer.cpp — Transfer descriptors, checksums, the reference executor, the host mirror.
#include "cache/transfer.h"

#include <sys/mman.h>

#include <cstring>

#include <fmt/format.h>
#include <xxhash.h>

#include "core/check.h"

namespace tandem::cache {

transfer_plan plan_transfer(const pool_geometry& src, const pool_geometry& dst,
                            std::span<const page_move> pages, int64_t tokens, int64_t src_slot,
                            slot_ref dst_slot) {
    const layout_spec& l = src.layout();
    TANDEM_CHECK_MSG(l.fingerprint() == dst.layout().fingerprint(),
                     "transfer between arenas of different layouts");
    const int64_t page_size = l.page_size();
    TANDEM_CHECK(tokens >= 0 && tokens <= static_cast<int64_t>(pages.size()) * page_size);
    transfer_plan plan;
    for (const layer_layout& ly : l.layers()) {
        for (int32_t bi : ly.buffers) {
            const buffer_layout& b = l.buffers()[bi];
            for (size_t i = 0; i < pages.size(); ++i) {
                const int64_t in_page = std::min(tokens - static_cast<int64_t>(i) * page_size, page_size);
                const int64_t rows = in_page / b.ratio;  // only complete rows exist
                if (rows <= 0) continue;
                transfer_span s;
                s.layer = ly.layer;
                s.kind = span_kind::history;
                s.index = bi;
                s.src_offset = src.page_offset(bi, pages[i].src_page);
                s.dst_offset = dst.page_offset(bi, pages[i].dst.page);
                s.bytes = rows * b.row.bytes;
                s.dst_page = pages[i].dst;
                s.what = buffer_kind_name(b.kind);
                plan.total_bytes += s.bytes;
                plan.spans.push_back(s);
            }
        }
        if (src_slot >= 0) {
            for (int32_t si : ly.states) {
                transfer_span s;
                s.layer = ly.layer;
                s.kind = span_kind::state;
                s.index = si;
                s.src_offset = src.state_offset(si, src_slot);
                s.dst_offset = dst.state_offset(si, dst_slot.slot);
                s.bytes = l.states()[si].bytes;
                s.dst_slot = dst_slot;
                s.what = state_kind_name(l.states()[si].kind);
                plan.total_bytes += s.bytes;
                plan.spans.push_back(s);
            }
        }
        plan.layer_end.push_back(static_cast<int32_t>(plan.spans.size()));
    }
    return plan;
}

std::vector<uint64_t> checksum_spans(const transfer_plan& plan, const std::byte* src_arena) {
    std::vector<uint64_t> out;
    out.reserve(plan.spans.size());
    for (const transfer_span& s : plan.spans) {
        out.push_back(XXH3_64bits(src_arena + s.src_offset, static_cast<size_t>(s.bytes)));
    }
    return out;
}

status verify_spans(const transfer_plan& plan, const std::byte* dst_arena,
                    std::span<const uint64_t> checksums) {
    TANDEM_CHECK(checksums.size() == plan.spans.size());
    for (size_t i = 0; i < plan.spans.size(); ++i) {
        const transfer_span& s = plan.spans[i];
        if (XXH3_64bits(dst_arena + s.dst_offset, static_cast<size_t>(s.bytes)) != checksums[i]) {
            return make_error(error_code::data_loss,
                              fmt::format("checksum mismatch in layer {} {} (span {}, {} bytes)",
                                          s.layer, s.what, i, s.bytes));
        }
    }
    return status::ok();
}

void execute_transfer(const transfer_plan& plan, const std::byte* src_arena, std::byte* dst_arena) {
    for (const transfer_span& s : plan.spans) {
        std::memcpy(dst_arena + s.dst_offset, src_arena + s.src_offset, static_cast<size_t>(s.bytes));
    }
}

status execute_transfer_into_pool(const transfer_plan& plan, const std::byte* src_arena,
                                  page_pool& dst) {
    // Check every destination before touching any byte: a transfer lands whole or not at all.
    int64_t stale = 0;
    for (const transfer_span& s : plan.spans) {
        const bool ok = s.kind == span_kind::history
                            ? dst.page_bytes_for_write(s.dst_page, s.index) != nullptr
                            : dst.slot_bytes_for_write(s.dst_slot) != nullptr;
        if (!ok) ++stale;
    }
    if (stale > 0) {
        return make_error(error_code::unavailable,
                          fmt::format("transfer rejected: {} span(s) name a stale page or slot",
                                      stale));
    }
    execute_transfer(plan, src_arena, dst.arena());
    return status::ok();
}

// ------------------------------------------------------------------------------------------------

result<std::unique_ptr<host_mirror>> host_mirror::create(const layout_spec& layout,
                                                         int64_t num_pages, int64_t num_slots) {
    if (num_pages < 0 || num_slots < 0) {
        return make_error(error_code::invalid_argument, "host mirror: negative size");
    }
    const int64_t bytes = pool_geometry(layout, num_pages, num_slots).total_bytes();
    void* p = ::mmap(nullptr, static_cast<size_t>(std::max<int64_t>(bytes, 1)),
                     PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        return make_error(error_code::io_error, fmt::format("host mirror: cannot map {} bytes", bytes));
    }
    return std::unique_ptr<host_mirror>(
        new host_mirror(layout, num_pages, num_slots, static_cast<std::byte*>(p), bytes));
}

host_mirror::host_mirror(const layout_spec& layout, int64_t pages, int64_t slots,
                         std::byte* arena, int64_t bytes)
    : layout_(layout), geometry_(layout_, pages, slots), arena_(arena), bytes_(bytes),
      used_(static_cast<size_t>(pages), 0) {
    for (int64_t i = pages - 1; i >= 0; --i) free_.push_back(i);
}

host_mirror::~host_mirror() { ::munmap(arena_, static_cast<size_t>(std::max<int64_t>(bytes_, 1))); }

int64_t host_mirror::alloc_page() {
    if (free_.empty()) return -1;
    const int64_t p = free_.back();
    free_.pop_back();
    used_[static_cast<size_t>(p)] = 1;
    return p;
}

void host_mirror::free_page(int64_t page) {
    TANDEM_CHECK_MSG(used_[static_cast<size_t>(page)], "free of a free host page");
    used_[static_cast<size_t>(page)] = 0;
    free_.push_back(page);
}

}  // namespace tandem::cache
