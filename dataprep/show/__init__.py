"""Looking at what a stage removed or kept (`ptk show`), without joining files."""
