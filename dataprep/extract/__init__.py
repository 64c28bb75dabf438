"""`ptk extract`: the main text of crawled web pages (WARC files) and HTML files, as JSONL records."""
