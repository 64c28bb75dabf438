"""`ptk prepare`: the stages of a pipeline file (or dedup then tokenize) run as one resumable job, ended by a funnel."""
