"""`ptk generate`: sampling from a trained model (any model `train/checkpoint/load_model.py` loads)."""
