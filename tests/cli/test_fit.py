"""The pure helpers of ``grace.cli.fit``: middle elision, durations and tables that fit."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

from grace.cli.fit import (
    ELLIPSIS,
    Column,
    Fit,
    duration,
    elide,
    elide_distinct,
    elide_end,
    fit_table,
    one_line,
)
from grace.cli.jobs_view import FormatError, JobColumn, parse_format, wait_run

# printable text, wide (CJK) characters included; no control or combining characters, and no
# ellipsis of its own (so the one elision adds can be found)
TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Mn", "Me", "Cf"),
                             blacklist_characters=ELLIPSIS), max_size=60)


@given(TEXT, st.integers(min_value=0, max_value=70))
def test_elided_text_never_exceeds_its_width_and_keeps_both_ends(text: str, width: int) -> None:
    out = elide(text, width)
    assert cell_len(out) <= width
    if cell_len(text) <= width:
        assert out == text
        return
    assert out.count(ELLIPSIS) == 1 or width == 0
    head, _, tail = out.partition(ELLIPSIS)
    assert text.startswith(head) and text.endswith(tail)
    if width >= 5:  # room for the ellipsis and a wide (2-cell) character at each end
        assert head and tail, out
        assert width - cell_len(out) <= 2  # what is lost is at most a wide character's gap


@given(st.lists(TEXT, min_size=1, max_size=8), st.integers(min_value=0, max_value=40))
def test_distinct_elision_fits_and_tells_apart_what_plain_elision_merges(
        texts: list[str], width: int) -> None:
    out = elide_distinct(texts, width)
    assert all(cell_len(o) <= width for o in out)
    plain = [elide(t, width) for t in texts]
    # never worse than plain elision: texts it told apart stay apart, equal texts stay equal
    for i in range(len(texts)):
        for j in range(len(texts)):
            if plain[i] != plain[j]:
                assert out[i] != out[j]
            if texts[i] == texts[j]:
                assert out[i] == out[j]


def test_sweep_trials_stay_distinguishable() -> None:
    assert elide("sweep-seed-12", 10) == "sweep…d-12"  # the start gets the odd cell
    names = [f"llama-sweep-seed-{i}-lr-3e-4-warmup-2000" for i in range(1, 4)]
    assert len({elide(n, 16) for n in names}) == 1  # plain middle elision merges them
    out = elide_distinct(names, 16)
    assert len(set(out)) == 3 and all(cell_len(o) == 16 for o in out)
    assert [f"seed-{i}" in o or f"d-{i}-" in o for i, o in enumerate(out, 1)] == [True] * 3


def test_end_elision_and_one_line() -> None:
    assert elide_end("node a100-00 lost", 8) == "node a1…"
    assert elide_end("short", 8) == "short"
    assert one_line("rank 2 exited 1\nNCCL error:\t unhandled") == "rank 2 exited 1 NCCL error: unhandled"


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "-"), (float("nan"), "-"), (-3, "0s"), (0.4, "0s"), (45, "45s"), (59.6, "1m00s"),
    (723, "12m03s"), (3599, "59m59s"), (3600, "1h00m"), (11_100, "3h05m"),
    (86_399, "23h59m"), (187_200, "2d04h"), (40 * 86_400, "40d00h")])
def test_durations_read_as_people_write_them(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


def render(renderable: object, width: int) -> list[str]:
    console = Console(width=width, color_system=None, force_terminal=False)
    with console.capture() as cap:
        console.print(renderable)
    return cap.get().splitlines()


def test_a_table_fits_its_width_with_ids_and_states_whole() -> None:
    cols = [Column("id", justify="right"), Column("name", Fit.MIDDLE), Column("state"),
            Column("reason", Fit.END, min_width=12)]
    rows = [[str(i), f"experiment-{i}-with-a-long-descriptive-name", state,
             "node a100-00 lost its heartbeat for 600 s; the job moved off it " * 3]
            for i, state in enumerate(["completed", "cancelled", "diverged"], 100)]
    lines = render(fit_table(cols, rows, 60, title="jobs"), 60)
    assert max(map(len, lines)) <= 60
    assert len(lines) == 3 + len(rows)  # title, header, rule, one line per row: nothing wraps
    for state in ("completed", "cancelled", "diverged"):
        assert sum(state in line for line in lines) == 1


def test_a_table_too_wide_to_cut_is_split_repeating_its_key() -> None:
    cols = [Column("tenant", Fit.MIDDLE), *(Column(f"figure {i}", justify="right")
                                            for i in range(10))]
    rows = [["research", *(f"{1000 * i:,.1f}" for i in range(10))]]
    lines = render(fit_table(cols, rows, 80, title="wide", caption="a caption " * 10), 80)
    assert max(map(len, lines)) <= 80
    assert sum(line.startswith("research") for line in lines) == 2  # the key in each part
    for i in range(10):  # every figure whole, in one part or the other
        assert any(f"{1000 * i:,.1f}" in line for line in lines)
    assert any("(continued)" in line for line in lines)


def test_wrapped_details_are_kept_in_full() -> None:
    detail = "from=a100-00 to=a100-01 reason=straggler step_time_ratio=1.42 " * 3
    lines = render(fit_table([Column("at"), Column("detail", Fit.WRAP, min_width=20)],
                             [["12:00:00", detail]], 40), 40)
    assert max(map(len, lines)) <= 40
    assert "".join(line[10:].strip() for line in lines[2:]).replace(" ", "") == \
        detail.replace(" ", "")


def test_markup_in_a_cell_prints_as_written() -> None:
    lines = render(fit_table([Column("reason")], [["[rank 3] lost [bold]x[/bold]"]], 80), 80)
    assert "[rank 3] lost [bold]x[/bold]" in "\n".join(lines)


def test_format_names_columns_and_refuses_unknown_ones_naming_the_allowed() -> None:
    assert parse_format("id, NAME,state,id") == (JobColumn.ID, JobColumn.NAME, JobColumn.STATE)
    with pytest.raises(FormatError, match=r"'nope'.*id, name, tenant"):
        parse_format("id,nope")
    with pytest.raises(FormatError, match="names no column"):
        parse_format(" , ")


def test_wait_and_run_are_totals_over_attempts() -> None:
    job = {"submitted_at": 0.0, "started_at": 10.0, "ended_at": 600.0}
    # ran 10-110, queued again 110-310, ran 310-600
    attempts = [{"started_at": 10.0, "ended_at": 110.0}, {"started_at": 310.0, "ended_at": 600.0}]
    assert wait_run(job, attempts, now=10_000.0) == (210.0, 390.0)
    assert wait_run(job, None, now=10_000.0) == (10.0, 590.0)  # the summary alone: one attempt
    pending_cancelled = {"submitted_at": 0.0, "started_at": None, "ended_at": 50.0}
    assert wait_run(pending_cancelled, [], now=10_000.0) == (50.0, 0.0)
    running = {"submitted_at": 0.0, "started_at": 5.0, "ended_at": None}
    assert wait_run(running, [{"started_at": 5.0, "ended_at": None}], now=65.0) == (5.0, 60.0)


def test_a_long_path_in_a_wrapped_column_breaks_between_its_parts() -> None:
    from grace.cli.fit import break_long_words

    path = "gpus.H100-SXM.offers.hyperscaler.on_demand_usd_per_gpu_hour"
    lines = break_long_words(f"see {path} now", 30).split("\n")
    assert "".join(lines) == f"see {path} now"
    assert lines[1:] == ["hyperscaler.", "on_demand_usd_per_gpu_hour now"]
    assert all(len(line.split()[-1]) <= 30 for line in lines)
    # a part wider than the column breaks after its underscores, never mid-word
    assert break_long_words("owned.maintenance_fraction_per_year", 20).split("\n") == [
        "owned.maintenance_", "fraction_per_year"]
    assert break_long_words("short words stay", 5) == "short words stay"
