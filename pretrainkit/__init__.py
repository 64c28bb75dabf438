"""pretrainkit: the `ptk` console and the few pieces every stage shares (errors, atomic files)."""

__version__ = "0.1.0"
