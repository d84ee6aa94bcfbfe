"""Sending one notification: a signed webhook POST (httpx) or a mail (smtplib).

Each sender returns nothing on success and raises ``SendError`` otherwise,
saying whether another try could help (``retry``): a network error, a timeout,
408, 429 or 5xx may pass; any other 4xx, or a redirect, will not (redirects are
never followed: the allow list names the host that is called, and a redirect
could point anywhere, e.g. at the cloud's metadata address).
"""

from __future__ import annotations

import ipaddress
import json
import smtplib
import socket
import ssl
import time
from email.message import EmailMessage
from typing import Any

import httpx

from grace.control.notify.signing import EVENT_HEADER, ID_HEADER, SIGNATURE_HEADER, sign
from grace.spec.notify import SmtpSpec, literal_ip_allowed, url_host

_RETRYABLE_STATUS = frozenset({408, 425, 429})
#: At most this much of a receiver's answer is kept as the error.
_ERROR_CHARS = 300
#: At most this much of a receiver's answer body is read (a slow or endless one is cut off).
_BODY_BYTES = 4096


class SendError(Exception):
    def __init__(self, message: str, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


def body_of(payload: dict[str, Any]) -> bytes:
    """The exact bytes that are signed and sent (sorted keys: the same on every try)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def _forbidden(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast
            or ip.is_reserved or ip.is_unspecified)


def checked_address(url: str, allow_hosts: list[str] | None) -> str:
    """The address to connect to for ``url``'s host: resolved once, and refused (SendError,
    no retry) when it is private, loopback, link-local, multicast or reserved unless
    ``allow_hosts`` names that literal IP. ``allow_hosts`` None: no check (the operator's
    own URLs), the first address is still the one connected to."""
    parts = httpx.URL(url)
    host = url_host(url)
    if host is None:
        raise SendError("its host holds characters other than letters, digits, dots and "
                        "hyphens", retry=False)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise SendError(f"cannot resolve {host}: {e}"[:_ERROR_CHARS], retry=True) from e
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise SendError(f"{host} resolves to no address", retry=True)
    if allow_hosts is not None:
        for address in addresses:  # every one: the resolver may answer in another order
            ip = ipaddress.ip_address(address.split("%")[0])
            if _forbidden(ip) and not literal_ip_allowed(str(ip), port, allow_hosts):
                raise SendError(
                    f"{host} resolves to {ip}, a private, loopback, link-local or multicast "
                    "address not named as a literal IP on allow_hosts: refused", retry=False)
    return addresses[0].split("%")[0]


def post_webhook(client: httpx.Client, url: str, payload: dict[str, Any], key: bytes,
                 timeout_s: float = 10.0, allow_hosts: list[str] | None = None,
                 pin: bool = True) -> None:
    """One signed POST, done within ``timeout_s`` in all (httpx's own timeout is per read):
    the answer's body is read up to ``_BODY_BYTES`` and no longer than the deadline.

    With ``pin`` the host is resolved once here (``checked_address``) and the request is
    sent to that address, with the name kept in the Host header and as the TLS server
    name, so a DNS answer that changes between the check and the connect is not used."""
    deadline = time.monotonic() + timeout_s
    body = body_of(payload)
    headers = {"Content-Type": "application/json", "User-Agent": "grace-notify/1",
               ID_HEADER: str(payload["notification_id"]), EVENT_HEADER: str(payload["event"]),
               SIGNATURE_HEADER: sign(key, body)}
    extensions: dict[str, Any] = {}
    try:
        target = httpx.URL(url)
        if pin:
            address = checked_address(url, allow_hosts)
            headers["Host"] = target.netloc.decode("ascii")
            extensions["sni_hostname"] = target.host
            target = target.copy_with(host=address)
        timeout = httpx.Timeout(max(deadline - time.monotonic(), 0.1))
        with client.stream("POST", target, content=body, headers=headers, timeout=timeout,
                           extensions=extensions) as response:
            code = response.status_code
            if 200 <= code < 300:
                return
            got = b""
            for chunk in response.iter_raw():
                got += chunk
                if len(got) >= _BODY_BYTES or time.monotonic() > deadline:
                    break
    except httpx.InvalidURL as e:  # not an HTTPError: no try will get further
        raise SendError(f"the URL cannot be sent: {e}"[:_ERROR_CHARS], retry=False) from e
    except httpx.HTTPError as e:
        raise SendError(f"{type(e).__name__}: {e}"[:_ERROR_CHARS], retry=True) from e
    answer = got[:_BODY_BYTES].decode("utf-8", "replace").strip()
    text = f"HTTP {code}: {answer}"[:_ERROR_CHARS]
    if 300 <= code < 400:
        raise SendError(f"{text} (redirects are not followed: give the final URL)", retry=False)
    raise SendError(text, retry=code >= 500 or code in _RETRYABLE_STATUS)


def mail_message(smtp: SmtpSpec, to: str, payload: dict[str, Any]) -> EmailMessage:
    """A plain-text mail like Slurm's: the subject says job, name and event."""
    job = payload["job"]
    msg = EmailMessage()
    msg["From"] = smtp.sender
    msg["To"] = to
    msg["Subject"] = f"Grace job {job['id']} ({job['name']}) {payload['event']}: {job['state']}"
    msg["Message-ID"] = f"<{payload['notification_id']}@grace>"
    lines = [f"{k}: {v}" for k, v in job.items() if v is not None]
    if payload.get("url"):
        lines.append(f"link: {payload['url']}")
    msg.set_content("\n".join(lines) + "\n")
    return msg


def send_mail(smtp: SmtpSpec, to: str, payload: dict[str, Any], timeout_s: float) -> None:
    try:
        with smtplib.SMTP(smtp.host, smtp.port, timeout=timeout_s) as client:
            if smtp.starttls:
                client.starttls(context=ssl.create_default_context())
            client.send_message(mail_message(smtp, to, payload))
    except smtplib.SMTPRecipientsRefused as e:
        raise SendError(f"the relay refused {to}: {e}"[:_ERROR_CHARS], retry=False) from e
    except smtplib.SMTPResponseException as e:
        raise SendError(f"SMTP {e.smtp_code}: {e.smtp_error!r}"[:_ERROR_CHARS],
                        retry=e.smtp_code >= 400 and e.smtp_code < 500) from e
    except (OSError, smtplib.SMTPException) as e:
        raise SendError(f"{type(e).__name__}: {e}"[:_ERROR_CHARS], retry=True) from e


__all__ = ["SendError", "body_of", "checked_address", "mail_message", "post_webhook", "send_mail"]
