// The one table that declares every setting. Defaults are not here: they live in the embedded
// etc/tandem.toml (a unit test checks that file sets every key declared below).
#include "core/config_schema.h"

#include <limits>

namespace tandem::config_schema {
namespace {

constexpr int64_t k_int_max = std::numeric_limits<int64_t>::max();
constexpr int64_t k_gib = int64_t{1} << 30;

#define REF(member) [](config& c) -> void* { return &c.member; }

field text(std::string_view s, std::string_view k, std::string_view help, void* (*ref)(config&)) {
    return field{s, k, field_type::string, help, ref, 0, 0, 0, 0, 0, std::vector<std::string_view>{}};
}
field integer(std::string_view s, std::string_view k, std::string_view help,
              void* (*ref)(config&), int64_t lo, int64_t hi, int64_t multiple_of = 0) {
    return field{s, k, field_type::integer, help, ref, lo, hi, multiple_of, 0, 0, std::vector<std::string_view>{}};
}
field real(std::string_view s, std::string_view k, std::string_view help, void* (*ref)(config&),
           double lo, double hi) {
    return field{s, k, field_type::real, help, ref, 0, 0, 0, lo, hi, std::vector<std::string_view>{}};
}
field boolean(std::string_view s, std::string_view k, std::string_view help,
              void* (*ref)(config&)) {
    return field{s, k, field_type::boolean, help, ref, 0, 0, 0, 0, 0, std::vector<std::string_view>{}};
}
field choice(std::string_view s, std::string_view k, std::string_view help, void* (*ref)(config&),
             std::vector<std::string_view> choices) {
    return field{s, k, field_type::choice, help, ref, 0, 0, 0, 0, 0, std::move(choices)};
}
field list(std::string_view s, std::string_view k, std::string_view help, void* (*ref)(config&)) {
    return field{s, k, field_type::string_list, help, ref, 0, 0, 0, 0, 0, std::vector<std::string_view>{}};
}

const std::vector<field>& table() {
    static const std::vector<field> fields = {
        text("server", "host", "Listen address.", REF(server.host)),
        integer("server", "port", "Listen port (0 picks a free port and logs it).",
         REF(server.port), 0, 65535),
        integer("server", "max_connections",
         "Concurrent connections; beyond it new ones get 503 and are closed.",
         REF(server.max_connections), 1, 1'000'000),
        integer("server", "max_header_bytes",
         "Largest request line + headers; larger requests get 413.", REF(server.max_header_bytes),
         256, 1 << 24),
        integer("server", "max_body_bytes", "Largest request body; larger bodies get 413.",
         REF(server.max_body_bytes), 0, 4 * k_gib),
        integer("server", "request_timeout_ms",
         "A request whose bytes started arriving must be complete within this, else 408.",
         REF(server.request_timeout_ms), 1, k_int_max),
        integer("server", "idle_timeout_ms",
         "An idle keep-alive connection is closed after this.", REF(server.idle_timeout_ms), 1,
         k_int_max),
        integer("server", "shutdown_grace_ms",
         "On SIGINT/SIGTERM in-flight requests may finish within this; the rest fail with 503.",
         REF(server.shutdown_grace_ms), 0, k_int_max),
        boolean("server", "debug_endpoints",
                "Serve /debug/* fault-injection routes (stall the scheduler); never in production.",
                REF(server.debug_endpoints)),

        text("model", "path",
         "Checkpoint directory (config.json, safetensors, tokenizer.json); relative to the "
         "working directory.",
         REF(model.path)),
        text("model", "served_name",
         "Model id reported by /v1/models and expected in requests; empty: the name of the "
         "model.path directory.", REF(model.served_name)),
        choice("model", "numerics",
         "hf: match HF transformers; official: DeepSeek's FP8/FP4 simulation.", REF(model.numerics), {"hf", "official"}),
        choice("model", "weight_pages",
         "huge: read the checkpoint into memory at startup, in 2 MiB pages (the kernels stream weights "
         "without a TLB miss per 4 KiB); mapped: map the files (lazy, shared page cache, 4 KiB pages).",
         REF(model.weight_pages), {"huge", "mapped"}),

        choice("backend", "device", "auto: CUDA when a GPU is present, else CPU.",
         REF(backend.device), {"auto", "cpu", "cuda"}),
        integer("backend", "threads", "CPU worker threads (0 = all cores).",
         REF(backend.threads), 0, 4096),
        choice("backend", "cpu_matmul",
         "exact: every linear in the kernels' one reduction order; amx: BF16, FP8 and FP4 matrices on AMX-BF16 tiles "
         "(FP8 / FP4 decoded to bf16 exactly, x split into three bf16 parts; batch-invariant, not bitwise the exact kernels).",
         REF(backend.cpu_matmul), {"exact", "amx"}),
        boolean("backend", "test_emulate_device",
         "Testing only: backend.device = cuda runs the device executor over the host emulation "
         "(host memory as the device), with no GPU probe.", REF(backend.test_emulate_device)),

        choice("cache", "kv_dtype",
         "Main KV row storage (fp32 is exact storage for reference tests).", REF(cache.kv_dtype), {"fp8", "bf16", "fp32"}),
        choice("cache", "index_k_dtype", "Lightning-indexer key row storage.",
         REF(cache.index_k_dtype), {"fp8", "bf16", "fp4", "fp32"}),
        integer("cache", "page_size", "Tokens per page; a multiple of 128.",
         REF(cache.page_size), 128, 1 << 20, 128),
        integer("cache", "memory_bytes", "Pool budget in bytes (0: use memory_fraction).",
         REF(cache.memory_bytes), 0, k_int_max),
        real("cache", "memory_fraction",
         "Share of available memory for the pool when memory_bytes = 0.",
         REF(cache.memory_fraction), 0.001, 1.0),
        boolean("cache", "prefix_cache",
                "Reuse cached prompt prefixes (history pages + boundary snapshots); the same "
                "tokens and logprobs as without it.",
                REF(cache.prefix_cache)),
        integer("cache", "snapshot_interval_tokens",
         "Also snapshot a prefill every this many tokens (a multiple of page_size; 0: only at "
         "the prompt end and the decode tail).",
         REF(cache.snapshot_interval_tokens), 0, k_int_max),
        integer("cache", "snapshot_memory_bytes",
         "Bytes of boundary snapshots the prefix cache keeps, besides the pool (0: 1/8 of the "
         "pool budget).",
         REF(cache.snapshot_memory_bytes), 0, k_int_max),
        integer("cache", "host_memory_bytes",
         "Host-memory tier of the prefix cache: history pages are written through to it and a "
         "page evicted from the pool is loaded back from it (0: off).",
         REF(cache.host_memory_bytes), 0, k_int_max),
        integer("cache", "host_load_timeout_ms",
         "How long a step waits for one layer of a host-tier load before failing its requests.",
         REF(cache.host_load_timeout_ms), 1, 3600000),
        integer("cache", "test_host_load_delay_ms",
         "Testing only: the host-tier copy thread sleeps this long before copying a matching "
         "kind of a matching layer.", REF(cache.test_host_load_delay_ms), 0, 600000),
        choice("cache", "test_host_load_delay_kind",
         "Testing only: which kind test_host_load_delay_ms delays.", REF(cache.test_host_load_delay_kind),
         {"all", "compressed_kv", "index_k", "window", "attn_compressor", "index_compressor"}),
        integer("cache", "test_host_load_delay_layer",
         "Testing only: which layer test_host_load_delay_ms delays (-1: every layer).",
         REF(cache.test_host_load_delay_layer), -1, 1 << 20),
        boolean("cache", "test_host_sentinel",
         "Testing only: fill host-tier load destinations with a sentinel and check it is gone "
         "before attention reads a layer.", REF(cache.test_host_sentinel)),
        boolean("cache", "test_host_skip_gate",
         "Testing only: the forward pass does not wait for host-tier loads (with "
         "test_host_sentinel, proves the sentinel check fires).", REF(cache.test_host_skip_gate)),
        boolean("cache", "test_host_evict_on_release",
         "Testing only: whenever a request ends, every pool copy the prefix cache could evict goes "
         "to the host tier, so every later hit loads from host memory.",
         REF(cache.test_host_evict_on_release)),

        integer("scheduler", "max_running_requests", "Requests decoding at once.",
         REF(scheduler.max_running_requests), 1, 1 << 20),
        integer("scheduler", "max_queued_requests",
         "Requests waiting for admission; beyond it new ones get 503 with Retry-After.",
         REF(scheduler.max_queued_requests), 0, 1 << 24),
        integer("scheduler", "max_prefill_tokens", "Prompt tokens processed per step.",
         REF(scheduler.max_prefill_tokens), 1, 1 << 24),
        integer("scheduler", "max_prompt_logprob_tokens",
         "Prompt tokens per step of requests that ask prompt logprobs (each such token's logits "
         "row comes back, vocab x 4 bytes): bounds the step's logits.",
         REF(scheduler.max_prompt_logprob_tokens), 1, 1 << 24),
        integer("scheduler", "max_context_tokens",
         "Prompt + completion limit (0: the model's maximum).", REF(scheduler.max_context_tokens),
         0, k_int_max),
        integer("scheduler", "queue_timeout_ms",
         "A queued request not started within this fails with a clear error.",
         REF(scheduler.queue_timeout_ms), 1, k_int_max),
        integer("scheduler", "stall_timeout_ms",
         "A loop with pending work and no progress for this turns /health 503.",
         REF(scheduler.stall_timeout_ms), 1, k_int_max),

        choice("topology", "mode", "single: one engine; pd: prefill + decode engines.",
         REF(topology.mode), {"single", "pd"}),
        choice("topology", "role",
         "pd across processes: which engine this process runs (both = in one process).",
         REF(topology.role), {"both", "prefill", "decode"}),

        choice("transport", "kind", "How pd engines exchange state.", REF(transport.kind), {"inproc", "tcp", "nccl"}),
        text("transport", "listen_host", "Prefill role: address to accept decode peers.",
         REF(transport.listen_host)),
        integer("transport", "listen_port", "Prefill role: port to accept decode peers.",
         REF(transport.listen_port), 0, 65535),
        list("transport", "peers", "Decode role: prefill servers as \"host:port\".",
         REF(transport.peers)),
        integer("transport", "handshake_timeout_ms", "Deadline for a peer handshake.",
         REF(transport.handshake_timeout_ms), 1, k_int_max),
        integer("transport", "transfer_timeout_ms",
         "pd: a prefill job with no progress (no write arriving) for this long fails.", REF(transport.transfer_timeout_ms), 1,
         k_int_max),
        integer("transport", "reconnect_min_ms",
         "First delay before redialing a lost peer; doubles on each failure.",
         REF(transport.reconnect_min_ms), 1, k_int_max),
        integer("transport", "reconnect_max_ms",
         "Longest delay between redials, and the retry period of a peer that refused the "
         "handshake; must be >= reconnect_min_ms.",
         REF(transport.reconnect_max_ms), 1, k_int_max),
        integer("transport", "max_frame_bytes",
         "Largest frame payload accepted; a larger one is treated as garbage and the link closed.",
         REF(transport.max_frame_bytes), 4096, std::numeric_limits<uint32_t>::max()),
        integer("transport", "abort_lease_ms",
         "Pages of an aborted transfer stay quarantined this long when the prefill side never "
         "answers ABORT_ACK.",
         REF(transport.abort_lease_ms), 1, k_int_max),
        integer("transport", "heartbeat_interval_ms",
         "tcp: each side PINGs every ready link this often; the peer answers PONG.",
         REF(transport.heartbeat_interval_ms), 1, k_int_max),
        integer("transport", "peer_timeout_ms",
         "tcp: a peer that answered no PING for this long (it stopped reading or writing) is "
         "declared lost: its link closes, its jobs fail, it is redialed; must be > "
         "heartbeat_interval_ms.",
         REF(transport.peer_timeout_ms), 1, k_int_max),
        integer("transport", "nccl_device", "kind = nccl: CUDA device of this side's cache pool.",
         REF(transport.nccl_device), 0, 1023),
        integer("transport", "fault_delay_ms",
         "Testing/drills only: each outgoing protocol frame waits this long (0: off).",
         REF(transport.fault_delay_ms), 0, k_int_max),
        integer("transport", "fault_stall_ms",
         "Testing/drills only: stop reading a link for this long, once per link (0: off).",
         REF(transport.fault_stall_ms), 0, k_int_max),
        integer("transport", "fault_stall_after_frames",
         "Testing/drills only: the stall starts after this many frames arrived on the link "
         "(0: at connect).",
         REF(transport.fault_stall_after_frames), 0, k_int_max),
        integer("transport", "fault_drop_after_frames",
         "Testing/drills only: close a link after this many frames in + out (0: never).",
         REF(transport.fault_drop_after_frames), 0, k_int_max),
        real("transport", "fault_corrupt_probability",
         "Testing/drills only: probability of flipping one random byte of an outgoing frame.",
         REF(transport.fault_corrupt_probability), 0.0, 1.0),
        integer("transport", "fault_abort_storm",
         "Testing/drills only: extra ABORT frames for unknown request ids sent after each frame "
         "(0: off).",
         REF(transport.fault_abort_storm), 0, 1 << 20),
        integer("transport", "fault_seed",
         "Testing/drills only: seed of the fault injector's random stream (reproducible runs).",
         REF(transport.fault_seed), 0, k_int_max),

        real("verify", "sample_rate",
         "Share of finished requests recomputed on the local plain path and compared bit for "
         "bit with what was served (0 = off).", REF(verify.sample_rate), 0.0, 1.0),
        integer("verify", "max_inflight",
         "Verification checks pending or computing; further samples are skipped (counted).",
         REF(verify.max_inflight), 1, 1 << 20),
        integer("verify", "max_tokens_per_second",
         "Recompute budget (a token bucket of 10 s); samples beyond it are skipped (counted). "
         "0 = unlimited.", REF(verify.max_tokens_per_second), 0, k_int_max),
        integer("verify", "max_chunk_tokens",
         "Tokens one verification step computes; a live request waits at most one such step.",
         REF(verify.max_chunk_tokens), 1, 1 << 20),
        choice("verify", "fault_corrupt_kind",
         "Testing/drills only (pd decode): flip bits in every landed write of this state kind "
         "after its checksum verified.", REF(verify.fault_corrupt_kind),
         {"none", "compressed_kv", "index_k", "window", "attn_compressor", "index_compressor"}),

        choice("logging", "level", "Least severe level written.", REF(logging.level), {"debug", "info", "warn", "error"}),
        boolean("logging", "access_log", "One log line per HTTP request.",
         REF(logging.access_log)),
    };
    return fields;
}

#undef REF

}  // namespace

std::span<const field> fields() { return table(); }

const field* find(std::string_view section, std::string_view key) {
    for (const field& f : table()) {
        if (f.section == section && f.key == key) return &f;
    }
    return nullptr;
}

bool is_section(std::string_view section) {
    for (const field& f : table()) {
        if (f.section == section) return true;
    }
    return false;
}

std::string_view type_name(field_type type) {
    switch (type) {
        case field_type::integer: return "integer";
        case field_type::real: return "number";
        case field_type::boolean: return "boolean";
        case field_type::string: return "string";
        case field_type::choice: return "string";
        case field_type::string_list: return "array of strings";
    }
    return "?";
}

}  // namespace tandem::config_schema
