"""Who is looking at a page: a session cookie, a bearer token, or a first visit with ``?token=``.

Opening any page with ``?token=T`` once checks T as the API would, starts a
session (``session.Sessions``), sets the cookie and redirects to the same page
without the token, so it is left neither in the address bar nor in what the page
links to (the way Jupyter signs a browser in). Anything else that cannot name a
signed-in person gets the sign-in page with 401: a form that sends the token the
same way. Pages are HTML all through: a refusal is a page, never a JSON body or a
stack trace.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode

from fastapi import HTTPException, Request
from starlette.responses import RedirectResponse, Response

from grace.control.auth import SESSION_COOKIE, Authenticator, Principal, PrincipalKind
from grace.control.dashboard.render import page
from grace.control.dashboard.security import page_headers
from grace.control.dashboard.session import MAX_AGE_S, Sessions

TOKEN_PARAM = "token"
JOB_TOKEN_REFUSED = ("a job's own token (GRACE_TOKEN) posts heartbeats only; sign in with a "
                     "person's token (grace token create --role viewer)")


class PageRefused(Exception):
    """A page cannot be shown: answered as an HTML page with ``status`` (see ``refused``)."""

    def __init__(self, status: int, message: str, who: Principal | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.who = status, message, who


class SignedIn(Exception):
    """A token in the URL was good: redirect to ``target`` with the new session's cookie."""

    def __init__(self, target: str, session_id: str, secure: bool) -> None:
        super().__init__(target)
        self.target, self.session_id, self.secure = target, session_id, secure


def _without_token(request: Request) -> str:
    rest = [(k, v) for k, v in request.query_params.multi_items() if k != TOKEN_PARAM]
    return request.url.path + (f"?{urlencode(rest)}" if rest else "")


def _reason(e: HTTPException) -> str:
    """The 401's reason without its advice on headers (the sign-in page gives its own)."""
    return str(e.detail).partition(":")[0]


def page_principal(auth: Authenticator, sessions: Sessions,
                   clock: Callable[[], float]) -> Callable[[Request], Principal]:
    """The FastAPI dependency of every page: the person, or ``PageRefused``/``SignedIn``."""

    def dependency(request: Request) -> Principal:
        token = request.query_params.get(TOKEN_PARAM)
        if token is not None:
            try:
                who = auth.principal_for(token.strip())
            except HTTPException as e:
                raise PageRefused(401, f"{_reason(e)}: that token does not sign in") from e
            if who.kind is not PrincipalKind.USER:
                raise PageRefused(403, JOB_TOKEN_REFUSED)
            request.state.principal = who  # the access log names who signed in
            raise SignedIn(_without_token(request), sessions.create(token.strip(), clock()),
                           request.url.scheme == "https")
        try:
            who = auth.identify(request)
        except HTTPException as e:
            raise PageRefused(401, "" if "no token" in str(e.detail) else _reason(e)) from e
        request.state.principal = who
        if who.kind is not PrincipalKind.USER:
            raise PageRefused(403, JOB_TOKEN_REFUSED)
        return who

    return dependency


def signed_in(exc: SignedIn) -> Response:
    """303 to the page without the token; the cookie JS cannot read, sent to this site only."""
    response = RedirectResponse(exc.target, status_code=303, headers=page_headers())
    response.set_cookie(SESSION_COOKIE, exc.session_id, max_age=int(MAX_AGE_S), path="/",
                        httponly=True, samesite="strict", secure=exc.secure)
    return response


def refused(request: Request, exc: PageRefused, hint: str | None) -> Response:
    """401: the sign-in page (saying why, if a token was refused); else an error page."""
    if exc.status == 401:
        return page("signin.html.j2", status=401, problem=exc.message, action=request.url.path,
                    hint=hint, who=None, current="")
    return page("error.html.j2", status=exc.status, message=exc.message, who=exc.who,
                current="")


__all__ = ["TOKEN_PARAM", "PageRefused", "SignedIn", "page_principal", "refused", "signed_in"]
