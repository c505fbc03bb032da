"""Predicted step and exposed copy time from a compiled step's schedule (issue 23): ``schedule``
unrolls the scheduled HLO, ``roofline`` prices its instructions on a target, ``simulate`` replays
it on a compute stream, a copy stream per direction and a collective stream; ``step`` ties them
to a compiled module, a target and host links; ``trade`` and ``recorded`` answer the plan's and
the run's questions.

The calls other code builds on::

    sched = schedule.build(module)                        # Module (profiler.xla.hlo) -> Schedule
    device = roofline.device_from_spec(spec_text)         # GpuTargetConfigProto text -> Device
    cost_ns = roofline.costs(sched, device)               # {instruction name: ns per execution}
    pred = simulate.simulate(sched, cost_ns, link)        # -> Prediction (step_ns, exposed_ns, ...)

``cost_ns`` may hold measured durations instead (any subset; a host copy left out is priced over
*link*; a name no op runs is listed in ``Prediction.unplaced`` with its time; a loop is replayed
as its body where its body has costs, else as one op of its own cost: the rules of
``profiler.analysis.replay_rules``); ``roofline.op_classes(sched)`` names each instruction's class
for accuracy tables.
"""
