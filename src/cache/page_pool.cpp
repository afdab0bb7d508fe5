// cache/page_pool.cpp — Arena, free lists, epochs, quarantine and per-sequence row addressing.
#include "cache/page_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>

#include <fmt/format.h>
#include <xxhash.h>

#include "core/check.h"

namespace tandem::cache {

// ------------------------------------------------------------------------------------------------
// Budget split

result<pool_split> plan_pool_split(const layout_spec& layout, const pool_options& opt) {
    if (opt.memory_bytes <= 0) {
        return make_error(error_code::invalid_argument,
                          "cache.memory_bytes: the cache budget must be positive");
    }
    if (opt.max_sequences < 0) {
        return make_error(error_code::invalid_argument, "cache.max_sequences: must be >= 0");
    }
    // Measure with a zero-sized geometry so alignment of every region is accounted for.
    const int64_t per_slot = pool_geometry(layout, 0, 1).slot_stride();
    const int64_t per_page = layout.page_group_bytes();
    const int64_t align_slack = pool_geometry::k_region_alignment *
                                static_cast<int64_t>(layout.buffers().size() + 1);
    const int64_t usable = opt.memory_bytes - align_slack;
    pool_split s;
    if (opt.max_sequences > 0) {
        s.num_slots = opt.max_sequences;
    } else {
        constexpr int64_t k_auto_slot_share = 8;  // slots take at most 1/8 of the budget
        constexpr int64_t k_auto_slot_max = 1024;
        s.num_slots = std::clamp<int64_t>(usable / k_auto_slot_share / std::max<int64_t>(per_slot, 1),
                                          1, k_auto_slot_max);
        // Never so many slots that fewer than one page per slot remains.
        while (s.num_slots > 1 && usable - s.num_slots * per_slot < s.num_slots * per_page) {
            --s.num_slots;
        }
    }
    const int64_t for_pages = usable - s.num_slots * per_slot;
    s.num_pages = per_page > 0 ? std::max<int64_t>(for_pages / per_page, 0) : 0;
    s.tokens = s.num_pages * layout.page_size();
    if (for_pages < 0 || (per_page > 0 && s.num_pages < 1)) {
        return make_error(error_code::out_of_range,
                          fmt::format("cache.memory_bytes: {} B cannot hold {} sequence slot(s) of "
                                      "{} B and one page of {} B",
                                      opt.memory_bytes, s.num_slots, per_slot, per_page));
    }
    if (s.num_pages > std::numeric_limits<int32_t>::max() ||
        s.num_slots > std::numeric_limits<int32_t>::max()) {
        return make_error(error_code::out_of_range, "cache.memory_bytes: too many pages for int32 ids");
    }
    return s;
}

// ------------------------------------------------------------------------------------------------
// Creation

result<std::unique_ptr<page_pool>> page_pool::create(const layout_spec& layout,
                                                     const pool_options& opt) {
    auto split = plan_pool_split(layout, opt);
    if (!split.is_ok()) return split.error();
    const int64_t bytes = pool_geometry(layout, split->num_pages, split->num_slots).total_bytes();
    // mmap: zero-filled, committed lazily page by page, and aligned for any region alignment.
    void* p = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        return make_error(error_code::io_error,
                          fmt::format("cache pool: cannot map {} bytes", bytes));
    }
    return std::unique_ptr<page_pool>(
        new page_pool(layout, *split, static_cast<std::byte*>(p), bytes));
}

result<std::unique_ptr<page_pool>> page_pool::create_external(const layout_spec& layout,
                                                              const pool_options& opt,
                                                              external_arena arena) {
    auto split = plan_pool_split(layout, opt);
    if (!split.is_ok()) return split.error();
    const int64_t bytes = pool_geometry(layout, split->num_pages, split->num_slots).total_bytes();
    if (arena.base == nullptr || !arena.write)
        return make_error(error_code::invalid_argument, "cache pool: an external arena needs a base and a writer");
    if (arena.bytes < bytes)
        return make_error(error_code::out_of_range,
                          fmt::format("cache pool: the external arena has {} bytes, the layout needs {}",
                                      arena.bytes, bytes));
    std::unique_ptr<page_pool> p(new page_pool(layout, *split, arena.base, bytes));
    p->external_ = std::move(arena);
    return p;
}

namespace {
std::atomic<uint64_t> next_pool_id{1};
}  // namespace

