"""The history loaders of ``grace assess``: each format on small crafted files, good rows
read right, bad rows skipped with their reason, wrong files and maps refused by name."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from grace.cost.history import HistoryFormat, load_history, parse_format
from grace.cost.history_bill import INSTANCE_GPUS, instance_gpus
from grace.cost.history_sacct import SACCT_FORMAT, tres_gpus

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
SACCT = DATA / "sacct_small.txt"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ------------------------------------------------------------------ formats
def test_an_unknown_format_lists_every_format() -> None:
    with pytest.raises(ValueError, match="unknown history format 'slurm'") as e:
        parse_format("slurm")
    for f in HistoryFormat:
        assert f.value in str(e.value)


def test_columns_are_refused_for_a_trace_format(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--columns applies to formats"):
        load_history(tmp_path / "x.csv", "philly", "submit=a")


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        load_history(tmp_path / "nope.txt", "sacct")


# ------------------------------------------------------------------ sacct
def test_the_fixture_is_in_the_documented_sacct_format() -> None:
    assert SACCT.read_text().splitlines()[0] == SACCT_FORMAT.replace(",", "|")


def test_sacct_reads_gpu_jobs_and_skips_the_rest_with_reasons() -> None:
    h = load_history(SACCT, "sacct")
    assert h.format is HistoryFormat.SACCT and h.rows == 11
    assert [j.job_id for j in h.jobs] == ["1001", "1002", "1003", "1007", "1008_3", "1010"]
    assert h.skipped == {"job step (export with sacct -X)": 1, "never started": 1,
                         "no GPUs in AllocTRES": 1, "unparseable submit time": 1,
                         "zero duration": 1}
    assert h.rows == len(h.jobs) + sum(h.skipped.values())
    first = h.jobs[0]
    # times from the first submission; the wait is Start - Submit
    assert first.submit_s == 0.0 and first.wait_s == 1 * 3600 + 48 * 60 + 37
    assert first.run_s == 7 * 86400 + 20 * 3600 + 37 * 60 + 32  # Elapsed 7-20:37:32
    assert (first.gpus, first.nodes, first.tenant) == (32.0, 4, "llm")
    assert first.limit_s == 10 * 86400 and first.name == "pretrain-7b"
    assert h.origin_epoch_s is not None


def test_sacct_tenant_falls_back_to_the_user_and_reads_slurm_limits() -> None:
    jobs = {j.job_id: j for j in load_history(SACCT, "sacct").jobs}
    assert jobs["1003"].tenant == "carol"  # no Account: User without its uid
    assert jobs["1007"].limit_s == math.inf and jobs["1007"].state == "RUNNING"
    assert jobs["1010"].limit_s == 1440 * 60  # a bare Timelimit is minutes
    assert jobs["1008_3"].gpu_model == "A100-80GB" and jobs["1008_3"].gpus == 1.0


def test_tres_counts_the_untyped_total_else_the_typed_entries() -> None:
    assert tres_gpus("billing=8,cpu=8,gres/gpu:h100=8,gres/gpu=8,node=1") == (8, None)
    assert tres_gpus("cpu=8,gres/gpu:h200=4,gres/gpu:b200=2") == (6, None)
    assert tres_gpus("cpu=8,gres/gpu:H200=4") == (4, "H200")
    assert tres_gpus("cpu=8,mem=1G") == (0, None)


def test_sacct_columns_are_found_in_any_case_and_can_be_renamed(tmp_path: Path) -> None:
    lines = SACCT.read_text().splitlines()
    lines[0] = lines[0].lower().replace("alloctres", "ReqTRES")
    p = write(tmp_path, "lower.txt", "\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"no column 'AllocTRES'.*--columns gpus=") as e:
        load_history(p, "sacct")
    assert "reqtres" in str(e.value).lower()
    h = load_history(p, "sacct", "gpus=ReqTRES")
    assert len(h.jobs) == 6


def test_sacct_needs_elapsed_or_end(tmp_path: Path) -> None:
    p = write(tmp_path, "s.txt", "JobID|Submit|Start|AllocTRES\n1|2026-01-01T00:00:00|"
                                 "2026-01-01T00:00:00|gres/gpu=1\n")
    with pytest.raises(ValueError, match="no column 'Elapsed' or 'End'"):
        load_history(p, "sacct")
    q = write(tmp_path, "e.txt", "JobID|Submit|Start|End|AllocTRES\n1|2026-01-01T00:00:00|"
                                 "2026-01-01T01:00:00|2026-01-01T03:00:00|gres/gpu=2\n")
    [job] = load_history(q, "sacct").jobs
    assert job.run_s == 7200 and job.wait_s == 3600


# ------------------------------------------------------------------ csv
CSV = """id,user,submitted,started,ended,ngpu,nodes,state,step,model,name
a,llm,2026-01-01T00:00:00,2026-01-01T02:00:00,2026-01-03T02:00:00,16,2,COMPLETED,0.5,h100-sxm,pre
b,llm,2026-01-01T01:00:00,2026-01-01T01:00:30,2026-01-01T05:00:30,0.5,,COMPLETED,,,share
c,cv,2026-01-02T00:00:00,,,8,1,PENDING,,,never
d,cv,2026-01-02T00:00:00,2026-01-02T00:10:00,2026-01-02T00:05:00,8,1,FAILED,,,backwards
e,cv,2026-01-02T00:00:00,2026-01-02T00:10:00,2026-01-02T01:10:00,0,1,COMPLETED,,,cpu
f,cv,1767225600,1767225700,1767229300,8,1,COMPLETED,,,epoch
g,cv,2026-01-03T00:00:00,2026-01-03T00:10:00,2026-01-03T01:10:00,8,1.5,COMPLETED,,,halfnode
"""
CSV_MAP = ("id=id,tenant=user,submit=submitted,start=started,end=ended,gpus=ngpu,nodes=nodes,"
           "state=state,step_s=step,gpu_model=model,name=name")


def test_csv_takes_duration_from_end_minus_start_and_skips_bad_rows(tmp_path: Path) -> None:
    h = load_history(write(tmp_path, "h.csv", CSV), "csv", CSV_MAP)
    assert [j.job_id for j in h.jobs] == ["a", "b"]
    assert h.skipped == {"never started": 1, "negative duration": 1, "no GPUs": 1,
                         "submit time format differs from earlier rows": 1,
                         "bad node count": 1}
    a, b = h.jobs
    assert (a.run_s, a.wait_s, a.nodes, a.step_time_s) == (2 * 86400, 7200, 2, 0.5)
    assert a.gpu_model == "H100-SXM" and a.state == "COMPLETED" and a.tenant == "llm"
    assert b.gpus == 0.5 and b.nodes is None and b.submit_s == 3600


def test_csv_reads_numbers_of_seconds_and_slurm_elapsed(tmp_path: Path) -> None:
    p = write(tmp_path, "n.csv", "s,d,g\n100,01:00:00,4\n160,90,2\n")
    h = load_history(p, "csv", "submit=s,duration=d,gpus=g")
    assert [(j.submit_s, j.run_s, j.gpus) for j in h.jobs] == [(0, 3600, 4), (60, 90, 2)]
    assert h.origin_epoch_s is None  # numbers of seconds: no calendar


def test_csv_column_map_errors_name_the_fix(tmp_path: Path) -> None:
    p = write(tmp_path, "n.csv", "s,d,g\n100,10,4\n")
    with pytest.raises(ValueError, match="format 'csv' needs --columns"):
        load_history(p, "csv")
    with pytest.raises(ValueError, match=r"--columns lacks duration \(or start and end\)"):
        load_history(p, "csv", "submit=s,gpus=g")
    with pytest.raises(ValueError, match="unknown role 'gpu'"):
        load_history(p, "csv", "submit=s,duration=d,gpu=g")
    with pytest.raises(ValueError, match="no column 'Tenant'"):
        load_history(p, "csv", "submit=s,duration=d,gpus=g,tenant=Tenant")


# ------------------------------------------------------------------ cloud bill
BILL = """Usage_Start,usage_end,instance_type,usage_hours,gpu_hours,cost_usd,capacity_errors,launch_requests
2026-01-01,2026-01-08,p5.48xlarge,100,,5504,2,10
2026-01-08,2026-01-08,Standard_ND96isr_H100_v5,10,,983.2,,
2026-01-08,2026-01-15,g6.xlarge,50,,40,0,1
2026-01-08,2026-01-15,g6.xlarge,50,50,40,0,1
2026-01-15,2026-01-10,p5.48xlarge,10,,550,0,1
2026-01-15,2026-01-22,p4de.24xlarge,-3,,0,0,1
2026-01-15,2026-01-22,p4de.24xlarge,3,,82.3,1.5,1
"""


def test_a_bill_turns_instance_hours_into_gpu_hours(tmp_path: Path) -> None:
    h = load_history(write(tmp_path, "bill.csv", BILL), "cloud-bill")
    assert h.rows == 7 and not h.jobs
    assert h.skipped == {"unknown instance type 'g6.xlarge': add a gpu_hours column": 1,
                         "period ends before it starts": 1, "negative usage hours": 1,
                         "bad capacity error count": 1}
    p5, azure, g6 = h.usage
    assert (p5.gpu_model, p5.gpu_hours, p5.cost_usd) == ("H100-SXM", 800.0, 5504.0)
    assert (p5.capacity_errors, p5.launch_requests) == (2, 10)
    assert p5.end_s - p5.start_s == 7 * 86400
    # a bare date equal to its start is that one day; blank counts are "not recorded"
    assert azure.end_s - azure.start_s == 86400 and azure.capacity_errors is None
    assert azure.gpu_hours == 80.0 and azure.gpu_model == "H100-SXM"
    assert g6.gpu_model is None and g6.gpu_hours == 50.0  # given gpu_hours: kept
    assert h.gpu_hours == pytest.approx(sum(h.gpu_hours_by_period()))


def test_bill_columns_can_be_renamed_and_missing_ones_are_named(tmp_path: Path) -> None:
    p = write(tmp_path, "b.csv", "from,to,type,hours,spend\n2026-01-01,2026-01-02,p5.48xlarge,24,1\n")
    with pytest.raises(ValueError, match=r"no column 'usage_start'.*--columns usage_start="):
        load_history(p, "cloud-bill")
    h = load_history(p, "cloud-bill", "usage_start=from,usage_end=to,instance_type=type,"
                                      "usage_hours=hours,cost_usd=spend")
    assert h.usage[0].gpu_hours == 24 * 8


def test_the_instance_table_uses_price_book_gpu_names() -> None:
    from grace.cost.pricebook import load_pricebook

    book = load_pricebook()
    for model, gpus in INSTANCE_GPUS.values():
        assert gpus == 8
        assert model in book.gpus or model == "A100-40GB"  # p4d: catalog only
    assert instance_gpus("STANDARD_ND96AMSR_A100_V4") == ("A100-80GB", 8)


def test_the_example_bill_is_what_its_script_writes(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "bill.csv"
    subprocess.run([sys.executable, str(REPO / "examples" / "make_cloud_bill.py"), "--out",
                    str(out)], check=True, capture_output=True)
    assert out.read_text() == (REPO / "examples" / "cloud_bill.csv").read_text()
    h = load_history(out, "cloud-bill")
    assert not h.skipped and h.span_s >= 270 * 86400  # about 9 months
    assert {u.instance_type for u in h.usage} == {"p5.48xlarge", "p4de.24xlarge"}
    assert sum(u.capacity_errors or 0 for u in h.usage) > 0


# ------------------------------------------------------------------ traces
def test_a_philly_file_becomes_jobs_with_vcs_as_tenants(tmp_path: Path) -> None:
    p = write(tmp_path, "philly.csv", (
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-09 07:01:55,3600,8,28800,vc1\n"
        "2017-10-09 08:01:55,nan,1,0,vc2\n"
        "2017-10-09 09:01:55,60,2,120,vc2\n"))
    h = load_history(p, HistoryFormat.PHILLY)
    assert h.rows == 3 and h.skipped == {"unparseable duration": 1}
    assert [(j.tenant, j.gpus, j.run_s, j.start_s, j.nodes) for j in h.jobs] == [
        ("vc1", 8.0, 3600.0, None, None), ("vc2", 2.0, 60.0, None, None)]
    assert h.jobs[0].wait_s is None  # no starts recorded: waits unknown, not zero


def test_an_openb_sharing_pod_counts_as_its_fraction(tmp_path: Path) -> None:
    p = write(tmp_path, "pods.csv", (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
        "deletion_time,scheduled_time\n"
        "p1,1000,1024,1,250,,BE,Running,0,3600,0\n"
        "p2,1000,1024,0,0,,BE,Running,0,3600,0\n"
        "p3,1000,1024,2,1000,T4,LS,Running,100,7300,100\n"))
    h = load_history(p, "openb")
    assert [(j.gpus, j.gpu_model) for j in h.jobs] == [(0.25, None), (2.0, "T4")]
    assert h.skipped == {"cpu_only": 1}


def test_implausible_rows_are_skipped_and_mixed_units_refused(tmp_path: Path) -> None:
    """A mistyped count or unit must not hang the indicators (a span of 50,000 years is
    millions of daily buckets) or reach them as a figure: rows are skipped with the reason,
    a history spanning decades is refused naming the likely cause."""
    from grace.cost.history import load_history

    roles = "submit=sub,duration=dur,gpus=g"
    big = tmp_path / "big.csv"
    big.write_text("sub,dur,g\n0,3600,8\n100,3600,1e12\n200,99999999999,8\n300,nan,8\n")
    h = load_history(big, "csv", roles)
    assert len(h.jobs) == 1
    assert h.skipped.get("more than 100,000 GPUs") == 1
    assert h.skipped.get("run time over 366 days (duration unit?)") == 1
    for rows in ("0,3600,8\n1700000000000,3600,8\n", "0,3600,8\n-1e300,3600,8\n"):
        mixed = tmp_path / "mixed.csv"
        mixed.write_text("sub,dur,g\n" + rows)
        with pytest.raises(ValueError, match="span more than 20 years: mixed units"):
            load_history(mixed, "csv", roles)


def test_bill_lines_refusing_more_than_requested_are_skipped(tmp_path: Path) -> None:
    from grace.cost.history import load_history

    bill = tmp_path / "bill.csv"
    bill.write_text(
        "usage_start,usage_end,instance_type,usage_hours,cost_usd,capacity_errors,launch_requests\n"
        "2026-01-01,2026-01-08,p5.48xlarge,100,5504,1,5\n"
        "2026-01-08,2026-01-15,p5.48xlarge,100,5504,9,5\n"
        "2026-01-15,2026-01-22,p5.48xlarge,1e9,5504,0,5\n")
    h = load_history(bill, "cloud-bill")
    assert len(h.usage) == 1 and h.skipped.get("refusals exceed requests") == 1
    assert h.skipped.get("more GPU-hours than 100,000 GPUs give in the period") == 1
