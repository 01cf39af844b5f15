"""neurenix: high-level machine-learning hardware APIs.

The IPU manager lives in :mod:`neurenix.hardware.graphcore`.
"""

__version__ = "0.1.0"
