"""One module per gate, each holding the gate's whole rule as pure functions over replies and rows.

Each exposes ``judge_probes(ProbeRun)`` for its live part and/or ``judge_run(RunRows)`` for its
run-dir part; ``inferencekit.gates.GATES`` names them.
"""
