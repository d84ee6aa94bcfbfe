"""``grace logs [-f]`` over a scripted server: what it asks for, prints, and when it stops."""

from __future__ import annotations

import io
from typing import Any

from grace.cli.logs_follow import print_logs


def _answer(attempt: int | None, lines: list[tuple[str, str]], *, cursor: str | None = "c",
            more: bool = False, ended: bool = False, attempts: int = 1,
            job_ended: bool = False, attempt_state: str = "running") -> dict[str, Any]:
    return {"attempt": attempt, "attempts": attempts, "attempt_state": attempt_state,
            "job_ended": job_ended, "cursor": cursor, "more": more, "ended": ended,
            "lines": [{"source": s, "text": t, "stream": "stdout"} for s, t in lines]}


class Server:
    """Answers in turn; records each request's params and each sleep."""

    def __init__(self, *answers: dict[str, Any]) -> None:
        self.answers = list(answers)
        self.asked: list[dict[str, Any]] = []
        self.sleeps = 0

    def call(self, method: str, path: str, params: dict[str, Any]) -> dict[str, Any]:
        assert (method, path) == ("GET", "/jobs/5/logs/follow")
        self.asked.append(dict(params))
        return self.answers.pop(0)

    def sleep(self, _: float) -> None:
        self.sleeps += 1


def _run(server: Server, **kw: Any) -> str:
    out = io.StringIO()
    print_logs(server.call, 5, out=out, sleep=server.sleep, **kw)
    assert server.answers == [], "it stopped before the server said the logs were complete"
    return out.getvalue()


def test_follow_passes_the_cursor_back_and_follows_a_restart_until_the_job_ends() -> None:
    server = Server(
        _answer(1, [("a100-00/rank0", "step 1"), ("a100-01/rank2", "[not markup]")], cursor="c1"),
        _answer(1, [("a100-00/rank0", "step 2")], cursor="c2", more=True),
        _answer(1, [], cursor="c3", ended=True, attempt_state="failed"),  # job pending again
        _answer(1, [], cursor="c3", ended=True, attempts=2, attempt_state="failed"),
        _answer(2, [("a100-00/rank0", "resumed")], cursor="d1", attempts=2),
        _answer(2, [], cursor="d2", ended=True, attempts=2, job_ended=True,
                attempt_state="succeeded"))
    text = _run(server, follow=True, node="a100-00")
    assert text.splitlines() == [
        "[a100-00/rank0] step 1", "[a100-01/rank2] [not markup]", "[a100-00/rank0] step 2",
        "[grace] attempt 1 failed; following attempt 2 (restart)", "[a100-00/rank0] resumed"]
    assert server.asked == [
        {"node": "a100-00"}, {"cursor": "c1", "node": "a100-00"},
        {"cursor": "c2", "node": "a100-00"}, {"cursor": "c3", "node": "a100-00"},
        {"attempt": 2, "node": "a100-00"}, {"cursor": "d1", "node": "a100-00"}]
    assert server.sleeps == 3  # none after an answer with more, none after the restart


def test_without_follow_it_prints_what_is_there_once() -> None:
    server = Server(_answer(3, [("n/rank0", "a")], more=True, attempts=3),
                    _answer(3, [("n/rank0", "b")], attempts=3))
    assert _run(server, follow=False, attempt=3) == "[n/rank0] a\n[n/rank0] b\n"
    assert server.asked == [{"attempt": 3}, {"cursor": "c"}] and server.sleeps == 0


def test_following_one_attempt_stops_at_its_end_and_a_job_that_never_started_at_once() -> None:
    server = Server(_answer(1, [("n/rank0", "x")], ended=True, attempts=2, attempt_state="lost"))
    assert _run(server, follow=True, attempt=1) == "[n/rank0] x\n"
    server = Server(_answer(None, [], cursor=None, attempts=0),
                    _answer(None, [], cursor=None, attempts=0, job_ended=True))
    assert _run(server, follow=True) == "" and server.asked == [{}, {}]
