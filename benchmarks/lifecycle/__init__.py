"""The whole lifecycle, corpus build then training, under injected faults (``soak.py``)."""
