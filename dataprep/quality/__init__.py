"""Model-based quality: classifiers trained and applied."""
