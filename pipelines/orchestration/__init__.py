"""The corpus build's orchestration: the stage table, the runner that drives it stage by stage
(cached, retried, checked), the publish step that commits the manifest, and the report on what
was dropped. Beneath it, ``pipelines.engine`` is the Ray/storage layer every stage runs on."""
