"""Ray Data's console on our own local Ray: its "no available CPUs ... will hang" warning dropped
while the cluster has CPUs, its per-execution INFO lines off the console unless ELECTRA_PROGRESS."""
from __future__ import annotations

import logging
import threading
import time

from pipelines.engine.raydata import NO_CPU_WARNING, drop_stale_no_cpu_warning


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.no_cpu = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if NO_CPU_WARNING in record.getMessage():
            self.no_cpu.set()


def test_ray_datas_no_cpu_warning_is_dropped_while_the_cluster_has_cpus(ray_local):
    """Ray's own warning, made for real: an actor holds both CPUs while a Dataset starts (the case
    the warning is for). The captured record is then passed through our filter: dropped, since
    the cluster has CPUs; another warning of the same logger passes."""
    ray = ray_local
    from ray.util.debug import reset_log_once

    logger = logging.getLogger("ray.data.dataset")
    saved_filters = list(logger.filters)
    for f in saved_filters:  # another test may have installed ours already
        logger.removeFilter(f)
    seen = _Records()
    logger.addHandler(seen)

    @ray.remote(num_cpus=2)
    class Holder:
        def ping(self) -> bool:
            return True

    try:
        reset_log_once("cpu_warning")
        holder = Holder.remote()
        assert ray.get(holder.ping.remote(), timeout=120)
        deadline = time.monotonic() + 60  # the holder's CPUs reach the resource view a moment later
        while ray.available_resources().get("CPU") and time.monotonic() < deadline:
            time.sleep(0.1)
        result: list = []
        run = threading.Thread(target=lambda: result.append(ray.data.range(4).materialize().count()))
        run.start()
        assert seen.no_cpu.wait(120), "Ray Data did not warn with both CPUs held"
        ray.kill(holder)  # the CPUs come back and the Dataset runs: it waited, it did not hang
        run.join(120)
        assert result == [4]
        (warning,) = [r for r in seen.records if NO_CPU_WARNING in r.getMessage()]

        drop_stale_no_cpu_warning()
        drop_stale_no_cpu_warning()  # idempotent: one filter however often Ray is started
        assert len(logger.filters) == 1
        seen.records.clear()
        logger.handle(warning)
        other = logging.LogRecord("ray.data.dataset", logging.WARNING, __file__, 1, "another warning", (), None)
        logger.handle(other)
        assert seen.records == [other]
    finally:
        logger.removeHandler(seen)
        for f in list(logger.filters):
            logger.removeFilter(f)
        for f in saved_filters:
            logger.addFilter(f)


def test_per_execution_lines_and_the_progress_bar_hint_off_the_console_unless_progress_is_asked(
        ray_local, monkeypatch):
    import io

    from ray.util.debug import reset_log_once

    from pipelines.engine.raydata import configure_data_context

    (console,) = [h for h in logging.getLogger("ray.data").handlers if h.get_name() == "console"]
    saved_level, quiet, chatty = console.level, io.StringIO(), io.StringIO()
    saved_stream = console.setStream(quiet)  # what the terminal would show
    try:
        monkeypatch.delenv("ELECTRA_PROGRESS", raising=False)
        reset_log_once("ray_data_progress_manager_disabled")
        configure_data_context()
        assert ray_local.data.range(3).materialize().count() == 3
        monkeypatch.setenv("ELECTRA_PROGRESS", "1")
        configure_data_context()
        console.setStream(chatty)
        assert ray_local.data.range(3).materialize().count() == 3
        assert "Starting execution of Dataset" in chatty.getvalue()
        assert "Starting execution of Dataset" not in quiet.getvalue()
        assert "Progress bars disabled" not in quiet.getvalue()
    finally:
        console.setStream(saved_stream)
        console.setLevel(saved_level)
        monkeypatch.delenv("ELECTRA_PROGRESS", raising=False)
        configure_data_context()
