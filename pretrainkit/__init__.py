"""pretrainkit: the `ptk` console and the few pieces every stage shares (errors, atomic files).

The repository's folders `dataprep/`, `shards/`, `mixtures/` and `train/` are this package's
subpackages (`pretrainkit.dataprep`, ...): pyproject.toml's package-dir maps them when installed.
"""

from pathlib import Path

__version__ = "0.1.0"

# A source checkout put on PYTHONPATH without installing (a fresh clone under test, a Ray worker
# given the checkout): the folders beside this one are found as the installed mapping finds them.
_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "train" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT))
