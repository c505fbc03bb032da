"""The policy table's spread of the steps, policies within the noise, same compiled steps and CPU runs:
in ``policy_table``, the terminal table and the dashboard's table, with known answers."""

from __future__ import annotations

import re

import pytest

from profiler.analysis.policies import policy_table, step_spread
from profiler.report.policies_text import render_policy_comparison
from tests.helpers.policy_noise import MS, run


def test_step_spread_of_included_steps():
    s = step_spread([{"duration_ns": d} for d in (1, 2, 3, 4, 5)])
    assert (s["step_min_ns"], s["step_max_ns"], s["step_spread_ns"]) == (1, 5, 4)
    assert s["step_iqr_ns"] == pytest.approx(2.0)  # 4 - 2, quartiles of 1..5 (inclusive)
    assert step_spread([]) == {"step_min_ns": None, "step_max_ns": None, "step_spread_ns": None, "step_iqr_ns": None}
    assert step_spread([{"duration_ns": 7}])["step_iqr_ns"] is None


def test_noise_is_said_and_a_real_difference_is_not():
    """The issue's case: remat 3.55 ms against none 8.03 ms from three CPU steps that ranged 3.2-21.3 ms."""
    tab = policy_table(
        [
            run("none", [3.2, 8.03, 21.25], platform="cpu"),
            run("remat", [3.4, 3.55, 3.6], platform="cpu"),
            run("offload", [30.0, 30.1, 30.2], platform="cpu"),
        ]
    )
    rows = {r["policy"]: r for r in tab["rows"]}
    assert rows["none"]["step_min_ns"] == 3.2 * MS and rows["none"]["step_max_ns"] == 21.25 * MS
    (pair,) = tab["within_spread"]  # none-remat: 4.48 ms apart, spread 18.05 ms; offload is 22 ms away from none
    assert pair["policies"] == ["none", "remat"]
    assert pair["difference_ns"] == pytest.approx(4.48 * MS) and pair["spread_ns"] == pytest.approx(18.05 * MS)
    assert rows["offload"]["within_spread_of"] == [] and rows["remat"]["within_spread_of"] == ["none"]
    assert tab["cpu_runs"] == ["none", "remat", "offload"]
    text = render_policy_comparison(tab)
    assert re.search(r"^none ~\s+3\s+8\.030\s+3\.200-21\.250\s", text, re.M), text
    assert re.search(r"^offload\s+3\s", text, re.M)
    assert "~: none and remat differ by 4.480 ms per step, less than the spread of their steps (18.050 ms)" in text
    assert "cpu: all runs ran on a CPU, which does not stand for a GPU" in text
    assert text.startswith("cpu: all runs ran on a CPU")  # before the numbers, which read as a ranking


def test_same_hlo_marks_different_policies_only():
    tab = policy_table(
        [run("none", [5, 5, 5], "aaa"), run("offload", [9, 9, 9], "aaa"), run("none", [5, 5, 5], "aaa"),
         run("remat", [7, 7, 7], "bbb"), run("remat", [7, 7, 7], "bbb")]
    )  # fmt: skip
    assert tab["same_hlo"] == [{"fingerprint": "aaa", "policies": ["none", "offload"], "cpu": False}]
    assert [r["same_hlo_as"] for r in tab["rows"]] == [["offload"], ["none"], ["offload"], [], []]
    assert tab["cpu_runs"] == []
    text = render_policy_comparison(tab)
    assert len(re.findall(r"^(none|offload) =", text, re.M)) == 3 and not re.search(r"^remat =", text, re.M)
    assert "=: none, offload compiled to the same step (HLO fingerprint aaa)" in text
    assert "does not stand for a GPU" not in text


