"""Every threshold of profiler/analysis/findings/config.py that decides whether a rule fires, tested at
its limit, just below and just above it (the severity grading is the savings branch's, tested there).

Each case builds the smallest export whose number lands exactly on the limit or one step beside
it; the derivation is written beside each case.  Builders and helpers are test_findings's."""

from __future__ import annotations

import math

import pytest

from profiler.analysis.findings import rule_ids
from profiler.analysis.findings.config import (
    THRESHOLDS,
    FindingsConfig,
    FindingsRequest,
    at_least,
    configure,
    exceeds,
    load_config,
    under,
)
from profiler.analysis.links import given_link, parse_link
from profiler.errors import InputError, ProfilerError
from profiler.synthetic.export import PAGEABLE, ExportBuilder
from tests.helpers.findings_runs import (
    H100,
    MIB,
    TID,
    exposed_run,
    findings_of,
    fired,
    launched,
    offload_run,
    skipped,
    slowed_group,
    stall_layers,
    steps,
    write_run,
)


def test_the_thresholds_tested_here_are_the_defaults():
    """The cases below are derived from these values; a change of a default must revisit them."""
    assert {k: THRESHOLDS[k] for k in THRESHOLDS if k not in SEVERITY} == {
        "lost_min_thunks": 100,
        "lost_thunks_share": 0.9,
        "offload_min_bytes_per_step": MIB,
        "pageable_min_count": 1,
        "sync_copy_min_count": 1,
        "compute_stream_share": 0.5,
        "boundary_fraction": 0.1,
        "boundary_share": 0.5,
        "boundary_min_cost_fraction": 0.01,
        "exposed_copies_fraction": 0.25,
        "exposed_copies_min_share": 0.001,
        "lhs_exposed_fraction": 0.1,
        "slow_link_fraction": 0.5,
        "slow_link_min_copies": 3,
        "contention_slowdown": 1.5,
        "contention_min_copies": 3,
        "kernel_slowdown": 1.1,
        "nccl_slowdown": 1.2,
        "hotspot_share": 0.5,
        "hotspot_min_stall_ns": 10_000,
    }


SEVERITY = ("problem_share", "warning_share", "severity_min_cost_ns")  # grading: the savings branch's


def test_comparisons_are_strict_or_not_and_forgive_a_rounding_error():
    assert not exceeds(0.25, 0.25) and exceeds(0.2500001, 0.25) and not exceeds(0.2499999, 0.25)
    assert not exceeds(0.1 + 0.2, 0.3)  # 0.30000000000000004: a rounding error, not above
    assert not under(0.25, 0.25) and under(0.2499999, 0.25) and not under(0.2500001, 0.25)
    assert not under(0.3, 0.1 + 0.2)
    assert at_least(0.25, 0.25) and at_least(0.2500001, 0.25) and not at_least(0.2499999, 0.25)
    assert at_least(0.1 + 0.2 - 1e-16, 0.3)
    assert exceeds(10_001, 10_000) and not exceeds(10_000, 10_000)  # slack relative to large limits:
    assert not exceeds(10_000 + 1e-6, 10_000)  # 1e-9 * 10_000 = 1e-5


@pytest.mark.parametrize(("limit", "slack"), [(0.25, 1e-9), (1.0, 1e-9), (10_000, 1e-5)])
def test_the_slack_is_a_billionth_of_the_limit_at_least_of_one(limit, slack):
    """1e-9 x max(1, |limit|): 1.5 slacks away decides, half a slack does not."""
    assert exceeds(limit + 1.5 * slack, limit) and not exceeds(limit + 0.5 * slack, limit)
    assert under(limit - 1.5 * slack, limit) and not under(limit - 0.5 * slack, limit)
    assert not at_least(limit - 1.5 * slack, limit) and at_least(limit - 0.5 * slack, limit)


@pytest.mark.parametrize("limit", [0.25, 1.0, 10_000])
def test_the_slack_itself_is_not_beyond_the_limit(limit):
    """Exactly one slack away is still at the limit (strict ``>`` and ``<``); the next float decides."""
    slack = 1e-9 * max(1.0, abs(limit))  # the same float expression as config.exceeds / config.under
    up, down = limit + slack, limit - slack
    assert not exceeds(up, limit) and exceeds(math.nextafter(up, math.inf), limit)
    assert not under(down, limit) and under(math.nextafter(down, -math.inf), limit)
    assert at_least(down, limit) and not at_least(math.nextafter(down, -math.inf), limit)


