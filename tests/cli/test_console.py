"""What of a profiled run's output reaches the console: the script's lines, not nsys's report chatter."""

from __future__ import annotations

from profiler.stored.console import ConsoleFilter
from tests.helpers.paths import ROOT

# the tail of a real output.log (nsys 2023.4.4 profiling examples/train.py on this project's CPU machine)
LOG = """train.py: policy=none backend=cpu layers=4 d_model=64 seq=32 batch=2 scan=False dispatch=per-layer
step 0: loss 6.4828 (15.9 ms)
Capture range started in the application.
Capture range ended in the application.
Generating '/tmp/nsys-report-3cf0.qdstrm'

[1/2] [0%                          ] trace.nsys-rep
[1/2] [========================100%] trace.nsys-rep

[2/2] [12%                         ] trace.sqlite


Generated:
    /work/i15/runs/20261130T061023-none-7e3b1b.partial/trace.nsys-rep
    /work/i15/runs/20261130T061023-none-7e3b1b.partial/trace.sqlite
"""


def test_only_the_scripts_lines_reach_the_console():
    f = ConsoleFilter()
    kept = [line for line in LOG.splitlines(keepends=True) if f.keep(line)]
    assert "".join(kept) == LOG.splitlines(keepends=True)[0] + "step 0: loss 6.4828 (15.9 ms)\n"


def test_the_scripts_own_blank_and_indented_lines_stay():
    f = ConsoleFilter()
    lines = ["table:\n", "\n", "    a  1\n", "Generating '/tmp/x.qdstrm'\n", "\n", "after\n", "\n", "  b\n"]
    assert [ln for ln in lines if f.keep(ln)] == ["table:\n", "\n", "    a  1\n", "after\n", "\n", "  b\n"]


# nsys's importer crash (the status, the exception's facts, a braced block: the text the stand-in
# tests/scripts/nsys_import_fails.sh prints), between the script's last line and the raw capture it kept
CRASH = (
    "step 2: loss 5.0139 (10.4 ms)\nGenerating '/tmp/nsys-report-7835.qdstrm'\n[1/1] [7%        ] trace.nsys-rep\n"
    + (ROOT / "tests" / "scripts" / "nsys_importer_crash.txt").read_text()
    + "Generated:\n    /work/runs/20261202T223337-offload_all-766db3.partial/trace.qdstrm\n"
)


def test_the_importers_crash_stays_in_the_log():
    f = ConsoleFilter()
    kept = [line for line in CRASH.splitlines(keepends=True) if f.keep(line)]
    assert kept == ["step 2: loss 5.0139 (10.4 ms)\n"]
    assert f.keep("after\n") and f.keep("}\n")  # the block has ended: the script's own braces are its own


def test_the_importers_failure_in_a_few_words(tmp_path):
    from profiler.stored import no_trace

    (tmp_path / "output.log").write_text(CRASH)
    what = "Importation failed: Wrong event order has been detected when ..."  # cut as test_no_trace says
    assert no_trace.nsys_failure(tmp_path) == f"nsys's importer failed ({what})"
    assert no_trace.describe(tmp_path, "no-trace", 0) == f"nsys's importer failed and wrote no report ({what})"


def test_nsys_failing_before_the_script_started(tmp_path):
    """Seen in a quickstart under load (nsys 2024.2.3): nsys printed 'End of file' and exited 1 before the
    script ran; after a lost agent it adds a pointer to its troubleshooting page. Both are nsys's lines."""
    from profiler.stored import no_trace

    (tmp_path / "output.log").write_text("End of file\n")
    assert no_trace.nsys_failure(tmp_path, 1) == "nsys failed before the script started (exit code 1: End of file)"
    assert no_trace.nsys_failure(tmp_path, 0) is None  # exit 0 without a report is not this
    (tmp_path / "startup.json").write_text("{}")  # the script's Python started: its failure, not nsys's
    assert no_trace.nsys_failure(tmp_path, 1) is None
    f = ConsoleFilter()
    lost = [
        "Connection to Agent lost. This is most likely a bug. Internal reason: 'End of file'.\n",
        "Please refer to the troubleshooting section of the docs:\n",
        "https://docs.nvidia.com/nsight-systems/UserGuide/index.html#troubleshooting\n",
    ]
    assert [ln for ln in lost if f.keep(ln)] == []


def test_nsys_throwing_before_the_script_started(tmp_path):
    """Seen in the CI with two test workers each running nsys 2024.2.3: the second nsys's client threw
    (its exception's four lines, as logged) and exited 1 before the script ran: nsys's failure, retried."""
    from profiler.stored import no_trace

    threw = [
        "/dvs/p4/build/sw/devtools/Agora/Rel/CUDA12.5/QuadD/Common/ProtobufComm/Client/ClientProxy.cpp(389): Throw"
        " in function QuadDProtobufComm::Endpoint QuadDProtobufComm::Client::ClientProxy::GetLocalEndpoint() const\n",
        "Dynamic exception type: boost::wrapexcept<QuadDCommon::RuntimeException>\n",
        "std::exception::what: RuntimeException\n",
        "[QuadDCommon::tag_message*] = Local Endpoint is not available.\n",
    ]
    f = ConsoleFilter()
    assert [ln for ln in threw if f.keep(ln)] == []
    (tmp_path / "output.log").write_text("".join([*threw, "\n"]))
    said = "nsys failed before the script started (exit code 1: Local Endpoint is not available.)"
    assert no_trace.nsys_failure(tmp_path, 1) == said
    (tmp_path / "startup.json").write_text("{}")  # the script's Python started: not nsys's failure
    assert no_trace.nsys_failure(tmp_path, 1) is None
