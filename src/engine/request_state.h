// engine/request_state.h — The life of one request as an explicit state machine.
//
// Every change of state goes through transition(), which checks the edge against the table
// below and records why it happened, so a request's history can be read back (logs, tests) and
// an impossible edge is a TANDEM_CHECK failure at the place it was attempted.
//
//   queued     → prefilling (admitted) | transferring (admitted, prefilled remotely: pd)
//              | finished (API stop before start) | aborted | failed (queue timeout, stopping)
//   transferring → decoding (state landed verified, first token from the prefill engine)
//              | queued (preempted) | finished | aborted | failed (transfer failed)
//   prefilling → decoding (first token of this run sampled) | queued (preempted)
//              | finished | aborted | failed
//   decoding   → queued (preempted) | finished | aborted | failed
//   finished, aborted, failed: terminal, no edge leaves them.
//
// A preempted request goes back to queued and, when re-admitted, to prefilling again: it
// recomputes its prompt plus the tokens it already generated.
#pragma once

#include <string>
#include <vector>

namespace tandem::engine {

enum class request_state {
    queued,      // accepted, waiting for admission (no model state, no cache capacity held)
    prefilling,  // admitted: processing prompt (+ earlier output after preemption) in chunks
    transferring,  // admitted (pd decode): a prefill engine computes the prompt; state lands here
    decoding,    // generating one token per step
    finished,    // ended normally: stop token, EOS, max_tokens, context limit, API stop
    aborted,     // cancelled by the client or an operator
    failed,      // ended by an error (queue timeout, model failure, engine stopping)
};

const char* request_state_name(request_state s);
bool is_terminal(request_state s);
bool can_transition(request_state from, request_state to);

struct state_change {
    request_state from;
    request_state to;
    std::string reason;
};

// A request's current state plus the history of how it got there.
struct state_record {
    request_state state = request_state::queued;
    std::vector<state_change> history;
    const std::string& last_reason() const;
};

// The only way a state changes. Checks the edge is allowed (a bug otherwise) and records it.
void transition(state_record& rec, request_state to, std::string reason);

}  // namespace tandem::engine
