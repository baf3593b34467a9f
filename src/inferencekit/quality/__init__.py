"""Quality checks: greedy trajectories, teacher-forced scoring against a reference, task evals."""
