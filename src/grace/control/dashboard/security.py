"""The headers every dashboard and docs page is sent with: nothing may load from elsewhere.

``Content-Security-Policy: default-src 'self'`` is the rule that makes "no request
leaves the machine" hold in the browser, not only in our templates: a script,
style, image, font or fetch from any other origin is refused by the browser itself.
What is added to it, and why:

- ``img-src data:``: Swagger UI's stylesheet draws its icons as ``data:`` SVGs;
- ``style-src 'unsafe-inline'``: plotly.js writes its own ``<style>`` rules and
  ``style`` attributes when it draws (it ships no stylesheet of its own); styles
  cannot fetch anything under ``default-src 'self'``, so this opens no way out;
- no ``'unsafe-eval'``, no inline scripts: plotly's SVG charts run without them
  (the browser test would see the refusal), and the docs page's one inline script
  is allowed by its SHA-256 only (``docs.swagger_page``);
- ``frame-ancestors 'none'``, ``base-uri 'none'``, ``form-action 'self'``: no other
  page may frame the dashboard, and its one form (sign-in) posts here only.
"""

from __future__ import annotations

import base64
import hashlib

_POLICY = ("default-src 'self'", "img-src 'self' data:", "style-src 'self' 'unsafe-inline'",
           "object-src 'none'", "base-uri 'none'", "frame-ancestors 'none'",
           "form-action 'self'")


def content_security_policy(inline_scripts: tuple[str, ...] = ()) -> str:
    """The policy; ``inline_scripts`` are the exact texts of inline scripts to allow."""
    parts = list(_POLICY)
    if inline_scripts:
        hashes = " ".join(f"'sha256-{_sha256(s)}'" for s in inline_scripts)
        parts.append(f"script-src 'self' {hashes}")
    return "; ".join(parts)


def _sha256(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def page_headers(inline_scripts: tuple[str, ...] = ()) -> dict[str, str]:
    """CSP plus the rest of what a private page needs: never cached by a shared cache,
    never framed, never sniffed into another type, and no Referer (a first visit's URL
    may hold ``?token=``)."""
    return {"Content-Security-Policy": content_security_policy(inline_scripts),
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
            "X-Frame-Options": "DENY",
            "Referrer-Policy": "no-referrer"}


__all__ = ["content_security_policy", "page_headers"]
