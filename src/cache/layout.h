// cache/layout.h — LayoutSpec: the one place every cache byte size comes from (design invariant 1).
//
// Owns: the row formats of every cached vector (dsv4-model.md §3.2), which buffers each layer has,
// rows and bytes per page, the fixed per-sequence state (window ring, compressor rings), the
// geometry of a pool arena (where page p of buffer (layer, kind) lives), and the fingerprint two
// peers compare at handshake. The pool, the host mirror, transfer descriptors, checksums and
// `tandem plan` all read sizes from here; nobody else multiplies dims by element sizes.
//
// Vocabulary:
//   * history buffers ("buffer_kind") are paged and append-only: compressed KV rows (CSA and HCA
//     layers, one row per `ratio` tokens) and index-K rows (CSA layers). One page id covers
//     page_size tokens of history for EVERY layer and kind (prefix-cache.md §5.1), so a page can be
//     shared by several sequences and moved as one unit.
//   * fixed per-sequence state ("state_kind") lives in a sequence slot: the sliding-window ring of
//     every layer (MTP included) and the compressor rings of compressed layers.
//   * layer ids are global model ids: main layers, then MTP layers (model_config::layers).
//
// Callers must not assume a particular arena arrangement; they ask pool_geometry for offsets.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/model_config.h"

namespace tandem::cache {

// Storage dtype of main KV rows (window and compressed). fp32 exists only so the hf-numerics
// golden tests can store exact values; fp8 and bf16 are the production formats.
enum class kv_dtype : uint8_t { fp8, bf16, fp32 };
// Storage dtype of indexer key rows. fp32: test-only, exact.
enum class index_k_dtype : uint8_t { fp8, bf16, fp4, fp32 };

const char* kv_dtype_name(kv_dtype d);
const char* index_k_dtype_name(index_k_dtype d);
result<kv_dtype> parse_kv_dtype(std::string_view s);            // error names cache.kv_dtype
result<index_k_dtype> parse_index_k_dtype(std::string_view s);  // error names cache.index_k_dtype

struct layout_options {
    kv_dtype kv = kv_dtype::fp8;
    index_k_dtype index_k = index_k_dtype::fp8;
    int64_t page_size = 256;  // tokens per page; a positive multiple of 128 and of every ratio
};

// Paged history buffers.
enum class buffer_kind : uint8_t { compressed_kv = 0, index_k = 1 };
inline constexpr int k_buffer_kinds = 2;
const char* buffer_kind_name(buffer_kind k);

// Fixed per-sequence state.
enum class state_kind : uint8_t { window = 0, attn_compressor = 1, index_compressor = 2 };
inline constexpr int k_state_kinds = 3;
const char* state_kind_name(state_kind k);

// Which codec (codec.h) reads and writes a row.
enum class row_encoding : uint8_t {
    kv_fp8,        // e4m3 nope (block-64 ue8m0 scales) + bf16 rope + scale bytes + pad
    kv_bf16,       // bf16 x dims
    kv_fp32,       // fp32 x dims (test-only, exact)
    index_k_fp8,   // e4m3 x dims + one fp32 scale
    index_k_bf16,  // bf16 x dims
    index_k_fp4,   // packed e2m1 (low nibble = even element) + block-32 ue8m0 scales
    index_k_fp32,  // fp32 x dims (test-only, exact)
};

// The byte layout of one row. Fields are in row order: values, rope, scales, pad.
struct row_format {
    row_encoding encoding = row_encoding::kv_bf16;
    std::string name;           // "kv_fp8", "index_k_fp4", ...
    int64_t dims = 0;           // logical elements in the row
    int64_t value_elems = 0;    // elements stored in the value section
    int64_t value_bytes = 0;    // e4m3 / packed e2m1 / bf16 / fp32 values
    int64_t rope_elems = 0;     // bf16 rope tail elements (kv fp8 only)
    int64_t rope_bytes = 0;     // bf16 rope tail (kv fp8 only)
    int64_t scale_bytes = 0;    // ue8m0 bytes or one fp32 scale
    int64_t pad_bytes = 0;
    int64_t scale_block = 0;    // elements per scale (0: unscaled)
    int64_t bytes = 0;          // total bytes per row
    int64_t alignment = 1;      // natural alignment of the row's widest element
};

// One paged history buffer of one layer.
struct buffer_layout {
    int32_t layer = 0;
    buffer_kind kind = buffer_kind::compressed_kv;
    int64_t ratio = 0;           // tokens per row (4 CSA, 128 HCA)
    row_format row;
    int64_t rows_per_page = 0;   // page_size / ratio
    int64_t bytes_per_page = 0;  // rows_per_page * row.bytes (pages are packed, no padding)
};

// One fixed-state region of one layer in a sequence slot.
struct state_layout {
    int32_t layer = 0;
    state_kind kind = state_kind::window;
    int64_t rows = 0;           // window: sliding_window rows; compressor: ring slots
    int64_t bytes_per_row = 0;  // window: kv row bytes; compressor: fp32 [kv | score]
    int64_t floats_per_row = 0; // compressor only: 2 * c * D' (c = 2 when overlapping)
    int64_t bytes = 0;          // rows * bytes_per_row
    int64_t offset_in_slot = 0; // where it starts inside a sequence slot (aligned)
};

// Everything one layer owns, in one list: the single source of truth for "which kinds does layer
// l have" (gate, loader, transfer planner, layer view; prefix-cache.md §5.7).
struct layer_layout {
    int32_t layer = 0;
    model::attention_type attention = model::attention_type::sliding;
    int64_t ratio = 0;
    bool is_mtp = false;
    std::vector<int32_t> buffers;  // indices into layout_spec::buffers()
    std::vector<int32_t> states;   // indices into layout_spec::states()
};

class layout_spec {
public:
    // Validates the options against the model (page size, quantization block divisibility).
    static result<layout_spec> create(const model::model_config& model, const layout_options& opt);

