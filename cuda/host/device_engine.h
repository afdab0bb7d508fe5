// cuda/host/device_engine.h — The engine the server runs with backend.device = "cuda": the same
// lockstep scheduler, capacity, sampler and prefix cache as the CPU engine (engine/cpu_engine.h),
// over the device executor, with the cache pool's arena in the device space
// (cache::page_pool::create_external). Everything outside the forward that moves pool bytes
// (sequence state reset, prefix-cache snapshots, the host tier, pd over tcp) goes through the
// arena's read/write, which are the runtime's download/upload (d2h/h2d); pd between two device
// engines of one process copies device to device (the arena's copy) and checks spans with the
// device XXH3 (the arena's checksum).
//
// The device is GPU 0, or — backend.test_emulate_device, testing only — the host emulation
// (device_runtime_emulated.cpp: host memory as the device), which CI serves through.
#pragma once

#include <memory>

#include "core/config.h"
#include "cuda/host/device_weights.h"
#include "core/liveness.h"
#include "engine/cpu_engine.h"
#include "engine/engine.h"

namespace tandem::cuda {

// One device engine's parts before its scheduler starts (pd builds two and wires them). Keys read:
// as engine::make_cpu_engine_parts, plus backend.test_emulate_device. `model_fingerprint` goes into
// the prefix cache's key; `copy_thread_beat`: the host tier's copy-thread heartbeat (may be null).
// `share`: weights the other device engine of this process holds for the same model.path (pd role
// both), read instead of a second upload.
result<engine::cpu_engine_parts> make_device_engine_parts(const config& cfg, uint64_t model_fingerprint = 0,
                                                          std::shared_ptr<heartbeat> copy_thread_beat = nullptr,
                                                          std::shared_ptr<const resident_weights> share = nullptr);

// Parts + scheduler (the single topology).
result<std::unique_ptr<engine::engine>> make_device_engine(const config& cfg, liveness_registry* liveness,
                                                           uint64_t model_fingerprint = 0);

}  // namespace tandem::cuda
