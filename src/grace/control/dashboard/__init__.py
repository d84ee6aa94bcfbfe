"""The web dashboard the API serves at ``/``: cluster map, queue, jobs, tenants, alerts.

Server-rendered pages (Jinja2 templates in ``templates/``), our own CSS and JS in
``static/``, charts drawn by plotly.js as the ``plotly`` package ships it, and
nothing loaded from any other host (``security``). A browser signs in once with
``/?token=T`` (``signin``, ``session``). Modules, one job each:

- ``routes``: the routes, and ``install_dashboard`` (the one call ``create_app`` makes);
- ``signin``, ``session``: who is looking, and their sessions;
- ``cluster_view``, ``job_view``, ``tenant_view``: store rows -> what a page shows;
- ``render``, ``security``, ``assets``: templates, headers, static files;
- ``docs``: ``/docs`` (Swagger UI) from the installed ``swagger_ui_bundle``.
"""

from __future__ import annotations

from grace.control.dashboard.docs import swagger_page
from grace.control.dashboard.routes import install_dashboard

__all__ = ["install_dashboard", "swagger_page"]