def test_the_config_file(tmp_path):
    """Thresholds and disabled rules from TOML override the defaults; every bad file is one line naming
    the file and the problem."""
    good = tmp_path / "good.toml"
    good.write_text('disabled = ["lhs-off"]\nlink = "pcie4"\n[thresholds]\nslow_link_fraction = 0.4\n')
    req = load_config(good, rule_ids())
    cfg = req.config
    assert cfg["slow_link_fraction"] == 0.4 and isinstance(cfg["slow_link_fraction"], float)
    assert {k: v for k, v in cfg.thresholds.items() if k != "slow_link_fraction"} == {
        k: v for k, v in THRESHOLDS.items() if k != "slow_link_fraction"
    }
    assert cfg.disabled == frozenset({"lhs-off"}) and req.link == parse_link("pcie4")  # parsed as it is read
    assert load_config(None, rule_ids()) == FindingsRequest(FindingsConfig(), None)
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    assert load_config(empty, rule_ids()) == FindingsRequest()
    known = ", ".join(sorted(rule_ids()))
    for text, problem in [
        ("[thresholds]\nno_such = 1\n", f"unknown threshold 'no_such' (known: {', '.join(sorted(THRESHOLDS))})"),
        ("[thresholds]\nslow_link_fraction = true\n", "threshold 'slow_link_fraction' must be a number, got True"),
        ('[thresholds]\nslow_link_fraction = "x"\n', "threshold 'slow_link_fraction' must be a number, got 'x'"),
        ("extra = 1\n", "unknown keys ['extra']: expected thresholds, disabled, link"),
        (
            'link = "pcie9"\n',
            "link: unknown link 'pcie9': use pcie3, pcie4, pcie5, pcie6, nvlink-c2c, tpu-v5e-host "
            "or a bandwidth in GB/s",
        ),
        ('disabled = ["no-rule"]\n', f"disabled must list rule ids among: {known}"),
        ('disabled = "lhs-off"\n', f"disabled must list rule ids among: {known}"),
    ]:
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(InputError) as err:
            load_config(bad, rule_ids())
        assert str(err.value) == f"{bad}: {problem}"
    broken = tmp_path / "broken.toml"
    broken.write_text("[thresholds\n")
    with pytest.raises(InputError, match=r"broken\.toml: is not valid TOML \("):
        load_config(broken, rule_ids())
    with pytest.raises(InputError) as err:
        load_config(tmp_path / "absent.toml", rule_ids())
    assert str(err.value) == f"{tmp_path / 'absent.toml'}: cannot be read (No such file or directory)"


def test_configure_checks_the_command_line_first(tmp_path):
    """The command line's link arrives parsed (``links.given_link``, where the user names it); a bad one
    is the one-line ``--link:`` error there, and the rules it turns off are checked before the file."""
    pcie5 = given_link("pcie5")
    req = configure(None, ["lhs-off"], pcie5, rule_ids())
    assert req.config.disabled == frozenset({"lhs-off"}) and req.link == pcie5 and pcie5 == parse_link("pcie5")
    assert configure(None, None, None, rule_ids()) == FindingsRequest(FindingsConfig(), None)
    with pytest.raises(ProfilerError) as err:
        configure(tmp_path / "absent.toml", ["no-rule"], None, rule_ids())  # before the file is read
    assert str(err.value) == f"--disable-finding: unknown rule 'no-rule' (rules: {', '.join(sorted(rule_ids()))})"
    with pytest.raises(ProfilerError, match=r"^--link: unknown link 'pcie9'"):
        given_link("pcie9")
    assert given_link(None) is None and given_link("") is None and given_link("12.5") == parse_link("12.5")
    both = tmp_path / "both.toml"
    both.write_text('disabled = ["sync-copies"]\nlink = "pcie4"\n')
    req = configure(both, ["lhs-off"], given_link("nvlink-c2c"), rule_ids())  # the command line adds to the file
    assert req.config.disabled == frozenset({"sync-copies", "lhs-off"}) and req.link == parse_link("nvlink-c2c")
    assert configure(both, None, None, rule_ids()).link == parse_link("pcie4")


# --- exposed-copies: exposed / busy > 0.25, and exposed >= 0.001 of the window ------------------------


