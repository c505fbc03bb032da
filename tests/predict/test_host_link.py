"""One rule for a trace's host link (``analysis.links.host_link``), in the terminal and the dashboard:
the link given with --link, else the device model's, else PCIe Gen4 assumed and said so, naming an
unknown GPU (2026.2 exports have no TARGET_INFO_GPU table)."""

from __future__ import annotations

import pytest

from dashboards.links import default_link
from profiler.analysis.links import ASSUMED, LINKS, given_link, host_link, parse_link, recorded_link
from profiler.synthetic.export import ExportBuilder
from tests.helpers.cli import run_cli

MIB = 1 << 20


def test_the_rule():
    assert host_link(["NVIDIA H100 80GB HBM3"]).link == LINKS["pcie5"]
    assert host_link(["NVIDIA H100 80GB HBM3"]).source == "gpu"
    assert host_link(["Quadro RTX 4000"]).link == LINKS["pcie3"]  # Turing, not "rtx 40" (Ada, Gen4)
    assert host_link(["NVIDIA RTX 4000 Ada Generation"]).link == LINKS["pcie4"]
    unnamed = host_link([])
    assert unnamed.assumed and unnamed.link == LINKS["pcie4"]
    assert "unknown GPU" in unnamed.why and "TARGET_INFO_GPU" in unnamed.why and "--link" in unnamed.why
    odd = host_link(["Some Accelerator 9000"])
    assert odd.assumed and "Some Accelerator 9000" in odd.why and "not in the table" in odd.why
    given = host_link([], parse_link("pcie5"))
    assert given.link == LINKS["pcie5"] and given.source == "given" and not given.assumed
    assert host_link(["NVIDIA H100 80GB HBM3"], parse_link("100")).link.gbps == 100.0  # --link wins over the model


def test_the_recorded_link_is_never_assumed():
    """The what-if's source link: the GPUs' family, as host_link tells it, but no guess for F."""
    assert recorded_link(["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"]) == LINKS["pcie5"]
    for names, shown in (
        ([], "no GPU named in the export"),
        (["Some Accelerator 9000"], "Some Accelerator 9000"),
        (["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"], "NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3"),
        (["NVIDIA H100 80GB HBM3", None], "NVIDIA H100 80GB HBM3, None"),
    ):
        with pytest.raises(ValueError, match="--from-link") as err:
            recorded_link(names)
        assert f"its GPUs ({shown}) use" in str(err.value)


def test_dashboard_says_the_same_without_the_cli_hint():
    link, why = default_link([])
    assert link == LINKS["pcie4"]
    assert why == "PCIe Gen4 x16 (31.5 GB/s per direction): assumed: unknown GPU (the export names none: no " + (
        "TARGET_INFO_GPU table)"
    )
    assert "--link" not in why


def _unnamed_gpu_export(build):
    b = ExportBuilder(nsys_version="2026.2.1.210", schema_version="3.25.0", omit=("TARGET_INFO_GPU",))
    b.kernel(0, 1000, "fusion")
    b.copy(100, 400, "d2h", 4 * MIB, stream=20)
    return build(b)


def test_analyze_names_an_unknown_gpu_and_the_assumed_link(build):
    path = _unnamed_gpu_export(build)
    out = run_cli("analyze", "--no-findings", str(path))
    assert out.returncode == 0, out.stderr
    assert "Device 0 (unknown GPU): window" in out.stdout
    line = next(ln for ln in out.stdout.splitlines() if "host link:" in ln)
    assert line.strip() == (
        "host link: PCIe Gen4 x16 (31.5 GB/s per direction), assumed: unknown GPU (the export names none: no "
        "TARGET_INFO_GPU table); --link NAME chooses another"
    )
    chosen = run_cli("analyze", "--no-findings", "--link", "pcie5", str(path))
    assert "host link: PCIe Gen5 x16 (63 GB/s per direction), as chosen (--link)" in chosen.stdout
    bad = run_cli("analyze", "--no-findings", "--link", "warp9", str(path))
    assert bad.returncode != 0 and bad.stderr.strip().count("\n") == 0 and "--link" in bad.stderr


@pytest.mark.shared
def test_real_2026_exports_say_unknown_gpu(shared_traces):
    out = run_cli("analyze", "--no-findings", str(shared_traces / "nsysai__h100_2gpu_1s.sqlite"))
    assert out.stdout.count("(unknown GPU): window") == 2
    assert out.stdout.count("assumed: unknown GPU") == 2


