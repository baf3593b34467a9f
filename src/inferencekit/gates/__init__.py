"""Anti-cheat gates: probes and run-dir checks that show an engine did the work it claims (issue 4)."""
