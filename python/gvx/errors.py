"""The exceptions gvx raises. Every message says what went wrong and how to fix it."""

from __future__ import annotations


class GvxError(Exception):
    """Base class of every gvx error."""


class LibraryNotFoundError(GvxError):
    """libgvx.so could not be found."""


class InvalidArgumentError(GvxError, ValueError):
    """An argument was rejected; the message names it."""


class InternalError(GvxError):
    """A bug in gvx. Please report the message, which carries a stack trace."""
