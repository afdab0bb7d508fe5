// cuda/nccl_transport.cu — The nccl transport (transport/nccl.h): frames over a wrapped control
// transport, device bytes over NCCL send/recv on one communicator and stream per peer.
// (No fmt here: its headers do not compile under nvcc, so messages are built with std::string.)
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

#include "core/gpu_probe.h"
#include "cuda/kernel_launch.h"
#include "transport/nccl.h"

namespace tandem::transport {

namespace {

status cuda_error(const char* what, cudaError_t e) {
    return make_error(error_code::io_error, std::string(what) + ": " + cudaGetErrorString(e));
}
status nccl_error(const char* what, ncclResult_t r) {
    return make_error(error_code::io_error, std::string(what) + ": " + ncclGetErrorString(r));
}

struct nccl_peer {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    int peer_rank = 0;
    void* scratch = nullptr;  // discard_buffer's destination, grown on demand
    int64_t scratch_bytes = 0;
    std::mutex mu;  // NCCL calls on one communicator must not overlap between threads
};

class nccl_impl final : public nccl_transport {
public:
    nccl_impl(std::unique_ptr<transport> control, nccl_options opt)
        : control_(std::move(control)), opt_(opt) {}
    ~nccl_impl() override { stop(); }

    status start(transport_events events) override {
        user_ = std::move(events);
        transport_events mine;
        mine.on_peer_ready = [this](peer_id p, const std::string& name) { on_control_ready(p, name); };
        mine.on_frame = [this](peer_id p, frame&& f) {
            if (f.kind == k_nccl_bootstrap_kind) {
                on_bootstrap(p, f);
            } else if (user_.on_frame) {
                user_.on_frame(p, std::move(f));
            }
        };
        mine.on_peer_lost = [this](peer_id p, const status& why) {
            destroy_peer(p, /*abort=*/true);
            if (user_.on_peer_lost) user_.on_peer_lost(p, why);
        };
        return control_->start(std::move(mine));
    }

    void stop() override {
        if (stopped_) return;
        stopped_ = true;
        control_->stop();  // no more events: the peers map is ours alone now
        std::vector<peer_id> ids;
        {
            std::lock_guard lock(mu_);
            for (auto& [id, p] : peers_) ids.push_back(id);
        }
        for (peer_id id : ids) destroy_peer(id, /*abort=*/false);
    }

    status send(peer_id peer, frame f) override {
        if (!find(peer)) return make_error(error_code::unavailable, "nccl: peer is not ready");
        return control_->send(peer, std::move(f));
    }
    std::vector<peer_id> ready_peers() const override {
        std::lock_guard lock(mu_);
        std::vector<peer_id> out;
        for (const auto& [id, p] : peers_) out.push_back(id);
        return out;
    }
    peer_stats stats(peer_id peer) const override { return control_->stats(peer); }
    peer_stats total_stats() const override { return control_->total_stats(); }

    status send_buffer(peer_id peer, const void* ptr, int64_t bytes) override {
        return post(peer, [&](nccl_peer& p) {
            return ncclSend(ptr, static_cast<size_t>(bytes), ncclUint8, p.peer_rank, p.comm, p.stream);
        }, "ncclSend");
    }
    status recv_buffer(peer_id peer, void* ptr, int64_t bytes) override {
        return post(peer, [&](nccl_peer& p) {
            return ncclRecv(ptr, static_cast<size_t>(bytes), ncclUint8, p.peer_rank, p.comm, p.stream);
        }, "ncclRecv");
    }
    // NCCL matches by order and size: the refused write's bytes land in scratch, never in a page.
    status discard_buffer(peer_id peer, int64_t bytes) override {
        return post(peer, [&](nccl_peer& p) {
            if (p.scratch_bytes < bytes) {
                if (p.scratch) cudaFree(p.scratch);
                p.scratch = nullptr;
                p.scratch_bytes = 0;
                if (cudaMalloc(&p.scratch, static_cast<size_t>(bytes)) != cudaSuccess) return ncclSystemError;
                p.scratch_bytes = bytes;
            }
            return ncclRecv(p.scratch, static_cast<size_t>(bytes), ncclUint8, p.peer_rank, p.comm, p.stream);
        }, "ncclRecv (discarded)");
    }
    status flush(peer_id peer, int64_t timeout_ms) override;
    result<uint64_t> checksum_device(const void* ptr, int64_t bytes) override;

private:
    std::shared_ptr<nccl_peer> find(peer_id id) const {
        std::lock_guard lock(mu_);
        auto it = peers_.find(id);
        return it == peers_.end() ? nullptr : it->second;
    }
    template <typename F> status post(peer_id peer, F&& call, const char* what);
    void on_control_ready(peer_id p, const std::string& name);
    void on_bootstrap(peer_id p, const frame& f);
    void init_comm(peer_id p, const ncclUniqueId& id, int rank);
    status make_comm(nccl_peer& peer, const ncclUniqueId& id, int rank);
    status poll(nccl_peer& p, std::chrono::steady_clock::time_point deadline, peer_id peer,
                int64_t timeout_ms, bool* done);
    void destroy_peer(peer_id p, bool abort);