def test_dashboard_policy_table_shows_the_same_facts():
    pytest.importorskip("dash")
    from dashboards.trade import policy_datatable

    tab = policy_table([run("none", [3.2, 8.03, 21.25], "aaa", "cpu"), run("offload", [3.4, 3.55, 3.6], "aaa", "cpu")])
    table, lines = policy_datatable(tab, ["none (run 1)", "offload (run 2)"])
    cols = {c["id"]: c["name"] for c in table.columns}
    assert cols["spread"] == "shortest-longest step (ms)" and cols["same_hlo"] == "same compiled step as"
    data = {d["run"]: d for d in table.data}
    assert data["none (run 1)"]["spread"] == "3.2-21.25" and data["none (run 1)"]["same_hlo"] == "offload"
    assert data["offload (run 2)"]["noise"] == "none" and data["offload (run 2)"]["compiled_host"] is None
    joined = "\n".join(lines)
    assert "same compiled step: none, offload compiled to the same step (HLO fingerprint aaa)" in joined
    assert "within the noise: none and offload differ by" in joined
    assert "CPU runs: all runs ran on a CPU" in joined
    assert any(c["if"]["filter_query"] == '{same_hlo} != ""' for c in table.style_data_conditional)


def test_dashboard_policy_table_folds_notes_that_differ_only_in_their_numbers():
    """The H200 example's trade tab listed 'no XLA cost analysis ... (was parsing 5726:67: ...)' once per
    run, eight lines that differ in their numbers: one line, as the terminal's table folds them."""
    pytest.importorskip("dash")
    from dashboards.trade import policy_datatable

    a, b = run("none", [3.0, 3.1, 3.2]), run("offload", [4.0, 4.1, 4.2])
    tab = policy_table([a, b])
    tab["rows"][0]["notes"] = ["no XLA cost analysis: could not parse (was parsing 5726:67: error)"]
    tab["rows"][1]["notes"] = ["no XLA cost analysis: could not parse (was parsing 967:40: error)"]
    _, lines = policy_datatable(tab, ["none (run 1)", "offload (run 2)"])
    (line,) = [t for t in lines if "no XLA cost analysis" in t]
    assert line == (
        "no XLA cost analysis: could not parse (was parsing 5726:67: error) (all runs; the numbers are none "
        "(run 1)'s, each run's in profile-step analyze --json)"
    )


def test_two_runs_of_one_policy_further_apart_than_their_spread():
    """The issue's offload_all: 21.25 ms in one run, 3.24 ms in the next."""
    tab = policy_table([run("offload_all", [21.0, 21.25, 21.5]), run("offload_all", [3.2, 3.24, 3.3])])
    (apart,) = tab["runs_apart"]
    assert apart["policy"] == "offload_all" and apart["median_steps_ns"] == [21.25 * MS, 3.24 * MS]
    assert tab["within_spread"] == []
    assert "!: two runs of offload_all took 21.250 and 3.240 ms per step, further apart than the spread" in (
        render_policy_comparison(tab)
    )
    steady = policy_table([run("none", [5.0, 6.0, 7.0]), run("none", [5.5, 6.5, 7.5])])
    assert steady["runs_apart"] == []


def test_policies_whose_steps_do_not_overlap_are_a_measured_difference():
    """The H200 example's offload_mlp (197.8-202.7 ms) and remat (207.7-216.9 ms): 8.3 ms apart, under
    remat's 9.2 ms spread (one slow step), yet each of offload_mlp's steps is shorter than any of remat's."""
    from profiler.analysis.policies import disjoint, within_noise

    tab = policy_table([run("offload_mlp", [197.8, 200.1, 202.7]), run("remat", [207.7, 208.4, 216.9])])
    a, b = tab["rows"]
    assert disjoint(a, b) and within_noise(a, b) is False and tab["within_spread"] == []
    assert "not a measured difference" not in render_policy_comparison(tab)
    # overlapping by one step: within the noise again
    tab = policy_table([run("offload_mlp", [197.8, 200.1, 208.0]), run("remat", [207.7, 208.4, 216.9])])
    assert within_noise(*tab["rows"]) is True and len(tab["within_spread"]) == 1
