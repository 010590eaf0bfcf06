"""gemvbw: how close do low-bit GEMV kernels get to memory bandwidth?"""

__version__ = "0.1.0"
