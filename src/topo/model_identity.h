// topo/model_identity.h — A fingerprint of the model a pd peer serves, for the handshake.
//
// Two engines whose cache layouts agree can still disagree on the weights (another checkpoint,
// another fine-tune) or on the numerics; state from one decodes into wrong tokens on the other,
// with nothing to notice. The fingerprint is XXH3-64 over config.json, model.numerics, and for
// every *.safetensors file (sorted by name) its name, size and 16 evenly spaced 64 KiB windows
// (the header and samples of every region of the weights): cheap next to loading the model, and
// different for any two checkpoints that differ anywhere but in bytes no window covers.
#pragma once

#include <string>

#include "core/status.h"
#include "topo/pd_protocol.h"

namespace tandem::topo {

// Errors (io_error, not_found) name the file.
result<model_identity> identify_model(const std::string& model_dir, const std::string& numerics);

}  // namespace tandem::topo
