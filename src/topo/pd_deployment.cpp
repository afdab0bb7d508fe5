// topo/pd_deployment.cpp — Building the prefill and decode sides and joining them.
#include "topo/pd_deployment.h"

#include <fmt/format.h>

#include "core/log.h"
#include "cuda/host/device_engine.h"
#include "engine/cpu_engine.h"
#include "model/model.h"
#include "topo/model_identity.h"
#include "topo/pd_decode.h"
#include "topo/pd_faults.h"
#include "topo/pd_holds.h"
#include "topo/pd_metrics_text.h"
#include "topo/pd_prefill.h"
#include "transport/nccl.h"
#include "transport/tcp.h"
#include "cuda/host/xxh3.h"

namespace tandem::topo {

namespace {

// backend.device is resolved by then (api/serve.cpp): both engines run on the chosen backend.
// A device engine's pool is in the device space; the transfer code reaches it only through the
// pool's read/write/copy/checksum, so tcp carries its pages through the host and inproc copies
// them device to device (one_device below).
// share: the other engine's weights in this process (role both), which this one reads instead of a
// second copy of the checkpoint (in host memory on the CPU, in device memory on the device).
result<engine::cpu_engine_parts> make_parts(const config& cfg, uint64_t model_fingerprint,
                                            std::shared_ptr<heartbeat> copy_beat,
                                            const engine::engine_weights& share = {}) {
    if (cfg.backend.device == "cuda")
        return cuda::make_device_engine_parts(cfg, model_fingerprint, std::move(copy_beat), share.device);
    return engine::make_cpu_engine_parts(cfg, model_fingerprint, std::move(copy_beat), share.cpu);
}

struct prefill_side {
    std::shared_ptr<engine::pool_sequences> seqs;
    engine::engine_weights weights;  // the executor's, for role both's decode engine (cpu: while sched lives)
    std::shared_ptr<span_holds> holds;  // pd on one device, or nccl
    std::unique_ptr<transport::buffer_channel> own_buffers;  // nccl emulated: the loopback end
    transport::buffer_channel* buffers = nullptr;           // nccl: where history bytes go
    std::unique_ptr<engine::scheduler> sched;
    std::unique_ptr<pd_endpoint> endpoint;
    std::unique_ptr<prefill_server> server;
    std::unique_ptr<transport::transport> transport;
    std::string listening;  // "host:port" for tcp
    int port = 0;           // the bound tcp port
};

struct decode_side {
    std::shared_ptr<engine::pool_sequences> seqs;
    std::unique_ptr<transport::buffer_channel> own_buffers;
    transport::buffer_channel* buffers = nullptr;
    std::shared_ptr<decode_link> link;
    std::unique_ptr<engine::scheduler> sched;
    std::unique_ptr<pd_endpoint> endpoint;
    std::unique_ptr<transport::transport> transport;
};

// pd on one device: both engines in this process (inproc) with their pools in one device space.
// History pages then move device to device (PAGE_SPAN): the prefill side names them and holds them,
// the decode side copies and verifies them with the device XXH3 (pd_holds.h, pd_transfer.h).
bool one_device(const config& cfg) { return cfg.transport.kind == "inproc" && cfg.backend.device == "cuda"; }
// transport.kind = "nccl" (validate_topology allowed it: backend.device = "cuda"): history bytes go
// over the buffer channel, announced by PAGE_BUFFER; the source pages are held as for PAGE_SPAN.
bool nccl(const config& cfg) { return cfg.transport.kind == "nccl"; }

result<prefill_side> build_prefill(const config& cfg, const model_identity& model,
                                   liveness_registry& liveness) {
    // The prefill engine keeps the prefix cache: a hit computes only the suffix, and the decode
    // still receives every page and the whole slot state (shared pages are read, not moved).
    const bool host = cfg.cache.prefix_cache && cfg.cache.host_memory_bytes > 0;
    result<engine::cpu_engine_parts> parts =
        make_parts(cfg, model.fingerprint, host ? liveness.add("prefill host-tier copy thread") : nullptr);
    if (!parts) return parts.error().with_context("prefill engine");
    prefill_side p;
    p.seqs = parts->sequences;
    p.weights = parts->weights;
    engine::scheduler_options so =
        engine::scheduler_options_from(cfg, liveness.add("prefill scheduler"));
    so.verify = {};  // the decode side checks whole requests (prompt state included)
    so.prefix = parts->prefix;
    if (one_device(cfg) || nccl(cfg)) {
        // A hold outlives the decode side's own transfer deadline and abort lease: only a wedged
        // decode side lets it run out.
        p.holds = std::make_shared<span_holds>(p.seqs, cfg.transport.transfer_timeout_ms + cfg.transport.abort_lease_ms);
        so.service = p.holds;
    }
    p.sched = std::make_unique<engine::scheduler>(std::move(parts->executor),
                                                  std::move(parts->cap), std::move(so));
    p.endpoint = std::make_unique<pd_endpoint>(pd_role::prefill, p.seqs->pool().layout(), model);
    p.server = std::make_unique<prefill_server>(*p.sched, p.seqs, cfg.model.path, p.holds);
    return p;
}

result<decode_side> build_decode(const config& cfg, const model_identity& model,
                                 liveness_registry& liveness,
                                 std::shared_ptr<engine::pool_sequences> span_source,
                                 const engine::engine_weights& share_weights_of) {
    config decode_cfg = cfg;
    decode_cfg.cache.prefix_cache = false;  // no decode-side cache yet (README: pd topology)
    result<engine::cpu_engine_parts> parts = make_parts(decode_cfg, 0, nullptr, share_weights_of);
    if (!parts) return parts.error().with_context("decode engine");
    decode_side d;
    d.seqs = parts->sequences;
    result<std::optional<landed_corruption>> corrupt =
        parse_landed_corruption(cfg.verify.fault_corrupt_kind);
    if (!corrupt) return corrupt.error();
    if (span_source && !d.seqs->pool().can_copy_from(span_source->pool())) {
        return make_error(error_code::internal,
                          "pd on one device: the decode pool cannot copy from the prefill pool (not one device space)");
    }
    d.link = std::make_shared<decode_link>(
        d.seqs, decode_link_options{cfg.transport.transfer_timeout_ms,
                                    cfg.transport.abort_lease_ms, *corrupt, std::move(span_source)});
    engine::scheduler_options so =
        engine::scheduler_options_from(cfg, liveness.add("decode scheduler"));
    so.remote = d.link;
    so.verify.transferred_state_kinds = transferred_state_kinds(d.seqs->pool().layout());
    d.sched = std::make_unique<engine::scheduler>(std::move(parts->executor),
                                                  std::move(parts->cap), std::move(so));
    d.endpoint = std::make_unique<pd_endpoint>(pd_role::decode, d.seqs->pool().layout(), model);
    return d;
}

status start_prefill(prefill_side& p) {
    p.server->attach(p.transport.get(), p.endpoint.get(), p.buffers);
    return p.transport->start(p.endpoint->events(p.server->handlers()));
}

status start_decode(decode_side& d) {
    d.link->attach(d.transport.get(), d.endpoint.get(), d.buffers);
    return d.transport->start(d.endpoint->events(d.link->handlers()));
}

result<std::unique_ptr<transport::transport>> make_tcp(const config& cfg, bool is_prefill,
                                                       const pd_endpoint& ep,
                                                       std::vector<std::string> peers,
                                                       std::shared_ptr<heartbeat> beat) {
    // Faults act on what this side sends; in one process (role both) only the prefill side
    // injects them, so a drill corrupts or delays the state transfer itself.
    const bool inject = is_prefill || cfg.topology.role == "decode";
    transport::tcp_options o = transport::tcp_options_from_config(
        cfg.transport, is_prefill, ep.handshake(cfg.transport.handshake_timeout_ms));
    o.faults = inject ? pd_fault_options(cfg.transport) : transport::fault_options{};
    if (!is_prefill) o.peers = std::move(peers);
    o.beat = std::move(beat);
    auto t = transport::tcp_transport::create(std::move(o));
    if (!t) return t.error();
    std::unique_ptr<transport::transport> out = std::move(t.value());
    if (cfg.transport.kind != "nccl") return out;
    // Frames stay on tcp; page bytes go GPU to GPU. The decode side starts the communicator.
    auto n = transport::nccl_transport::create(std::move(out), {static_cast<int>(cfg.transport.nccl_device), !is_prefill});
    if (!n) return n.error();
    std::unique_ptr<transport::transport> wrapped = std::move(n.value());
    return wrapped;
}

// The buffer channel of a transport made by make_tcp with kind nccl.
transport::buffer_channel* buffers_of(transport::transport* t, const config& cfg) {
    return cfg.transport.kind == "nccl" ? static_cast<transport::nccl_transport*>(t) : nullptr;
}

class pd_deployment final : public deployment {
  public:
    pd_deployment(std::string describe, std::optional<prefill_side> p, std::optional<decode_side> d)
        : describe_(std::move(describe)), prefill_(std::move(p)), decode_(std::move(d)) {}

