"""Engine tests: semantics, hooks, concurrency, reentrancy and leaks of the backward engine."""
