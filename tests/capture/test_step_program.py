"""The one rule that picks the step's compiled program (profiler.xla.step_program), with known
answers: each case is a pattern seen in a real program (issue 29), its expected program derived
by hand from the rule (the programs that ran more than once, then GPU time, executions, host time)."""

from __future__ import annotations

from profiler.units import si
from profiler.xla.step_program import NO_PROGRAM, Program, StepProgram, choose, program_label


def test_a_blocking_collective_run_once_is_not_the_step():
    """Pax on A100s (the nsys-jax archive, proc1): jit__psum 38 ran once with 2.65 s on the GPU,
    jit__psum 1 ran 4 times (2.86 s of host time, 18.5 ms of GPU), the step 5 times (4.29 s of GPU).
    Of the programs that ran more than once the step has the most GPU time."""
    progs = [
        Program("pjit__wrapped_step_fn", 40, 5, gpu_ns=4_289_138_271, host_ns=4_288_000_000),
        Program("jit__psum", 38, 1, gpu_ns=2_649_784_566, host_ns=269_762),
        Program("jit__psum", 1, 4, gpu_ns=18_538_794, host_ns=2_863_600_000),
        Program("pjit_init_model_from_seed", 19, 1, gpu_ns=3_619_785),
    ]
    step = choose(progs)
    assert (step.name, step.program_id, step.executions) == ("pjit__wrapped_step_fn", 40, 5)
    assert step.how == (
        "pjit__wrapped_step_fn (program 40): ran 5 times, the most GPU time of the programs that ran more "
        "than once (jit__psum ran as 2 programs, 4 times and once, pjit_init_model_from_seed ran once)"
    )
    assert step.others is None


def test_one_jit_name_as_three_programs():
    """A trainer whose first step compiles one program (weak-typed inputs), the loop another, and every
    third step a logging variant (a static argument): the loop's program ran most often; the other two
    are said once, in one clause."""
    progs = [
        Program("jit_train_step", 4, 1, host_ns=9_000),
        Program("jit_train_step", 6, 5, host_ns=5_000),
        Program("jit_train_step", 8, 3, host_ns=4_000),
        Program("jit_init", 2, 1, host_ns=90_000),
    ]
    step = choose(progs)
    assert (step.name, step.program_id) == ("jit_train_step", 6)
    assert step.how == (
        "jit_train_step (program 6): ran 5 times (9 times with its other programs), "
        "the only jit name that ran more than once (jit_init ran once)"
    )
    assert step.others == "jit_train_step also ran as 2 other programs, 3 times and once: not the step"
    assert step.sentence == step.how + "; " + step.others
    assert step.is_program("jit_train_step", 6) and not step.is_program("jit_train_step", 8)
    assert step.is_program("jit_train_step", None)  # an id unknown on one side: by name


def test_other_names_are_said_by_name():
    progs = [Program("jit_step", 22, 5), Program("jit_scanned", 10, 1), Program("jit_scanned", 12, 1)]
    progs += [Program("jit_a", 1, 1), Program("jit_b", 2, 1)]
    assert choose(progs).how == (
        "jit_step (program 22): ran 5 times, the only program that ran more than once "
        "(jit_scanned ran as 2 programs, once each, jit_a ran once, 1 more program name)"
    )
    assert choose(progs[:3]).how.endswith("(jit_scanned ran as 2 programs, once each)")


def test_a_step_as_two_programs_beats_a_helper_that_runs_once_per_step():
    """The public trainer of issue 44: its step compiled as two programs under one jit name (a logging
    variant every few steps: 27 and 24 executions) and a learning-rate schedule jitted once per step
    (51 executions, 16 FLOPs).  Counted together the step ran as often as the schedule; its work
    (FLOPs x executions) decides, never the schedule's count."""
    progs = [
        Program("jit_train_step", 3, 27, host_ns=27_000, flops=2.0e9),
        Program("jit_train_step", 5, 24, host_ns=24_500, flops=2.1e9),
        Program("jit_schedule", 2, 51, host_ns=90_000, flops=16.0),
        Program("jit_init", 1, 1, host_ns=500_000, flops=9.0e9),
    ]
    step = choose(progs)
    assert (step.name, step.program_id, step.executions) == ("jit_train_step", 3, 27)
    work = 27 * 2.0e9 + 24 * 2.1e9
    assert step.how == (
        f"jit_train_step (program 3): ran 27 times (51 times with its other program), the most work "
        f"({si(work)}FLOP in all) of the jit names that ran more than once "
        "(jit_schedule ran 51 times, jit_init ran once)"
    )
    assert step.others == "jit_train_step also ran as another program 24 times: not the step"
    # without FLOPs (a trace without its compiled modules) the step's GPU time decides; its count never loses
    no_flops = [Program(p.name, p.program_id, p.executions, gpu_ns=p.executions * (9 if p.flops > 1e3 else 1))
                for p in progs]  # fmt: skip
    assert choose(no_flops).name == "jit_train_step"
    # nothing but counts and host time (XLA:CPU, no dump): the two programs together tie with the schedule
    assert choose([Program(p.name, p.program_id, p.executions, host_ns=p.host_ns) for p in progs]).name == (
        "jit_schedule"  # the schedule's 90 us of host time: only work or GPU time can tell them apart
    )


