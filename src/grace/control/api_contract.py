"""What the API promises its clients: one error shape, the codes each route answers, and an
OpenAPI document that says both (and the job spec a submission takes).

Every 4xx and 5xx body is ``{"detail": str}`` or, when fields are at fault,
``{"detail": [{"field": ..., "message": ...}, ...]}``: one shape a client
(and ``grace``'s CLI, ``cli.client._call``) reads the same way everywhere.
Each route lists the codes it can answer (``errors(...)``), so the document a
client generates code from, or a fuzzer checks against, says what really comes
back: FastAPI's own 422 schema (``HTTPValidationError``: ``loc``/``msg``/``type``)
is replaced, because ``api``'s handler never sends that shape.

A store that cannot take a write (disk full, read-only file, server gone) is
not a bug in the request or in Grace: it answers 507 (no space) or 503 with the
database's own words instead of a bare 500, so an operator reading the error
knows what to fix (``store.writability``). A write that lost a race with the
reconciler (``StaleWrite``) is a 409: read again and retry.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.exc import DataError, IntegrityError, OperationalError

from grace.control.store.errors import StaleWrite
from grace.control.store.writability import describe_failure

#: The largest id or count a parameter may carry: the store's INTEGER columns are 32-bit
#: on PostgreSQL, so a larger one is refused as input (422), not met as a database error.
MAX_INT32 = 2**31 - 1


class FieldProblem(BaseModel):
    """One bad field of a request and how to fix it."""

    field: str = Field(description="where: a body field path (gpus, model.params_b), or "
                                   "query.NAME / path.NAME for a parameter; '' for the whole")
    message: str = Field(description="what is wrong and the fix")


class ErrorBody(BaseModel):
    """Every error the API answers: a sentence, or the bad fields one by one."""

    detail: str | list[FieldProblem]


class HealthReport(BaseModel):
    """``/healthz``: ``ok``, or ``degraded`` (HTTP 503) with what is wrong."""

    model_config = {"extra": "allow"}

    status: str = Field(description="ok | degraded")
    store: str | None = Field(default=None, description="set when the store cannot be written")


_WHY = {
    400: "the body could not be read (not UTF-8, or not JSON)",
    401: "no token, or one that is unknown, revoked or expired",
    403: "the token's role or tenant does not allow this",
    404: "no such job, node, tenant or token (or one this token may not see)",
    409: "the state does not allow it now (already ended, not drained, changed meanwhile)",
    413: "the request body is larger than the limit",
    422: "bad fields or parameters, each named with its fix",
    501: "this backend cannot do it",
    503: "a standby that writes nothing, a lost lease, or a store that cannot be written",
    507: "the store is out of space: nothing was saved",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route that can answer ``codes``, each with ``ErrorBody``."""
    unknown = set(codes) - _WHY.keys()
    if unknown:
        raise ValueError(f"no description for status {sorted(unknown)}: add it to _WHY")
    return {code: {"model": ErrorBody, "description": _WHY[code]} for code in codes}


#: What a caller's token can cause on any route but /healthz.
AUTH = (401, 403)
#: A route with parameters or a body: FastAPI validates them (422).
READ = (*AUTH, 422, 503)
#: A route that writes: a standby or a store that cannot be written refuses it.
WRITE = (*AUTH, 409, 422, 503, 507)
#: A route with a JSON body.
BODY = (400, 413, 422)


def install_store_errors(app: FastAPI) -> None:
    """Answer the store's failures with the status that says what happened (see above)."""

    @app.exception_handler(OperationalError)
    async def _unwritable(_: Request, exc: OperationalError) -> JSONResponse:
        failure = describe_failure(exc)
        return JSONResponse(status_code=failure.status, content={"detail": failure.detail},
                            headers={"Retry-After": "5"} if failure.status == 503 else None)

    @app.exception_handler(StaleWrite)
    async def _stale(_: Request, exc: StaleWrite) -> JSONResponse:
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    @app.exception_handler(IntegrityError)
    async def _conflict(_: Request, exc: IntegrityError) -> JSONResponse:
        # two writers made the same row at once (e.g. one tenant, two first submissions)
        return JSONResponse(status_code=409, content={"detail": (
            f"the store refused a conflicting write ({describe_failure(exc).reason}); "
            "read the current state and retry")})

    @app.exception_handler(DataError)
    async def _unstorable(_: Request, exc: DataError) -> JSONResponse:
        # a value the request validation let through but the database cannot keep: a gap
        # in the validation, answered as the client's input, not as a crash
        return JSONResponse(status_code=422, content={"detail": [{"field": "", "message": (
            f"the store cannot keep a value of this request ({describe_failure(exc).reason}); "
            "shorten or simplify it")}]})


def document(app: FastAPI, bodies: dict[tuple[str, str], type[BaseModel]]) -> None:
    """Make the OpenAPI document say what the API sends and takes: ``ErrorBody`` for every
    422 (not FastAPI's ``HTTPValidationError``, which the 422 handler never sends), and
    for each ``(method, path)`` in ``bodies`` the model its JSON body is validated with
    inside the route (``POST /jobs`` takes a dict and validates ``JobSpec`` itself, so
    that its errors name the spec's fields with their fixes)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for (method, path), model in bodies.items():
            body = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(body.pop("$defs", {}))
            components[model.__name__] = body
            operation = schema["paths"][path][method.lower()]
            operation["requestBody"] = {"required": True, "content": {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}
        ref = {"$ref": "#/components/schemas/ErrorBody"}
        for item in schema.get("paths", {}).values():
            for operation in item.values():
                for code, answer in operation.get("responses", {}).items():
                    # errors are JSON even where the route answers text (FastAPI documents
                    # them in the route's media type: text/plain for the logs)
                    schemas = [c.get("schema") for c in answer.get("content", {}).values()]
                    if code == "422" or ref in schemas:
                        answer["content"] = {"application/json": {"schema": ref}}
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