@pytest.mark.parametrize(("exposed", "fires"), [(999, False), (1000, False), (1001, True)])
def test_exposed_copies_fraction(tmp_path, exposed, fires):
    # a 4000 ns d2h copy from 0, a kernel [0, 4000 - exposed): busy 4000, exposed / busy = exposed / 4000,
    # 0.25 at 1000; the window is [0, 4000), so exposed >= 0.001 * 4000 = 4 in every case
    b = ExportBuilder()
    b.copy(0, 4000, "d2h", MIB)
    b.kernel(0, 4000 - exposed, "k")
    found = fired(findings_of(write_run(tmp_path, b)), "exposed-copies")
    assert bool(found) is fires
    if fires:
        assert (found[0]["evidence"]["exposed_ns"], found[0]["evidence"]["busy_ns"]) == (exposed, 4000)


@pytest.mark.parametrize(("span", "fires"), [(999_999, True), (1_000_000, True), (1_000_001, False)])
def test_exposed_copies_min_share(tmp_path, span, fires):
    # a 1000 ns copy [0, 1000) with no kernel (fraction 1.0), a kernel [span - 10, span): the window's
    # span is `span`; 1000 >= 0.001 * span holds up to span 1_000_000 exactly
    b = ExportBuilder()
    b.copy(0, 1000, "h2d", MIB)
    b.kernel(span - 10, span, "k")
    assert bool(fired(findings_of(write_run(tmp_path, b)), "exposed-copies")) is fires


# --- lhs-off: exposed / busy of all offload copies > 0.1 -------------------------------------------------

LHS_OFF = "--xla_gpu_enable_latency_hiding_scheduler=false"


@pytest.mark.parametrize(("exposed", "fires"), [(999_999, False), (1_000_000, False), (1_000_001, True)])
def test_lhs_exposed_fraction(tmp_path, exposed, fires):
    # one 10 ms copy, a kernel over all of it but `exposed` ns: 0.1 at 1_000_000
    path = exposed_run(tmp_path, exposed, LHS_OFF, f"lhs{exposed}")
    assert bool(fired(findings_of(path), "lhs-off")) is fires


def test_lhs_off_without_offload_copies_and_with_one_of_1_ns(tmp_path):
    # an XLA program with the scheduler off: no offload copy (busy 0) is nothing to say, not a division by
    # zero; a 1 ns copy with no kernel (exposed / busy = 1 > 0.1) is enough
    manifest = {"versions": {"jax": "0.10.2"}, "xla_flags": {"final": LHS_OFF}}
    b = ExportBuilder()
    b.kernel(0, 100, "k")
    assert not fired(findings_of(write_run(tmp_path, b, manifest, name="none")), "lhs-off")
    b.copy(200, 201, "d2h", MIB)
    assert fired(findings_of(write_run(tmp_path, b, manifest, name="one")), "lhs-off")


@pytest.mark.parametrize(("kernel_ns", "fires"), [(999_000, True), (999_001, False)])
def test_lhs_off_needs_its_exposed_time_to_matter(tmp_path, kernel_ns, fires):
    # a kernel [0, K), then a 1 us copy alone: all of it exposed (> 0.1 of its busy time), and it fires only
    # while 1000 ns >= exposed_copies_min_share (0.001) of the window K + 1000: K <= 999_000 (the H200
    # none run's 4-byte copy, 5.92 us of a 508 ms window, said "turn the scheduler on")
    b = ExportBuilder()
    b.kernel(0, kernel_ns, "k")
    b.copy(kernel_ns, kernel_ns + 1000, "d2h", MIB)
    manifest = {"versions": {"jax": "0.10.2"}, "xla_flags": {"final": LHS_OFF}}
    assert bool(fired(findings_of(write_run(tmp_path, b, manifest)), "lhs-off")) is fires


# --- pageable-copies, sync-copies: how many it takes ------------------------------------------------------


@pytest.mark.parametrize(("limit", "fires"), [(1, True), (2, True), (3, False)])
def test_pageable_min_count(tmp_path, limit, fires):
    # two pageable copies (an h2d and a d2h) on device 0: fires while 2 >= the limit
    b = ExportBuilder()
    b.copy(0, 100, "h2d", MIB, host=PAGEABLE)
    b.copy(200, 300, "d2h", MIB, host=PAGEABLE)
    b.copy(400, 500, "d2h", MIB)  # pinned: not counted
    doc = findings_of(write_run(tmp_path, b), pageable_min_count=limit)
    found = fired(doc, "pageable-copies")
    assert bool(found) is fires
    if fires:
        assert (found[0]["evidence"]["h2d_pageable"], found[0]["evidence"]["d2h_pageable"]) == (1, 1)


