// cache/snapshot.cpp — capture, verify and restore of boundary snapshots.
#include "cache/snapshot.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/check.h"

namespace tandem::cache {

namespace {

// An overlapping (CSA) compressor ring has 2m rows of [kv (2D') | score (2D')]; its Ca half of
// row j is kv[0:D'] and score[0:D'] (model/compressor.cpp pool_window reads nothing else of the
// previous window).
bool is_overlapping_ring(const layout_spec& layout, const state_layout& st) {
    const layer_layout& ly = layout.layers()[static_cast<size_t>(st.layer)];
    return st.kind != state_kind::window && ly.ratio > 0 && st.rows == 2 * ly.ratio;
}

int64_t ca_floats(const state_layout& st) { return st.floats_per_row / 4; }  // D'

}  // namespace

std::vector<snapshot_part> snapshot_parts(const layout_spec& layout, int64_t boundary) {
    TANDEM_CHECK_MSG(boundary > 0 && boundary % layout.page_size() == 0,
                     "a snapshot boundary is a positive page multiple");
    std::vector<snapshot_part> parts;
    int64_t offset = 0;
    for (int k = 0; k < k_state_kinds; ++k) {
        for (size_t i = 0; i < layout.states().size(); ++i) {
            const state_layout& st = layout.states()[i];
            if (static_cast<int>(st.kind) != k) continue;
            snapshot_part p;
            p.state_idx = static_cast<int32_t>(i);
            p.layer = st.layer;
            p.kind = st.kind;
            if (st.kind == state_kind::window) {
                p.rows = std::min(st.rows, boundary);
                p.bytes_per_row = st.bytes_per_row;
            } else {
                if (!is_overlapping_ring(layout, st)) continue;  // HCA: empty at a boundary
                p.rows = st.rows / 2;
                p.bytes_per_row = 2 * ca_floats(st) * static_cast<int64_t>(sizeof(float));
            }
            p.bytes = p.rows * p.bytes_per_row;
            p.payload_offset = offset;
            offset += p.bytes;
            parts.push_back(p);
        }
    }
    return parts;
}

int64_t snapshot_payload_bytes(const layout_spec& layout, int64_t boundary) {
    int64_t total = 0;
    for (const snapshot_part& p : snapshot_parts(layout, boundary)) total += p.bytes;
    return total;
}

uint64_t hash_tokens(std::span<const int32_t> tokens) {
    return XXH3_64bits(tokens.data(), tokens.size_bytes());
}

void seal_snapshot_checksums(const layout_spec& layout, boundary_snapshot& snap) {
    XXH3_state_t* st[k_state_kinds];
    for (auto& s : st) {
        s = XXH3_createState();
        XXH3_64bits_reset(s);
    }
    if (snap.header.boundary > 0 && snap.header.boundary % layout.page_size() == 0) {
        for (const snapshot_part& p : snapshot_parts(layout, snap.header.boundary)) {
            if (p.payload_offset + p.bytes > static_cast<int64_t>(snap.payload.size())) break;
            XXH3_64bits_update(st[static_cast<int>(p.kind)], snap.payload.data() + p.payload_offset,
                               static_cast<size_t>(p.bytes));
        }
    }
    for (int k = 0; k < k_state_kinds; ++k) {
        snap.header.kind_checksum[k] = XXH3_64bits_digest(st[k]);
        XXH3_freeState(st[k]);
    }
}

boundary_snapshot capture_snapshot(const page_pool& pool, slot_ref slot,
                                   std::span<const int32_t> tokens, uint64_t cache_key) {
    const layout_spec& layout = pool.layout();
    const int64_t b = static_cast<int64_t>(tokens.size());
    boundary_snapshot snap;
    snap.header.cache_key = cache_key;
    snap.header.boundary = b;
    snap.header.token_hash = hash_tokens(tokens);
    snap.header.payload_bytes = snapshot_payload_bytes(layout, b);
    snap.payload.resize(static_cast<size_t>(snap.header.payload_bytes));
    // Pool bytes are read through the pool (a device arena is not host memory); a failed read
    // (a broken device) is fatal, as a failed sequence-state write is (page_pool.cpp).
    auto read = [&pool](std::byte* dst, const void* src, int64_t n) {
        const status st = pool.read_bytes(dst, static_cast<const std::byte*>(src), n);
        TANDEM_CHECK_MSG(st.is_ok(), "snapshot: reading the pool failed");
    };
    for (const snapshot_part& p : snapshot_parts(layout, b)) {
        std::byte* dst = snap.payload.data() + p.payload_offset;
        if (p.kind == state_kind::window) {
            for (int64_t r = 0; r < p.rows; ++r)  // logical order: position b − rows first
                read(dst + r * p.bytes_per_row, pool.window_row(slot, p.layer, b - p.rows + r), p.bytes_per_row);
            continue;
        }
        const state_layout& st = layout.states()[static_cast<size_t>(p.state_idx)];
        const float* ring = pool.compressor_state(slot, p.layer, p.kind);
        const int64_t d = ca_floats(st), half = st.floats_per_row / 2;
        const int64_t fsz = static_cast<int64_t>(sizeof(float));
        for (int64_t r = 0; r < p.rows; ++r) {
            std::byte* out = dst + r * p.bytes_per_row;
            read(out, ring + r * st.floats_per_row, d * fsz);
            read(out + d * fsz, ring + r * st.floats_per_row + half, d * fsz);
        }
    }
    seal_snapshot_checksums(layout, snap);
    return snap;
}

status verify_snapshot(const layout_spec& layout, const boundary_snapshot& snap,
                       std::span<const int32_t> tokens, uint64_t cache_key) {
    const snapshot_header& h = snap.header;
    if (h.magic != snapshot_header::k_magic || h.version != snapshot_header::k_version) {
        return make_error(error_code::data_loss,
                          fmt::format("snapshot: bad magic/version ({:#x} v{})", h.magic, h.version));
    }
    if (h.cache_key != cache_key) {
        return make_error(error_code::invalid_argument,
                          fmt::format("snapshot: cache key {:016x} is not this engine's {:016x} "
                                      "(another layout, model or numerics)",
                                      h.cache_key, cache_key));
    }
    const int64_t b = static_cast<int64_t>(tokens.size());
    if (h.boundary != b || b <= 0 || b % layout.page_size() != 0) {
        return make_error(error_code::invalid_argument,
                          fmt::format("snapshot: boundary {} does not match the {} tokens asked "
                                      "for (page size {})",
                                      h.boundary, b, layout.page_size()));
    }
    if (h.token_hash != hash_tokens(tokens)) {
        return make_error(error_code::invalid_argument,
                          fmt::format("snapshot: token hash differs at boundary {}", b));
    }
    const int64_t want = snapshot_payload_bytes(layout, b);
    if (h.payload_bytes != want || static_cast<int64_t>(snap.payload.size()) != want) {
        return make_error(error_code::data_loss,
                          fmt::format("snapshot: payload is {} B (header says {}), layout needs {}",
                                      snap.payload.size(), h.payload_bytes, want));
    }
    boundary_snapshot check;
    check.header = h;
    check.payload = snap.payload;  // checksums are recomputed over a copy: verify stays const
    seal_snapshot_checksums(layout, check);
    for (int k = 0; k < k_state_kinds; ++k) {
        if (check.header.kind_checksum[k] != h.kind_checksum[k]) {
            return make_error(error_code::data_loss,
                              fmt::format("snapshot: {} checksum mismatch at boundary {}",
                                          state_kind_name(static_cast<state_kind>(k)), b));
        }
    }
    return status::ok();
}

void for_each_restore_copy(page_pool& pool, slot_ref slot, const boundary_snapshot& snap,
                           int32_t state_idx, const restore_copy_fn& fn) {
    const layout_spec& layout = pool.layout();
    const int64_t b = snap.header.boundary;
    for (const snapshot_part& p : snapshot_parts(layout, b)) {
        if (p.state_idx != state_idx) continue;
        const std::byte* src = snap.payload.data() + p.payload_offset;
        if (p.kind == state_kind::window) {
            for (int64_t r = 0; r < p.rows; ++r) {
                fn(pool.window_row_for_write(slot, p.layer, b - p.rows + r), src + r * p.bytes_per_row,
                   p.bytes_per_row);
            }
            continue;
        }
        const state_layout& st = layout.states()[static_cast<size_t>(p.state_idx)];
        auto* ring = reinterpret_cast<std::byte*>(pool.compressor_state_for_write(slot, p.layer, p.kind));
        const int64_t d = ca_floats(st), half = st.floats_per_row / 2;
        const int64_t fsz = static_cast<int64_t>(sizeof(float));
        for (int64_t r = 0; r < p.rows; ++r) {
            const std::byte* in = src + r * p.bytes_per_row;
            fn(ring + r * st.floats_per_row * fsz, in, d * fsz);
            fn(ring + (r * st.floats_per_row + half) * fsz, in + d * fsz, d * fsz);
        }
    }
}

status restore_snapshot(page_pool& pool, slot_ref slot, const boundary_snapshot& snap) {
    if (!pool.is_current(slot)) {
        return make_error(error_code::invalid_argument, "snapshot restore into a stale slot");
    }
    status failed = status::ok();
    for (size_t i = 0; i < pool.layout().states().size(); ++i) {
        for_each_restore_copy(pool, slot, snap, static_cast<int32_t>(i),
                              [&](std::byte* dst, const std::byte* src, int64_t bytes) {
                                  if (failed.is_ok()) failed = pool.write_bytes(dst, src, bytes);
                              });
    }
    return failed.is_ok() ? status::ok() : failed.with_context("snapshot restore");
}

}  // namespace tandem::cache
