// Status -> rangekv.Error subclasses. The classes live in python/rangekv/_errors.py (plain
// Python, so they pickle and subclass ValueError where that fits); _errors.from_status picks the
// class for a code name (StatusCodeName).
#include <string>

#include "binding.h"

namespace rangekv::py {

namespace {

nb::object ErrorsModule() {
  // Imported on first use (the first error raised), by which time rangekv/__init__.py has
  // imported _errors.
  return nb::module_::import_("rangekv._errors");
}

[[noreturn]] void Raise(nb::object exc) {
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw nb::python_error();
}

}  // namespace

nb::object StatusObject(const Status& status) {
  if (status.ok()) return nb::none();
  return ErrorsModule().attr("from_status")(std::string(StatusCodeName(status.code())),
                                            status.message());
}

void ThrowStatus(const Status& status) {
  if (status.ok()) Raise(StatusObject(Status(StatusCode::kInternal, "ThrowStatus(OK)")));
  Raise(StatusObject(status));
}

void Throw(StatusCode code, std::string message) { ThrowStatus(Status(code, std::move(message))); }

void ThrowClosed(std::string_view what) {
  Raise(ErrorsModule().attr("ClosedError")(std::string(what) + ": the engine is closed"));
}

}  // namespace rangekv::py
