"""Fleet operations: acting on a run's verdicts across many nodes (draining bad nodes)."""
