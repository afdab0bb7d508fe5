// core/config.h — Every setting of tandem, in one struct, from one TOML file plus overrides.
//
// Precedence, lowest first: the built-in defaults (etc/tandem.toml, embedded in the binary at
// build time, so the shipped file and the defaults can never drift apart) → the --config file →
// the CLI flags (--model, --host, --port, --topology) → --set section.key=value, in order.
//
// Every key is declared once in the schema (config_schema.cpp) with its type, range and help
// text; loading rejects unknown keys, wrong types and out-of-range values with one message that
// names the key and, for a file, its line. Relative paths resolve against the working directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace tandem {

struct server_section {
    std::string host;              // listen address
    int64_t port = 0;              // listen port (0 = any free port; the bound port is logged)
    int64_t max_connections = 0;   // concurrent connections; more are answered 503 and closed
    int64_t max_header_bytes = 0;  // request line + headers; larger → 413
    int64_t max_body_bytes = 0;    // request body; larger → 413
    int64_t request_timeout_ms = 0;  // a started request must arrive whole within this → 408
    int64_t idle_timeout_ms = 0;     // an idle keep-alive connection is closed after this
    int64_t shutdown_grace_ms = 0;   // SIGTERM: in-flight requests may finish within this
    bool debug_endpoints = false;    // /debug/* fault-injection routes (tests and drills only)
};

struct model_section {
    std::string path;         // checkpoint directory (config.json, *.safetensors, tokenizer)
    std::string served_name;  // the id /v1/models reports and requests must name (load_config
                              // fills an empty one with served_name_of(path))
    std::string numerics;     // "hf" | "official"
    std::string weight_pages; // "huge" (copied into memory, huge pages) | "mapped"
};

struct backend_section {
    std::string device;  // "auto" | "cpu" | "cuda"
    int64_t threads = 0; // CPU worker threads (0 = all cores)
    // "exact": every linear in the kernels' one reduction order (bitwise across ISAs and the GPU);
    // "amx": BF16 / FP8 / FP4 matrices on AMX tiles (cpu/amx.h) — faster, batch-invariant, not bitwise exact.
    std::string cpu_matmul;
    // Testing only: device = "cuda" over cuda::make_emulated_runtime() (host memory as the
    // device), so CI serves through the device path without a GPU. Never set in production.
    bool test_emulate_device = false;
};

struct cache_section {
    std::string kv_dtype;       // "fp8" | "bf16" | "fp32" (fp32: exact storage for tests)
    std::string index_k_dtype;  // "fp8" | "bf16" | "fp4" | "fp32"
    int64_t page_size = 0;      // tokens per page, a multiple of 128
    int64_t memory_bytes = 0;   // pool budget (0 = memory_fraction of available memory)
    double memory_fraction = 0; // used when memory_bytes = 0
    bool prefix_cache = false;  // radix prefix cache over the pool (engine/prefix_cache.h)
    int64_t snapshot_interval_tokens = 0;  // extra prefill snapshots (multiple of page_size)
    int64_t snapshot_memory_bytes = 0;     // snapshot budget (0: memory budget / 8)
    int64_t host_memory_bytes = 0;         // host tier of the prefix cache (0: off)
    int64_t host_load_timeout_ms = 0;      // a step waits this long for one layer of a load
    // Testing only (cache/host_tier.h host_tier_test_hooks): never set in production.
    int64_t test_host_load_delay_ms = 0;
    std::string test_host_load_delay_kind;  // "all" or a kind name
    int64_t test_host_load_delay_layer = -1;
    bool test_host_sentinel = false;
    bool test_host_skip_gate = false;
    bool test_host_evict_on_release = false;
};

