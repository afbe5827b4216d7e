"""A CLI in miniature for tests/flows/test_runtime.py: enter ``prefect_runtime``, run a flow with a
task, a run-logger line and a printed line, then print (last line, JSON) what the run saw: the API
URL, Prefect's home during the run, the flow runs that server holds and its analytics switch."""
from __future__ import annotations

import json
import logging
import os
import sys

import httpx
from prefect import flow, get_run_logger, task
from prefect.runtime import flow_run

from flows.runtime import RuntimeUnavailable, prefect_runtime


@task
def double(x: int) -> int:
    return 2 * x


@flow(name="runtime-probe", log_prints=True)
def probe(x: int) -> dict:
    get_run_logger().info("probe: our progress line")
    print("probe: a printed line")
    return {"value": double(x), "flow_run": str(flow_run.id)}


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s", force=True)
    try:
        with prefect_runtime("runtime-probe") as url:
            from prefect.settings import get_current_settings

            home = str(get_current_settings().home)
            seen = {"url": url, "home": home, "home_existed": os.path.isdir(home), **probe(21)}
            runs = httpx.post(f"{url}/flow_runs/filter", json={"limit": 200}).json()
            seen["flow_runs"] = sorted(r["id"] for r in runs)
            seen["analytics"] = httpx.get(f"{url}/admin/settings").json()["server"]["analytics_enabled"]
    except RuntimeUnavailable as exc:
        print(f"runtime-probe: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(seen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
