// Invariant assertions. RANGEKV_CHECK is always on (a broken invariant in a storage engine must
// stop the process rather than serve wrong bytes); RANGEKV_DCHECK only in debug builds.
// Use these for programming errors only; bad input gets a Status.
#pragma once

#include <cstdio>
#include <cstdlib>

#define RANGEKV_CHECK(cond)                                                                 \
  do {                                                                                      \
    if (!(cond)) [[unlikely]] {                                                             \
      std::fprintf(stderr, "%s:%d: RANGEKV_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

#ifdef NDEBUG
#define RANGEKV_DCHECK(cond) \
  do {                       \
  } while (false && (cond))
#else
#define RANGEKV_DCHECK(cond) RANGEKV_CHECK(cond)
#endif
