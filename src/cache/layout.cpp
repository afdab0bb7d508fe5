// cache/layout.cpp — Deriving every cache size from (model_config, dtypes, page size).
//
// Row sizes are sums of element counts times element sizes; the only constants are the element
// sizes of the formats and the quantization block lengths of the official format (64 for main
// KV nope, 32 for index-K fp4), both from dsv4-model.md §3.2 / §6.
#include "cache/layout.h"

#include <fmt/format.h>
#include <xxhash.h>

#include "core/check.h"

namespace tandem::cache {

namespace {

// Element sizes (bytes) of the storage formats.
constexpr int64_t k_e4m3_bytes = 1;
constexpr int64_t k_bf16_bytes = 2;
constexpr int64_t k_fp32_bytes = 4;
constexpr int64_t k_ue8m0_bytes = 1;
constexpr int64_t k_e2m1_per_byte = 2;
// Quantization blocks of the official formats.
constexpr int64_t k_kv_fp8_block = 64;      // one ue8m0 scale per 64 nope dims
constexpr int64_t k_index_fp4_block = 32;   // one ue8m0 scale per 32 dims
// The fp8 main row's scale section is padded so the row is a multiple of 8 bytes
// (448 + 128 + 7 = 583 -> 584, FlashMLA "fp8_ds_mla").
constexpr int64_t k_kv_fp8_row_multiple = 8;
// Pages are a multiple of 128 tokens so cacheable boundaries are HCA-window aligned: no
// compressed row straddles a page and the HCA ring is empty at a boundary (prefix-cache.md §5.3).
constexpr int64_t k_page_granularity = 128;

row_format plain_row(row_encoding enc, const char* name, int64_t dims, int64_t elem_bytes) {
    row_format r;
    r.encoding = enc;
    r.name = name;
    r.dims = dims;
    r.value_elems = dims;
    r.value_bytes = dims * elem_bytes;
    r.bytes = r.value_bytes;
    r.alignment = elem_bytes;
    return r;
}

}  // namespace

const char* kv_dtype_name(kv_dtype d) {
    switch (d) {
        case kv_dtype::fp8: return "fp8";
        case kv_dtype::bf16: return "bf16";
        case kv_dtype::fp32: return "fp32";
    }
    return "?";
}

const char* index_k_dtype_name(index_k_dtype d) {
    switch (d) {
        case index_k_dtype::fp8: return "fp8";
        case index_k_dtype::bf16: return "bf16";
        case index_k_dtype::fp4: return "fp4";
        case index_k_dtype::fp32: return "fp32";
    }
    return "?";
}

result<kv_dtype> parse_kv_dtype(std::string_view s) {
    if (s == "fp8") return kv_dtype::fp8;
    if (s == "bf16") return kv_dtype::bf16;
    if (s == "fp32") return kv_dtype::fp32;
    return make_error(error_code::invalid_argument,
                      fmt::format("cache.kv_dtype: '{}' is not one of fp8, bf16, fp32", s));
}

result<index_k_dtype> parse_index_k_dtype(std::string_view s) {
    if (s == "fp8") return index_k_dtype::fp8;
    if (s == "bf16") return index_k_dtype::bf16;
    if (s == "fp4") return index_k_dtype::fp4;
    if (s == "fp32") return index_k_dtype::fp32;
    return make_error(error_code::invalid_argument,
                      fmt::format("cache.index_k_dtype: '{}' is not one of fp8, bf16, fp4, fp32", s));
}

const char* buffer_kind_name(buffer_kind k) {
    return k == buffer_kind::compressed_kv ? "compressed_kv" : "index_k";
}

const char* state_kind_name(state_kind k) {
    switch (k) {
        case state_kind::window: return "window";
        case state_kind::attn_compressor: return "attn_compressor";
        case state_kind::index_compressor: return "index_compressor";
    }
    return "?";
}

result<row_format> make_kv_row_format(kv_dtype d, int64_t head_dim, int64_t rope_dim) {
    switch (d) {
        case kv_dtype::bf16: return plain_row(row_encoding::kv_bf16, "kv_bf16", head_dim, k_bf16_bytes);
        case kv_dtype::fp32: return plain_row(row_encoding::kv_fp32, "kv_fp32", head_dim, k_fp32_bytes);
        case kv_dtype::fp8: break;
    }
    const int64_t nope = head_dim - rope_dim;
    if (nope <= 0 || nope % k_kv_fp8_block != 0) {
        return make_error(error_code::invalid_argument,
                          fmt::format("cache.kv_dtype fp8 needs head_dim - rope dim ({}) to be a "
                                      "positive multiple of {}", nope, k_kv_fp8_block));
    }
    row_format r;
    r.encoding = row_encoding::kv_fp8;
    r.name = "kv_fp8";
    r.dims = head_dim;
    r.value_elems = nope;
    r.value_bytes = nope * k_e4m3_bytes;
    r.rope_elems = rope_dim;
    r.rope_bytes = rope_dim * k_bf16_bytes;
    r.scale_block = k_kv_fp8_block;
    r.scale_bytes = nope / k_kv_fp8_block * k_ue8m0_bytes;
    const int64_t unpadded = r.value_bytes + r.rope_bytes + r.scale_bytes;
    r.bytes = align_up(unpadded, k_kv_fp8_row_multiple);
    r.pad_bytes = r.bytes - unpadded;
    r.alignment = k_bf16_bytes;
    return r;
}

result<row_format> make_index_k_row_format(index_k_dtype d, int64_t dim) {
    switch (d) {
        case index_k_dtype::bf16:
            return plain_row(row_encoding::index_k_bf16, "index_k_bf16", dim, k_bf16_bytes);
        case index_k_dtype::fp32:
            return plain_row(row_encoding::index_k_fp32, "index_k_fp32", dim, k_fp32_bytes);
        case index_k_dtype::fp8: {
            row_format r = plain_row(row_encoding::index_k_fp8, "index_k_fp8", dim, k_e4m3_bytes);
            r.scale_block = dim;
            r.scale_bytes = k_fp32_bytes;
            r.bytes = r.value_bytes + r.scale_bytes;
            r.alignment = k_fp32_bytes;
            return r;
        }
        case index_k_dtype::fp4: break;
    }
    if (dim % k_index_fp4_block != 0) {
        return make_error(error_code::invalid_argument,
                          fmt::format("cache.index_k_dtype fp4 needs index_head_dim ({}) to be a "
                                      "multiple of {}", dim, k_index_fp4_block));
    }
    row_format r;
    r.encoding = row_encoding::index_k_fp4;
    r.name = "index_k_fp4";
    r.dims = dim;
    r.value_elems = dim;
    r.value_bytes = dim / k_e2m1_per_byte;
    r.scale_block = k_index_fp4_block;
    r.scale_bytes = dim / k_index_fp4_block * k_ue8m0_bytes;
    r.bytes = r.value_bytes + r.scale_bytes;
    r.alignment = 1;
    return r;
}

// ------------------------------------------------------------------------------------------------

result<layout_spec> layout_spec::create(const model::model_config& m, const layout_options& opt) {
    if (opt.page_size <= 0 || opt.page_size % m.compress_rate_hca != 0 ||
        opt.page_size % m.compress_rate_csa != 0 || opt.page_size % k_page_granularity != 0) {
        return make_error(error_code::invalid_argument,
                          fmt::format("cache.page_size: {} is not a positive multiple of {} and "
                                      "of the compress ratios ({}, {})",
                                      opt.page_size, k_page_granularity, m.compress_rate_csa,
                                      m.compress_rate_hca));
    }
    auto kv = make_kv_row_format(opt.kv, m.head_dim, m.rope_head_dim);
    if (!kv.is_ok()) return kv.error();
    auto idx = make_index_k_row_format(opt.index_k, m.index_head_dim);
    if (!idx.is_ok()) return idx.error();

    layout_spec l;
    l.opt_ = opt;
    l.window_rows_ = m.sliding_window;
    l.kv_row_ = *kv;
    l.index_k_row_ = *idx;
    l.buffer_index_.assign(m.layers.size(), {-1, -1});
    l.state_index_.assign(m.layers.size(), {-1, -1, -1});

    auto add_buffer = [&](int32_t layer, buffer_kind kind, int64_t ratio, const row_format& row) {
        buffer_layout b{layer, kind, ratio, row, opt.page_size / ratio, 0};
        b.bytes_per_page = b.rows_per_page * row.bytes;
        l.buffer_index_[layer][static_cast<int>(kind)] = static_cast<int32_t>(l.buffers_.size());
        l.layers_[layer].buffers.push_back(static_cast<int32_t>(l.buffers_.size()));
        l.buffers_.push_back(b);
        l.page_group_bytes_ += b.bytes_per_page;
    };
    int64_t slot_offset = 0;
    auto add_state = [&](int32_t layer, state_kind kind, int64_t rows, int64_t row_bytes,
                         int64_t floats) {
        state_layout s{layer, kind, rows, row_bytes, floats, rows * row_bytes, slot_offset};
        slot_offset = align_up(slot_offset + s.bytes, pool_geometry::k_region_alignment);
        l.state_index_[layer][static_cast<int>(kind)] = static_cast<int32_t>(l.states_.size());
        l.layers_[layer].states.push_back(static_cast<int32_t>(l.states_.size()));
        l.states_.push_back(s);
    };
    // Compressor ring (dsv4-model.md §3.2): overlapping (CSA) compressors keep 2m slots of
    // [kv | score] with 2·D' each; non-overlapping (HCA) keep m slots of [kv | score] with D'.
    auto add_compressor = [&](int32_t layer, state_kind kind, int64_t ratio, bool overlap,
                              int64_t dim) {
        const int64_t c = overlap ? 2 : 1;
        const int64_t floats = 2 * c * dim;
        add_state(layer, kind, c * ratio, floats * k_fp32_bytes, floats);
    };

    for (size_t i = 0; i < m.layers.size(); ++i) {
        const model::layer_config& lc = m.layers[i];
        const int32_t id = static_cast<int32_t>(i);
        l.layers_.push_back({id, lc.attention, lc.compress_ratio, lc.is_mtp, {}, {}});
        add_state(id, state_kind::window, l.window_rows_, l.kv_row_.bytes, 0);
        if (lc.attention == model::attention_type::sliding) continue;
        const bool csa = lc.attention == model::attention_type::csa;
        add_buffer(id, buffer_kind::compressed_kv, lc.compress_ratio, l.kv_row_);
        add_compressor(id, state_kind::attn_compressor, lc.compress_ratio, csa, m.head_dim);
        if (csa) {
            add_buffer(id, buffer_kind::index_k, lc.compress_ratio, l.index_k_row_);
            add_compressor(id, state_kind::index_compressor, lc.compress_ratio, true,
                           m.index_head_dim);
        }
    }
    l.state_bytes_per_sequence_ = slot_offset;

    // The fingerprint covers everything two peers must agree on to exchange bytes.
    std::string& c = l.canonical_;
    c = fmt::format("tandem-layout-v1;kv={};index_k={};page={};window={};head_dim={};rope={};"
                    "index_head_dim={};kv_row={};index_row={};layers=",
                    kv_dtype_name(opt.kv), index_k_dtype_name(opt.index_k), opt.page_size,
                    l.window_rows_, m.head_dim, m.rope_head_dim, m.index_head_dim,
                    l.kv_row_.bytes, l.index_k_row_.bytes);
    for (const layer_layout& ly : l.layers_) {
        c += fmt::format("{}:{}{},", static_cast<int>(ly.attention), ly.ratio, ly.is_mtp ? "m" : "");
    }
    for (const state_layout& s : l.states_) c += fmt::format(";s{}:{}x{}", s.layer, s.rows, s.bytes_per_row);
    l.fingerprint_ = XXH3_64bits(c.data(), c.size());
    return l;
}

int32_t layout_spec::buffer_index(int32_t layer, buffer_kind kind) const {
    if (layer < 0 || layer >= num_layers()) return -1;
    return buffer_index_[layer][static_cast<int>(kind)];
}

int32_t layout_spec::state_index(int32_t layer, state_kind kind) const {
    if (layer < 0 || layer >= num_layers()) return -1;
    return state_index_[layer][static_cast<int>(kind)];
}

const buffer_layout& layout_spec::buffer(int32_t layer, buffer_kind kind) const {
    const int32_t i = buffer_index(layer, kind);
    TANDEM_CHECK_MSG(i >= 0, "layer has no such history buffer");
    return buffers_[i];
}

const state_layout& layout_spec::state(int32_t layer, state_kind kind) const {
    const int32_t i = state_index(layer, kind);
    TANDEM_CHECK_MSG(i >= 0, "layer has no such state");
    return states_[i];
}

double layout_spec::bytes_per_token() const {
    return static_cast<double>(page_group_bytes_) / static_cast<double>(opt_.page_size);
}

std::string layout_spec::fingerprint_hex() const { return fmt::format("{:016x}", fingerprint_); }

std::string layout_spec::describe() const {
    int64_t n[3] = {0, 0, 0};
    for (const layer_layout& l : layers_) ++n[static_cast<int>(l.attention)];
    return fmt::format("layout {} (kv {} {} B/row, index_k {} {} B/row, page {} tokens, "
                       "{} layers: {} sliding, {} csa, {} hca)",
                       fingerprint_hex(), kv_dtype_name(opt_.kv), kv_row_.bytes,
                       index_k_dtype_name(opt_.index_k), index_k_row_.bytes, opt_.page_size,
                       layers_.size(), n[0], n[1], n[2]);
}

// ------------------------------------------------------------------------------------------------

pool_geometry::pool_geometry(const layout_spec& layout, int64_t num_pages, int64_t num_slots)
    : layout_(&layout), num_pages_(num_pages), num_slots_(num_slots) {
    TANDEM_CHECK(num_pages >= 0 && num_slots >= 0);
    int64_t off = 0;
    for (const buffer_layout& b : layout.buffers()) {
        buffer_base_.push_back(off);
        off = align_up(off + num_pages * b.bytes_per_page, k_region_alignment);
    }
    slots_base_ = off;
    slot_stride_ = align_up(layout.state_bytes_per_sequence(), k_region_alignment);
    total_bytes_ = slots_base_ + num_slots * slot_stride_;
}

int64_t pool_geometry::page_offset(int32_t buffer_idx, int64_t page) const {
    TANDEM_CHECK(page >= 0 && page < num_pages_);
    return buffer_base_[buffer_idx] + page * layout_->buffers()[buffer_idx].bytes_per_page;
}

int64_t pool_geometry::row_offset(int32_t buffer_idx, int64_t page, int64_t row_in_page) const {
    const buffer_layout& b = layout_->buffers()[buffer_idx];
    TANDEM_CHECK(row_in_page >= 0 && row_in_page < b.rows_per_page);
    return page_offset(buffer_idx, page) + row_in_page * b.row.bytes;
}

int64_t pool_geometry::slot_offset(int64_t slot) const {
    TANDEM_CHECK(slot >= 0 && slot < num_slots_);
    return slots_base_ + slot * slot_stride_;
}

int64_t pool_geometry::state_offset(int32_t state_idx, int64_t slot) const {
    return slot_offset(slot) + layout_->states()[state_idx].offset_in_slot;
}

}  // namespace tandem::cache
