// cache/prefix_tree.cpp — match, insert, locks and the two eviction families.
#include "cache/prefix_tree.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <set>
#include <tuple>

#include "core/check.h"

namespace tandem::cache {

prefix_tree::prefix_tree(page_pool& pool, uint64_t cache_key, prefix_tree_options opt,
                         host_tier* host)
    : host_(host),
      pool_(pool),
      cache_key_(cache_key),
      opt_(opt),
      page_size_(pool.layout().page_size()),
      root_(std::make_unique<node>()) {}

prefix_tree::~prefix_tree() {
    // Depth-first release of every page; locks no longer matter (the engine is going away).
    std::vector<node*> stack{root_.get()};
    while (!stack.empty()) {
        node* n = stack.back();
        stack.pop_back();
        if (n->page.valid()) pool_.release_page(n->page);  // host pages go with the host tier
        for (auto& [k, c] : n->children) stack.push_back(c.get());
    }
}

prefix_tree::node* prefix_tree::child_of(const node* n, std::span<const int32_t> key) const {
    auto it = n->children.find(std::vector<int32_t>(key.begin(), key.end()));
    return it == n->children.end() ? nullptr : it->second.get();
}

void prefix_tree::touch(node* n) {
    ++tick_;
    for (; n != nullptr; n = n->parent) n->last_use = tick_;
}

bool prefix_tree::usable(const node& n) const {
    return n.page.valid() || (n.host_page >= 0 && host_->present(n.host_page));
}

prefix_tree::match_result prefix_tree::match(std::span<const int32_t> tokens) {
    match_result m;
    const int64_t len = static_cast<int64_t>(tokens.size());
    const int64_t limit = len > 0 ? (len - 1) / page_size_ * page_size_ : 0;
    node* n = root_.get();
    node* best = nullptr;
    for (int64_t at = 0; at + page_size_ <= limit; at += page_size_) {
        n = child_of(n, tokens.subspan(static_cast<size_t>(at), static_cast<size_t>(page_size_)));
        // A page neither copy of which is usable ends the match: every kind of every layer comes
        // from the same page, so the usable prefix is clamped to whole pages before it.
        if (n == nullptr || !usable(*n)) break;
        if (n->snapshot) best = n;
    }
    if (best == nullptr) return m;
    touch(best);
    best->snapshot_last_use = tick_;
    m.tokens = best->depth;
    m.at = best;
    m.snapshot = best->snapshot.get();
    m.snapshot_ref = best->snapshot;
    const size_t n_pages = static_cast<size_t>(best->depth / page_size_);
    m.pages.resize(n_pages);
    m.host_pages.resize(n_pages);
    m.path.resize(n_pages);
    for (node* p = best; p != root_.get(); p = p->parent) {
        const size_t i = static_cast<size_t>(p->depth / page_size_ - 1);
        m.pages[i] = p->page;
        m.host_pages[i] = p->host_page;
        m.path[i] = p;
        if (p->loading && p->loading->complete()) p->loading.reset();
        if (p->loading) m.loading.push_back(p->loading);
    }
    return m;
}

const prefix_tree::node* prefix_tree::find(std::span<const int32_t> tokens) const {
    const int64_t b = static_cast<int64_t>(tokens.size());
    if (b <= 0 || b % page_size_ != 0) return nullptr;
    const node* n = root_.get();
    for (int64_t at = 0; at < b && n != nullptr; at += page_size_) {
        n = child_of(n, tokens.subspan(static_cast<size_t>(at), static_cast<size_t>(page_size_)));
    }
    return n;
}

int64_t prefix_tree::history_depth(std::span<const int32_t> tokens) const {
    const int64_t len = static_cast<int64_t>(tokens.size());
    const int64_t limit = len > 0 ? (len - 1) / page_size_ * page_size_ : 0;
    const node* n = root_.get();
    int64_t depth = 0;
    for (int64_t at = 0; at + page_size_ <= limit; at += page_size_) {
        n = child_of(n, tokens.subspan(static_cast<size_t>(at), static_cast<size_t>(page_size_)));
        if (n == nullptr) break;
        depth = n->depth;
    }
    return depth;
}

bool prefix_tree::has_snapshot(std::span<const int32_t> tokens) const {
    const node* n = find(tokens);
    return n != nullptr && n->snapshot != nullptr;
}

void prefix_tree::lock(node* n) {
    for (; n != nullptr; n = n->parent) ++n->locks;
}

void prefix_tree::unlock(node* n) {
    for (; n != nullptr; n = n->parent) {
        TANDEM_CHECK_MSG(n->locks > 0, "prefix tree unlock without lock");
        --n->locks;
    }
}

prefix_tree::node* prefix_tree::insert(std::span<const int32_t> tokens,
                                       std::span<const page_ref> pages,
                                       std::optional<boundary_snapshot> snap) {
    const int64_t b = static_cast<int64_t>(tokens.size());
    TANDEM_CHECK_MSG(b > 0 && b % page_size_ == 0, "insert at a page boundary only");
    TANDEM_CHECK(static_cast<int64_t>(pages.size()) >= b / page_size_);
    node* n = root_.get();
    for (int64_t i = 0; i < b / page_size_; ++i) {
        auto key = tokens.subspan(static_cast<size_t>(i * page_size_), static_cast<size_t>(page_size_));
        node* c = child_of(n, key);
        if (c == nullptr) {
            const page_ref p = pages[static_cast<size_t>(i)];
            if (pool_.state_of(p.page) == page_state::allocated) pool_.seal_page(p);
            pool_.retain_page(p);
            auto fresh = std::make_unique<node>();
            fresh->parent = n;
            fresh->key.assign(key.begin(), key.end());
            fresh->page = p;
            fresh->depth = n->depth + page_size_;
            c = fresh.get();
            n->children.emplace(fresh->key, std::move(fresh));
            ++stats_.nodes;
            ++stats_.pages_held;
            write_through(*c);
        } else if (!c->page.valid()) {
            // Host copy only, and the caller computed the same page again: it becomes the
            // device copy (the contents are equal: chunk-invariant kernels).
            const page_ref p = pages[static_cast<size_t>(i)];
            if (pool_.state_of(p.page) == page_state::allocated) pool_.seal_page(p);
            pool_.retain_page(p);
            c->page = p;
            ++stats_.pages_held;
        }
        n = c;
    }
    touch(n);
    if (snap && !n->snapshot) {
        TANDEM_CHECK_MSG(snap->header.boundary == n->depth, "snapshot attached off its boundary");
        n->snapshot = std::make_shared<const boundary_snapshot>(std::move(*snap));
        n->snapshot_last_use = tick_;
        ++stats_.snapshots;
        stats_.snapshot_bytes += n->snapshot->bytes();
        enforce_snapshot_budget();
    }
    return n;
}

// ------------------------------------------------------------------------------------------------
// Eviction

double prefix_tree::score(const node& n, bool snapshot_only) const {
    const double page_bytes = static_cast<double>(pool_.layout().page_group_bytes());
    double held = snapshot_only ? 0.0 : page_bytes;
    if (n.snapshot) held += static_cast<double>(n.snapshot->bytes());
    const double saved_per_unit = static_cast<double>(n.depth) * page_bytes / std::max(held, 1.0);
    const uint64_t used = snapshot_only ? n.snapshot_last_use : n.last_use;
    return static_cast<double>(used) + saved_per_unit / static_cast<double>(page_size_);
}

void prefix_tree::drop_snapshot(node& n) {
    if (!n.snapshot) return;
    stats_.snapshot_bytes -= n.snapshot->bytes();
    --stats_.snapshots;
    ++stats_.evicted_snapshots;
    n.snapshot.reset();
}

void prefix_tree::enforce_snapshot_budget() {
    if (opt_.snapshot_budget_bytes <= 0 || stats_.snapshot_bytes <= opt_.snapshot_budget_bytes) return;
    std::vector<std::pair<double, node*>> order;
    std::vector<node*> stack{root_.get()};
    while (!stack.empty()) {
        node* n = stack.back();
        stack.pop_back();
        if (n->snapshot) order.emplace_back(score(*n, true), n);
        for (auto& [k, c] : n->children) stack.push_back(c.get());
    }
    std::sort(order.begin(), order.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [s, n] : order) {
        if (stats_.snapshot_bytes <= opt_.snapshot_budget_bytes) break;
        drop_snapshot(*n);
    }
}

// ------------------------------------------------------------------------------------------------
// The host tier

int32_t prefix_tree::alloc_host_page() {
    int32_t hp = host_->alloc_page();
    if (hp >= 0) return hp;
    // Full: drop host copies, unlocked host-only leaves first (the whole node goes), then host
    // copies of unlocked nodes that keep their device copy; lowest score first, a batch at once so
    // the walk is paid every few pages, not every page.
    using entry = std::tuple<int, double, node*>;
    std::vector<entry> order;
    std::vector<node*> stack{root_.get()};
    while (!stack.empty()) {
        node* n = stack.back();
        stack.pop_back();
        for (auto& [k, c] : n->children) stack.push_back(c.get());
        if (n == root_.get() || n->locks > 0 || n->host_page < 0 || !host_->present(n->host_page))
            continue;
        if (!n->page.valid() && !n->children.empty()) continue;
        order.emplace_back(n->page.valid() ? 1 : 0, score(*n, false), n);
    }
    std::sort(order.begin(), order.end(), [](const entry& a, const entry& b) {
        return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
    });
    const int64_t batch = std::max<int64_t>(1, host_->geometry().num_pages() / 16);
    int64_t dropped = 0;
    for (auto& [has_device, sc, n] : order) {
        if (dropped >= batch) break;
        if (has_device) {
            drop_host_copy(*n);
        } else {
            remove_leaf(n);
            ++stats_.host_evictions;
        }
        ++dropped;
    }
    return host_->alloc_page();
}

void prefix_tree::write_through(node& n) {
    if (host_ == nullptr || n.host_page >= 0) return;
    const int32_t hp = alloc_host_page();
    if (hp < 0) {
        ++stats_.host_store_skipped;
        return;
    }
    n.host_page = hp;
    ++stats_.host_pages_held;
    host_->store(n.page, hp);
}

void prefix_tree::drop_host_copy(node& n) {
    if (n.host_page < 0) return;
    host_->free_page(n.host_page);
    n.host_page = -1;
    --stats_.host_pages_held;
    ++stats_.host_evictions;
}

void prefix_tree::drop_device_copy(node& n) {
    if (!n.page.valid()) return;
    pool_.release_page(n.page);
    n.page = page_ref{};
    n.loading.reset();
    --stats_.pages_held;
}

void prefix_tree::adopt_loading_page(node* n, page_ref device,
                                     std::shared_ptr<const load_ticket> ticket) {
    TANDEM_CHECK_MSG(!n->page.valid() && n->host_page >= 0, "adopting a page for a device-resident node");
    pool_.seal_page(device);
    pool_.retain_page(device);
    n->page = device;
    n->loading = std::move(ticket);
    ++stats_.pages_held;
}

void prefix_tree::drop_loading(const load_ticket* ticket) {
    std::vector<node*> stack{root_.get()};
    while (!stack.empty()) {
        node* n = stack.back();
        stack.pop_back();
        if (n->loading.get() == ticket) drop_device_copy(*n);
        for (auto& [k, c] : n->children) stack.push_back(c.get());
    }
}

// ------------------------------------------------------------------------------------------------

void prefix_tree::remove_leaf(node* n) {
    TANDEM_CHECK(n != root_.get() && n->children.empty() && n->locks == 0);
    drop_snapshot(*n);
    drop_device_copy(*n);
    if (n->host_page >= 0) {
        host_->free_page(n->host_page);
        --stats_.host_pages_held;
    }
    --stats_.nodes;
    node* parent = n->parent;
    auto it = parent->children.find(n->key);
    TANDEM_CHECK(it != parent->children.end() && it->second.get() == n);
    parent->children.erase(it);  // destroys n
}

void prefix_tree::remove_subtree(node* n) {
    while (!n->children.empty()) remove_subtree(n->children.begin()->second.get());
    remove_leaf(n);
}

namespace {

bool holds_device_below(const prefix_tree::node& n) {
    for (const auto& [k, c] : n.children)
        if (c->page.valid() || holds_device_below(*c)) return true;
    return false;
}

// Pages held by device leaves of unlocked subtrees whose page the tree alone holds.
bool frees_device_page(const page_pool& pool, const prefix_tree::node& n) {
    return n.page.valid() && n.locks == 0 && pool.refcount_of(n.page.page) == 1;
}

}  // namespace

int64_t prefix_tree::evictable_pages() const {
    // Unlocked nodes have no locked descendant (locks count along the path), so every unlocked
    // node's device copy can go, deepest first; a page frees only where the tree is its last
    // holder. (A store still in flight blocks that page: the caller drains the host tier first.)
    int64_t n_pages = 0;
    std::vector<const node*> stack{root_.get()};
    while (!stack.empty()) {
        const node* n = stack.back();
        stack.pop_back();
        if (n != root_.get() && frees_device_page(pool_, *n)) ++n_pages;
        for (const auto& [k, c] : n->children) stack.push_back(c.get());
    }
    return n_pages;
}

int64_t prefix_tree::evict_pages(int64_t want) {
    if (want <= 0) return 0;
    // Min-heap on (has snapshot, score) over unlocked device leaves: dangling history first, then
    // the least valuable.
    using entry = std::tuple<int, double, node*>;
    std::priority_queue<entry, std::vector<entry>, std::greater<>> heap;
    auto consider = [&](node* n) {
        if (n != root_.get() && n->locks == 0 && n->page.valid() && !holds_device_below(*n)) {
            heap.emplace(n->snapshot ? 1 : 0, score(*n, false), n);
        }
    };
    std::vector<node*> stack{root_.get()};
    while (!stack.empty()) {
        node* n = stack.back();
        stack.pop_back();
        consider(n);
        for (auto& [k, c] : n->children) stack.push_back(c.get());
    }
    int64_t freed = 0;
    while (freed < want && !heap.empty()) {
        node* n = std::get<2>(heap.top());
        heap.pop();
        const bool frees = frees_device_page(pool_, *n);
        node* parent = n->parent;
        if (n->host_page >= 0) {
            TANDEM_CHECK_MSG(host_->present(n->host_page), "device eviction before its store landed");
            drop_device_copy(*n);  // the node stays: a later match loads it back
            ++stats_.evicted_to_host;
        } else {
            remove_subtree(n);  // what is below holds host copies only
        }
        if (frees) {
            ++freed;
            ++stats_.evicted_pages;
        }
        consider(parent);
    }
    return freed;
}

int64_t prefix_tree::flush() {
    const int64_t before = pool_.stats().pages_free;
    std::vector<node*> stack{root_.get()};
    while (!stack.empty()) {
        node* n = stack.back();
        stack.pop_back();
        drop_snapshot(*n);
        for (auto& [k, c] : n->children) stack.push_back(c.get());
    }
    std::vector<node*> tops;
    for (auto& [k, c] : root_->children)
        if (c->locks == 0) tops.push_back(c.get());
    for (node* n : tops) remove_subtree(n);
    // Nodes whose page a sequence still holds were removed too (their page stays with the
    // sequence); count only what actually returned to the pool.
    return pool_.stats().pages_free - before;
}

int64_t prefix_tree::locked_nodes() const {
    int64_t n_locked = 0;
    std::vector<const node*> stack{root_.get()};
    while (!stack.empty()) {
        const node* n = stack.back();
        stack.pop_back();
        if (n != root_.get() && n->locks > 0) ++n_locked;
        for (const auto& [k, c] : n->children) stack.push_back(c.get());
    }
    return n_locked;
}

void prefix_tree::check_integrity() const {
    std::set<int32_t> pages, host_pages;
    int64_t nodes = 0, snapshots = 0, snapshot_bytes = 0, device = 0;
    std::vector<const node*> stack{root_.get()};
    while (!stack.empty()) {
        const node* n = stack.back();
        stack.pop_back();
        int64_t child_locks = 0;
        for (const auto& [k, c] : n->children) {
            TANDEM_CHECK_MSG(c->parent == n && c->depth == n->depth + page_size_,
                             "prefix tree depth broken");
            TANDEM_CHECK(static_cast<int64_t>(k.size()) == page_size_ && k == c->key);
            child_locks += c->locks;
            stack.push_back(c.get());
        }
        TANDEM_CHECK_MSG(n->locks >= child_locks, "prefix tree lock counts broken");
        if (n->snapshot) {
            TANDEM_CHECK_MSG(n->snapshot->header.boundary == n->depth, "snapshot off its node");
            ++snapshots;
            snapshot_bytes += n->snapshot->bytes();
        }
        if (n == root_.get()) continue;
        ++nodes;
        TANDEM_CHECK_MSG(n->page.valid() || n->host_page >= 0, "a tree node holds no copy of its page");
        if (n->host_page >= 0) {
            TANDEM_CHECK_MSG(host_ != nullptr && host_pages.insert(n->host_page).second,
                             "a host page held by two tree nodes");
        }
        if (!n->page.valid()) continue;
        ++device;
        TANDEM_CHECK_MSG(pages.insert(n->page.page).second, "a page held by two tree nodes");
        TANDEM_CHECK_MSG(pool_.state_of(n->page.page) == page_state::sealed &&
                             pool_.epoch_of(n->page.page) == n->page.epoch &&
                             pool_.refcount_of(n->page.page) >= 1,
                         "a tree node holds a page that is not live and sealed");
    }
    TANDEM_CHECK(root_->snapshot == nullptr);
    TANDEM_CHECK(nodes == stats_.nodes && device == stats_.pages_held);
    TANDEM_CHECK(static_cast<int64_t>(host_pages.size()) == stats_.host_pages_held);
    TANDEM_CHECK(snapshots == stats_.snapshots && snapshot_bytes == stats_.snapshot_bytes);
}

}  // namespace tandem::cache
