// engine/prefix_cache.cpp — when to match, snapshot, publish and evict (see the header).
#include "engine/prefix_cache.h"

#include <xxhash.h>

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "core/liveness.h"
#include "core/log.h"

namespace tandem::engine {

uint64_t prefix_cache_key(uint64_t layout_fingerprint, uint64_t model_fingerprint,
                          std::string_view numerics) {
    XXH3_state_t* st = XXH3_createState();
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, &layout_fingerprint, sizeof layout_fingerprint);
    XXH3_64bits_update(st, &model_fingerprint, sizeof model_fingerprint);
    XXH3_64bits_update(st, numerics.data(), numerics.size());
    const uint64_t key = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return key;
}

namespace {

// prompt ++ output, first n tokens.
std::span<const int32_t> known_tokens(const request& r, int64_t n, std::vector<int32_t>& buf) {
    buf.clear();
    buf.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) buf.push_back(r.token_at(i));
    return buf;
}

}  // namespace

prefix_cache::prefix_cache(std::shared_ptr<pool_sequences> seqs, prefix_cache_options opt,
                           std::unique_ptr<cache::host_tier> host)
    : seqs_(std::move(seqs)),
      opt_(opt),
      host_(std::move(host)),
      tree_(std::make_unique<cache::prefix_tree>(
          seqs_->pool(), opt.cache_key, cache::prefix_tree_options{opt.snapshot_budget_bytes},
          host_.get())) {}

prefix_cache::~prefix_cache() {
    // Stores read tree pages and loads write sequence pages: both land before anything is freed.
    if (host_) host_->drain();
}

int64_t prefix_cache::attach(const request& r) {
    TANDEM_CHECK(r.sequence >= 0 && !seqs_state_.contains(r.sequence));
    sequence_state& s = seqs_state_[r.sequence];
    const int64_t total = r.total_tokens();
    s.known_at_admission = total;
    // Prompt logprobs need the logits of every prompt position: nothing may be skipped.
    if (r.params.prompt_logprobs) return 0;
    ++lookups_;
    lookup_tokens_ += total;
    std::span<const int32_t> tokens = known_tokens(r, total, scratch_tokens_);
    cache::prefix_tree::match_result m = tree_->match(tokens);
    // History without a snapshot beyond the match: the tokens branch off there (or a snapshot
    // was evicted). A snapshot at that point makes the next sibling resumable.
    const int64_t history = tree_->history_depth(tokens);
    if (history > m.tokens) s.branch_point = history;
    int64_t computed = 0;
    if (m.tokens > 0) {
        cache::page_pool& pool = seqs_->pool();
        const auto prefix = tokens.first(static_cast<size_t>(m.tokens));
        status st = cache::verify_snapshot(pool.layout(), *m.snapshot, prefix, opt_.cache_key);
        const cache::slot_ref slot = seqs_->slot(r.sequence);
        if (st.is_ok() && host_) {
            if (attach_loaded(r, s, m)) {
                hit_tokens_ += m.tokens;
                computed = m.tokens;
            }
        } else if (st.is_ok()) {
            TANDEM_CHECK_MSG(pool.page_table(slot).empty(), "prefix attach to a used sequence");
            for (const cache::page_ref& p : m.pages) {
                pool.retain_page(p);
                pool.append_page(slot, p);
            }
            st = cache::restore_snapshot(pool, slot, *m.snapshot);
            TANDEM_CHECK_MSG(st.is_ok(), "snapshot restore into a fresh slot failed");
            relock(s, m.at);
            hit_tokens_ += m.tokens;
            computed = m.tokens;
        } else {
            ++restore_failures_;
            TANDEM_LOG_WARN("prefix cache: request {} recomputes {} tokens: {}", r.trace_id,
                            m.tokens, st.message());
        }
    }
    publish_stats();
    return computed;
}

