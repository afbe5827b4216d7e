"""The GPU benchmark (``gpu.py``) and the one-command GPU check (``gpu_check.sh``)."""
