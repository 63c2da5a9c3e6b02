"""Backend tests: the simulated CUDA device."""
