#include "cuda/host/device_executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "model/safetensors.h"

namespace tandem::cuda {

result<std::unique_ptr<device_executor>> device_executor::create(std::unique_ptr<device_runtime> ops, device_buffer arena,
                                                                 const std::string& model_dir,
                                                                 model::numerics_mode numerics,
                                                                 std::shared_ptr<engine::pool_sequences> seqs,
                                                                 std::shared_ptr<const resident_weights> share) {
    namespace fs = std::filesystem;
    // From here on every early return frees the arena while its ops are still alive.
    std::unique_ptr<device_executor> ex(new device_executor(std::move(ops), std::move(arena), std::move(seqs)));
    result<model::model_config> cfg = model::load_model_config((fs::path(model_dir) / "config.json").string());
    if (!cfg) return cfg.error();
    const cache::layout_spec& l = ex->seqs_->pool().layout();
    if (l.num_layers() != cfg->num_layers_total() || l.window_rows() != cfg->sliding_window || l.kv_row().dims != cfg->head_dim)
        return make_error(error_code::invalid_argument,
                          fmt::format("cache pool layout ({}) does not belong to the model in {}", l.describe(), model_dir));
    if (share) {
        if (share->model_dir != model_dir)
            return make_error(error_code::internal, fmt::format("device executor for {} offered the weights of {}",
                                                                model_dir, share->model_dir));
        ex->weights_ = std::move(share);
    } else {
        result<model::checkpoint> ck = model::checkpoint::open_dir(model_dir);
        if (!ck) return ck.error();
        result<model::model_weights> w = model::load_weights(*cfg, *ck);
        if (!w) return w.error().with_context(model_dir);
        result<std::shared_ptr<const resident_weights>> up =
            upload_resident(ex->ops_, *w, cfg->num_hidden_layers, model_dir);
        if (!up) return up.error().with_context("uploading the weights to " + ex->ops_->describe());
        ex->weights_ = std::move(up.value());
    }
    result<std::unique_ptr<device_forward>> f = device_forward::create(*ex->ops_, *cfg, ex->weights_, numerics);
    if (!f) return f.error();
    ex->forward_ = std::move(f.value());
    return ex;
}

int32_t device_executor::vocab_size() const { return static_cast<int32_t>(forward_->config().vocab_size); }

int32_t device_executor::eos_token_id() const {
    const auto& eos = forward_->config().eos_token_ids;
    return eos.empty() ? -1 : static_cast<int32_t>(eos.front());
}

int64_t device_executor::max_context_tokens() const { return forward_->config().max_position_embeddings; }

status device_executor::execute(const engine::step_plan& plan, engine::step_output& out) {
    const model::model_config& c = forward_->config();
    result<step_metadata> meta = plan_step_metadata(plan, step_limits{static_cast<int32_t>(c.vocab_size), c.sliding_window, 0});
    if (!meta) return meta.error();
    slots_.clear();
    std::vector<std::shared_ptr<const cache::load_ticket>> tickets;
    for (size_t i = 0; i < plan.items.size(); ++i) {
        const engine::plan_item& it = plan.items[i];
        const cache::slot_ref s = seqs_->slot(it.sequence);
        const int64_t end = it.start_position + static_cast<int64_t>(it.tokens.size());
        if (static_cast<int64_t>(seqs_->pool().page_table(s).size()) * seqs_->pool().layout().page_size() < end)
            return make_error(error_code::out_of_range,
                              fmt::format("batch item {}: the slot's pages cover fewer than {} tokens", i, end));
        slots_.push_back(s);
        if (const auto* loads = seqs_->loads(it.sequence))
            for (const auto& t : *loads)
                if (std::find(tickets.begin(), tickets.end(), t) == tickets.end()) tickets.push_back(t);
    }
    // The head's rows are the plan's rows in plan order: downloaded straight into the step output.
    const int64_t rows = engine::number_output_rows(plan, vocab_size(), out);
    const cache::layer_gate gate(seqs_->pool(), std::move(tickets), seqs_->load_timeout_ms);
    TANDEM_RETURN_IF_ERROR(forward_->run(gate, *meta, slots_, out.logits));
    if (static_cast<int64_t>(out.logits.size()) != rows * out.vocab)
        return make_error(error_code::internal, "device executor: the head computed a different number of rows than the plan asks");
    return status::ok();
}

}  // namespace tandem::cuda
