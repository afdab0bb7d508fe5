#include "topo/pd_landed_fault.h"

#include <fmt/format.h>

#include <map>
#include <vector>

namespace tandem::topo {

namespace {

constexpr std::byte k_flip{0x80};

void flip_rows(std::byte* base, int64_t rows, int64_t row_bytes) {
    for (int64_t r = 0; r < rows; ++r) base[r * row_bytes] ^= k_flip;
}

}  // namespace

result<std::optional<landed_corruption>> parse_landed_corruption(std::string_view kind) {
    if (kind == "none" || kind.empty()) return std::optional<landed_corruption>{};
    landed_corruption c;
    for (int b = 0; b < cache::k_buffer_kinds; ++b) {
        if (kind == cache::buffer_kind_name(static_cast<cache::buffer_kind>(b))) {
            c.buffer = static_cast<cache::buffer_kind>(b);
            return std::optional<landed_corruption>{c};
        }
    }
    for (int s = 0; s < cache::k_state_kinds; ++s) {
        if (kind == cache::state_kind_name(static_cast<cache::state_kind>(s))) {
            c.history = false;
            c.state = static_cast<cache::state_kind>(s);
            return std::optional<landed_corruption>{c};
        }
    }
    return make_error(error_code::invalid_argument,
                      fmt::format("verify.fault_corrupt_kind = \"{}\" is not a state kind", kind));
}

namespace {

// Read, flip, write back through the pool: a device arena is not host memory. A drill whose
// copy fails simply does not corrupt (the canary then finds nothing, which its test would see).
void flip_pool_rows(cache::page_pool& pool, std::byte* at, int64_t rows, int64_t bytes_per_row) {
    std::vector<std::byte> host(static_cast<size_t>(rows * bytes_per_row));
    if (!pool.read_bytes(host.data(), at, rows * bytes_per_row).is_ok()) return;
    flip_rows(host.data(), rows, bytes_per_row);
    (void)pool.write_bytes(at, host.data(), rows * bytes_per_row);
}

void corrupt_page(cache::page_pool& pool, const landed_corruption& c, cache::page_ref ref, int32_t layer,
                  cache::buffer_kind kind) {
    if (!c.history || kind != c.buffer) return;
    const cache::layout_spec& l = pool.layout();
    const int32_t bi = l.buffer_index(layer, kind);
    if (bi < 0) return;
    std::byte* page = pool.page_bytes_for_write(ref, bi);
    if (page == nullptr) return;
    const cache::buffer_layout& b = l.buffers()[static_cast<size_t>(bi)];
    flip_pool_rows(pool, page, b.rows_per_page, b.row.bytes);
}

}  // namespace

void corrupt_landed(cache::page_pool& pool, const landed_corruption& c, const page_write_msg& w) {
    corrupt_page(pool, c, w.page, w.layer, w.kind);
}

void corrupt_landed(cache::page_pool& pool, const landed_corruption& c, const page_span_msg& w) {
    corrupt_page(pool, c, w.page, w.layer, w.kind);
}

void corrupt_landed(cache::page_pool& pool, const landed_corruption& c, const state_write_msg& w) {
    if (c.history || w.kind != c.state) return;
    const cache::layout_spec& l = pool.layout();
    const int32_t si = l.state_index(w.layer, w.kind);
    std::byte* slot = pool.slot_bytes_for_write(w.slot);
    if (si < 0 || slot == nullptr) return;
    const cache::pool_geometry& g = pool.geometry();
    const cache::state_layout& s = l.states()[static_cast<size_t>(si)];
    flip_pool_rows(pool, slot + (g.state_offset(si, w.slot.slot) - g.slot_offset(w.slot.slot)), s.rows,
                   s.bytes_per_row);
}

std::string transferred_state_kinds(const cache::layout_spec& layout) {
    std::map<std::string, int> layers;  // kind → how many layers have it
    for (const cache::buffer_layout& b : layout.buffers()) ++layers[cache::buffer_kind_name(b.kind)];
    for (const cache::state_layout& s : layout.states()) ++layers[cache::state_kind_name(s.kind)];
    std::string out;
    for (const auto& [kind, n] : layers) {
        if (!out.empty()) out += ", ";
        out += fmt::format("{} ({} layers)", kind, n);
    }
    return out;
}

}  // namespace tandem::topo