page_pool::page_pool(const layout_spec& layout, const pool_split& split, std::byte* arena,
                     int64_t bytes)
    : layout_(layout),
      geometry_(layout_, split.num_pages, split.num_slots),
      arena_(arena),
      arena_bytes_(bytes),
      id_(next_pool_id.fetch_add(1)),
      pages_(static_cast<size_t>(split.num_pages)),
      slots_(static_cast<size_t>(split.num_slots)) {
    // Stacks popped from the back: page 0 and slot 0 are handed out first.
    free_pages_.reserve(pages_.size());
    for (int64_t i = split.num_pages - 1; i >= 0; --i) free_pages_.push_back(static_cast<int32_t>(i));
    free_slots_.reserve(slots_.size());
    for (int64_t i = split.num_slots - 1; i >= 0; --i) free_slots_.push_back(static_cast<int32_t>(i));
    const int64_t max_pages_per_seq =
        (split.tokens + layout_.page_size() - 1) / std::max<int64_t>(layout_.page_size(), 1);
    for (slot_meta& s : slots_) s.pages.reserve(static_cast<size_t>(std::min<int64_t>(max_pages_per_seq, 4096)));
}

status page_pool::read_bytes(std::byte* host_dst, const std::byte* pool_src, int64_t n) const {
    TANDEM_CHECK(n >= 0 && pool_src >= arena_ && pool_src + n <= arena_ + arena_bytes_);
    if (n == 0) return status::ok();
    if (!external_.write) {
        std::memcpy(host_dst, pool_src, static_cast<size_t>(n));
        return status::ok();
    }
    if (!external_.read)
        return make_error(error_code::internal, "cache pool: this external arena has no reader (cannot copy its bytes to the host)");
    return external_.read(host_dst, pool_src, n);
}

status page_pool::write_bytes(std::byte* pool_dst, const std::byte* host_src, int64_t n) const {
    TANDEM_CHECK(n >= 0 && pool_dst >= arena_ && pool_dst + n <= arena_ + arena_bytes_);
    if (n == 0) return status::ok();
    if (!external_.write) {
        std::memcpy(pool_dst, host_src, static_cast<size_t>(n));
        return status::ok();
    }
    return external_.write(pool_dst, host_src, n);
}

result<uint64_t> page_pool::checksum_bytes(const std::byte* pool_src, int64_t n) const {
    TANDEM_CHECK(n >= 0 && pool_src >= arena_ && pool_src + n <= arena_ + arena_bytes_);
    if (!external_.write) return XXH3_64bits(pool_src, static_cast<size_t>(n));
    if (external_.checksum) return external_.checksum(pool_src, n);
    std::vector<std::byte> host(static_cast<size_t>(n));
    TANDEM_RETURN_IF_ERROR(read_bytes(host.data(), pool_src, n));
    return XXH3_64bits(host.data(), host.size());
}

bool page_pool::can_copy_from(const page_pool& src) const {
    return external_.write && src.external_.write && external_.copy && external_.space != 0 &&
           external_.space == src.external_.space;
}

status page_pool::copy_from(std::byte* pool_dst, const page_pool& src, const std::byte* src_ptr,
                            int64_t n) const {
    TANDEM_CHECK(n >= 0 && pool_dst >= arena_ && pool_dst + n <= arena_ + arena_bytes_);
    TANDEM_CHECK(src_ptr >= src.arena_ && src_ptr + n <= src.arena_ + src.arena_bytes_);
    if (!can_copy_from(src))
        return make_error(error_code::internal, "cache pool: the source arena is not in this arena's device space");
    if (n == 0) return status::ok();
    return external_.copy(pool_dst, src_ptr, n);
}

page_pool::~page_pool() {
    if (!external_.write) ::munmap(arena_, static_cast<size_t>(arena_bytes_));
}

pool_stats page_pool::stats() const {
    pool_stats s;
    s.pages_total = static_cast<int64_t>(pages_.size());
    s.pages_free = static_cast<int64_t>(free_pages_.size());
    s.pages_quarantined = static_cast<int64_t>(quarantined_pages_.size());
    s.slots_total = static_cast<int64_t>(slots_.size());
    s.slots_free = static_cast<int64_t>(free_slots_.size());
    s.stale_writes_rejected = stale_writes_.load(std::memory_order_relaxed);
    s.leases_expired = leases_expired_;
    return s;
}

// ------------------------------------------------------------------------------------------------
// Pages