def test_pageable_copies_none_is_nothing_whatever_the_limit(tmp_path):
    b = ExportBuilder()
    b.copy(0, 100, "h2d", MIB)
    assert not fired(findings_of(write_run(tmp_path, b), pageable_min_count=0), "pageable-copies")


@pytest.mark.parametrize(("limit", "fires"), [(1, True), (2, True), (3, False)])
def test_sync_copy_min_count(tmp_path, limit, fires):
    # two synchronous copy calls, no steps (the whole capture): fires while 2 >= the limit
    b = ExportBuilder()
    b.runtime(3000, 3900, 901, name="cuMemcpyDtoH_v2", tid=TID)
    b.runtime(4000, 4900, 902, name="cudaMemcpy2D", tid=TID)
    b.kernel(0, 10, "k")
    assert bool(fired(findings_of(write_run(tmp_path, b), sync_copy_min_count=limit), "sync-copies")) is fires


def test_sync_copies_none_is_nothing_whatever_the_limit(tmp_path):
    b = ExportBuilder()
    b.runtime(1000, 1100, 900, name="cudaMemcpyAsync_v3020", tid=TID)  # asynchronous: not one
    b.kernel(0, 10, "k")
    assert not fired(findings_of(write_run(tmp_path, b), sync_copy_min_count=0), "sync-copies")


# --- copy-on-compute-stream: the copies' stream ran >= 0.5 of the device's compute kernels ---------------


@pytest.mark.parametrize(
    ("on_stream7", "of", "fires"),
    [(4, 9, False), (5, 10, True), (5, 9, True)],  # 0.444 (below), 0.5 (at), 0.556 (above)
)
def test_compute_stream_share(tmp_path, on_stream7, of, fires):
    b = ExportBuilder()
    for i in range(of):
        b.kernel(i * 100, i * 100 + 50, "k", stream=7 if i < on_stream7 else 100 + i)
    b.copy(2000, 2100, "d2h", MIB, stream=7)
    found = fired(findings_of(write_run(tmp_path, b)), "copy-on-compute-stream")
    assert bool(found) is fires
    if fires:
        assert found[0]["evidence"]["share"] == on_stream7 / of


@pytest.mark.parametrize(("limit", "fires"), [(0.5 - 1e-6, True), (0.5, True), (0.5 + 1e-6, False)])
def test_compute_stream_share_limit_moves(tmp_path, limit, fires):
    # 2 of 4 compute kernels on the copy's stream: 0.5, against a limit just under, at, just over it
    b = ExportBuilder()
    for i in range(4):
        b.kernel(i * 100, i * 100 + 50, "k", stream=7 if i < 2 else 8 + i)
    b.copy(500, 600, "d2h", MIB, stream=7)
    doc = findings_of(write_run(tmp_path, b), compute_stream_share=limit)
    assert bool(fired(doc, "copy-on-compute-stream")) is fires


def test_compute_stream_share_forgives_a_rounding_error(tmp_path):
    # 3 of 10 compute kernels on the copy's stream: 3 / 10 = 0.3, against 0.1 + 0.2 = 0.30000000000000004,
    # a rounding error above it: at the limit, so it fires
    b = ExportBuilder()
    for i in range(10):
        b.kernel(i * 100, i * 100 + 50, "k", stream=7 if i < 3 else 100 + i)
    b.copy(2000, 2100, "d2h", MIB, stream=7)
    doc = findings_of(write_run(tmp_path, b), compute_stream_share=0.1 + 0.2)
    assert fired(doc, "copy-on-compute-stream")


# --- slow-link: alone copies reach < 0.5 of the link, with >= 3 of them ----------------------------------


@pytest.mark.parametrize(("duration", "fires"), [(99_999, False), (100_000, False), (100_001, True)])
def test_slow_link_fraction(tmp_path, duration, fires):
    # 3 copies of 3_150_000 bytes alone: 3_150_000 / 100_000 = 31.5 GB/s = 0.5 x 63 exactly at 100_000 ns;
    # slower (longer) is under half the link
    b = ExportBuilder()
    b.gpu(0, H100)
    for i in range(3):
        b.copy(i * 200_000, i * 200_000 + duration, "h2d", 3_150_000)
    assert bool(fired(findings_of(write_run(tmp_path, b)), "slow-link")) is fires


