"""Sending one notification: a signed webhook POST (httpx) or a mail (smtplib).

Each sender returns nothing on success and raises ``SendError`` otherwise,
saying whether another try could help (``retry``): a network error, a timeout,
408, 429 or 5xx may pass; any other 4xx, or a redirect, will not (redirects are
never followed: the allow list names the host that is called, and a redirect
could point anywhere, e.g. at the cloud's metadata address).
"""

from __future__ import annotations

import json
import smtplib
import ssl
from email.message import EmailMessage
from typing import Any

import httpx

from grace.control.notify.signing import EVENT_HEADER, ID_HEADER, SIGNATURE_HEADER, sign
from grace.spec.notify import SmtpSpec

_RETRYABLE_STATUS = frozenset({408, 425, 429})
#: At most this much of a receiver's answer is kept as the error.
_ERROR_CHARS = 300


class SendError(Exception):
    def __init__(self, message: str, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


def body_of(payload: dict[str, Any]) -> bytes:
    """The exact bytes that are signed and sent (sorted keys: the same on every try)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def post_webhook(client: httpx.Client, url: str, payload: dict[str, Any], key: bytes) -> None:
    body = body_of(payload)
    headers = {"Content-Type": "application/json", "User-Agent": "grace-notify/1",
               ID_HEADER: str(payload["notification_id"]), EVENT_HEADER: str(payload["event"]),
               SIGNATURE_HEADER: sign(key, body)}
    try:
        response = client.post(url, content=body, headers=headers)
    except httpx.InvalidURL as e:  # not an HTTPError: no try will get further
        raise SendError(f"the URL cannot be sent: {e}"[:_ERROR_CHARS], retry=False) from e
    except httpx.HTTPError as e:
        raise SendError(f"{type(e).__name__}: {e}"[:_ERROR_CHARS], retry=True) from e
    code = response.status_code
    if 200 <= code < 300:
        return
    text = f"HTTP {code}: {response.text.strip()}"[:_ERROR_CHARS]
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


__all__ = ["SendError", "body_of", "mail_message", "post_webhook", "send_mail"]
