"""How the model is spread over processes: the process group, data parallelism and ZeRO/FSDP."""