// The host-tier attach: shared device pages by reference as without it; host-only pages get fresh
// pool pages that the copy thread fills; the snapshot is restored by the same load, layer by
// layer. The path is locked first so making room cannot evict it. False (nothing attached) when
// the pool cannot hold the pages to load: the request computes from 0.
bool prefix_cache::attach_loaded(const request& r, sequence_state& s,
                                 cache::prefix_tree::match_result& m) {
    cache::page_pool& pool = seqs_->pool();
    const cache::slot_ref slot = seqs_->slot(r.sequence);
    TANDEM_CHECK_MSG(pool.page_table(slot).empty(), "prefix attach to a used sequence");
    tree_->lock(m.at);
    int64_t missing = 0;
    for (const cache::page_ref& p : m.pages) missing += p.valid() ? 0 : 1;
    if (missing > pool.stats().pages_free) {
        host_->drain();
        tree_->evict_pages(missing - pool.stats().pages_free);
    }
    if (missing > pool.stats().pages_free) {
        tree_->unlock(m.at);
        return false;
    }
    std::vector<cache::page_load> loads;
    std::vector<size_t> loaded_at;
    for (size_t i = 0; i < m.pages.size(); ++i) {
        cache::page_ref p = m.pages[i];
        if (p.valid()) {
            pool.retain_page(p);
        } else {
            p = pool.alloc_page(static_cast<cache::owner_id>(r.sequence));
            TANDEM_CHECK(p.valid());
            loads.push_back({m.host_pages[i], p});
            loaded_at.push_back(i);
        }
        pool.append_page(slot, p);
    }
    s.load = host_->load(loads, slot, m.snapshot_ref);
    for (size_t k = 0; k < loads.size(); ++k) {
        tree_->adopt_loading_page(m.path[loaded_at[k]], loads[k].device, s.load);
    }
    s.locked = m.at;
    s.from_host = !loads.empty();
    std::vector<std::shared_ptr<const cache::load_ticket>> waits(m.loading.begin(), m.loading.end());
    waits.push_back(s.load);
    seqs_->set_loads(r.sequence, std::move(waits));
    return true;
}

bool prefix_cache::loaded_from_host(const request& r) const {
    auto it = seqs_state_.find(r.sequence);
    return it != seqs_state_.end() && it->second.from_host;
}

bool prefix_cache::is_boundary(const sequence_state& s, int64_t computed) const {
    const int64_t page = tree_->page_size();
    if (computed <= 0 || computed % page != 0 || computed >= s.known_at_admission) return false;
    if (computed == (s.known_at_admission - 1) / page * page) return true;
    if (computed == s.branch_point) return true;
    return opt_.snapshot_interval_tokens > 0 && computed % opt_.snapshot_interval_tokens == 0;
}

int64_t prefix_cache::next_stop(const request& r) const {
    const int64_t total = r.total_tokens();
    auto it = seqs_state_.find(r.sequence);
    if (it == seqs_state_.end()) return total;
    const sequence_state& s = it->second;
    const int64_t page = tree_->page_size();
    int64_t stop = total;
    const int64_t prompt_end = (s.known_at_admission - 1) / page * page;
    if (prompt_end > r.computed) stop = std::min(stop, prompt_end);
    if (s.branch_point > r.computed) stop = std::min(stop, s.branch_point);
    if (const int64_t every = opt_.snapshot_interval_tokens; every > 0) {
        const int64_t next = (r.computed / every + 1) * every;
        if (next < s.known_at_admission) stop = std::min(stop, next);
    }
    return stop;
}

void prefix_cache::relock(sequence_state& s, cache::prefix_tree::node* n) {
    tree_->lock(n);  // lock the new path before the old one is let go
    tree_->unlock(s.locked);
    s.locked = n;
}

void prefix_cache::after_step(const request& r) {
    auto it = seqs_state_.find(r.sequence);
    if (it == seqs_state_.end()) return;
    sequence_state& s = it->second;
    cache::page_pool& pool = seqs_->pool();
    const cache::slot_ref slot = seqs_->slot(r.sequence);
    // A step ran: the forward pass waited for every layer of the loads this sequence depended on.
    if (s.load) seqs_->set_loads(r.sequence, {});
    if (r.computed >= s.known_at_admission) {  // past the known tokens: decoding
        if (r.computed % tree_->page_size() != 0) return;
        s.tail = cache::capture_snapshot(pool, slot, known_tokens(r, r.computed, scratch_tokens_),
                                         opt_.cache_key);
        return;
    }
    if (!is_boundary(s, r.computed)) return;
    std::span<const int32_t> tokens = known_tokens(r, r.computed, scratch_tokens_);
    std::optional<cache::boundary_snapshot> snap;
    if (!tree_->has_snapshot(tokens)) snap = cache::capture_snapshot(pool, slot, tokens, opt_.cache_key);
    relock(s, tree_->insert(tokens, pool.page_table(slot), std::move(snap)));
    publish_stats();
}

