"""The engine that runs build-corpus: the stage table (``stages``), the one runner with its
completion markers (``runner``), publishing the manifest (``publish``), stage outputs as files on
the store (``parts``), the storage-based shuffle (``shuffle``) and Ray Data's settings (``raydata``).
"""
