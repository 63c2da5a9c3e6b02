"""The programs here are run by tests/examples/test_torch_programs.py, once with torch and once
with asyncgrad: pytest does not import them itself (they import torch, which may be absent)."""

collect_ignore_glob = ["[!c_]*.py"]
