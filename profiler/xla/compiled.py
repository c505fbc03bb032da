"""One compiled module described from files: its memory (buffer assignment), its cost
(XLA's own cost analysis, through jaxlib when it is installed) and its offload plan.

Every reader here turns damage into notes: a module whose text is cut short
still gives its plan up to the cut, a missing buffer assignment leaves memory
empty with a note, and the rest of the description stays.
"""

from __future__ import annotations

import contextlib
import lzma
import os
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

from profiler.xla.buffers import MEMORY_FIELDS, memory_stats, parse_buffer_assignment
from profiler.xla.cost_probe import COST_KEYS, analyze_text, parse_error
from profiler.xla.dump import DumpModule
from profiler.xla.fingerprint import module_fingerprint, text_fingerprint
from profiler.xla.hlo import HloError, Module, parse_text
from profiler.xla.plan import offload_plan, plan_note
from profiler.xla.proto import WireError, module_from_proto, read_bytes
from profiler.xla.same_program import entry_signature

# the notes of a module this jaxlib cannot analyze (capture retries with the script's own Python)
UNPARSED = "no cost analysis: profile-step's jaxlib could not parse this module"
NO_JAXLIB = "no cost analysis: jaxlib is not installed here"


def unparsed_why(note: str, written_by: str | None) -> str:
    """*note* (``UNPARSED``'s, as a run folder keeps it) said as what it is: the run's XLA (its jaxlib,
    when the run names it) wrote a module the jaxlib that analyzed the run could not parse: a newer
    XLA's text, not a broken run (the parser's own message stays in compiled.json: a line number of the
    module means nothing to a reader of the note).  Which jaxlib that was is not recorded: none is named."""
    if not note.startswith(UNPARSED):
        return note
    wrote = f"the run's XLA (jaxlib {written_by})" if written_by else "the run's XLA"
    said = " (the parser's words are in the run folder's compiled.json)" if note[len(UNPARSED) :].strip() else ""
    return (
        f"no XLA cost analysis: {wrote} wrote a module that the jaxlib analyzing the run could not parse, "
        f"a newer XLA's text{said}"
    )


@cache
def _cpu_client() -> Any:
    """jaxlib's CPU client, made once, without initializing JAX's other backends; XLA's
    start-up log lines are kept off the console when jaxlib is first loaded here."""
    quiet = "jaxlib" not in sys.modules and "TF_CPP_MIN_LOG_LEVEL" not in os.environ
    if quiet:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
    try:
        from jax._src.lib import xla_client

        return xla_client.make_cpu_client()
    finally:
        if quiet:
            os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)


def cost_analysis(hlo_text: str) -> tuple[dict[str, float] | None, str | None]:
    """XLA's HloCostAnalysis of a module's text (what ``compiled.cost_analysis()`` returns),
    run by jaxlib's CPU client; (None, why) without jaxlib or when jaxlib cannot parse it."""
    try:
        client = _cpu_client()
        import jaxlib._hlo  # noqa: F401  (analyze_text parses with it)
    except ImportError as exc:
        return None, f"{NO_JAXLIB} ({exc})"
    try:
        return analyze_text(client, hlo_text), None
    except Exception as exc:  # jaxlib raises its own error types
        return None, f"{UNPARSED} ({parse_error(exc)})"


def pick_costs(raw: Any) -> dict[str, float] | None:
    """The cost fields of ``compiled.cost_analysis()`` (a dict, or a list of one in older JAX)."""
    if isinstance(raw, list):
        raw = raw[0] if raw else None
    if not raw:
        return None
    return {k: float(raw[k]) for k in COST_KEYS if k in raw}


def load_module(path: Path) -> tuple[Module, list[dict[str, Any]], str | None]:
    """Module, buffer allocations held in it (protos only), and its text (text dumps only)."""
    if path.name.endswith((".pb", ".pb.xz")):
        try:
            module, allocs = module_from_proto(read_bytes(path), str(path))
        except WireError as exc:
            raise HloError(f"{path}: {exc}") from None
        return module, allocs, None
    data = read_bytes(path)
    text = data.decode("utf-8", "replace")
    return parse_text(text, str(path)), [], text


_STAGE = re.compile(r"\.([\w.]+)_after_optimizations")


def platform_of(path: Path | None) -> str | None:
    """``cpu`` or ``gpu`` from a dump file's stage (``cpu_after_optimizations``,
    ``sm_9.0a_gpu_after_optimizations``), None when the name does not say."""
    m = _STAGE.search(path.name) if path is not None else None
    if not m:
        return None
    stage = m.group(1)
    return "cpu" if stage.endswith("cpu") else ("gpu" if stage.endswith("gpu") else stage)