page_ref page_pool::alloc_page(owner_id owner) {
    if (free_pages_.empty()) return {};
    const int32_t p = free_pages_.back();
    free_pages_.pop_back();
    page_meta& m = pages_[p];
    TANDEM_CHECK(m.state == page_state::free && m.refcount == 0);
    ++m.epoch;  // every reuse gets a new epoch: writes naming an older one are rejected
    m.state = page_state::allocated;
    m.refcount = 1;
    m.owner = owner;
    return {p, m.epoch};
}

void page_pool::retain_page(page_ref ref) {
    page_meta& m = pages_[ref.page];
    TANDEM_CHECK_MSG(m.epoch == ref.epoch && (m.state == page_state::allocated ||
                                              m.state == page_state::sealed),
                     "retain of a page that is not live");
    ++m.refcount;
}

void page_pool::release_page(page_ref ref) {
    page_meta& m = pages_[ref.page];
    TANDEM_CHECK_MSG(m.epoch == ref.epoch && m.refcount > 0 &&
                         (m.state == page_state::allocated || m.state == page_state::sealed),
                     "release of a page that is not live");
    if (--m.refcount == 0) free_page_now(ref.page);
}

void page_pool::seal_page(page_ref ref) {
    page_meta& m = pages_[ref.page];
    TANDEM_CHECK(m.epoch == ref.epoch && m.state == page_state::allocated);
    m.state = page_state::sealed;
}

void page_pool::quarantine_page(page_ref ref, owner_id writer, int64_t lease_deadline_ns) {
    page_meta& m = pages_[ref.page];
    TANDEM_CHECK_MSG(m.epoch == ref.epoch && m.state == page_state::allocated && m.refcount == 1,
                     "only an unshared, unsealed page can be quarantined");
    m.state = page_state::quarantined;
    m.refcount = 0;
    m.owner = writer;
    m.lease_deadline_ns = lease_deadline_ns;
    quarantined_pages_.push_back(ref.page);
}

void page_pool::free_page_now(int32_t page) {
    page_meta& m = pages_[page];
    m.state = page_state::free;
    m.refcount = 0;
    m.owner = 0;
    free_pages_.push_back(page);
}

int64_t page_pool::release_quarantine(owner_id writer) {
    int64_t n = 0;
    std::erase_if(quarantined_pages_, [&](int32_t p) {
        if (pages_[p].owner != writer) return false;
        free_page_now(p);
        ++n;
        return true;
    });
    std::erase_if(quarantined_slots_, [&](int32_t s) {
        if (slots_[s].owner != writer) return false;
        free_slot_now(s);
        ++n;
        return true;
    });
    return n;
}

int64_t page_pool::expire_leases(int64_t now_ns) {
    int64_t n = 0;
    std::erase_if(quarantined_pages_, [&](int32_t p) {
        if (pages_[p].lease_deadline_ns > now_ns) return false;
        free_page_now(p);
        ++n;
        return true;
    });
    std::erase_if(quarantined_slots_, [&](int32_t s) {
        if (slots_[s].lease_deadline_ns > now_ns) return false;
        free_slot_now(s);
        ++n;
        return true;
    });
    leases_expired_ += n;
    return n;
}

bool page_pool::page_writable(page_ref ref) const {
    if (ref.page < 0 || ref.page >= static_cast<int32_t>(pages_.size())) return false;
    const page_meta& m = pages_[ref.page];
    return m.state == page_state::allocated && m.epoch == ref.epoch;
}

std::byte* page_pool::page_bytes_for_write(page_ref ref, int32_t buffer_idx) {
    if (!page_writable(ref)) {
        stale_writes_.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
    }
    return arena_ + geometry_.page_offset(buffer_idx, ref.page);
}

const std::byte* page_pool::page_bytes(int32_t page, int32_t buffer_idx) const {
    return arena_ + geometry_.page_offset(buffer_idx, page);
}

// ------------------------------------------------------------------------------------------------
// Sequences

slot_ref page_pool::alloc_sequence(owner_id owner) {
    if (free_slots_.empty()) return {};
    const int32_t s = free_slots_.back();
    free_slots_.pop_back();
    slot_meta& m = slots_[s];
    TANDEM_CHECK(m.state == page_state::free && m.pages.empty());
    ++m.epoch;
    m.state = page_state::allocated;
    m.owner = owner;
    return {s, m.epoch};
}

bool page_pool::slot_current(slot_ref s) const {
    if (s.slot < 0 || s.slot >= static_cast<int32_t>(slots_.size())) return false;
    const slot_meta& m = slots_[s.slot];
    return m.state == page_state::allocated && m.epoch == s.epoch;
}

