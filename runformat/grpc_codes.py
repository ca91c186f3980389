"""gRPC status codes: a gRPC attempt's ``status`` is the code's name (``OK``,
``RESOURCE_EXHAUSTED`` …), and the figures that count throttling and server errors the HTTP
way read it as the HTTP status it amounts to.

:data:`AS_HTTP` is the mapping google.rpc.Code documents for each code (googleapis'
``google/rpc/code.proto``): ``RESOURCE_EXHAUSTED`` is a 429 and ``UNAVAILABLE`` a 503, so a
step's ``throttled`` counts them as it counts 429s and 503s. What the retry policy retries is
the load generator's to decide (``locustfiles.transports.grpc``).
"""

from __future__ import annotations

#: The codes by number (grpc/doc/statuscodes.md).
CODES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)

AS_HTTP = {
    "OK": 200,
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INVALID_ARGUMENT": 400,
    "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403,
    "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400,
    "ABORTED": 409,
    "OUT_OF_RANGE": 400,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DATA_LOSS": 500,
    "UNAUTHENTICATED": 401,
}


def name(code: int) -> str:
    """The name of code number ``code``; a number gRPC does not define is UNKNOWN (as gRPC's
    own clients read it)."""
    return CODES[code] if 0 <= code < len(CODES) else "UNKNOWN"
