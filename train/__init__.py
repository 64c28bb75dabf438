"""train: Llama-style model, parallelism, optimizer, trainer loop, checkpoints and planning."""
