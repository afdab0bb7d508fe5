// topo/pd_landed_fault.h — verify.fault_corrupt_kind: the fault the shadow-verification canary
// (engine/verifier.h) exists to catch, injected on purpose for tests and drills.
//
// The deployment this models decoded from corrupt state because a descriptor named the wrong
// offset or size: every checksum verified (they cover the bytes that were sent), yet the pool
// held wrong bytes. So the corruption happens on the decode side AFTER a write of the chosen
// kind verified and landed: bit 7 of the first byte of every row it wrote is flipped (the sign
// of an fp8 element, an exponent bit of a bf16 one; never a NaN). Nothing in the transfer path
// can see it; only a recompute can.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "cache/layout.h"
#include "cache/page_pool.h"
#include "core/status.h"
#include "topo/pd_protocol.h"

namespace tandem::topo {

struct landed_corruption {
    bool history = true;  // a paged buffer kind; else a per-sequence state kind
    cache::buffer_kind buffer = cache::buffer_kind::compressed_kv;
    cache::state_kind state = cache::state_kind::window;
};

// "none" → nothing; a buffer or state kind name → that kind; anything else names the key.
result<std::optional<landed_corruption>> parse_landed_corruption(std::string_view kind);

// Applied after the write verified and landed (no-op for writes of other kinds).
void corrupt_landed(cache::page_pool& pool, const landed_corruption& c, const page_write_msg& w);
void corrupt_landed(cache::page_pool& pool, const landed_corruption& c, const page_span_msg& w);
void corrupt_landed(cache::page_pool& pool, const landed_corruption& c, const state_write_msg& w);

// What a transfer carries, for divergence logs: "compressed_kv (4 layers), index_k (2 layers), …".
std::string transferred_state_kinds(const cache::layout_spec& layout);

}  // namespace tandem::topo
