"""PyTorch programs in the style of pytorch/examples, run unchanged but for the import by
tests/examples/test_torch_programs.py. Each defines ``build(**options)`` (the model and what its
training needs) and ``train(model, batches, steps)`` returning the losses; the test builds both
libraries' models, gives asyncgrad's torch's initial weights, and compares the losses and the
final weights."""
