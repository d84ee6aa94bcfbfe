"""Notifications: what a job asks to be told (``notify:``) and what the server allows.

Slurm users write ``--mail-type=END,FAIL --mail-user=me@lab``. Grace's job spec
says the same with ``notify: {webhook: URL, mail: ADDRESS, events: [...]}``:
a signed JSON POST (and, where the server has an SMTP relay, a mail) when the
job ends, fails, is preempted or is moved off a node.

On a shared cluster a webhook is a request the control plane makes on a user's
behalf from inside the cluster network, so it is a server-side request forgery
waiting to happen (the cloud metadata address, the store's own PostgreSQL, an
admin port on a node). Hence the server's file (``grace up --notify FILE``,
``kind: notify``, ``NotifyConfig``): a job's webhook must name a host on its
``allow_hosts`` list, checked at submit (a 422 naming ``notify.webhook``); with
no file, job webhooks are refused and the message says how to enable them.
Redirects are never followed (one could point past the list).

What is checked here, at the edge, names the field and the fix: http/https
only, no credentials in the URL (the receiver verifies Grace's signature
instead, and a URL is printed in listings), bounded lengths, no control
characters (a mail address with a newline would forge headers).
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from grace.spec.errors import SpecError, SpecProblem, from_validation_error
from grace.spec.text_limits import TENANT_PATTERN

#: The longest webhook URL: far above any real one, far below what fills a log line.
MAX_URL_CHARS = 2000
#: RFC 5321's limit on a forward path.
MAX_MAIL_CHARS = 254
#: ``local@domain``: no spaces, commas, angle brackets or quotes (one address, one header).
_MAIL = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")
#: A host on the allow list: a DNS name or address, optionally ``:port``; ``*.`` in front
#: allows every subdomain (not the bare domain).
_HOST = re.compile(r"(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?"
                   r"|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")
_CONTROL = re.compile(r"[\x00-\x20\x7f-\x9f]")
#: A webhook's host after IDNA encoding: letters, digits, dots and hyphens only (a backslash,
#: ``;``, ``%`` or a Unicode space would be read differently by a resolver or a proxy).
_HOST_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?")
_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)


class NotifyEvent(StrEnum):
    """What a job can be notified of; Slurm's ``--mail-type`` names in brackets."""

    STARTED = "started"  # an attempt was placed (BEGIN)
    ENDED = "ended"  # completed, or cancelled (END)
    FAILED = "failed"  # ended failed, diverged or timed out (FAIL)
    PREEMPTED = "preempted"  # its GPUs were taken; queued again (REQUEUE)
    MOVED = "moved"  # moved off a straggling or drained node from a checkpoint
    REQUEUED = "requeued"  # an attempt failed and the job was queued again (REQUEUE)


#: What ``notify:`` means with no ``events``: Slurm's END,FAIL plus the two moves a user
#: of a shared cluster did not cause and wants to hear about.
DEFAULT_EVENTS: tuple[NotifyEvent, ...] = (NotifyEvent.ENDED, NotifyEvent.FAILED,
                                           NotifyEvent.PREEMPTED, NotifyEvent.MOVED)


def check_webhook_url(url: str) -> str:
    """``url`` if it is an http(s) URL a control plane may call; ValueError saying the fix."""
    if len(url) > MAX_URL_CHARS:
        raise ValueError(f"the URL is {len(url)} characters; use at most {MAX_URL_CHARS}")
    if _CONTROL.search(url):
        raise ValueError("the URL holds spaces or control characters; percent-encode them")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        got = f"{parts.scheme}:" if parts.scheme else "a bare host"
        raise ValueError(f"use an http:// or https:// URL, not {got}")
    if parts.username is not None or parts.password is not None:
        raise ValueError("put no credentials in the URL (user:password@): it is stored and "
                         "listed; the receiver checks the Grace-Signature header instead")
    if not parts.hostname:
        raise ValueError("the URL names no host; write e.g. https://hooks.example.com/grace")
    if url_host(url) is None:
        raise ValueError(f"notify.webhook: the host {parts.hostname!r} holds characters other "
                         "than letters, digits, dots and hyphens; write its plain DNS name "
                         "(e.g. hooks.example.com) or a bracketed IPv6 address")
    try:
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError as e:
        raise ValueError(f"the URL's port is not a number from 1 to 65535 ({e})") from e
    if parts.fragment:
        raise ValueError("drop the #fragment: it is never sent to the server")
    return url


