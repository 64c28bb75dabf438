"""Document filters: language ID, heuristic quality filters, PII redaction (`ptk filter`)."""
