"""What a submit may ask for in ``notify:``, under the server's ``--notify`` file.

Checked at submit, so a user learns at once (a 422 naming the field) that a
webhook's host is not on the operator's list, or that this server sends no
mail, instead of finding a failed delivery after the job ended.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from grace.spec.job import JobSpec
from grace.spec.notify import NotifyConfig, host_allowed


def submit_problem(config: NotifyConfig | None, spec: JobSpec) -> dict[str, str] | None:
    """``{"field", "message"}`` for the first thing ``spec.notify`` may not do here, else None."""
    notify = spec.notify
    if notify is None:
        return None
    if notify.webhook is not None:
        if config is None:
            return {"field": "notify.webhook", "message":
                    "this control plane sends no job webhooks: its operator enables them with "
                    "`grace up --notify FILE`, a file listing the allowed hosts (allow_hosts); "
                    "drop notify.webhook or ask them to"}
        if not host_allowed(notify.webhook, config.allow_hosts):
            host = urlsplit(notify.webhook).netloc
            allowed = ", ".join(config.allow_hosts[:10]) or "none"
            return {"field": "notify.webhook", "message":
                    f"host {host} is not on this cluster's webhook allow list ({allowed}); "
                    "use an allowed host or ask the operator to add it to allow_hosts"}
    if notify.mail is not None and (config is None or config.smtp is None):
        return {"field": "notify.mail", "message":
                "this control plane sends no mail: its operator sets an smtp: relay in the "
                "`grace up --notify FILE`; drop notify.mail or use notify.webhook"}
    return None


__all__ = ["submit_problem"]