def check_mail_address(address: str) -> str:
    """One plain ``local@domain`` address (no display name); ValueError saying the fix."""
    if len(address) > MAX_MAIL_CHARS:
        raise ValueError(f"the address is {len(address)} characters; use at most {MAX_MAIL_CHARS}")
    if not _MAIL.fullmatch(address):
        raise ValueError("give one plain address like me@example.com: no name, spaces, commas "
                         "or angle brackets")
    return address


def url_host(url: str) -> str | None:
    """``url``'s host, lower case, IDNA-encoded, without a trailing dot; an IPv6 literal
    without its brackets. None when it holds anything but letters, digits, dots and hyphens."""
    parts = urlsplit(url)
    raw = parts.hostname or ""
    if "[" in parts.netloc:  # urlsplit checks a bracketed literal is an IPv6 address
        return raw.lower() if re.fullmatch(r"[0-9a-f:.]+", raw.lower()) else None
    try:
        host = raw.encode("idna").decode("ascii") if not raw.isascii() else raw
    except UnicodeError:
        return None
    host = host.lower().rstrip(".")
    return host if _HOST_NAME.fullmatch(host) and ".." not in host else None


def host_allowed(url: str, allow_hosts: list[str]) -> bool:
    """Whether ``url``'s host (and port, where the entry names one) is on the list.

    ``*.example.com`` allows every subdomain of example.com; an entry without a
    port allows every port of its host. Names compare case-insensitively.
    """
    parts = urlsplit(url)
    host = url_host(url)
    if host is None:  # a character a resolver reads differently: never on the list
        return False
    port = parts.port or (443 if parts.scheme == "https" else 80)
    for entry in allow_hosts:
        name, want_port = _split_entry(entry.lower())
        if want_port is not None and want_port != port:
            continue
        if name.startswith("*."):
            if host.endswith(name[1:]) and host != name[2:]:
                return True
        elif host == name.strip("[]"):
            return True
    return False


def literal_ip_allowed(address: str, port: int, allow_hosts: list[str]) -> bool:
    """Whether the list names ``address`` itself, as an IP literal (for that port, where the
    entry names one): only then may a webhook reach a private or loopback address."""
    for entry in allow_hosts:
        name, want_port = _split_entry(entry.lower())
        if want_port is not None and want_port != port:
            continue
        if name.strip("[]") == address.lower():
            return True
    return False


def _split_entry(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):  # [::1]:8080
        host, _, rest = entry.partition("]")
        return host + "]", int(rest[1:]) if rest.startswith(":") else None
    name, sep, port = entry.rpartition(":")
    return (name, int(port)) if sep else (entry, None)


class NotifySpec(BaseModel):
    """A job's ``notify:``: where to tell, and of what (``events``, default ``DEFAULT_EVENTS``)."""

    model_config = _STRICT

    webhook: str | None = Field(default=None, description="http(s) URL on the server's "
                                "allow list; gets a signed JSON POST per event")
    mail: str | None = Field(default=None, description="one address; needs the server's SMTP relay")
    events: list[NotifyEvent] = Field(default_factory=lambda: list(DEFAULT_EVENTS), min_length=1,
                                      max_length=len(NotifyEvent))

    @field_validator("webhook")
    @classmethod
    def _webhook(cls, url: str | None) -> str | None:
        return None if url is None else check_webhook_url(url)

    @field_validator("mail")
    @classmethod
    def _mail(cls, address: str | None) -> str | None:
        return None if address is None else check_mail_address(address)

    @field_validator("events")
    @classmethod
    def _unique(cls, events: list[NotifyEvent]) -> list[NotifyEvent]:
        return list(dict.fromkeys(events))

    @model_validator(mode="after")
    def _somewhere(self) -> NotifySpec:
        if self.webhook is None and self.mail is None:
            raise ValueError("notify needs a webhook URL or a mail address (or both); "
                             "drop notify to be told nothing")
        return self