@pytest.mark.parametrize(("copies", "judged"), [(2, False), (3, True), (4, True)])
def test_slow_link_min_copies(tmp_path, copies, judged):
    # `copies` d2h copies of 1 MiB alone at 11.65 GB/s (90 us each): judged (and slow) from 3 on
    b = ExportBuilder()
    b.gpu(0, H100)
    for i in range(copies):
        b.copy(i * 100_000, i * 100_000 + 90_000, "d2h", MIB)
    doc = findings_of(write_run(tmp_path, b))
    assert bool(fired(doc, "slow-link")) is judged
    assert (skipped(doc, "slow-link") is None) is judged


def test_slow_link_min_copies_below_one_counts_as_one(tmp_path):
    # a limit of 0 is taken as 1 (max(1, limit)): with one 1 MiB copy under a kernel (none alone) the rule
    # is not judged, and says so with 1 and the most copies alone, 0
    b = ExportBuilder()
    b.gpu(0, H100)
    b.copy(0, 90_000, "d2h", MIB)
    b.kernel(0, 90_000, "k")
    doc = findings_of(write_run(tmp_path, b), slow_link_min_copies=0)
    assert skipped(doc, "slow-link") == (
        "no GPU ran 1 or more h2d or d2h copies of 1 MiB or more alone (the most: 0; slow_link_min_copies): "
        "too few to measure the link by"
    )
    # one such copy alone (1 MiB in 90 us: 11.65 GB/s, under half of 63) is then enough to judge the link
    b.copy(200_000, 290_000, "d2h", MIB)
    doc = findings_of(write_run(tmp_path, b, name="alone"), slow_link_min_copies=0)
    assert fired(doc, "slow-link") and skipped(doc, "slow-link") is None


# --- copy-contention: GB/s alone / GB/s beside kernels > 1.5, >= 3 copies on each side -------------------


def _contention(b: ExportBuilder, alone: int, beside: int, beside_ns: int) -> None:
    """*alone* 4 MiB h2d copies of 100 us with nothing beside; *beside* of *beside_ns* under a kernel."""
    for i in range(alone):
        b.copy(i * 1_000_000, i * 1_000_000 + 100_000, "h2d", 4 * MIB)
    for i in range(beside):
        s = 10_000_000 + i * 1_000_000
        b.copy(s, s + beside_ns, "h2d", 4 * MIB)
        b.kernel(s, s + beside_ns, "gemm_fusion_dot.3", stream=7)


@pytest.mark.parametrize(("beside_ns", "fires"), [(149_999, False), (150_000, False), (150_001, True)])
def test_contention_slowdown(tmp_path, beside_ns, fires):
    # same bytes: slowdown = beside_ns / 100_000, 1.5 at 150_000
    b = ExportBuilder()
    _contention(b, 3, 3, beside_ns)
    assert bool(fired(findings_of(write_run(tmp_path, b)), "copy-contention")) is fires


@pytest.mark.parametrize(("alone", "beside", "fires"), [(2, 3, False), (3, 2, False), (3, 3, True), (4, 4, True)])
def test_contention_min_copies(tmp_path, alone, beside, fires):
    b = ExportBuilder()
    _contention(b, alone, beside, 200_000)  # 2x slower beside kernels: above the slowdown limit
    assert bool(fired(findings_of(write_run(tmp_path, b)), "copy-contention")) is fires


@pytest.mark.parametrize("limit", [0, 1])
def test_contention_min_copies_of_one(tmp_path, limit):
    # one copy alone (100 us) and one beside a kernel (200 us), same bytes: slowdown 2 > 1.5; a limit of 1
    # (or 0, taken as 1: max(1, limit)) is met by one copy on each side
    b = ExportBuilder()
    _contention(b, 1, 1, 200_000)
    assert fired(findings_of(write_run(tmp_path, b), contention_min_copies=limit), "copy-contention")


# --- kernels-slowed-by-copies (> 1.1) and nccl-slowed-by-copies (> 1.2): lower medians' ratio -------------


@pytest.mark.parametrize(("slow", "fires"), [(1_099, False), (1_100, False), (1_101, True)])
def test_kernel_slowdown(tmp_path, slow, fires):
    # 3 calls alone of 1000 ns, 3 beside a copy of `slow` ns: ratio slow / 1000, 1.1 at 1_100
    b = ExportBuilder()
    slowed_group(b, "loop_add_fusion", slow, stream=7)
    assert bool(fired(findings_of(write_run(tmp_path, b)), "kernels-slowed-by-copies")) is fires