    ~pd_deployment() override {
        // No transport event may reach an engine or link being destroyed.
        if (decode_ && decode_->transport) decode_->transport->stop();
        if (prefill_ && prefill_->transport) prefill_->transport->stop();
        if (decode_) decode_->sched.reset();   // unfinished requests end with an error
        if (prefill_) prefill_->sched.reset();
    }

    engine::engine* api_engine() override { return decode_ ? decode_->sched.get() : nullptr; }

    std::string no_engine_reason() const override {
        return fmt::format("this process is a pd prefill server (topology.role = \"prefill\", "
                           "accepting decode peers on {}); send requests to a decode server",
                           prefill_ ? prefill_->listening : std::string("?"));
    }

    std::optional<std::string> health_problem() const override {
        if (!decode_) return std::nullopt;
        return decode_->link->unavailable();
    }

    std::string render_metrics() const override {
        std::string out;
        if (decode_) {
            render_decode_metrics(out, decode_->link->metrics(), decode_->endpoint->counters(),
                                  decode_->transport->total_stats());
        }
        if (prefill_) {
            render_prefill_metrics(out, prefill_->server->metrics(),
                                   prefill_->endpoint->counters(),
                                   prefill_->transport->total_stats(), prefill_->sched->stats());
        }
        return out;
    }