    std::unique_ptr<transport> control_;
    nccl_options opt_;
    transport_events user_;
    bool stopped_ = false;
    mutable std::mutex mu_;
    std::map<peer_id, std::shared_ptr<nccl_peer>> peers_;  // communicator up
    std::map<peer_id, std::string> names_;                 // control up, waiting for bootstrap
};

template <typename F>
status nccl_impl::post(peer_id peer, F&& call, const char* what) {
    std::shared_ptr<nccl_peer> p = find(peer);
    if (!p) return make_error(error_code::unavailable, "nccl: peer " + std::to_string(peer) + " is not ready");
    std::lock_guard lock(p->mu);
    cudaError_t ce = cudaSetDevice(opt_.device);
    if (ce != cudaSuccess) return cuda_error("cudaSetDevice", ce);
    ncclResult_t r = call(*p);
    return r == ncclSuccess ? status::ok() : nccl_error(what, r);
}

// The decode side starts the communicator; the prefill side waits for its id.
void nccl_impl::on_control_ready(peer_id p, const std::string& name) {
    {
        std::lock_guard lock(mu_);
        names_[p] = name;
    }
    if (!opt_.initiator) return;
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
        if (user_.on_peer_lost) user_.on_peer_lost(p, nccl_error("ncclGetUniqueId", r));
        return;
    }
    frame f{k_nccl_bootstrap_kind, std::vector<std::byte>(sizeof(id))};
    std::memcpy(f.payload.data(), &id, sizeof(id));
    status st = control_->send(p, std::move(f));
    if (!st.is_ok()) {
        if (user_.on_peer_lost) user_.on_peer_lost(p, st);
        return;
    }
    init_comm(p, id, 0);
}

void nccl_impl::on_bootstrap(peer_id p, const frame& f) {
    // Only the non-initiator expects an id, once, of the exact size (untrusted input).
    if (opt_.initiator || f.payload.size() != sizeof(ncclUniqueId) || find(p)) return;
    ncclUniqueId id;
    std::memcpy(&id, f.payload.data(), sizeof(id));
    init_comm(p, id, 1);
}

// Creates the stream and joins the two-rank communicator (blocks until the peer joins too).
status nccl_impl::make_comm(nccl_peer& peer, const ncclUniqueId& id, int rank) {
    cudaError_t ce = cudaSetDevice(opt_.device);
    if (ce == cudaSuccess) ce = cudaStreamCreateWithFlags(&peer.stream, cudaStreamNonBlocking);
    if (ce != cudaSuccess) return cuda_error("creating the transfer stream", ce);
    ncclResult_t r = ncclCommInitRank(&peer.comm, 2, id, rank);
    if (r != ncclSuccess) return nccl_error("ncclCommInitRank", r);
    return status::ok();
}

void nccl_impl::init_comm(peer_id p, const ncclUniqueId& id, int rank) {
    auto peer = std::make_shared<nccl_peer>();
    peer->peer_rank = 1 - rank;
    const status st = make_comm(*peer, id, rank);
    if (!st.is_ok()) {
        if (peer->stream) cudaStreamDestroy(peer->stream);
        if (user_.on_peer_lost) user_.on_peer_lost(p, st.with_context("nccl bootstrap"));
        return;
    }
    std::string name;
    {
        std::lock_guard lock(mu_);
        peers_[p] = peer;
        name = names_[p];
    }
    if (user_.on_peer_ready) user_.on_peer_ready(p, name);
}

void nccl_impl::destroy_peer(peer_id p, bool abort) {
    std::shared_ptr<nccl_peer> peer;
    {
        std::lock_guard lock(mu_);
        names_.erase(p);
        auto it = peers_.find(p);
        if (it == peers_.end()) return;
        peer = it->second;
        peers_.erase(it);
    }
    std::lock_guard lock(peer->mu);
    cudaSetDevice(opt_.device);
    // Abort (not destroy) when the peer vanished: destroy would wait for transfers that can
    // never complete.
    if (peer->comm) (abort ? ncclCommAbort(peer->comm) : ncclCommDestroy(peer->comm));
    if (peer->stream) cudaStreamDestroy(peer->stream);
    if (peer->scratch) cudaFree(peer->scratch);
    peer->comm = nullptr;
    peer->stream = nullptr;
    peer->scratch = nullptr;
    peer->scratch_bytes = 0;
}

// One look at the peer's stream: done, still running, or an error that ends the transfer.
status nccl_impl::poll(nccl_peer& p, std::chrono::steady_clock::time_point deadline, peer_id peer,
                       int64_t timeout_ms, bool* done) {
    std::lock_guard lock(p.mu);
    const cudaError_t ce = cudaStreamQuery(p.stream);
    *done = ce == cudaSuccess;
    if (ce == cudaSuccess) return status::ok();
    if (ce != cudaErrorNotReady) return cuda_error("nccl transfer", ce);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(p.comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) return nccl_error("nccl transfer", async);
    if (std::chrono::steady_clock::now() >= deadline) {
        return make_error(error_code::deadline_exceeded,
                          "nccl transfer to peer " + std::to_string(peer) +
                              " did not finish within " + std::to_string(timeout_ms) + " ms");
    }
    return status::ok();
}

status nccl_impl::flush(peer_id peer, int64_t timeout_ms) {
    std::shared_ptr<nccl_peer> p = find(peer);
    if (!p) return make_error(error_code::unavailable, "nccl: peer " + std::to_string(peer) + " is not ready");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        bool done = false;
        const status st = poll(*p, deadline, peer, timeout_ms, &done);
        if (!st.is_ok()) {
            destroy_peer(peer, /*abort=*/true);  // abort unblocks kernels waiting on the peer
            return st;
        }
        if (done) return status::ok();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

// The device XXH3 over the bytes where they lie: one launch, then the 8-byte result read back.
result<uint64_t> nccl_impl::checksum_device(const void* ptr, int64_t bytes) {
    cudaError_t ce = cudaSetDevice(opt_.device);
    if (ce != cudaSuccess) return cuda_error("cudaSetDevice", ce);
    uint64_t* out = nullptr;
    if ((ce = cudaMalloc(&out, sizeof(uint64_t))) != cudaSuccess) return cuda_error("device XXH3 result word", ce);
    const status launched = cuda::launch_xxh3(ptr, bytes, out, nullptr);
    uint64_t h = 0;
    ce = launched.is_ok() ? cudaMemcpy(&h, out, sizeof(h), cudaMemcpyDeviceToHost) : cudaSuccess;
    cudaFree(out);
    if (!launched.is_ok()) return launched;
    if (ce != cudaSuccess) return cuda_error("device XXH3", ce);
    return h;
}

}  // namespace

result<std::unique_ptr<nccl_transport>> nccl_transport::create(std::unique_ptr<transport> control,
                                                               nccl_options opt) {
    gpu_info info = gpu_probe();
    if (info.device_count == 0) return make_error(error_code::unavailable, "nccl transport: " + info.reason);
    if (opt.device < 0 || opt.device >= info.device_count) {
        return make_error(error_code::invalid_argument,
                          "nccl transport: device " + std::to_string(opt.device) + " does not exist (" +
                              std::to_string(info.device_count) + " GPUs)");
    }
    return std::unique_ptr<nccl_transport>(new nccl_impl(std::move(control), opt));
}

}  // namespace tandem::transport
