"""Notifications: a job's webhook (and mail) when it ends, fails, is preempted or moved.

- ``outbox``: what the transaction that moves a job writes (one row per destination);
- ``signing``: the server's HMAC key (``<state_dir>/notify.key``, mode 0600);
- ``senders``: the signed webhook POST (httpx) and the mail (smtplib);
- ``worker``: the leader's delivery loop (retries with backoff, at least once);
- ``policy``: what a submit may ask for under ``grace up --notify FILE``.

Kept free of imports at package level: ``store.repository`` imports ``outbox``.
See docs/notifications.md.
"""
