// cache/snapshot.h — Boundary snapshots: the per-sequence state a later request needs to resume at
// a page boundary b without recomputing [0, b) (prefix-cache.md §5.1).
//
// Owns: which bytes of a sequence slot a snapshot holds (snapshot_parts — the one list the
// capture, the restore, the header checksums and the kind-mutation tests all read), capturing them
// from a slot, verifying a snapshot against what the caller expects, and restoring it into a
// freshly reset slot. It does not own history pages (prefix_tree.h shares those by reference).
//
// What a snapshot at boundary b holds, and why nothing else is needed (b is a multiple of the
// page size P, and P of 128 and of every compress ratio — layout.h):
//   window           the last min(W, b) window rows of every layer (MTP included), in LOGICAL
//                    order (position b−n first), so the format does not depend on the ring.
//   attn_compressor  CSA layers only: the Ca half (kv[0:D'] and score[0:D']) of ring rows 0..m−1,
//   index_compressor the previous window the next emission pools from. The current-window
//                    rows m..2m−1 and the Cb halves are always overwritten before they are read,
//                    and an HCA ring is empty at b (its window starts there), so they are left
//                    out — the kind-mutation test proves both claims (poisoning them changes
//                    nothing; poisoning any captured part changes the logits).
// Restore writes the parts into a slot whose state was reset (kv 0, score −inf), so everything
// left out holds exactly what a cold sequence would hold there.
//
// Header (checked by verify before any byte is restored): magic + version, the cache key (layout
// fingerprint + model fingerprint + numerics), b, XXH3-64 of tokens [0, b), payload size, and one
// XXH3-64 per state kind over that kind's parts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "cache/layout.h"
#include "cache/page_pool.h"
#include "core/status.h"

namespace tandem::cache {

// One captured region: a state region of one layer, its place in the payload.
struct snapshot_part {
    int32_t state_idx = -1;       // index into layout_spec::states()
    int32_t layer = 0;
    state_kind kind = state_kind::window;
    int64_t rows = 0;             // window: rows in logical order; compressor: ring rows 0..m−1
    int64_t bytes_per_row = 0;    // bytes each row contributes to the payload
    int64_t payload_offset = 0;
    int64_t bytes = 0;            // rows * bytes_per_row
};

// The parts of a snapshot at boundary b, grouped by kind (window, attn_compressor,
// index_compressor), layers ascending within a kind. b must be a positive page multiple.
std::vector<snapshot_part> snapshot_parts(const layout_spec& layout, int64_t boundary);
int64_t snapshot_payload_bytes(const layout_spec& layout, int64_t boundary);

struct snapshot_header {
    static constexpr uint64_t k_magic = 0x31304e5350414e53ull;  // "SNAPSN01"
    static constexpr uint32_t k_version = 1;
    uint64_t magic = k_magic;
    uint32_t version = k_version;
    uint64_t cache_key = 0;
    int64_t boundary = 0;
    uint64_t token_hash = 0;
    int64_t payload_bytes = 0;
    uint64_t kind_checksum[k_state_kinds] = {};
};

struct boundary_snapshot {
    snapshot_header header;
    std::vector<std::byte> payload;
    int64_t bytes() const { return static_cast<int64_t>(payload.size() + sizeof(header)); }
};

// XXH3-64 of the token ids [0, b) (the header's token_hash).
uint64_t hash_tokens(std::span<const int32_t> tokens);

// Copies the snapshot parts of `slot` (which holds exactly `tokens.size()` == b tokens of state).
boundary_snapshot capture_snapshot(const page_pool& pool, slot_ref slot,
                                   std::span<const int32_t> tokens, uint64_t cache_key);

// Checks magic, version, key, boundary, token hash, payload size and every kind checksum;
// data_loss / invalid_argument errors name the field that disagrees.
status verify_snapshot(const layout_spec& layout, const boundary_snapshot& snap,
                       std::span<const int32_t> tokens, uint64_t cache_key);

// Writes the parts into `slot`, whose state was reset and which holds nothing yet. The caller
// verified the snapshot; a stale slot is an error (nothing written).
status restore_snapshot(page_pool& pool, slot_ref slot, const boundary_snapshot& snap);

// The byte copies that restore the parts of state region `state_idx` (layout_spec::states()) into
// `slot`: dst in the pool, src in the payload. restore_snapshot and the host tier's per-layer load
// both use it, so the two cannot disagree on what a restore writes. Nothing for a region the
// snapshot leaves out (HCA rings).
using restore_copy_fn = std::function<void(std::byte* dst, const std::byte* src, int64_t bytes)>;
void for_each_restore_copy(page_pool& pool, slot_ref slot, const boundary_snapshot& snap,
                           int32_t state_idx, const restore_copy_fn& fn);

// Recomputes header.kind_checksum from the payload (capture, and tests that edit a payload).
void seal_snapshot_checksums(const layout_spec& layout, boundary_snapshot& snap);

}  // namespace tandem::cache