    const layout_options& options() const { return opt_; }
    int64_t page_size() const { return opt_.page_size; }
    int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
    int64_t window_rows() const { return window_rows_; }
    const row_format& kv_row() const { return kv_row_; }
    const row_format& index_k_row() const { return index_k_row_; }

    const std::vector<layer_layout>& layers() const { return layers_; }
    const std::vector<buffer_layout>& buffers() const { return buffers_; }
    const std::vector<state_layout>& states() const { return states_; }
    // -1 when the layer has no such buffer / state.
    int32_t buffer_index(int32_t layer, buffer_kind kind) const;
    int32_t state_index(int32_t layer, state_kind kind) const;
    const buffer_layout& buffer(int32_t layer, buffer_kind kind) const;  // CHECKs it exists
    const state_layout& state(int32_t layer, state_kind kind) const;     // CHECKs it exists

    // All history buffers of one page id (every layer, every kind).
    int64_t page_group_bytes() const { return page_group_bytes_; }
    // Asymptotic history bytes per token = page_group_bytes / page_size
    //   = Σ_CSA (kv_row + index_k_row) / csa_ratio + Σ_HCA kv_row / hca_ratio.
    // Windows and compressor rings are per sequence, not per token, so they do not count.
    double bytes_per_token() const;
    // One sequence slot: every window ring and compressor ring, each region aligned.
    int64_t state_bytes_per_sequence() const { return state_bytes_per_sequence_; }

    uint64_t fingerprint() const { return fingerprint_; }
    std::string fingerprint_hex() const;
    // A one-line description naming dtypes, page size and layer pattern (for mismatch errors).
    std::string describe() const;

private:
    layout_options opt_;
    int64_t window_rows_ = 0;
    row_format kv_row_;
    row_format index_k_row_;
    std::vector<layer_layout> layers_;
    std::vector<buffer_layout> buffers_;
    std::vector<state_layout> states_;
    std::vector<std::array<int32_t, k_buffer_kinds>> buffer_index_;
    std::vector<std::array<int32_t, k_state_kinds>> state_index_;
    int64_t page_group_bytes_ = 0;
    int64_t state_bytes_per_sequence_ = 0;
    uint64_t fingerprint_ = 0;
    std::string canonical_;  // what the fingerprint hashes
};

// Row formats, derived from dims and element sizes (no literal row size anywhere).
result<row_format> make_kv_row_format(kv_dtype d, int64_t head_dim, int64_t rope_dim);
result<row_format> make_index_k_row_format(index_k_dtype d, int64_t index_head_dim);

// Where everything lives in an arena of `num_pages` pages and `num_slots` sequence slots.
// Arrangement (layer-major, per kind, so one layer's rows are one gather per kind):
//   [buffer 0: num_pages x bytes_per_page] [buffer 1: ...] ... [slot 0] [slot 1] ...
// Every region starts at a multiple of k_region_alignment. All offsets are int64.
class pool_geometry {
public:
    static constexpr int64_t k_region_alignment = 256;

    pool_geometry(const layout_spec& layout, int64_t num_pages, int64_t num_slots);

    const layout_spec& layout() const { return *layout_; }
    int64_t num_pages() const { return num_pages_; }
    int64_t num_slots() const { return num_slots_; }
    int64_t total_bytes() const { return total_bytes_; }

    int64_t buffer_base(int32_t buffer_idx) const { return buffer_base_[buffer_idx]; }
    int64_t page_offset(int32_t buffer_idx, int64_t page) const;
    int64_t row_offset(int32_t buffer_idx, int64_t page, int64_t row_in_page) const;
    int64_t slot_offset(int64_t slot) const;
    int64_t state_offset(int32_t state_idx, int64_t slot) const;
    int64_t slot_stride() const { return slot_stride_; }

private:
    const layout_spec* layout_;
    int64_t num_pages_;
    int64_t num_slots_;
    std::vector<int64_t> buffer_base_;
    int64_t slots_base_ = 0;
    int64_t slot_stride_ = 0;
    int64_t total_bytes_ = 0;
};

inline int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

}  // namespace tandem::cache
