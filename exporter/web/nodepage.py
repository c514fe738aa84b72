"""The live node page's files and the headers they are served with.

The page is three static files shipped in the package (``static/``): an HTML shell, a script that
fetches ``gpus.json`` from the same exporter and redraws, and a style sheet. They are read once when
the listener is built, so answering ``/`` does no file I/O on the event loop. Nothing is loaded from
anywhere else (no CDN: the page works on an air-gapped cluster), which lets the Content-Security-Policy
forbid everything but this origin: no inline script or style, no frames, no form targets. A pod name
that carries markup can then do nothing even if some future change forgot to escape it; the script
itself only ever assigns ``textContent``.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                           "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

PAGE_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

_STATIC_TYPES: Mapping[str, str] = {
    "/static/node.js": "text/javascript; charset=utf-8",
    "/static/node.css": "text/css; charset=utf-8",
    "/static/icon.svg": "image/svg+xml",
}


@dataclass(frozen=True)
class NodePageAssets:
    """The page's files, read once; ``static`` maps a request path to (content type, bytes)."""

    shell: str
    static: Mapping[str, tuple[str, bytes]]

    def page(self, version: str, health: str) -> bytes:
        """The HTML shell with the version and the health line filled in (escaped)."""
        return self.shell.format(version=html.escape(version), health=html.escape(health)).encode("utf-8")


def load_assets() -> NodePageAssets:
    folder = resources.files("exporter.web").joinpath("static")
    static = {path: (content_type, folder.joinpath(path.rsplit("/", 1)[1]).read_bytes())
              for path, content_type in _STATIC_TYPES.items()}
    return NodePageAssets(shell=folder.joinpath("node.html").read_text(encoding="utf-8"), static=static)
