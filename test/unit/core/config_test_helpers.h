// Config helpers shared by the unit tests that build engines and deployments.
#pragma once

#include "core/config.h"

namespace tandem::testing {

// Shadow verification off. A randomly sampled shadow check recomputes a request after its final
// event and borrows pool pages meanwhile, so with it on a test's page accounting ("every page is
// back") would pass or fail by chance. Tests of verification itself set their own sample_rate.
inline void no_verify(config& c) { c.verify.sample_rate = 0; }

}  // namespace tandem::testing
