"""gpuledger: GPU-time analytics and chargeback with enforcement hooks."""

__version__ = "0.1.0"