bool page_pool::is_current(slot_ref s) const { return slot_current(s); }

owner_id page_pool::sequence_owner(slot_ref s) const {
    TANDEM_CHECK(slot_current(s));
    return slots_[s.slot].owner;
}

void page_pool::free_slot_now(int32_t slot) {
    slot_meta& m = slots_[slot];
    m.state = page_state::free;
    m.owner = 0;
    m.pages.clear();
    free_slots_.push_back(slot);
}

void page_pool::free_sequence(slot_ref s) {
    TANDEM_CHECK_MSG(slot_current(s), "free of a stale sequence slot");
    for (const page_ref& p : slots_[s.slot].pages) release_page(p);
    free_slot_now(s.slot);
}

void page_pool::abort_sequence(slot_ref s, owner_id writer, int64_t lease_deadline_ns) {
    TANDEM_CHECK_MSG(slot_current(s), "abort of a stale sequence slot");
    slot_meta& m = slots_[s.slot];
    for (const page_ref& p : m.pages) {
        const page_meta& pm = pages_[p.page];
        if (pm.state == page_state::allocated && pm.refcount == 1) {
            quarantine_page(p, writer, lease_deadline_ns);
        } else {
            release_page(p);  // sealed or shared: nobody writes it any more
        }
    }
    m.pages.clear();
    m.state = page_state::quarantined;
    m.owner = writer;
    m.lease_deadline_ns = lease_deadline_ns;
    quarantined_slots_.push_back(s.slot);
}

void page_pool::append_page(slot_ref s, page_ref ref) {
    TANDEM_CHECK(slot_current(s));
    const page_meta& m = pages_[ref.page];
    TANDEM_CHECK(m.epoch == ref.epoch && m.refcount > 0);
    slots_[s.slot].pages.push_back(ref);
}

bool page_pool::ensure_capacity(slot_ref s, int64_t tokens) {
    TANDEM_CHECK(slot_current(s));
    slot_meta& m = slots_[s.slot];
    const int64_t need = (tokens + layout_.page_size() - 1) / layout_.page_size();
    const int64_t missing = need - static_cast<int64_t>(m.pages.size());
    if (missing <= 0) return true;
    if (!can_alloc_pages(missing)) return false;
    for (int64_t i = 0; i < missing; ++i) m.pages.push_back(alloc_page(m.owner));
    return true;
}

std::span<const page_ref> page_pool::page_table(slot_ref s) const {
    TANDEM_CHECK(slot_current(s));
    return slots_[s.slot].pages;
}

const page_ref* page_pool::page_for_row(slot_ref s, int32_t buffer_idx, int64_t row_index,
                                        int64_t* row_in_page) const {
    TANDEM_CHECK_MSG(buffer_idx >= 0, "layer has no such history buffer");
    const buffer_layout& b = layout_.buffers()[buffer_idx];
    TANDEM_CHECK(row_index >= 0);
    const int64_t page_index = row_index / b.rows_per_page;
    *row_in_page = row_index % b.rows_per_page;
    const std::vector<page_ref>& table = slots_[s.slot].pages;
    TANDEM_CHECK_MSG(page_index < static_cast<int64_t>(table.size()),
                     "row beyond the sequence's page table");
    return &table[static_cast<size_t>(page_index)];
}

const std::byte* page_pool::row(slot_ref s, int32_t layer, buffer_kind kind,
                                int64_t row_index) const {
    TANDEM_CHECK(slot_current(s));
    const int32_t bi = layout_.buffer_index(layer, kind);
    int64_t r = 0;
    const page_ref* p = page_for_row(s, bi, row_index, &r);
    return arena_ + geometry_.row_offset(bi, p->page, r);
}

std::byte* page_pool::row_for_write(slot_ref s, int32_t layer, buffer_kind kind,
                                    int64_t row_index) {
    if (!slot_current(s)) {
        stale_writes_.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
    }
    const int32_t bi = layout_.buffer_index(layer, kind);
    int64_t r = 0;
    const page_ref* p = page_for_row(s, bi, row_index, &r);
    if (!page_writable(*p)) {
        stale_writes_.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
    }
    return arena_ + geometry_.row_offset(bi, p->page, r);
}

const std::byte* page_pool::window_row(slot_ref s, int32_t layer, int64_t pos) const {
    TANDEM_CHECK(slot_current(s) && pos >= 0);
    const int32_t si = layout_.state_index(layer, state_kind::window);
    TANDEM_CHECK(si >= 0);
    const state_layout& st = layout_.states()[si];
    return arena_ + geometry_.state_offset(si, s.slot) + (pos % st.rows) * st.bytes_per_row;
}

