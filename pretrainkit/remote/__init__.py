"""Object storage: URLs (s3://, gs://, az://, hf://) as paths, through fsspec and its backends."""
