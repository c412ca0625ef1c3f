"""Typed errors with stable codes, translated once at each edge.

Every error Cairn raises on purpose is a :class:`CairnError` subclass carrying a
stable ``code`` (used in HTTP JSON bodies and CLI messages) and an
``http_status``. Messages say what failed, the bad value, what was expected and
how to fix it (docs/design.md, "Conventions").
"""

from __future__ import annotations


class CairnError(Exception):
    """Base of all deliberate Cairn errors. ``code`` is stable; ``http_status`` is used by the HTTP edge."""

    code = "internal"
    http_status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(CairnError):
    """Bad configuration value, unknown key, or missing vault."""

    code = "config_error"
    http_status = 500


class BadRequestError(CairnError):
    """A client sent an invalid argument (empty question, bad top_k, ...)."""

    code = "bad_request"
    http_status = 400


class UnauthorizedError(CairnError):
    """Missing or wrong bearer token."""

    code = "unauthorized"
    http_status = 401


class ForbiddenError(CairnError):
    """Request refused by the Host/Origin allowlists or policy."""

    code = "forbidden"
    http_status = 403


class NotFoundError(CairnError):
    """A note or route that does not exist."""

    code = "not_found"
    http_status = 404


class PathOutsideVaultError(BadRequestError):
    """A path that escapes the vault root (``..``, absolute, symlink out)."""

    code = "path_outside_vault"


class StoreError(CairnError):
    """The index database cannot be opened or used."""

    code = "store_error"
    http_status = 503


class StoreUnavailableError(StoreError):
    """The index database's file cannot be opened by this process now (too many open files, no permission): the
    file itself may be fine, so it is never moved aside or rebuilt for it."""


class IndexFileChangedError(StoreError):
    """The index file was deleted or replaced by another file while this process used it: nothing more is read
    from or written to it until Cairn is restarted (which checks the file at that path again)."""

    code = "index_file_changed"


class IndexOfAnotherVaultError(StoreError):
    """The index file records another vault's path than the one it was opened for (copied or restored from
    elsewhere)."""

    code = "index_of_another_vault"


class SchemaTooNewError(StoreError):
    """The database was written by a newer Cairn (``PRAGMA user_version`` above what this code knows)."""

    code = "schema_too_new"


class ModelError(CairnError):
    """The embedding model files are missing, corrupt or fail to load."""

    code = "model_error"
    http_status = 503


class NoteReadError(CairnError):
    """A vault file cannot be read as a note (binary, not UTF-8, too large); the note is skipped with this reason."""

    code = "note_unreadable"
    http_status = 422


class FileOpenError(NoteReadError):
    """A vault file could not be opened or read just now (permission denied, too many open files, locked by
    another program, vanished): a property of the moment, not of the note. Its indexed version is kept and the
    file is looked at again later; it is never recorded as skipped or deleted for this."""

    code = "file_unreadable_now"


class PdfReadError(NoteReadError):
    """Nothing of a PDF can be indexed (encrypted, damaged, not a PDF, too big, no text layer, time limit,
    reader crash)."""

    code = "pdf_unreadable"


class MisdirectedRequestError(CairnError):
    """The ``Host`` header names something other than this loopback server (DNS-rebinding defence)."""

    code = "misdirected_request"
    http_status = 421


class TooManyRequestsError(CairnError):
    """Throttled: too many bad tokens, or too many open streams. ``retry_after`` is in seconds."""

    code = "too_many_requests"
    http_status = 429

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = max(1, int(retry_after))


class BusyError(TooManyRequestsError):
    """Every stream slot is taken; try again after ``retry_after`` seconds (HTTP 503 + Retry-After)."""

    code = "busy"
    http_status = 503


class LLMError(CairnError):
    """The configured language model could not be reached, refused, failed, stalled or said nothing."""

    code = "llm_error"
    http_status = 502


#: The stable ``code`` of an HTTP error answer (status → code) when no :class:`CairnError` chose one: a framework's
#: plain refusal (no route, a method not allowed, a body too large, a Host or Origin refused). One vocabulary for
#: the plugin API and the MCP HTTP port.
STATUS_CODES: dict[int, str] = {
    400: BadRequestError.code,
    401: UnauthorizedError.code,
    403: ForbiddenError.code,
    404: NotFoundError.code,
    405: "method_not_allowed",
    408: "request_timeout",
    413: "payload_too_large",
    415: "unsupported_media_type",
    421: MisdirectedRequestError.code,
    429: TooManyRequestsError.code,
    503: "unavailable",
}


def status_code(status: int) -> str:
    """The ``code`` of an error answer with HTTP ``status`` (:data:`STATUS_CODES`): any other 5xx is
    :attr:`CairnError.code` (``internal``), any other status ``http_<status>``."""
    if status in STATUS_CODES:
        return STATUS_CODES[status]
    return CairnError.code if status >= 500 else f"http_{status}"
