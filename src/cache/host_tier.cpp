// cache/host_tier.cpp — host arena, host page ids and the copy thread (see the header).
#include "cache/host_tier.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "core/check.h"
#include "core/liveness.h"
#include "core/log.h"

namespace tandem::cache {

namespace {

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

}  // namespace

int64_t host_tier_pages(const layout_spec& layout, int64_t memory_bytes) {
    // Alignment padding per buffer region is bounded by the number of buffers.
    const int64_t slack =
        static_cast<int64_t>(layout.buffers().size()) * pool_geometry::k_region_alignment;
    return std::max<int64_t>(0, (memory_bytes - slack) / std::max<int64_t>(layout.page_group_bytes(), 1));
}

result<std::unique_ptr<host_tier>> host_tier::create(page_pool& pool, host_tier_options opt) {
    const int64_t pages = host_tier_pages(pool.layout(), opt.memory_bytes);
    if (pages < 1) {
        return make_error(error_code::out_of_range,
                          fmt::format("cache.host_memory_bytes: {} B cannot hold one page of "
                                      "history ({} B per page with this layout)",
                                      opt.memory_bytes, pool.layout().page_group_bytes()));
    }
    if (pages > INT32_MAX) {
        return make_error(error_code::out_of_range,
                          fmt::format("cache.host_memory_bytes: {} B is more than 2^31 pages",
                                      opt.memory_bytes));
    }
    return std::unique_ptr<host_tier>(new host_tier(pool, std::move(opt), pages));
}

host_tier::host_tier(page_pool& pool, host_tier_options opt, int64_t num_pages)
    : pool_(pool),
      opt_(std::move(opt)),
      geometry_(pool.layout(), num_pages, 0),
      arena_(new std::byte[static_cast<size_t>(geometry_.total_bytes())]),
      present_(new std::atomic<uint8_t>[static_cast<size_t>(num_pages)]),
      load_seconds_(histogram::latency_seconds_bounds()) {
    free_.reserve(static_cast<size_t>(num_pages));
    for (int64_t p = num_pages - 1; p >= 0; --p) {
        free_.push_back(static_cast<int32_t>(p));
        present_[static_cast<size_t>(p)].store(0);
    }
    thread_ = std::thread([this] { run(); });
}

host_tier::~host_tier() {
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

int32_t host_tier::alloc_page() {
    if (free_.empty()) return -1;
    const int32_t p = free_.back();
    free_.pop_back();
    present_[static_cast<size_t>(p)].store(0, std::memory_order_relaxed);
    used_.fetch_add(1, std::memory_order_relaxed);
    return p;
}

void host_tier::free_page(int32_t host_page) {
    TANDEM_CHECK_MSG(present(host_page), "freeing a host page whose store has not landed");
    present_[static_cast<size_t>(host_page)].store(0, std::memory_order_relaxed);
    free_.push_back(host_page);
    used_.fetch_sub(1, std::memory_order_relaxed);
}

bool host_tier::present(int32_t host_page) const {
    TANDEM_CHECK(host_page >= 0 && host_page < geometry_.num_pages());
    return present_[static_cast<size_t>(host_page)].load(std::memory_order_acquire) != 0;
}

std::byte* host_tier::host_bytes(int32_t buffer_idx, int32_t host_page) const {
    return arena_.get() + geometry_.page_offset(buffer_idx, host_page);
}

void host_tier::store(page_ref device, int32_t host_page) {
    TANDEM_CHECK(pool_.state_of(device.page) == page_state::sealed &&
                 pool_.epoch_of(device.page) == device.epoch);
    {
        std::lock_guard lock(mu_);
        job j;
        j.device = device;
        j.host_page = host_page;
        queue_.push_back(std::move(j));
    }
    if (opt_.beat) opt_.beat->set_pending(true);
    cv_.notify_one();
}

load_plan host_tier::plan_load(std::span<const page_load> pages, slot_ref slot,
                               const boundary_snapshot* snap) {
    const layout_spec& layout = pool_.layout();
    load_plan plan;
    plan.per_layer.resize(layout.layers().size());
    plan.buffers_per_layer.resize(layout.layers().size());
    plan.states_per_layer.resize(layout.layers().size());
    // Copies in ascending destination order: freed pages come back off the pool's stack in
    // reverse, and a backwards walk through memory costs a fifth of the copy bandwidth.
    std::vector<page_load> by_dst(pages.begin(), pages.end());
    std::sort(by_dst.begin(), by_dst.end(),
              [](const page_load& a, const page_load& b) { return a.device.page < b.device.page; });
    for (const layer_layout& ly : layout.layers()) {
        auto& copies = plan.per_layer[static_cast<size_t>(ly.layer)];
        for (int32_t bi : ly.buffers) {
            plan.buffers_per_layer[static_cast<size_t>(ly.layer)].push_back(bi);
            const buffer_layout& bl = layout.buffers()[static_cast<size_t>(bi)];
            for (const page_load& pl : by_dst) {
                std::byte* dst = pool_.page_bytes_for_write(pl.device, bi);
                TANDEM_CHECK_MSG(dst != nullptr, "host-tier load into a page the loader does not own");
                copies.push_back({dst, host_bytes(bi, pl.host_page), bl.bytes_per_page,
                                  buffer_kind_name(bl.kind), pl.device, slot_ref{}});
            }
        }
        for (int32_t si : ly.states) {
            plan.states_per_layer[static_cast<size_t>(ly.layer)].push_back(si);
            if (snap == nullptr) continue;
            const char* kind = state_kind_name(layout.states()[static_cast<size_t>(si)].kind);
            for_each_restore_copy(pool_, slot, *snap, si,
                                  [&](std::byte* dst, const std::byte* src, int64_t bytes) {
                                      copies.push_back({dst, src, bytes, kind, page_ref{}, slot});
                                  });
        }
    }
    return plan;
}

std::shared_ptr<load_ticket> host_tier::load(std::span<const page_load> pages, slot_ref slot,
                                             std::shared_ptr<const boundary_snapshot> snap) {
    job j;
    {
        std::lock_guard lock(mu_);
        j.hooks = opt_.hooks;
    }
    j.plan = plan_load(pages, slot, snap.get());
    j.snap = std::move(snap);
    j.pages = static_cast<int64_t>(pages.size());
    j.ticket = std::make_shared<load_ticket>(static_cast<int32_t>(pool_.layout().num_layers()),
                                             j.hooks.skip_gate);
    j.ticket->created_ns = now_ns();
    if (j.hooks.sentinel) {
        std::vector<std::byte> sentinel;
        for (size_t l = 0; l < j.plan.per_layer.size(); ++l) {
            for (const load_plan::copy& c : j.plan.per_layer[l]) {
                sentinel.assign(static_cast<size_t>(c.bytes), k_load_sentinel);
                TANDEM_CHECK_MSG(pool_.write_bytes(c.dst, sentinel.data(), c.bytes).is_ok(),
                                 "host tier: writing the load sentinel into the pool failed");
                j.ticket->add_destination(
                    {static_cast<int32_t>(l), c.kind, c.dst, c.bytes, c.page, c.slot});
            }
        }
    }
    std::shared_ptr<load_ticket> ticket = j.ticket;
    {
        std::lock_guard lock(mu_);
        queue_.push_back(std::move(j));
    }
    if (opt_.beat) opt_.beat->set_pending(true);
    cv_.notify_one();
    return ticket;
}

void host_tier::drain() {
    std::unique_lock lock(mu_);
    idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

host_tier_stats host_tier::stats() const {
    host_tier_stats s;
    s.pages_total = geometry_.num_pages();
    s.bytes_total = s.pages_total * pool_.layout().page_group_bytes();
    s.pages_used = used_.load(std::memory_order_relaxed);
    s.bytes_used = s.pages_used * pool_.layout().page_group_bytes();
    s.stores = stores_.load(std::memory_order_relaxed);
    s.loaded_pages = loaded_pages_.load(std::memory_order_relaxed);
    s.loads = loads_.load(std::memory_order_relaxed);
    return s;
}

// ---- The copy thread --------------------------------------------------------------------------

void host_tier::run() {
    std::unique_lock lock(mu_);
    for (;;) {
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) break;  // stopping, and everything queued ran
        job j = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
        lock.unlock();
        if (j.ticket) run_load(j);
        else run_store(j);
        if (opt_.beat) opt_.beat->beat();
        lock.lock();
        busy_ = false;
        if (queue_.empty()) {
            if (opt_.beat) opt_.beat->set_pending(false);
            idle_cv_.notify_all();
        }
    }
    idle_cv_.notify_all();
}

void host_tier::run_store(const job& j) {
    const layout_spec& layout = pool_.layout();
    for (size_t bi = 0; bi < layout.buffers().size(); ++bi) {
        const int32_t b = static_cast<int32_t>(bi);
        // Through the pool (d2h on a device arena). A failed read means a broken device; a host
        // page must never turn present with bytes that did not land, so it is fatal here.
        const status st = pool_.read_bytes(host_bytes(b, j.host_page), pool_.page_bytes(j.device.page, b),
                                           layout.buffers()[bi].bytes_per_page);
        TANDEM_CHECK_MSG(st.is_ok(), "host tier: reading a pool page back to the host failed");
    }
    present_[static_cast<size_t>(j.host_page)].store(1, std::memory_order_release);
    stores_.fetch_add(1, std::memory_order_relaxed);
}

void host_tier::set_test_hooks(host_tier_test_hooks hooks) {
    std::lock_guard lock(mu_);
    opt_.hooks = std::move(hooks);
}

host_tier_test_hooks host_tier::test_hooks() const {
    std::lock_guard lock(mu_);
    return opt_.hooks;
}

// A cancelled load wakes from its delay at once (false: stop copying).
bool host_tier::delay_for(const host_tier_test_hooks& h, load_ticket& t, const char* kind,
                          int32_t layer) {
    if (h.delay_ms <= 0) return true;
    if (!h.delay_kind.empty() && h.delay_kind != kind) return true;
    if (h.delay_layer >= 0 && h.delay_layer != layer) return true;
    return t.pause(h.delay_ms);
}

void host_tier::run_load(job& j) {
    load_ticket& t = *j.ticket;
    for (int32_t l = 0; l < t.num_layers(); ++l) {
        if (!t.begin_layer(l)) return;  // cancelled: the destinations are no longer ours
        const char* last_kind = nullptr;
        for (const load_plan::copy& c : j.plan.per_layer[static_cast<size_t>(l)]) {
            if (last_kind == nullptr || std::strcmp(last_kind, c.kind) != 0) {
                if (!delay_for(j.hooks, t, c.kind, l)) {
                    t.abandon_layer();
                    return;
                }
            }
            last_kind = c.kind;
            // Through the pool: on a device arena this is the h2d copy, complete (ordered before
            // the forward's kernels) when it returns, so end_layer below is a true "landed".
            if (status st = pool_.write_bytes(c.dst, c.src, c.bytes); !st.is_ok()) {
                t.fail("host tier: loading layer " + std::to_string(l) + " " + c.kind +
                       " into the pool failed: " + st.message());
                return;
            }
        }
        if (l + 1 == t.num_layers()) {  // counted before the last signal: a waiter sees them
            load_seconds_.observe(static_cast<double>(now_ns() - t.created_ns) * 1e-9);
            loaded_pages_.fetch_add(j.pages, std::memory_order_relaxed);
            loads_.fetch_add(1, std::memory_order_relaxed);
        }
        t.end_layer(l);
        if (opt_.beat) opt_.beat->beat();
    }
}

}  // namespace tandem::cache