def test_a_link_is_parsed_once_where_it_is_named(tmp_path):
    """``given_link``: the edge's parse (None when none is named, the one-line --link error); a TOML
    findings file's link is parsed when the file is read, and a bad one names the file."""
    from profiler.analysis.findings.config import load_config
    from profiler.errors import InputError, ProfilerError

    assert given_link(None) is None and given_link("") is None
    assert given_link("gen5") is LINKS["pcie5"] and given_link("12.5").gbps == 12.5
    with pytest.raises(ProfilerError, match=r"^--from-link: unknown link 'usb'"):
        given_link("usb", "--from-link")
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text('link = "c2c"\n')
    bad.write_text('link = "warp9"\n')
    assert load_config(good, set()).link is LINKS["nvlink-c2c"]
    with pytest.raises(InputError, match=r"bad\.toml: link: unknown link 'warp9'"):
        load_config(bad, set())


def test_one_default_for_an_unknown_gpu():
    """Every path that needs a host link and cannot tell it takes ASSUMED (PCIe Gen4): the trace's
    (host_link), and a plan's whose target names no known GPU family (pgle / plan --calibrate)."""
    from profiler.predict.plan_costs import prediction_links

    assert ASSUMED == "pcie4" and host_link([]).link is LINKS[ASSUMED]
    assert prediction_links({"target": {"label": "my accelerator"}}, None) == [LINKS[ASSUMED]]
    assert prediction_links({"target": {"label": "NVIDIA H100"}}, None) == [LINKS["pcie5"]]
    plan = {"links": [{**LINKS["pcie6"].doc(), "why": "as chosen (--link)"}], "target": {"label": "x"}}
    assert prediction_links(plan, None) == [LINKS["pcie6"]]  # the plan's link, read back as it was written


def test_a_gpus_link_is_resolved_by_one_rule():
    """``run_link``: --link first, else the GPU's own model, else the run's named GPUs, else assumed; the
    terminal, the findings and the dashboard all ask it."""
    from profiler.analysis.links import run_link

    gpus = {"0": "NVIDIA H100 80GB HBM3", "1": "NVIDIA GH200 480GB"}
    assert run_link(gpus, "1").link is LINKS["nvlink-c2c"] and run_link(gpus, 0).link is LINKS["pcie5"]
    assert run_link(gpus, "7").link is LINKS["pcie5"]  # unnamed: the run's first named GPU
    assert run_link(gpus, "1", LINKS["pcie3"]).source == "given"
    unknown = run_link({}, "0")
    assert unknown.assumed and unknown.link is LINKS[ASSUMED] and "unknown GPU" in unknown.why


def test_link_is_declared_once():
    """``--link`` (and ``--from-link``) are declared by ``links.add_link_option`` only: no
    ``add_argument("--link"`` anywhere in the package."""
    import re

    from tests.helpers.paths import ROOT

    declared = re.compile(r"add_argument\(\s*\"--(from-)?link\"")
    found = [str(p.relative_to(ROOT)) for p in (ROOT / "profiler").rglob("*.py") if declared.search(p.read_text())]
    assert declared.search('p.add_argument(\n        "--link",\n') and declared.search('w.add_argument("--from-link"')
    assert found == []
    assert "def add_link_option(" in (ROOT / "profiler" / "analysis" / "links.py").read_text()


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (["analyze"], "--link"),
        (["findings"], "--link"),
        (["whatif"], "--link"),
        (["whatif", "--link", "pcie5"], "--from-link"),
    ],
)
def test_a_bad_link_is_one_line_naming_its_flag(tmp_path, command, flag):
    b = ExportBuilder()
    b.gpu(0, "NVIDIA H100 80GB HBM3")
    b.copy(0, 1_000, "h2d", MIB)
    path = b.write(tmp_path / "t.sqlite")
    proc = run_cli(*command, flag, "warp9", str(path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"profile-step: error: {flag}: unknown link 'warp9': use pcie3, pcie4, pcie5, pcie6, nvlink-c2c, "
        "tpu-v5e-host or a bandwidth in GB/s"
    ]


def test_a_plan_link_the_target_does_not_have_is_said_to_be_another_machines():
    """The quickstart asks for an H100 on PCIe Gen5 and on NVLink-C2C (a Grace Hopper's): the second is a
    what-if for that GPU, and the plan's link line says so; a target whose own link is unknown says nothing."""
    from profiler.capture.plan import predict_links

    pcie, c2c = predict_links(["pcie5", "nvlink-c2c"], "NVIDIA H100 80GB HBM3")
    assert pcie.why == "as chosen (--link)"
    assert c2c.why == "as chosen (--link), not the NVIDIA H100 80GB HBM3's own (PCIe Gen5 x16): another machine's link"
    assert [h.why for h in predict_links(["nvlink-c2c"], "a GPU of its own")] == ["as chosen (--link)"]
    (own,) = predict_links(None, "NVIDIA H100 80GB HBM3")
    assert (own.link.key, own.source) == ("pcie5", "gpu")