@pytest.mark.parametrize(("slow", "fires"), [(1_199, False), (1_200, False), (1_201, True)])
def test_nccl_slowdown(tmp_path, slow, fires):
    b = ExportBuilder()
    slowed_group(b, "ncclDevKernel_AllGather_RING", slow)
    assert bool(fired(findings_of(write_run(tmp_path, b)), "nccl-slowed-by-copies")) is fires


@pytest.mark.parametrize(("slow", "fires"), [(600, False), (1_001, True)])
def test_kernel_slowdown_below_one_still_needs_an_excess(tmp_path, slow, fires):
    # a limit under 1 (0.5): 3 calls beside copies at 600 ns against 1000 alone are 0.6x, above the limit,
    # but faster, so their excess is 3 * max(0, -400) = 0: nothing; at 1_001, 3 ns of excess: fires
    b = ExportBuilder()
    slowed_group(b, "loop_add_fusion", slow, stream=7)
    doc = findings_of(write_run(tmp_path, b), kernel_slowdown=0.5)
    assert bool(fired(doc, "kernels-slowed-by-copies")) is fires


# --- offload-missing: an offload policy moving < 1 MiB per step -------------------------------------------


@pytest.mark.parametrize(("per_step", "fires"), [(MIB - 1, True), (MIB, False), (MIB + 1, False)])
def test_offload_min_bytes_per_step(tmp_path, per_step, fires):
    # two steps, each with one d2h copy of `per_step` bytes
    assert bool(fired(findings_of(offload_run(tmp_path, per_step)), "offload-missing")) is fires


# --- exposed-at-boundaries, per step: the first and last 10% of the step hold >= 0.5 of its exposed copy
# time, which is >= 0.01 of the step ------------------------------------------------------------------------


def _step_run(tmp_path, exposed: list[tuple[int, int]], span: int, name: str) -> dict:
    """One step whose GPU ops span [0, span): a d2h copy at each of *exposed* (sorted, apart), kernels in
    the gaps (so that only the copies are exposed); every op launched inside the step, at its start."""
    b = ExportBuilder()
    steps(b, [(0, span + 1000)])
    t = 0
    for s, e in exposed:
        if s > t:
            launched(b, t, "kernel", t, s, "k")
        launched(b, s, "copy", s, e, "d2h", MIB, stream=20)
        t = e
    if span > t:
        launched(b, t, "kernel", t, span, "k")
    return findings_of(write_run(tmp_path, b, name=name))


@pytest.mark.parametrize(("start", "fires"), [(8_999, True), (9_000, True), (9_001, False)])
def test_boundary_fraction(tmp_path, start, fires):
    # span 100_000: the head is [0, 10_000).  A 1000 ns exposed copy at `start`, another of 999 ns in the
    # middle: at 9_000 the whole copy is in the head, 1000 / 1999 >= 0.5; at 9_001 only 999 of it: below
    doc = _step_run(tmp_path, [(start, start + 1000), (50_000, 50_999)], 100_000, f"f{start}")
    assert bool(fired(doc, "exposed-at-boundaries")) is fires


@pytest.mark.parametrize(("middle", "fires"), [(999, True), (1000, True), (1001, False)])
def test_boundary_share(tmp_path, middle, fires):
    # 1000 ns exposed at the head, `middle` ns in the middle: 1000 / (1000 + middle), 0.5 at 1000
    doc = _step_run(tmp_path, [(0, 1000), (50_000, 50_000 + middle)], 100_000, f"s{middle}")
    found = fired(doc, "exposed-at-boundaries")
    assert bool(found) is fires
    if fires:
        assert found[0]["evidence"]["share"] == 1000 / (1000 + middle)


@pytest.mark.parametrize(("span", "fires"), [(99_999, True), (100_000, True), (100_001, False)])
def test_boundary_min_cost_fraction(tmp_path, span, fires):
    # 1000 ns exposed at the start of a step of `span`: 1000 / span, 0.01 at 100_000
    doc = _step_run(tmp_path, [(0, 1000)], span, f"c{span}")
    assert bool(fired(doc, "exposed-at-boundaries")) is fires