void prefix_cache::release(const request& r, bool publish) {
    auto it = seqs_state_.find(r.sequence);
    if (it == seqs_state_.end()) return;
    sequence_state& s = it->second;
    if (s.load && !s.load->complete() && seqs_->waited_on_by_others(r.sequence, s.load.get())) {
        // Another sequence matched pages this load fills and its next step waits on them:
        // cancelling would fail that step (and its whole batch) over this request's abort. The
        // step would wait for the same copies anyway, so wait for them here.
        const int64_t deadline = monotonic_ms() + seqs_->load_timeout_ms;
        (void)s.load->wait_layer(s.load->num_layers() - 1, deadline);  // incomplete: cancelled below
    }
    if (s.load && !s.load->complete()) {
        // Dropped before its first step (abort, error): no more writes into its pages, and the
        // tree forgets the device copies that load was filling (they never landed).
        s.load->cancel();
        tree_->drop_loading(s.load.get());
        publish = false;
    }
    if (s.load) seqs_->set_loads(r.sequence, {});
    if (publish && s.tail && s.tail->header.boundary <= r.computed) {
        std::span<const int32_t> tokens =
            known_tokens(r, s.tail->header.boundary, scratch_tokens_);
        std::optional<cache::boundary_snapshot> snap;
        if (!tree_->has_snapshot(tokens)) snap = std::move(s.tail);
        tree_->insert(tokens, seqs_->pool().page_table(seqs_->slot(r.sequence)), std::move(snap));
    }
    tree_->unlock(s.locked);
    seqs_state_.erase(it);
    if (host_ && host_->test_hooks().evict_on_release) {
        host_->drain();
        tree_->evict_pages(tree_->stats().pages_held);
    }
    publish_stats();
}

int64_t prefix_cache::evictable_pages() const {
    if (host_) host_->drain();  // a page whose store is in flight cannot go yet
    return tree_->evictable_pages();
}

int64_t prefix_cache::evict_pages(int64_t want) {
    if (host_) host_->drain();
    const int64_t freed = tree_->evict_pages(want);
    publish_stats();
    return freed;
}

result<int64_t> prefix_cache::flush() {
    if (!seqs_state_.empty() || tree_->locked_nodes() > 0) {
        return make_error(error_code::unavailable,
                          fmt::format("the prefix cache cannot be flushed while {} request(s) hold "
                                      "cache state; retry when idle",
                                      seqs_state_.size()));
    }
    if (host_) host_->drain();
    const int64_t freed = tree_->flush();
    publish_stats();
    return freed;
}

void prefix_cache::publish_stats() {
    const cache::prefix_tree_stats t = tree_->stats();
    pub_.lookups.store(lookups_, std::memory_order_relaxed);
    pub_.lookup_tokens.store(lookup_tokens_, std::memory_order_relaxed);
    pub_.hit_tokens.store(hit_tokens_, std::memory_order_relaxed);
    pub_.cached_pages.store(t.pages_held, std::memory_order_relaxed);
    pub_.snapshots.store(t.snapshots, std::memory_order_relaxed);
    pub_.snapshot_bytes.store(t.snapshot_bytes, std::memory_order_relaxed);
    pub_.evicted_pages.store(t.evicted_pages, std::memory_order_relaxed);
    pub_.evicted_snapshots.store(t.evicted_snapshots, std::memory_order_relaxed);
    pub_.restore_failures.store(restore_failures_, std::memory_order_relaxed);
    pub_.evicted_to_host.store(t.evicted_to_host, std::memory_order_relaxed);
    pub_.host_evictions.store(t.host_evictions, std::memory_order_relaxed);
}

prefix_cache_stats prefix_cache::stats() const {
    prefix_cache_stats s;
    s.lookups = pub_.lookups.load(std::memory_order_relaxed);
    s.lookup_tokens = pub_.lookup_tokens.load(std::memory_order_relaxed);
    s.hit_tokens = pub_.hit_tokens.load(std::memory_order_relaxed);
    s.cached_pages = pub_.cached_pages.load(std::memory_order_relaxed);
    s.snapshots = pub_.snapshots.load(std::memory_order_relaxed);
    s.snapshot_bytes = pub_.snapshot_bytes.load(std::memory_order_relaxed);
    s.evicted_pages = pub_.evicted_pages.load(std::memory_order_relaxed);
    s.evicted_snapshots = pub_.evicted_snapshots.load(std::memory_order_relaxed);
    s.restore_failures = pub_.restore_failures.load(std::memory_order_relaxed);
    if (host_) {
        const cache::host_tier_stats h = host_->stats();
        s.host_enabled = true;
        s.host_bytes_total = h.bytes_total;
        s.host_bytes_used = h.bytes_used;
        s.host_loaded_pages = h.loaded_pages;
        s.evicted_to_host = pub_.evicted_to_host.load(std::memory_order_relaxed);
        s.host_evictions = pub_.host_evictions.load(std::memory_order_relaxed);
        s.host_load_seconds = host_->load_latency();
    }
    return s;
}

}  // namespace tandem::engine
