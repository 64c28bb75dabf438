"""`ptk mix search`: mixture weights fitted from short proxy runs (RegMix-style); `search.py` runs it."""