# ---------------------------------------------------------------- the server's file
class TenantNotify(BaseModel):
    """Webhooks the operator set for every job of one tenant (a team's chat channel)."""

    model_config = _STRICT

    webhooks: list[str] = Field(min_length=1, max_length=20)
    events: list[NotifyEvent] = Field(default_factory=lambda: list(DEFAULT_EVENTS), min_length=1)

    @field_validator("webhooks")
    @classmethod
    def _urls(cls, urls: list[str]) -> list[str]:
        return [check_webhook_url(u) for u in urls]


class SmtpSpec(BaseModel):
    """The relay mail goes through. Grace sends plain text, one message per event."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    host: str = Field(min_length=1, max_length=253)
    port: int = Field(default=25, ge=1, le=65535)
    sender: str = Field(alias="from", description="the From address")
    starttls: bool = Field(default=True, description="upgrade with STARTTLS before sending; "
                                                     "false only for a relay on localhost")

    @field_validator("sender")
    @classmethod
    def _sender(cls, address: str) -> str:
        return check_mail_address(address)


class DeliverySpec(BaseModel):
    """How hard the worker tries: exponential backoff from ``first_retry_s`` doubling up to
    ``max_retry_s``, then the delivery is marked failed after ``max_tries``."""

    model_config = _STRICT

    max_tries: int = Field(default=8, ge=1, le=100)
    timeout_s: float = Field(default=10.0, gt=0, le=120)
    first_retry_s: float = Field(default=5.0, gt=0, le=3600)
    max_retry_s: float = Field(default=600.0, gt=0, le=86400)


class NotifyConfig(BaseModel):
    """``grace up --notify FILE`` (``kind: notify``)."""

    model_config = _STRICT

    allow_hosts: list[str] = Field(
        default_factory=list, max_length=1000,
        description="hosts a job's webhook may call: name, name:port, *.domain, [v6]:port")
    tenants: dict[str, TenantNotify] = Field(default_factory=dict)
    smtp: SmtpSpec | None = None
    delivery: DeliverySpec = Field(default_factory=DeliverySpec)
    link_url: str | None = Field(
        default=None, description="where users reach this control plane (the job link in each "
                                  "notification); default: grace up's own address")

    @field_validator("link_url")
    @classmethod
    def _link(cls, url: str | None) -> str | None:
        return None if url is None else check_webhook_url(url)

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, hosts: list[str]) -> list[str]:
        for h in hosts:
            if not _HOST.fullmatch(h):
                raise ValueError(f"{h!r} is not a host: write a name (hooks.example.com), "
                                 "name:port, *.example.com or [::1]:8080, no scheme or path")
        return hosts

    @field_validator("tenants")
    @classmethod
    def _tenant_names(cls, tenants: dict[str, TenantNotify]) -> dict[str, TenantNotify]:
        for name in tenants:
            if not TENANT_PATTERN.fullmatch(name):
                raise ValueError(f"{name!r} is not a tenant name (letters, digits, . _ -)")
        return tenants


def parse_notify_config(data: Any, source: str = "<notify>") -> NotifyConfig:
    """``kind: notify`` (the kind may be left out); one SpecError listing every problem."""
    if isinstance(data, dict) and "kind" in data:
        if str(data["kind"]).lower() != "notify":
            raise SpecError(source, [SpecProblem("kind", f"expected kind 'notify', got "
                                                         f"{data['kind']!r}")])
        data = {k: v for k, v in data.items() if k != "kind"}
    if not isinstance(data, dict):
        raise SpecError(source, [SpecProblem("", "expected a mapping: allow_hosts, tenants, "
                                                 "smtp, delivery")])
    try:
        return NotifyConfig.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(source, e) from e


def load_notify_config(path: Path | str) -> NotifyConfig:
    from grace.spec.loader import read_yaml  # loader imports JobSpec, which imports this

    return parse_notify_config(read_yaml(path), str(path))


__all__ = [
    "DEFAULT_EVENTS",
    "DeliverySpec",
    "NotifyConfig",
    "NotifyEvent",
    "NotifySpec",
    "SmtpSpec",
    "TenantNotify",
    "check_mail_address",
    "check_webhook_url",
    "host_allowed",
    "literal_ip_allowed",
    "load_notify_config",
    "parse_notify_config",
    "url_host",
]
