"""dataprep: raw corpora in, clean documents out (readers, normalization, dedup, tokenizers)."""
