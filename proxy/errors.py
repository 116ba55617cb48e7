"""Errors the HTTP API answers with: Toxiproxy's messages and status codes."""

from __future__ import annotations


class ApiError(Exception):
    """Answered as `{"error": message, "status": status}` with that HTTP status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def bad_request_body(detail: str) -> ApiError:
    return ApiError(f"bad request body: {detail}", 400)


def missing_field(detail: str) -> ApiError:
    return ApiError(f"missing required field: {detail}", 400)


PROXY_NOT_FOUND = "proxy not found"
PROXY_EXISTS = "proxy already exists"
TOXIC_NOT_FOUND = "toxic not found"