def describe(mod: DumpModule, with_cost: bool = True, platform: str | None = None) -> dict[str, Any]:
    """Memory, cost, plan and fingerprint of a dumped module; problems become ``notes``.
    *platform* (``cpu``, ``gpu``) when the file name does not say it."""
    notes: list[str] = []
    out: dict[str, Any] = {
        "name": mod.name,
        "id": mod.id,
        "files": {k: p.name for k, p in mod.files.items()},
        "instructions": None,
        "memory": None,
        "memory_source": None,
        "cost": None,
        "plan": None,
        "platform": None,
        "fingerprint": None,
        "signature": None,
        "notes": notes,
    }
    path = mod.files.get("after") or mod.files.get("after_proto")
    out["platform"] = platform_of(path) or platform
    module, allocs, text = None, [], None
    if path is None:
        notes.append("no after-optimization module in the dump")
    else:
        try:
            module, allocs, text = load_module(path)
        except (HloError, OSError) as exc:
            notes.append(str(exc))
    if module is not None:
        out["instructions"] = module.instruction_count
        plan = offload_plan(module)
        out["plan"] = plan
        notes += plan["notes"]
        if plan_note(plan, out["platform"]):
            out["plan_note"] = plan_note(plan, out["platform"])
        out["fingerprint"] = text_fingerprint(text) if text is not None else module_fingerprint(module)
        out["signature"] = entry_signature(text)  # which program, beside its name (xla.same_program)
    if "buffers" in mod.files:
        try:
            out["memory"] = memory_stats(parse_buffer_assignment(mod.files["buffers"].read_text(errors="replace")))
            out["memory_source"] = f"buffer assignment ({mod.files['buffers'].name})"
        except OSError as exc:
            notes.append(f"buffer assignment unreadable: {exc}")
    elif allocs:
        out["memory"] = memory_stats(allocs)
        out["memory_source"] = "buffer assignment in the HLO proto (aliasing: parameters live out)"
    else:
        notes.append("no buffer assignment in the dump: no memory numbers")
    if with_cost:
        if text is None:
            notes.append("no cost analysis: it needs the module's text (--xla_dump_hlo_as_text)")
        elif module is not None and module.truncated:
            notes.append("no cost analysis: the module text is cut short")
        else:
            out["cost"], why = cost_analysis(text)
            if why:
                notes.append(why)
    return out


def agreement(handed: dict[str, Any], dumped: dict[str, Any]) -> dict[str, Any]:
    """Whether the numbers the script handed over equal those read from the dump."""
    diffs = []
    hm, dm = handed.get("memory") or {}, dumped.get("memory") or {}
    for k in ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes"):
        for pre in ("", "host_"):
            a, b = hm.get(pre + k), dm.get(pre + k)
            if a is not None and b is not None and int(a) != int(b):
                diffs.append(f"{pre + k}: handed over {a}, dump {b}")
    hc, dc = handed.get("cost") or {}, dumped.get("cost") or {}
    for k in COST_KEYS:
        a, b = hc.get(k), dc.get(k)
        if a is not None and b is not None and abs(a - b) > 1e-6 * max(1.0, abs(a)):
            diffs.append(f"{k}: handed over {a:g}, dump {b:g}")
    compared = bool(hm and dm) or bool(hc and dc)
    return {"compared": compared, "agree": compared and not diffs, "differences": diffs}


def memory_fields(ma: Any) -> dict[str, int] | None:
    """``compiled.memory_analysis()`` as a dict (None when the backend gives nothing)."""
    if ma is None:
        return None
    out = {k: int(getattr(ma, k)) for k in MEMORY_FIELDS if getattr(ma, k, None) is not None}
    if getattr(ma, "peak_memory_in_bytes", None) is not None:
        out["peak_memory_in_bytes"] = int(ma.peak_memory_in_bytes)
    return out


def module_name(hlo_text: str) -> str | None:
    first = hlo_text.lstrip().split("\n", 1)[0]
    if first.startswith("HloModule "):
        return first.split()[1].rstrip(",")
    return None


HEADER_CHARS = 1 << 20  # an HLO text's header, entry_computation_layout included, even for thousands of parameters


def _text_head(path: Path) -> str:
    """The first ``HEADER_CHARS`` characters of a text dump (only those decompressed, for an ``.xz``)."""
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", errors="replace") as f:
        return f.read(HEADER_CHARS)


def upgraded(doc: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """A run's ``compiled.json`` (*doc*) with what a file written before them lacks, read from the run's
    dump: the entry instruction around the movements inside a loop (``top``), and each module's
    ``signature`` (``same_program.entry_signature``, from a text dump's header).  A module whose dump is
    gone, or does not read, stays as it was."""
    from profiler.xla.plan import with_tops

    mods = []
    for m in doc.get("modules") or []:
        moves = (m.get("plan") or {}).get("movements") or []
        looped = any(mv.get("executions_per_step") != 1 for mv in moves)
        after = (m.get("files") or {}).get("after")
        path = run_dir / (doc.get("dump_dir") or "") / after if after else None
        if path is None or not path.is_file():
            mods.append(m)
            continue
        m = dict(m)
        if looped and any("top" not in mv for mv in moves):
            with contextlib.suppress(HloError, OSError, ValueError):  # a dump that does not read: the plan as it was
                m["plan"] = with_tops(m["plan"], load_module(path)[0])
        if "signature" not in m and not path.name.endswith((".pb", ".pb.xz")):
            with contextlib.suppress(OSError, EOFError, lzma.LZMAError):
                m["signature"] = entry_signature(_text_head(path))
        mods.append(m)
    return {**doc, "modules": mods}
