"""``grace whatif``'s timeline gives the reference replays' numbers, exactly.

The timeline (``sim.whatif_timeline``) replays each seed once and banks its attempts
under every checkpoint interval; the reference runs ``Simulation`` once per interval
and seed. Cases below include spares and none, a job that gives up when it keeps
failing without a checkpoint (only under the long intervals), and Daly's interval.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from grace.cli.main import app
from grace.core.policies import get_policy
from grace.core.restart import FailureKind, RestartPolicy
from grace.sim.failures import FailureModel
from grace.sim.report_page import STYLE
from grace.sim.report_whatif import whatif_figure
from grace.sim.whatif import WhatIfInput, WhatIfMethod, _cluster, run_whatif
from grace.sim.whatif_timeline import bank_interval, replay_attempts

CASES = {
    # the job fails every ~1.6 h: the 240-min interval rarely commits a checkpoint
    "frequent failures": WhatIfInput(gpus=64, days=3, gpu_mtbf_h=100.0,
                                     intervals_min=(5.0, 60.0, 240.0, None), replicates=3),
    "three spares, fast repair": WhatIfInput(
        gpus=100, days=4, gpu_mtbf_h=50.0, intervals_min=(30.0, 1000.0), spare_nodes=3,
        repair_s=3600, replicates=2, seed=3),
    "one node, long intervals": WhatIfInput(gpus=12, days=10, gpu_mtbf_h=20.0,
                                            intervals_min=(5.0, 2000.0), replicates=3, seed=11),
}


def without_wall(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "wall_s"}


@pytest.mark.parametrize("name", list(CASES))
def test_the_timeline_equals_one_replay_per_interval_and_seed(name: str) -> None:
    inp = CASES[name]
    fast = run_whatif(inp)
    reference = run_whatif(inp, WhatIfMethod.REPLAY)
    assert without_wall(fast) == without_wall(reference)  # every float, not approximately


def test_a_job_that_keeps_failing_without_a_checkpoint_gives_up_per_interval() -> None:
    """The replay restarts the job whatever it banked; the budget is the interval's."""
    inp = CASES["one node, long intervals"]
    topo = _cluster(inp, 1)
    model = FailureModel(gpu_mtbf_h=inp.gpu_mtbf_h, checkpoint_interval_s=None)
    policy = RestartPolicy(exclude_failed_node=False)
    timeline = replay_attempts(topo, inp.gpus, model, inp.days * 86_400.0, 11,
                               get_policy("grace"), policy)
    failed = sum(a.kind is not None for a in timeline.attempts)
    short = bank_interval(timeline, FailureModel(gpu_mtbf_h=20.0, checkpoint_interval_s=300.0),
                          policy)
    long = bank_interval(timeline, FailureModel(gpu_mtbf_h=20.0, checkpoint_interval_s=120_000.0),
                         policy)
    assert short["failures"] == failed > 20  # 5-min checkpoints: it always progresses
    # with a 2000-min interval nothing is ever committed: the job gives up at the failure
    # that is its own (an application's, not a node's) one time more than the budget allows
    ran = timeline.attempts[:int(long["failures"])]
    own = [a for a in ran if a.kind is FailureKind.APPLICATION]
    assert len(own) == policy.max_restarts_without_progress + 1 and ran[-1] is own[-1]
    assert long["failures"] < failed
    assert long["ettr"] == 0.0 < short["ettr"]


def test_progress_counts_replayed_days_up_to_the_total() -> None:
    seen: list[tuple[float, float]] = []
    inp = CASES["frequent failures"]
    run_whatif(inp, progress=lambda done, total: seen.append((done, total)))
    totals = {t for _, t in seen}
    assert totals == {2 * inp.replicates * inp.days}  # each seed once, with and without spares
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == pytest.approx(totals.pop())
    assert len(seen) > 10  # within a replay too, not only between them


def test_the_whatif_page_is_styled_like_the_other_reports(tmp_path: Path) -> None:
    html, out = tmp_path / "whatif.html", tmp_path / "whatif.json"
    r = CliRunner().invoke(app, ["whatif", "--gpus", "64", "--days", "2", "--replicates", "2",
                                 "--json", str(out), "--html", str(html)])
    assert r.exit_code == 0, r.output
    doc = html.read_text()
    assert STYLE in doc and doc.count("<h1>") == 1 and "<table border" not in doc
    result = json.loads(out.read_text())
    auto = f"auto ({result['auto_interval_min']:.1f} min)"
    assert f"<td>{auto}</td>" in doc and "<td>5 min</td>" in doc
    fig = whatif_figure(result)
    with_spares, _, without = fig.data
    assert list(with_spares.x) == ["5 min", "30 min", "60 min", auto]
    assert list(with_spares.error_y.array) == [row["ettr_sim_sd"] for row in result["rows"]]
    assert list(without.y) == [row["ettr_sim"] for row in result["rows_without_spares"]]
    assert fig.layout.yaxis.tickformat == ".0%"
