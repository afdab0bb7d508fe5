// test/cuda/generated_checkpoint.h — A checkpoint the GPU checks generate themselves from a preset
// (nothing travels to the GPU machine): in a fresh temporary directory removed afterwards, or, when
// `keep_under` is given, in keep_under/<preset>, reused if a previous run completed it and kept —
// so the GPU check generates the 3.6 GB flash-layer once for tier 5 and the decode benchmark.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "model/make_model.h"

namespace tandem::parity {

class generated_checkpoint {
public:
    generated_checkpoint(const std::string& preset, const std::string& keep_under) : keep_(!keep_under.empty()) {
        dir_ = keep_ ? std::filesystem::path(keep_under) / preset
                     : std::filesystem::temp_directory_path() / ("tandem_cuda_" + preset + "_" + std::to_string(::getpid()));
        // generation_config.json is the last file write_random_checkpoint writes: its presence
        // means a complete checkpoint.
        if (keep_ && std::filesystem::exists(dir_ / "generation_config.json")) {
            reused_ = true;
            return;
        }
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
        std::filesystem::create_directories(dir_, ec);
        status_ = write(preset);
    }
    ~generated_checkpoint() {
        std::error_code ec;
        if (!keep_) std::filesystem::remove_all(dir_, ec);
    }
    generated_checkpoint(const generated_checkpoint&) = delete;
    generated_checkpoint& operator=(const generated_checkpoint&) = delete;

    const status& written() const { return status_; }
    std::string dir() const { return dir_.string(); }
    bool reused() const { return reused_; }

private:
    status write(const std::string& preset) {
        result<model::model_config> cfg = model::preset_config(preset);
        if (!cfg) return cfg.error();
        model::make_model_options opt;
        opt.seed = 5;
        opt.bf16 = cfg->torch_dtype == "bfloat16";
        opt.quantize = cfg->quantization.present;
        return model::write_random_checkpoint(*cfg, dir_.string(), opt);
    }

    std::filesystem::path dir_;
    bool keep_ = false, reused_ = false;
    status status_ = status::ok();
};

}  // namespace tandem::parity
