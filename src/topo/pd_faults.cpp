#include "topo/pd_faults.h"

#include "topo/pd_protocol.h"

namespace tandem::topo {
namespace {

// splitmix64's finaliser: spreads consecutive n over the id space so a storm does not look like a
// sequence a receiver could special-case.
uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

}  // namespace

transport::frame make_storm_abort_frame(uint64_t n) {
    abort_msg m;
    m.request_id = k_storm_request_id_bit | mix(n);
    m.cause = abort_cause::client;
    return encode_message(m);
}

transport::fault_options pd_fault_options(const transport_section& t) {
    return transport::fault_options_from_config(t, make_storm_abort_frame);
}

}  // namespace tandem::topo
