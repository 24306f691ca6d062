// Compiled only where a real cufile.h exists (src/io/CMakeLists.txt): cufile_shim.h's
// declarations must match the header's layout and signatures, or this does not build.
#include <cufile.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <type_traits>

#include "io/cufile_shim.h"

namespace rangekv::cufile {
namespace {

// Our types -> the header's, for comparing function signatures.
template <typename T>
struct Real {
  using type = T;
};
template <>
struct Real<Error> {
  using type = CUfileError_t;
};
template <>
struct Real<Descr*> {
  using type = CUfileDescr_t*;
};
template <>
struct Real<DrvProps*> {
  using type = CUfileDrvProps_t*;
};
template <typename F>
struct RealFn;
template <typename R, typename... A>
struct RealFn<R (*)(A...)> {
  using type = typename Real<R>::type (*)(typename Real<A>::type...);
};
template <typename F>
using RealFnT = typename RealFn<F>::type;

#define RANGEKV_CHECK_FN_(name) \
  static_assert(std::is_same_v<RealFnT<decltype(Api::name)>, decltype(&::name)>, #name)
RANGEKV_CHECK_FN_(cuFileDriverOpen);
RANGEKV_CHECK_FN_(cuFileDriverClose);  // the header's macro names cuFileDriverClose_v2
RANGEKV_CHECK_FN_(cuFileHandleRegister);
RANGEKV_CHECK_FN_(cuFileHandleDeregister);
RANGEKV_CHECK_FN_(cuFileBufRegister);
RANGEKV_CHECK_FN_(cuFileBufDeregister);
RANGEKV_CHECK_FN_(cuFileRead);
RANGEKV_CHECK_FN_(cuFileWrite);
RANGEKV_CHECK_FN_(cuFileDriverGetProperties);
RANGEKV_CHECK_FN_(cuFileGetVersion);
#undef RANGEKV_CHECK_FN_

static_assert(std::is_same_v<Handle, CUfileHandle_t>);
static_assert(sizeof(Error) == sizeof(CUfileError_t));
static_assert(offsetof(Error, err) == offsetof(CUfileError_t, err));
static_assert(offsetof(Error, cu_err) == offsetof(CUfileError_t, cu_err));
static_assert(sizeof(Descr) == sizeof(CUfileDescr_t) && sizeof(Descr) == 24);
static_assert(offsetof(Descr, type) == offsetof(CUfileDescr_t, type));
static_assert(offsetof(Descr, handle) == offsetof(CUfileDescr_t, handle));
static_assert(offsetof(Descr, fs_ops) == offsetof(CUfileDescr_t, fs_ops));
static_assert(sizeof(DrvProps) == sizeof(CUfileDrvProps_t) && sizeof(DrvProps) == 56);
static_assert(offsetof(DrvProps, nvfs.major_version) ==
              offsetof(CUfileDrvProps_t, nvfs.major_version));
static_assert(offsetof(DrvProps, nvfs.minor_version) ==
              offsetof(CUfileDrvProps_t, nvfs.minor_version));
static_assert(offsetof(DrvProps, nvfs.dcontrolflags) ==
              offsetof(CUfileDrvProps_t, nvfs.dcontrolflags));
static_assert(offsetof(DrvProps, fflags) == offsetof(CUfileDrvProps_t, fflags));
static_assert(offsetof(DrvProps, max_batch_io_timeout_msecs) ==
              offsetof(CUfileDrvProps_t, max_batch_io_timeout_msecs));
static_assert(kSuccess == CU_FILE_SUCCESS);
static_assert(kOpBaseError == CUFILEOP_BASE_ERR);
static_assert(kHandleTypeOpaqueFd == CU_FILE_HANDLE_TYPE_OPAQUE_FD);
static_assert(CU_FILE_NVFS_SETUP_ERROR == 5033 && CU_FILE_HANDLE_NOT_REGISTERED == 5027);

TEST(CuFileAbiTest, ShimMatchesTheRealHeader) {
  // Everything is checked at compile time; reaching here means the declarations match.
  SUCCEED();
}

}  // namespace
}  // namespace rangekv::cufile