def test_unknown_flops_count_as_no_work():
    """A name whose modules are not in the dump has no work: a name with known FLOPs wins over it."""
    progs = [Program("jit_step", 4, 5, flops=1e6), Program("jit_other", 8, 9)]
    assert choose(progs).name == "jit_step"
    assert choose([Program("jit_step", 4, 5), Program("jit_other", 8, 9)]).name == "jit_other"


def test_as_often_as_another_the_most_host_time():
    step = choose([Program("jit_update", None, 5, host_ns=10_000), Program("jit_sum", None, 5, host_ns=2_500)])
    assert step.how == "jit_update: ran 5 times, as often as another, with the most host time (jit_sum ran 5 times)"


def test_the_step_the_script_names_narrows_the_choice_to_its_programs():
    progs = [Program("jit_data", 3, 10, host_ns=1), Program("jit_step", 5, 4), Program("jit_step", 7, 1)]
    step = choose(progs, declared="jit_step")
    assert (step.name, step.program_id) == ("jit_step", 5)
    assert step.how.startswith(
        "jit_step (program 5): ran 4 times (5 times with its other program), "
        "the step the script handed to annotate.compiled_step (jit_data ran 10 times)"
    )
    assert step.others == "jit_step also ran as another program once: not the step"
    # a name that never ran: the rule as without it
    assert choose(progs, declared="jit_other").name == "jit_data"


def test_nothing_ran_the_largest_program_in_the_dump():
    progs = [Program("jit_init", 2, 0, size=9_000), Program("jit_step", 5, 0, size=4_000)]
    step = choose(progs)
    assert (step.name, step.program_id, step.executions) == ("jit_init", 2, 0)
    assert "the largest program in the XLA dump (no execution of any program was recorded)" in step.how
    assert choose(progs, declared="jit_step").program_id == 5
    assert choose([]) is NO_PROGRAM and NO_PROGRAM.label is None


def test_labels():
    assert program_label("jit_step", 48) == "jit_step (program 48)"
    assert program_label("jit_step", None) == "jit_step"
    s = StepProgram("jit_step", 0, 2, "x")
    assert s.label == "jit_step (program 0)" and s.to_json()["program_id"] == 0


def test_the_program_id_is_read_from_the_module_proto_without_parsing_it():
    """HloModuleProto: name = 1, entry_computation_name = 2, computations = 3 (length-delimited),
    id = 5 (varint).  300 is the varint bytes ac 02."""
    from profiler.capture.startup import program_of, proto_id

    def field(number: int, payload: bytes) -> bytes:
        return bytes([number << 3 | 2, len(payload)]) + payload

    proto = field(1, b"jit_step") + field(2, b"main") + field(3, b"\x0a\x04body") + bytes([5 << 3, 0xAC, 0x02])
    assert proto_id(proto) == 300
    assert proto_id(proto[:-1]) is None  # cut short
    # proto3 writes no field that holds its default: a whole message without field 5 is program 0
    # (the first module a process compiles: module_0000 in the dump, program_id=0 in XLA's ranges)
    assert proto_id(field(1, b"jit_step") + field(3, b"\x0a\x04body")) == 0
    assert proto_id(field(1, b"jit_step") + bytes([3 << 3 | 2, 9]) + b"body") is None  # a length past the end
    assert proto_id(b"") is None

    class Module:
        name = "jit_step"

        def as_serialized_hlo_module_proto(self) -> bytes:
            return proto

    class Client:
        platform = "cuda"

    class Executable:
        client = Client()

        def hlo_modules(self) -> list:
            return [Module()]

    class Call:
        xla_executable = Executable()

    assert program_of(Call()) == ("jit_step", 300, "cuda")