struct scheduler_section {
    int64_t max_running_requests = 0;
    int64_t max_queued_requests = 0;
    int64_t max_prefill_tokens = 0;   // per-step prefill token budget (chunk size)
    int64_t max_prompt_logprob_tokens = 0;  // of which prompt-logprob requests' (every row's logits)
    int64_t max_context_tokens = 0;   // prompt + completion (0 = the model's maximum)
    int64_t queue_timeout_ms = 0;     // a queued request not started within this fails
    int64_t stall_timeout_ms = 0;     // a loop with work and no progress for this → /health 503
};

struct topology_section {
    std::string mode;  // "single" | "pd"
    std::string role;  // "both" | "prefill" | "decode" (pd across processes)
};

struct transport_section {
    std::string kind;                 // "inproc" | "tcp" | "nccl"
    std::string listen_host;          // prefill role: where to accept decode peers
    int64_t listen_port = 0;
    std::vector<std::string> peers;   // decode role: prefill servers, "host:port"
    int64_t handshake_timeout_ms = 0;
    int64_t transfer_timeout_ms = 0;
    int64_t reconnect_min_ms = 0;     // first reconnect delay; doubles up to reconnect_max_ms
    int64_t reconnect_max_ms = 0;     // >= reconnect_min_ms (checked at load)
    int64_t max_frame_bytes = 0;      // larger incoming frames close the link
    int64_t abort_lease_ms = 0;       // quarantine of an aborted transfer's pages without ABORT_ACK
    int64_t heartbeat_interval_ms = 0;  // tcp: PING every this often on each ready link
    int64_t peer_timeout_ms = 0;      // tcp: no PONG this long → the peer is lost (> interval)
    int64_t nccl_device = 0;          // kind = "nccl": CUDA device of this side's pool
    // Fault injection (tests and drills only; transport/tcp.h fault_options). All 0 = off.
    int64_t fault_delay_ms = 0;
    int64_t fault_stall_ms = 0;
    int64_t fault_stall_after_frames = 0;
    int64_t fault_drop_after_frames = 0;
    double fault_corrupt_probability = 0;
    int64_t fault_abort_storm = 0;
    int64_t fault_seed = 0;
};

struct verify_section {
    double sample_rate = 0;             // share of finished requests recomputed and compared
    int64_t max_inflight = 0;           // checks pending or computing; more are skipped
    int64_t max_tokens_per_second = 0;  // recompute budget (0 = unlimited)
    int64_t max_chunk_tokens = 0;       // tokens per verification step (bounds the delay)
    // Testing/drills only: after a pd write of this state kind verified its checksum and landed,
    // flip bits in it (a wrong-offset descriptor the checksum cannot see). "none" = off.
    std::string fault_corrupt_kind;
};

struct logging_section {
    std::string level;        // "debug" | "info" | "warn" | "error"
    bool access_log = false;  // one line per HTTP request
};

struct config {
    server_section server;
    model_section model;
    backend_section backend;
    cache_section cache;
    scheduler_section scheduler;
    topology_section topology;
    transport_section transport;
    verify_section verify;
    logging_section logging;
};

// Where a configuration comes from; built by the CLI parser.
struct config_sources {
    std::string file;                        // --config (empty: built-in defaults only)
    std::vector<std::string> flag_overrides; // "section.key=value" from --model/--host/...
    std::vector<std::string> set_overrides;  // --set, in command-line order
};

result<config> load_config(const config_sources& sources);

// The default model.served_name: the last component of the model directory.
std::string served_name_of(std::string_view model_path);

// Parses TOML text on top of `base` (used by load_config and tests). `origin` names the text
// in error messages (a file path, "<defaults>").
result<config> apply_toml(config base, std::string_view toml_text, std::string_view origin);

// Applies one "section.key=value" override.
status apply_override(config& cfg, std::string_view assignment, std::string_view origin);

// The effective configuration as TOML (tandem --print-config); loading it back gives `cfg`.
std::string config_to_toml(const config& cfg);

// The reference of every key: section, name, type, range and help (tandem --help).
std::string config_reference();

// The embedded etc/tandem.toml.
std::string_view default_config_toml();

}  // namespace tandem
