// topo/deployment.cpp — Choosing and validating the topology; the single topology.
#include "topo/deployment.h"

#include "cuda/host/device_engine.h"
#include "model/model.h"
#include "topo/model_identity.h"

#include "engine/cpu_engine.h"
#include "topo/pd_deployment.h"

namespace tandem::topo {

status validate_topology(const config& cfg) {
    const std::string& mode = cfg.topology.mode;
    const std::string& role = cfg.topology.role;
    const std::string& kind = cfg.transport.kind;
    if (cfg.backend.cpu_matmul == "amx" && cfg.backend.device == "cuda") {
        // The device backend computes every linear bitwise as the exact CPU kernels do; "amx" would
        // name numerics it does not run.
        return make_error(error_code::invalid_argument,
                          "backend.cpu_matmul = \"amx\" is a CPU backend setting; backend.device is \"cuda\" "
                          "(use cpu_matmul = \"exact\", or backend.device = \"cpu\")");
    }
    if (mode == "single") {
        if (role != "both") {
            return make_error(error_code::invalid_argument,
                              "topology.role = \"" + role + "\" needs topology.mode = \"pd\" "
                              "(--topology pd); a single topology has no roles");
        }
        return status::ok();
    }
    if (kind == "nccl") {
        // Page bytes over NCCL between two GPUs, frames on a tcp control link: the two sides run
        // in two processes (roles prefill and decode), each pool on its GPU. In one process both
        // engines share GPU 0, where "inproc" already copies device to device; the only one-process
        // nccl is CI's, over the host emulation (a loopback buffer channel stands in for NCCL).
        if (cfg.backend.device != "cuda") {
            return make_error(error_code::invalid_argument,
                              "transport.kind = \"nccl\" moves pages between GPU pools: it needs "
                              "backend.device = \"cuda\" (this is \"" + cfg.backend.device + "\"); with the CPU "
                              "backend use transport.kind = \"inproc\" or \"tcp\"");
        }
        if (cfg.transport.nccl_device != 0 && !cfg.backend.test_emulate_device) {
            // The device engine's pool is on GPU 0 of this process; NCCL must address that GPU.
            return make_error(error_code::invalid_argument,
                              "transport.nccl_device = " + std::to_string(cfg.transport.nccl_device) +
                              ": the cache pool is on GPU 0 of this process (backend.device = \"cuda\"); "
                              "keep transport.nccl_device = 0 and choose the GPU with CUDA_VISIBLE_DEVICES");
        }
        if (role == "both" && !cfg.backend.test_emulate_device) {
            return make_error(error_code::invalid_argument,
                              "transport.kind = \"nccl\" joins two processes on two GPUs (topology.role = "
                              "\"prefill\" / \"decode\", frames over tcp); in one process both engines share "
                              "GPU 0: use transport.kind = \"inproc\", which copies pages device to device");
        }
    }
    if (role != "both" && kind == "inproc") {
        return make_error(error_code::invalid_argument,
                          "topology.role = \"" + role + "\" runs one side of pd in this process: "
                          "it needs transport.kind = \"tcp\" or \"nccl\" (transport.kind = \"" + kind +
                          "\" joins two engines inside one process)");
    }
    if (role == "decode" && cfg.transport.peers.empty()) {
        return make_error(error_code::invalid_argument,
                          "topology.role = \"decode\" needs at least one prefill server in "
                          "transport.peers, e.g. [\"127.0.0.1:8100\"]");
    }
    return status::ok();
}

namespace {

class single_deployment final : public deployment {
  public:
    explicit single_deployment(std::unique_ptr<engine::engine> e) : engine_(std::move(e)) {}
    engine::engine* api_engine() override { return engine_.get(); }
    std::string no_engine_reason() const override { return {}; }
    std::optional<std::string> health_problem() const override { return std::nullopt; }
    std::string render_metrics() const override { return {}; }
    std::string describe() const override { return "single"; }

  private:
    std::unique_ptr<engine::engine> engine_;
};

}  // namespace

result<std::unique_ptr<deployment>> deployment::create(const config& cfg,
                                                       liveness_registry& liveness) {
    TANDEM_RETURN_IF_ERROR(validate_topology(cfg));
    if (cfg.topology.mode == "pd") return make_pd_deployment(cfg, liveness);
    // The prefix cache's key names the weights, not only their shape.
    result<model_identity> model = identify_model(cfg.model.path, model::numerics_identity(cfg.model.numerics, cfg.backend.cpu_matmul));
    if (!model) return model.error();
    // backend.device is resolved by then (api/serve.cpp): "cuda" only when the user or auto chose it.
    result<std::unique_ptr<engine::engine>> e = cfg.backend.device == "cuda"
                                                    ? cuda::make_device_engine(cfg, &liveness, model->fingerprint)
                                                    : engine::make_cpu_engine(cfg, &liveness, model->fingerprint);
    if (!e) return e.error();
    std::unique_ptr<deployment> d = std::make_unique<single_deployment>(std::move(e.value()));
    return d;
}

}  // namespace tandem::topo
