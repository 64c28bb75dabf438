"""The model itself: a Llama-family decoder in plain PyTorch, nothing about distribution in it."""
