"""Exceptions of rangekv: one class per StatusCode of include/rangekv/status.h.

Every error the engine reports is raised as an instance of the class of its code, all deriving
from :class:`Error`. ``err.code`` is the code's stable name (``"stale_generation"``),
``err.message`` the engine's message (for people: never parse it). Classes for caller errors
(``InvalidArgument``, ``OutOfRange``, ``GeometryMismatch``) are also ``ValueError``.
"""

from __future__ import annotations


class Error(Exception):
    """Base class of every rangekv error."""

    code: str = "unknown"

    def __init__(self, message: str = "", code: str | None = None) -> None:
        self.code = code if code is not None else type(self).code
        self.message = message
        super().__init__(f"{self.code}: {message}" if message else self.code)

    def __reduce__(self):
        return (type(self), (self.message, self.code))


def _make(name: str, code: str, doc: str, *bases: type) -> type:
    cls = type(name, (Error, *bases), {"code": code, "__doc__": doc, "__module__": "rangekv"})
    globals()[name] = cls
    return cls


# (class name, code name, extra bases, doc)
_CODES = [
    ("InvalidArgument", "invalid_argument", (ValueError,), "Malformed input."),
    ("OutOfRange", "out_of_range", (ValueError,), "An offset, slot or length outside its range."),
    ("GeometryMismatch", "geometry_mismatch", (ValueError,),
     "Input of the wrong geometry, dtype or shape for this store."),
    ("NamespaceMismatch", "namespace_mismatch", (), "A ticket or record of another namespace."),
    ("FailedPrecondition", "failed_precondition", (),
     "The object is not in a state that allows the call."),
    ("AlreadyExists", "already_exists", (), "Already exists."),
    ("NotFound", "not_found", (), "Not found."),
    ("StaleTicket", "stale_generation", (), "A pack the ticket names was reclaimed."),
    ("ForeignOwner", "foreign_owner", (),
     "The ticket belongs to another request, session, attempt, rank or store epoch."),
    ("TokenMismatch", "token_mismatch", (), "Claimed tokens differ from the ticket's."),
    ("EndpointBeyondTicket", "endpoint_beyond_ticket", (),
     "The claim asks for more tokens than the ticket promised."),
    ("TicketReplaced", "ticket_replaced", (),
     "A second lookup tried to replace an outstanding ticket's query."),
    ("CorruptTicket", "corrupt_ticket", (), "Undecodable or forged ticket bytes."),
    ("ResourceExhausted", "resource_exhausted", (), "A bounded table, pool or queue is full."),
    ("NoSpace", "no_space", (), "The file system is full (ENOSPC)."),
    ("IoError", "io_error", (), "A system call failed (EIO and others)."),
    ("ShortTransfer", "short_transfer", (), "An I/O moved fewer bytes than requested."),
    ("WrongStore", "wrong_store", (), "A file of another store."),
    ("WrongVersion", "wrong_version", (), "An on-disk format version not understood."),
    ("Truncated", "truncated", (), "A file shorter than its header says."),
    ("Corruption", "corruption", (), "Checksum failure or impossible field values."),
    ("UnsafePermissions", "unsafe_permissions", (),
     "A store directory or file owned by another user or writable by group or others."),
    ("Cancelled", "cancelled", (), "The operation was cancelled."),
    ("Aborted", "aborted", (), "The operation was aborted."),
    ("Unavailable", "unavailable", (),
     "A service the call needs (the store service, the remote tier) is unreachable now; "
     "transient: a later call may succeed."),
    ("Unimplemented", "unimplemented", (), "Not implemented in this build or on this device."),
    ("Internal", "internal", (), "An internal error (a bug)."),
    ("Locked", "locked", (),
     "The store directory is held by another engine or store service (one at a time)."),
    ("DeadlineExceeded", "deadline_exceeded", (TimeoutError,),
     "A wait ran past its deadline; nothing changed and it may be retried."),
    ("NotSupported", "not_supported", (),
     "An optional backend (io_uring, CUDA, cuFile) or tool is not usable in this build or on "
     "this host; retrying changes nothing."),
    ("DeviceFault", "device_fault", (),
     "Device work could not be proven complete and no usable bank is left; reopen the engine."),
]

_BY_CODE: dict[str, type] = {}
for _name, _code, _bases, _doc in _CODES:
    _BY_CODE[_code] = _make(_name, _code, _doc, *_bases)


# FailedPrecondition is one of the classes _make put into globals() above.
class ClosedError(FailedPrecondition):  # type: ignore[misc,valid-type]  # noqa: F821
    """A call on an Engine after close()."""

    __module__ = "rangekv"


def from_status(code: str, message: str) -> Error:
    """The exception instance for a Status (code name, message)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return Error(message, code)
    return cls(message)


__all__ = ["Error", "ClosedError", "from_status"] + [n for n, *_ in _CODES]
