// text/tokenizer_impl.h — Internal state of text::tokenizer (not part of the public API).
//
// Token bytes are stored raw (the GPT-2 byte-to-unicode mapping is undone at load), so BPE runs
// on bytes: a word starts as one symbol per byte and merges are looked up by (left id, right id)
// in an open-addressing table keyed by the id pair.
#pragma once

#include <array>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/pretokenizer.h"
#include "text/tokenizer.h"

namespace tandem::text {

class merge_table {
public:
    struct entry {
        uint64_t key = ~uint64_t{0};  // (left << 32) | right; all-ones marks an empty slot
        int32_t rank = 0;
        token_id merged = 0;
    };
    void reserve(int64_t count);
    // Keeps the first (lowest-rank) entry when a pair repeats, as HF does.
    void insert(token_id left, token_id right, int32_t rank, token_id merged);
    const entry* find(token_id left, token_id right) const {
        const uint64_t key = pair_key(left, right);
        for (uint64_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
            const entry& e = slots_[i];
            if (e.key == key) return &e;
            if (e.key == ~uint64_t{0}) return nullptr;
        }
    }
    int64_t size() const { return count_; }

private:
    static uint64_t pair_key(token_id l, token_id r) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
    }
    static uint64_t hash(uint64_t k) {
        k ^= k >> 33;
        k *= 0xff51afd7ed558ccdULL;
        k ^= k >> 33;
        return k;
    }
    std::vector<entry> slots_;
    uint64_t mask_ = 0;
    int64_t count_ = 0;
};

// Byte trie over added-token contents for leftmost-longest matching.
class added_trie {
public:
    void insert(std::string_view content, token_id id);
    // Length of the longest token starting at text[pos] (0 if none); its id in *id.
    int64_t longest_match(std::string_view text, int64_t pos, token_id* id) const;
    bool empty() const { return nodes_.size() <= 1; }

private:
    struct node {
        std::vector<std::pair<uint8_t, int32_t>> children;
        token_id id = -1;
    };
    std::vector<node> nodes_{1};
};

struct tokenizer::impl {
    std::vector<std::string> bytes_by_id;   // raw bytes of every id; empty for holes
    std::vector<uint8_t> flags_by_id;       // bit 0: exists, bit 1: added, bit 2: special
    std::array<token_id, 256> byte_ids{};   // the single-byte symbols
    merge_table merges;
    split_chain splitter;
    // HF splits on non-normalized added tokens first, then on normalized ones.
    added_trie unnormalized_added;
    added_trie normalized_added;
    std::unordered_map<std::string, token_id> added_by_content;

    // Pre-token -> ids cache. try_lock only: a busy cache is skipped, never waited on.
    mutable std::mutex cache_mutex;
    struct string_hash {
        using is_transparent = void;  // lookups by string_view allocate nothing
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    mutable std::unordered_map<std::string, std::vector<token_id>, string_hash, std::equal_to<>> cache;

    void bpe_word(std::string_view word, std::vector<token_id>* out) const;
    void encode_plain(std::string_view valid_text, std::vector<token_id>* out) const;
};

inline constexpr uint8_t token_exists = 1;
inline constexpr uint8_t token_added = 2;
inline constexpr uint8_t token_special = 4;

// GPT-2 bytes_to_unicode: code point -> byte, or -1 for code points outside the alphabet.
int byte_level_char_to_byte(uint32_t code_point);
// Decodes a byte-level token string ("Ġthe") to raw bytes; returns false (and the raw UTF-8 of
// `token`) when some character is outside the alphabet, as HF's ByteLevel decoder does.
bool byte_level_to_bytes(std::string_view token, std::string* out);

}  // namespace tandem::text
