"""``/docs`` without the internet: Swagger UI's files from the installed ``swagger_ui_bundle``.

FastAPI's page loads Swagger UI from a CDN by default, so on a cluster without
internet it renders blank. Here ``get_swagger_ui_html`` is pointed at the copies
``assets`` serves from the package. The page's one inline script (the
``SwaggerUIBundle({...})`` call FastAPI writes) is allowed by its SHA-256 in the
page's CSP, so no other inline script could run; Swagger UI's online validator
badge (``validator.swagger.io``) is turned off, the one request it would make to
another host.
"""

from __future__ import annotations

import re

from fastapi.openapi.docs import get_swagger_ui_html
from starlette.responses import HTMLResponse

from grace.control.dashboard.assets import swagger_url
from grace.control.dashboard.security import page_headers

_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def swagger_page(openapi_url: str, title: str) -> HTMLResponse:
    body = get_swagger_ui_html(
        openapi_url=openapi_url, title=title,
        swagger_js_url=swagger_url("swagger-ui-bundle.js"),
        swagger_css_url=swagger_url("swagger-ui.css"),
        swagger_favicon_url=swagger_url("favicon-32x32.png"),
        swagger_ui_parameters={"validatorUrl": None}).body
    html = bytes(body).decode()
    inline = tuple(_INLINE_SCRIPT.findall(html))
    return HTMLResponse(html, headers=page_headers(inline_scripts=inline))


__all__ = ["swagger_page"]
