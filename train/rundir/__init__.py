"""A training run's folder, a local path or a bucket URL: its file names, its lock, its local mirror and
the sync with the bucket."""
