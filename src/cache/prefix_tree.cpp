// cache/prefix_tree.cpp — match, insert, locks and the two eviction families.
#include "cache/prefix_tree.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <set>
#include <tuple>

#include "core/check.h"

namespace tandem::cache {

prefix_tree::prefix_tree(page_pool& pool, uint64_t cache_key, prefix_tree_options opt)
    : pool_(pool),
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
        if (n->page.valid()) pool_.release_page(n->page);
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

prefix_tree::match_result prefix_tree::match(std::span<const int32_t> tokens) {
    match_result m;
    const int64_t len = static_cast<int64_t>(tokens.size());
    const int64_t limit = len > 0 ? (len - 1) / page_size_ * page_size_ : 0;
    node* n = root_.get();
    node* best = nullptr;
    for (int64_t at = 0; at + page_size_ <= limit; at += page_size_) {
        n = child_of(n, tokens.subspan(static_cast<size_t>(at), static_cast<size_t>(page_size_)));
        if (n == nullptr) break;
        if (n->snapshot) best = n;
    }
    if (best == nullptr) return m;
    touch(best);
    best->snapshot_last_use = tick_;
    m.tokens = best->depth;
    m.at = best;
    m.snapshot = best->snapshot.get();
    m.pages.resize(static_cast<size_t>(best->depth / page_size_));
    for (node* p = best; p != root_.get(); p = p->parent) {
        m.pages[static_cast<size_t>(p->depth / page_size_ - 1)] = p->page;
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
        }
        n = c;
    }
    touch(n);
    if (snap && !n->snapshot) {
        TANDEM_CHECK_MSG(snap->header.boundary == n->depth, "snapshot attached off its boundary");
        n->snapshot = std::make_unique<boundary_snapshot>(std::move(*snap));
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

void prefix_tree::remove_leaf(node* n) {
    TANDEM_CHECK(n != root_.get() && n->children.empty() && n->locks == 0);
    drop_snapshot(*n);
    pool_.release_page(n->page);
    --stats_.nodes;
    --stats_.pages_held;
    node* parent = n->parent;
    auto it = parent->children.find(n->key);
    TANDEM_CHECK(it != parent->children.end() && it->second.get() == n);
    parent->children.erase(it);  // destroys n
}

namespace {

// A leaf is evictable when unlocked; it frees a page when the tree holds the only reference.
bool freeable(const page_pool& pool, const prefix_tree::node& n) {
    return n.locks == 0 && n.children.empty() && pool.refcount_of(n.page.page) == 1;
}

}  // namespace

int64_t prefix_tree::evictable_pages() const {
    // Unlocked nodes have no locked descendant (locks count along the path), so every unlocked
    // subtree can be removed leaf by leaf; a page frees only where the tree is its last holder.
    int64_t n_pages = 0;
    std::vector<const node*> stack{root_.get()};
    while (!stack.empty()) {
        const node* n = stack.back();
        stack.pop_back();
        if (n != root_.get() && n->locks == 0 && pool_.refcount_of(n->page.page) == 1) ++n_pages;
        for (const auto& [k, c] : n->children) stack.push_back(c.get());
    }
    return n_pages;
}

int64_t prefix_tree::evict_pages(int64_t want) {
    if (want <= 0) return 0;
    // Min-heap on (has snapshot, score): dangling history first, then the least valuable.
    using entry = std::tuple<int, double, node*>;
    std::priority_queue<entry, std::vector<entry>, std::greater<>> heap;
    auto consider = [&](node* n) {
        if (n != root_.get() && n->locks == 0 && n->children.empty()) {
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
        const bool frees = freeable(pool_, *n);
        node* parent = n->parent;
        remove_leaf(n);
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
    evict_pages(stats_.pages_held);
    // Unlocked leaves whose page a sequence still holds were removed too (their page stays with
    // the sequence); count only what actually returned to the pool.
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
    std::set<int32_t> pages;
    int64_t nodes = 0, snapshots = 0, snapshot_bytes = 0;
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
        TANDEM_CHECK_MSG(pages.insert(n->page.page).second, "a page held by two tree nodes");
        TANDEM_CHECK_MSG(pool_.state_of(n->page.page) == page_state::sealed &&
                             pool_.epoch_of(n->page.page) == n->page.epoch &&
                             pool_.refcount_of(n->page.page) >= 1,
                         "a tree node holds a page that is not live and sealed");
    }
    TANDEM_CHECK(root_->snapshot == nullptr);
    TANDEM_CHECK(nodes == stats_.nodes && nodes == stats_.pages_held);
    TANDEM_CHECK(snapshots == stats_.snapshots && snapshot_bytes == stats_.snapshot_bytes);
}

}  // namespace tandem::cache
