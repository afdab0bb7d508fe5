// text/tokenizer.cpp — Encoding and decoding.
#include "text/tokenizer.h"

#include <queue>

#include "text/tokenizer_impl.h"
#include "text/utf8.h"

namespace tandem::text {

void merge_table::reserve(int64_t count) {
    uint64_t cap = 16;
    while (cap < static_cast<uint64_t>(count) * 2) cap <<= 1;
    slots_.assign(cap, entry{});
    mask_ = cap - 1;
    count_ = 0;
}

void merge_table::insert(token_id left, token_id right, int32_t rank, token_id merged) {
    const uint64_t key = pair_key(left, right);
    for (uint64_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
        entry& e = slots_[i];
        if (e.key == key) return;
        if (e.key == ~uint64_t{0}) {
            e = entry{key, rank, merged};
            ++count_;
            return;
        }
    }
}

void added_trie::insert(std::string_view content, token_id id) {
    int32_t at = 0;
    for (char ch : content) {
        const auto c = static_cast<uint8_t>(ch);
        int32_t next = -1;
        for (const auto& [byte, child] : nodes_[at].children) {
            if (byte == c) next = child;
        }
        if (next < 0) {
            next = static_cast<int32_t>(nodes_.size());
            nodes_[at].children.emplace_back(c, next);
            nodes_.emplace_back();
        }
        at = next;
    }
    if (nodes_[at].id < 0) nodes_[at].id = id;
}

int64_t added_trie::longest_match(std::string_view text, int64_t pos, token_id* id) const {
    int32_t at = 0;
    int64_t best = 0;
    for (int64_t i = pos; i < static_cast<int64_t>(text.size()); ++i) {
        const auto c = static_cast<uint8_t>(text[i]);
        int32_t next = -1;
        for (const auto& [byte, child] : nodes_[at].children) {
            if (byte == c) {
                next = child;
                break;
            }
        }
        if (next < 0) break;
        at = next;
        if (nodes_[at].id >= 0) {
            best = i + 1 - pos;
            *id = nodes_[at].id;
        }
    }
    return best;
}

// ---- BPE ---------------------------------------------------------------------------------
// HF's Word::merge_all: a min-heap of candidate merges ordered by (rank, position); stale
// entries (a side already merged away) are skipped when popped. O(n log n) per word, so a
// 1 MB word without pre-token boundaries stays fast.

namespace {

struct symbol {
    token_id id;
    int32_t prev;
    int32_t next;
    bool alive;
};

struct candidate {
    int32_t rank;
    int32_t pos;
    token_id merged;
    bool operator>(const candidate& o) const {
        return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
};

}  // namespace

void tokenizer::impl::bpe_word(std::string_view word, std::vector<token_id>* out) const {
    const auto n = static_cast<int32_t>(word.size());
    if (n == 1) {
        out->push_back(byte_ids[static_cast<uint8_t>(word[0])]);
        return;
    }
    std::vector<symbol> sym(n);
    for (int32_t i = 0; i < n; ++i) {
        sym[i] = {byte_ids[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, true};
    }
    std::priority_queue<candidate, std::vector<candidate>, std::greater<>> heap;
    for (int32_t i = 0; i + 1 < n; ++i) {
        if (const auto* m = merges.find(sym[i].id, sym[i + 1].id)) {
            heap.push({m->rank, i, m->merged});
        }
    }
    while (!heap.empty()) {
        const candidate top = heap.top();
        heap.pop();
        symbol& cur = sym[top.pos];
        if (!cur.alive || cur.next < 0) continue;
        symbol& right = sym[cur.next];
        const auto* m = merges.find(cur.id, right.id);
        if (m == nullptr || m->merged != top.merged) continue;  // stale entry
        cur.id = top.merged;
        right.alive = false;
        cur.next = right.next;
        if (cur.next >= 0) sym[cur.next].prev = top.pos;
        if (cur.prev >= 0) {
            if (const auto* pm = merges.find(sym[cur.prev].id, cur.id)) {
                heap.push({pm->rank, cur.prev, pm->merged});
            }
        }
        if (cur.next >= 0) {
            if (const auto* nm = merges.find(cur.id, sym[cur.next].id)) {
                heap.push({nm->rank, top.pos, nm->merged});
            }
        }
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
}

namespace {
constexpr int64_t cache_max_word = 256;      // longer words are rare and not worth caching
constexpr size_t cache_max_entries = 200000; // cleared when full
}  // namespace

void tokenizer::impl::encode_plain(std::string_view text, std::vector<token_id>* out) const {
    thread_local std::vector<text_span> spans;
    splitter.split(text, &spans);
    for (const text_span& s : spans) {
        std::string_view word = text.substr(s.begin, s.end - s.begin);
        if (word.size() == 1) {
            out->push_back(byte_ids[static_cast<uint8_t>(word[0])]);
            continue;
        }
        const bool cacheable = static_cast<int64_t>(word.size()) <= cache_max_word;
        if (cacheable) {
            std::unique_lock lock(cache_mutex, std::try_to_lock);
            if (lock.owns_lock()) {
                auto it = cache.find(word);
                if (it != cache.end()) {
                    out->insert(out->end(), it->second.begin(), it->second.end());
                    continue;
                }
            }
        }
        const size_t first = out->size();
        bpe_word(word, out);
        if (cacheable) {
            std::unique_lock lock(cache_mutex, std::try_to_lock);
            if (lock.owns_lock()) {
                if (cache.size() >= cache_max_entries) cache.clear();
                cache.emplace(std::string(word),
                              std::vector<token_id>(out->begin() + first, out->end()));
            }
        }
    }
}

// ---- public API -------------------------------------------------------------------------

tokenizer::tokenizer(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
tokenizer::~tokenizer() = default;

void tokenizer::encode_append(std::string_view text, std::vector<token_id>* out) const {
    if (utf8_is_valid(text)) {
        impl_->encode_plain(text, out);
    } else {
        impl_->encode_plain(utf8_sanitize(text), out);
    }
}

std::vector<token_id> tokenizer::encode(std::string_view text) const {
    std::vector<token_id> out;
    out.reserve(text.size() / 3 + 1);
    encode_append(text, &out);
    return out;
}

namespace {

// Splits `text` on the tokens of `trie` (leftmost-longest) and hands every gap to `gap`.
template <typename Gap, typename Hit>
void split_on_trie(const added_trie& trie, std::string_view text, Gap&& gap, Hit&& hit) {
    int64_t gap_begin = 0;
    const auto n = static_cast<int64_t>(text.size());
    for (int64_t i = 0; i < n;) {
        token_id id = -1;
        int64_t len = trie.longest_match(text, i, &id);
        if (len == 0) {
            ++i;
            continue;
        }
        if (i > gap_begin) gap(text.substr(gap_begin, i - gap_begin));
        hit(id);
        i += len;
        gap_begin = i;
    }
    if (gap_begin < n) gap(text.substr(gap_begin));
}

}  // namespace

void tokenizer::encode_with_added_tokens_append(std::string_view text,
                                                std::vector<token_id>* out) const {
    std::string sanitized;
    if (!utf8_is_valid(text)) {
        sanitized = utf8_sanitize(text);
        text = sanitized;
    }
    auto emit = [out](token_id id) { out->push_back(id); };
    auto plain = [this, out](std::string_view piece) { impl_->encode_plain(piece, out); };
    auto normalized_pass = [&](std::string_view piece) {
        split_on_trie(impl_->normalized_added, piece, plain, emit);
    };
    split_on_trie(impl_->unnormalized_added, text, normalized_pass, emit);
}

std::vector<token_id> tokenizer::encode_with_added_tokens(std::string_view text) const {
    std::vector<token_id> out;
    out.reserve(text.size() / 3 + 1);
    encode_with_added_tokens_append(text, &out);
    return out;
}

result<std::string> tokenizer::decode(std::span<const token_id> ids, bool skip_special) const {
    std::string raw;
    for (token_id id : ids) {
        if (id < 0 || id >= id_count() || !(impl_->flags_by_id[id] & token_exists)) {
            return make_error(error_code::invalid_argument,
                              "token id " + std::to_string(id) + " is not in the vocabulary");
        }
        if (skip_special && (impl_->flags_by_id[id] & token_special)) continue;
        raw.append(impl_->bytes_by_id[id]);
    }
    if (utf8_is_valid(raw)) return raw;
    return utf8_sanitize(raw);
}

std::string_view tokenizer::token_bytes(token_id id) const {
    if (id < 0 || id >= id_count()) return {};
    return impl_->bytes_by_id[id];
}

bool tokenizer::contains(token_id id) const {
    return id >= 0 && id < id_count() && (impl_->flags_by_id[id] & token_exists);
}

bool tokenizer::is_special(token_id id) const {
    return id >= 0 && id < id_count() && (impl_->flags_by_id[id] & token_special);
}

bool tokenizer::is_added(token_id id) const {
    return id >= 0 && id < id_count() && (impl_->flags_by_id[id] & token_added);
}

std::optional<token_id> tokenizer::added_token_id(std::string_view content) const {
    auto it = impl_->added_by_content.find(std::string(content));
    if (it == impl_->added_by_content.end()) return std::nullopt;
    return it->second;
}

int32_t tokenizer::id_count() const { return static_cast<int32_t>(impl_->bytes_by_id.size()); }

}  // namespace tandem::text
