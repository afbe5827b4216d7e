"""The Ray/storage layer every corpus stage runs on: stage outputs as files on the store
(``parts``), the storage-based shuffle (``shuffle``) and Ray Data's settings and start-up
(``raydata``). The stages themselves, their order and the manifest live in
``pipelines.orchestration``, above this layer."""
