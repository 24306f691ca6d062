// rangekv._core: the private extension module of the rangekv package (python/rangekv/).
#include <nanobind/stl/string.h>

#include "binding.h"
#include "rangekv/build_info.h"

namespace nb = nanobind;

NB_MODULE(_core, m) {
  m.doc() = "RangeKV engine binding (private: use the rangekv package).";
  m.attr("__version__") = RANGEKV_PY_VERSION;
  m.def(
      "layouts", [] { return rangekv::py::LayoutNames(); }, "The layout names, comma-separated.");
  m.def(
      "status_code_names",
      [] {
        nb::list l;
        for (int c = 0; c <= static_cast<int>(rangekv::kLastStatusCode); ++c) {
          l.append(std::string(rangekv::StatusCodeName(static_cast<rangekv::StatusCode>(c))));
        }
        return l;
      },
      "Every StatusCode's name, in code order.");
  m.def(
      "build_info",
      [] {
        const rangekv::BuildInfo& b = rangekv::GetBuildInfo();
        nb::dict d;
        d["version"] = std::string(b.version);
        d["cuda_kernels"] = std::string(b.cuda_kernels);
        d["cuda_compiler_version"] = std::string(b.cuda_compiler_version);
        return d;
      },
      "What this build contains: {'version', 'cuda_kernels' ('sm_80,...,compute_100', or '' "
      "when built without nvcc: then only the host device exists), 'cuda_compiler_version'}.");
  rangekv::py::RegisterEngine(m);
}
