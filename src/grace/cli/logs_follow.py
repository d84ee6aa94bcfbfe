"""``grace logs JOB [-f]``: each line once, ``[node/rankN] text``, from the API's cursor.

It polls ``GET /jobs/N/logs/follow`` with the cursor of the last answer, so each poll
returns only what was written since (never the whole log again), and prints lines in the
order each rank wrote them. It calls again at once while the answer says ``more`` (the
server caps bytes per answer), else waits ``poll_s``. With ``-f`` it moves on to a new
attempt when the job restarts (printing a line that says so) and returns when the job has
ended and every line of its last attempt is printed; without ``-f`` it prints what is
there now, once. ``--attempt N`` reads (or follows) that attempt only.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

#: Seconds between polls when nothing new came.
POLL_S = 1.0

Call = Callable[..., Any]


def print_logs(call: Call, job_id: int, *, follow: bool, attempt: int | None = None,
               node: str | None = None, out: TextIO | None = None, poll_s: float = POLL_S,
               sleep: Callable[[float], None] = time.sleep) -> None:
    """Print job ``job_id``'s logs through ``call`` (``client._call``: method, path, params)."""
    write = (out or sys.stdout).write
    flush = (out or sys.stdout).flush
    cursor: str | None = None
    number = attempt
    while True:
        params: dict[str, Any] = {"cursor": cursor} if cursor else (
            {"attempt": number} if number else {})
        if node is not None:
            params["node"] = node
        r = call("GET", f"/jobs/{job_id}/logs/follow", params=params)
        # not Rich: a line of a job's output is text, never markup
        write("".join(f"[{line['source']}] {line['text']}\n" for line in r["lines"]))
        flush()
        cursor, number = r["cursor"], r["attempt"]
        if r["more"]:
            continue
        if not follow:
            return
        if r["ended"] or r["attempt"] is None:
            if attempt is None and number is not None and r["attempts"] > number:
                write(f"[grace] attempt {number} {r['attempt_state']}; following attempt "
                      f"{number + 1} (restart)\n")
                cursor, number = None, number + 1
                continue
            if r["job_ended"] or (attempt is not None and r["ended"]):
                return
        sleep(poll_s)