@pytest.mark.parametrize(("end_hidden", "middle_hidden", "fires"), [(1, 0, False), (0, 0, True), (0, 1, True)])
def test_boundary_share_of_the_layer_loop(tmp_path, end_hidden, middle_hidden, fires):
    # 4 layers, each a 10_000 ns d2h copy with a kernel over its first `hidden` ns: exposed 10_000 - hidden.
    # First and last layer over all: 20_000 / 40_000 = 0.5 (at); 19_998 / 39_998 (below); 20_000 / 39_998
    b = ExportBuilder()
    b.domain(1, "profile-step", tid=TID)
    for i in range(4):
        t = i * 100_000
        b.nvtx(t, t + 50_000, f"layer={i}", tid=TID, domain_id=1)
        launched(b, t + 10, "copy", t + 1000, t + 11_000, "d2h", MIB, stream=20)
        hidden = end_hidden if i in (0, 3) else middle_hidden
        launched(b, t + 20, "kernel", t + 1000, t + 1000 + hidden, "k")
    assert bool(fired(findings_of(write_run(tmp_path, b)), "exposed-at-boundaries")) is fires


# --- stall-hotspot: one layer causes >= 0.5 of the copy-caused stall time, which is >= 10 us --------------


@pytest.mark.parametrize(
    ("stalls", "fires"),
    [([50_000, 49_999, 2], False), ([50_000, 50_000], True), ([50_001, 50_000], True)],
)
def test_hotspot_share(tmp_path, stalls, fires):
    # the worst layer's share: 50_000 / 100_001 (below), 50_000 / 100_000 (at), 50_001 / 100_001 (above)
    doc = findings_of(stall_layers(tmp_path, stalls, "h" + "-".join(map(str, stalls))))
    assert bool(fired(doc, "stall-hotspot")) is fires


@pytest.mark.parametrize(("stalls", "fires"), [([5_000, 4_999], False), ([5_000, 5_000], True), ([5_001, 5_000], True)])
def test_hotspot_min_stall_ns(tmp_path, stalls, fires):
    # total 9_999 (below), 10_000 (at), 10_001 (above); the worst layer holds >= half in each
    doc = findings_of(stall_layers(tmp_path, stalls, "m" + "-".join(map(str, stalls))))
    assert bool(fired(doc, "stall-hotspot")) is fires


# --- gpu-records-lost ------------------------------------------------------------------------------
def _lost_run(tmp_path, recorded: int, lost: int, name: str) -> dict:
    """*recorded* thunks that each launched a 1 us kernel, then *lost* thunks whose launches left no GPU
    record (as under nsys 2023.4.4 and a CUDA 13 driver)."""
    b = ExportBuilder()
    b.domain(2, "TSL", tid=TID)
    for i in range(recorded + lost):
        t = i * 10_000
        b.nvtx(t, t + 10_000, f"Thunk:#hlo_op=fusion.{i}#", tid=TID, domain_id=2)
        if i < recorded:
            launched(b, t + 1_000, "kernel", t + 2_000, t + 3_000, f"fusion_{i}")
    return findings_of(write_run(tmp_path, b, name=name))


@pytest.mark.parametrize(
    ("recorded", "lost", "fires"),
    [
        (100, 900, True),  # a share of exactly 0.9 (lost_thunks_share), 900 thunks: at both limits
        (11, 99, False),  # 99 thunks without a record: under lost_min_thunks (100), whatever the share
        (10, 100, True),  # 100 of 110: 0.909
        (12, 100, False),  # 100 of 112: 0.893, under 0.9
        (0, 100, True),  # nothing recorded at all
    ],
)
def test_gpu_records_lost(tmp_path, recorded, lost, fires):
    found = fired(_lost_run(tmp_path, recorded, lost, f"r{recorded}-{lost}"), "gpu-records-lost")
    assert bool(found) == fires
    if found:
        (f,) = found
        assert f["evidence"] == {"thunks": recorded + lost, "thunks_without_gpu_records": lost}
        assert f["verdict"].startswith(f"{lost} of XLA's {recorded + lost} thunks")
        assert f["saving_ns"] is None and "a fault of the recording" in f["saving_basis"]


def test_gpu_records_lost_needs_xla_thunks(tmp_path):
    b = ExportBuilder()
    launched(b, 0, "kernel", 10, 20, "k")
    assert "no XLA thunk ranges" in skipped(findings_of(write_run(tmp_path, b)), "gpu-records-lost")
