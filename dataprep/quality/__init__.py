"""Model-based quality: training text classifiers (`ptk classifier train`) and scoring corpora with them."""
