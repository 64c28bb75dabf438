"""Model-based quality: text classifiers trained (`ptk classifier train`) and applied (`ptk score`, the
filters' `classifier` step), and corpora cut into quality buckets by a score (`ptk split`)."""