std::byte* page_pool::window_row_for_write(slot_ref s, int32_t layer, int64_t pos) {
    if (!slot_current(s)) {
        stale_writes_.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
    }
    return const_cast<std::byte*>(window_row(s, layer, pos));
}

const float* page_pool::compressor_state(slot_ref s, int32_t layer, state_kind kind) const {
    TANDEM_CHECK(slot_current(s) && kind != state_kind::window);
    const int32_t si = layout_.state_index(layer, kind);
    TANDEM_CHECK_MSG(si >= 0, "layer has no such compressor");
    return reinterpret_cast<const float*>(arena_ + geometry_.state_offset(si, s.slot));
}

float* page_pool::compressor_state_for_write(slot_ref s, int32_t layer, state_kind kind) {
    if (!slot_current(s)) {
        stale_writes_.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
    }
    return const_cast<float*>(compressor_state(s, layer, kind));
}

void page_pool::reset_sequence_state(slot_ref s) {
    TANDEM_CHECK(slot_current(s));
    std::vector<std::byte> host;  // an external arena's state is built here, then written
    for (size_t i = 0; i < layout_.states().size(); ++i) {
        const state_layout& st = layout_.states()[i];
        std::byte* dst = arena_ + geometry_.state_offset(static_cast<int32_t>(i), s.slot);
        std::byte* base = dst;
        if (external_.write) {
            host.assign(static_cast<size_t>(st.bytes), std::byte{0});
            base = host.data();
        }
        std::memset(base, 0, static_cast<size_t>(st.bytes));
        if (st.kind != state_kind::window) {
            // Each ring row is [kv (half) | score (half)]: scores start at -inf (weight 0).
            const int64_t half = st.floats_per_row / 2;
            float* f = reinterpret_cast<float*>(base);
            for (int64_t r = 0; r < st.rows; ++r) {
                std::fill_n(f + r * st.floats_per_row + half, half,
                            -std::numeric_limits<float>::infinity());
            }
        }
        if (external_.write) {
            const status st_w = external_.write(dst, base, st.bytes);
            TANDEM_CHECK_MSG(st_w.is_ok(), "writing a sequence's initial state into the external arena failed");
        }
    }
}

std::byte* page_pool::slot_bytes_for_write(slot_ref s) {
    if (!slot_current(s)) {
        stale_writes_.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
    }
    return arena_ + geometry_.slot_offset(s.slot);
}

const std::byte* page_pool::slot_bytes(int32_t slot) const {
    return arena_ + geometry_.slot_offset(slot);
}

// ------------------------------------------------------------------------------------------------

void page_pool::check_integrity() const {
    std::vector<int32_t> refs(pages_.size(), 0);
    std::vector<uint8_t> on_free(pages_.size(), 0);
    for (int32_t p : free_pages_) {
        TANDEM_CHECK_MSG(!on_free[p], "page twice on the free list");
        on_free[p] = 1;
        TANDEM_CHECK(pages_[p].state == page_state::free && pages_[p].refcount == 0);
    }
    int64_t quarantined = 0;
    for (size_t p = 0; p < pages_.size(); ++p) {
        const page_meta& m = pages_[p];
        if (m.state == page_state::free) TANDEM_CHECK_MSG(on_free[p], "free page not on the list");
        if (m.state == page_state::quarantined) ++quarantined;
        if (m.state == page_state::allocated || m.state == page_state::sealed) {
            TANDEM_CHECK_MSG(m.refcount > 0, "live page without references");
        }
    }
    TANDEM_CHECK(quarantined == static_cast<int64_t>(quarantined_pages_.size()));
    int64_t free_slots = 0;
    for (const slot_meta& s : slots_) {
        if (s.state == page_state::free) ++free_slots;
        if (s.state != page_state::allocated) TANDEM_CHECK(s.pages.empty());
        for (const page_ref& r : s.pages) {
            TANDEM_CHECK_MSG(pages_[r.page].epoch == r.epoch, "page table names a stale epoch");
            ++refs[r.page];
        }
    }
    TANDEM_CHECK(free_slots == static_cast<int64_t>(free_slots_.size()));
    // A page's refcount covers every page table holding it (others: e.g. the prefix tree).
    for (size_t p = 0; p < pages_.size(); ++p) TANDEM_CHECK(refs[p] <= pages_[p].refcount);
}

}  // namespace tandem::cache
