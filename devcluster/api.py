"""A minimal client for the test cluster's API server: JSON over HTTPS with the admin client
certificate or a bearer token.

scripts/cluster and the platform tier use it for set-up (nodes, TokenRequest,
SelfSubjectAccessReview). The product's own clients are exercised by the tests themselves; this one
stays small and stdlib-only so that ``up`` needs nothing the product might break.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


class ApiError(Exception):
    """A non-2xx answer: the status code and the API server's Status message."""

    def __init__(self, status: int, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.body = body or {}


class Api:
    """Requests against one API server, as one identity."""

    def __init__(self, server: str, ca_file: Path, client_cert: Path | None = None,
                 client_key: Path | None = None, token: str | None = None) -> None:
        self.server = server.rstrip("/")
        self.ca_file = ca_file
        self._context = ssl.create_default_context(cafile=str(ca_file))
        if client_cert is not None and client_key is not None:
            self._context.load_cert_chain(str(client_cert), str(client_key))
        self._token = token

    def as_token(self, token: str) -> Api:
        """The same server, as the identity a bearer token names (a ServiceAccount, a user)."""
        return Api(self.server, self.ca_file, token=token)

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                timeout: float = 30.0) -> Any:
        """One call; the decoded JSON answer, or ApiError."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        if self._token:
            req.add_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(req, context=self._context, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                status_body = json.loads(raw)
            except ValueError:
                status_body = {"message": raw.decode(errors="replace")}
            raise ApiError(exc.code, str(status_body.get("message", "")), status_body) from None
        return json.loads(raw) if raw else None

    def ok(self, path: str) -> bool:
        """Whether GET ``path`` answers 200 (a health endpoint that answers plain text)."""
        req = urllib.request.Request(self.server + path)
        if self._token:
            req.add_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(req, context=self._context, timeout=10) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def create(self, path: str, obj: dict[str, Any]) -> Any:
        return self.request("POST", path, obj)

    def apply_create(self, path: str, obj: dict[str, Any]) -> Any:
        """Create, or leave alone when it already exists (409 AlreadyExists)."""
        try:
            return self.create(path, obj)
        except ApiError as exc:
            if exc.status != 409:
                raise
            return None

    def delete(self, path: str) -> Any:
        try:
            return self.request("DELETE", path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            return None
