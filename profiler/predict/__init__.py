"""Predicted step and exposed copy time from a compiled step's schedule (issue 23): ``schedule``
unrolls the scheduled HLO, ``roofline`` prices its instructions on a target, ``simulate`` replays
it on a compute stream, a copy stream per direction and a collective stream; ``step`` ties them
to a compiled module, a target and host links."""
