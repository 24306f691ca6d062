// The file seam moved to the public header include/rangekv/env.h (Env, File, EnvWrapper,
// DefaultEnv). This forwarding header keeps `#include "env/env.h"` in src/ working; new code
// includes "rangekv/env.h".
#pragma once

#include "rangekv/env.h"  // IWYU pragma: export
