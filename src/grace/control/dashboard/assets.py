"""Static files the pages load, all from installed packages: no CDN, nothing copied in.

Three sources, each an allowlist of names (a request names a file, never a path):

- our own CSS and JS, in this package's ``static/`` (package data);
- plotly.js as the ``plotly`` Python package ships it (``package_data/plotly.min.js``);
- Swagger UI's bundle, stylesheet and icon from ``swagger_ui_bundle`` (for ``/docs``).

Public, like ``/healthz``: they hold no data, and the sign-in page needs its
stylesheet before anyone has signed in. Read once and kept in memory (plotly.js is
about 5 MB); the browser may cache them for an hour.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from importlib.metadata import version
from importlib.resources.abc import Traversable

#: URL prefixes the routes serve these under.
STATIC_PREFIX = "/ui/static"
PLOTLY_URL = "/ui/vendor/plotly.min.js"
SWAGGER_PREFIX = "/docs/assets"
SWAGGER_FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png")
CACHE_CONTROL = "public, max-age=3600"

_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".png": "image/png", ".svg": "image/svg+xml"}


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    media_type: str


def _media_type(name: str) -> str:
    return next((t for ext, t in _TYPES.items() if name.endswith(ext)),
                "application/octet-stream")


def _read(file: Traversable, name: str) -> Asset:
    return Asset(file.read_bytes(), _media_type(name))


def _own() -> Traversable:
    return resources.files("grace.control.dashboard") / "static"


@functools.cache
def own_names() -> frozenset[str]:
    """Our static files (a flat folder)."""
    return frozenset(f.name for f in _own().iterdir() if f.is_file())


@functools.cache
def own(name: str) -> Asset | None:
    return _read(_own() / name, name) if name in own_names() else None


@functools.cache
def plotly_js() -> Asset:
    """plotly.js from the installed ``plotly`` package (a required dependency)."""
    return _read(resources.files("plotly") / "package_data" / "plotly.min.js", "plotly.min.js")


def plotly_url() -> str:
    """With the package's version, so a browser's cached copy is replaced on upgrade."""
    return f"{PLOTLY_URL}?v={version('plotly')}"


def _swagger_dir() -> Traversable:
    # the package's own pointer to its vendored Swagger UI (swagger-ui-<version>/)
    from swagger_ui_bundle import swagger_ui_path

    return swagger_ui_path


@functools.cache
def swagger(name: str) -> Asset | None:
    return _read(_swagger_dir() / name, name) if name in SWAGGER_FILES else None


def swagger_url(name: str) -> str:
    # the folder is named for Swagger UI's version (swagger-ui-5.31.0)
    return f"{SWAGGER_PREFIX}/{name}?v={_swagger_dir().name.removeprefix('swagger-ui-')}"


__all__ = ["CACHE_CONTROL", "PLOTLY_URL", "STATIC_PREFIX", "SWAGGER_FILES", "SWAGGER_PREFIX",
           "Asset", "own", "own_names", "plotly_js", "plotly_url", "swagger", "swagger_url"]
