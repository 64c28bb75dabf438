"""The training loop and its state: trainer step, optimizer and schedule, spike recovery, metrics."""