    std::string describe() const override { return describe_; }
    std::string prefill_address() const override { return prefill_ ? prefill_->listening : ""; }

  private:
    std::string describe_;
    std::optional<prefill_side> prefill_;
    std::optional<decode_side> decode_;
};

}  // namespace

result<std::unique_ptr<deployment>> make_pd_deployment(const config& cfg,
                                                       liveness_registry& liveness) {
    const std::string& role = cfg.topology.role;
    // nccl in one process is CI's emulation only (validate_topology): an inproc control link
    // and a loopback buffer channel over the emulated device's memory.
    const bool inproc = cfg.transport.kind == "inproc" || (nccl(cfg) && role == "both");
    // One fingerprint for both sides of this process: it reads samples of every weight file.
    result<model_identity> model = identify_model(cfg.model.path, model::numerics_identity(cfg.model.numerics, cfg.backend.cpu_matmul));
    if (!model) return model.error();
    std::optional<prefill_side> p;
    std::optional<decode_side> d;
    if (role != "decode") {
        auto built = build_prefill(cfg, *model, liveness);
        if (!built) return built.error();
        p = std::move(built.value());
    }
    if (role != "prefill") {
        // Role both: the decode engine reads the prefill engine's weights (no second copy).
        auto built = build_decode(cfg, *model, liveness, p && p->holds ? p->seqs : nullptr,
                                  p ? p->weights : engine::engine_weights{});
        if (!built) return built.error();
        d = std::move(built.value());
    }
    const int64_t hs_ms = cfg.transport.handshake_timeout_ms;
    if (inproc) {
        transport::inproc_pair pair = transport::make_inproc_pair(
            p->endpoint->handshake(hs_ms), d->endpoint->handshake(hs_ms),
            liveness.add("prefill transport"), liveness.add("decode transport"));
        p->transport = std::move(pair.a);
        d->transport = std::move(pair.b);
        if (nccl(cfg)) {
            transport::buffer_channel_pair ch = transport::make_loopback_buffer_channels(
                [](const void* src, int64_t n) -> result<uint64_t> { return kmath::xxh3_64(src, n); });
            p->own_buffers = std::move(ch.a);
            d->own_buffers = std::move(ch.b);
            p->buffers = p->own_buffers.get();
            d->buffers = d->own_buffers.get();
        }
    }
    if (p && !inproc) {
        auto t = make_tcp(cfg, true, *p->endpoint, {}, liveness.add("prefill transport"));
        if (!t) return t.error().with_context("pd prefill transport");
        p->port = static_cast<transport::tcp_transport&>(**t).bound_port();
        p->listening = fmt::format("{}:{}", cfg.transport.listen_host, p->port);
        p->transport = std::move(t.value());
        p->buffers = buffers_of(p->transport.get(), cfg);
        TANDEM_LOG_INFO("pd: prefill accepting decode peers on {}", p->listening);
    }
    if (d && !inproc) {
        std::vector<std::string> peers = cfg.transport.peers;
        if (p) {  // role both over tcp: the decode side dials our own prefill listener
            const std::string host =
                cfg.transport.listen_host == "0.0.0.0" ? "127.0.0.1" : cfg.transport.listen_host;
            peers = {fmt::format("{}:{}", host, p->port)};
        }
        auto t = make_tcp(cfg, false, *d->endpoint, std::move(peers),
                          liveness.add("decode transport"));
        if (!t) return t.error().with_context("pd decode transport");
        d->transport = std::move(t.value());
        d->buffers = buffers_of(d->transport.get(), cfg);
    }
    if (p) TANDEM_RETURN_IF_ERROR(start_prefill(*p));
    if (d) TANDEM_RETURN_IF_ERROR(start_decode(*d));
    std::string what = fmt::format("pd ({}, role {})", cfg.transport.kind, role);
    std::unique_ptr<deployment> out =
        std::make_unique<pd_deployment>(std::move(what), std::move(p), std::move(d));
    return out;
}

}  // namespace tandem::topo
