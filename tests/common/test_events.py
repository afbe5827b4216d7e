"""common.events: the API check never imports Prefect; events reach a real Prefect server."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


from common import events

ROOT = Path(__file__).resolve().parents[2]


def test_api_url_from_environment_or_active_profile(tmp_path, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("PREFECT_PROFILE", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    assert events.prefect_api_url() is None  # no profiles.toml
    (tmp_path / "profiles.toml").write_text(
        'active = "dev"\n[profiles.dev]\nPREFECT_API_URL = "http://h:1/api"\n'
        '[profiles.other]\nPREFECT_LOGGING_LEVEL = "INFO"\n')
    assert events.prefect_api_url() == "http://h:1/api"
    monkeypatch.setenv("PREFECT_PROFILE", "other")
    assert events.prefect_api_url() is None
    monkeypatch.setenv("PREFECT_API_URL", "http://e:2/api")
    assert events.prefect_api_url() == "http://e:2/api"
    (tmp_path / "profiles.toml").write_text("not [ toml")
    monkeypatch.delenv("PREFECT_API_URL")
    assert events.prefect_api_url() is None


def test_no_api_no_thread_and_prefect_never_imported(tmp_path):
    code = ("import sys; from common import events; "
            "t = events.emit_checkpoint_committed(sys.argv[1], step=3); "
            "print(t is None, 'prefect' in sys.modules, events.flush(1.0))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r/checkpoints/step_3")],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False", "True"]


def test_checkpoint_event_contract(tmp_path):
    step = tmp_path / "myrun" / "checkpoints" / "step_00000040"
    ev = events.checkpoint_event(step, step=40)
    assert ev["event"] == "electra.checkpoint.committed"
    assert ev["resource"]["prefect.resource.id"] == "electra.checkpoint.myrun.step_00000040"
    assert ev["payload"] == {"checkpoint": str(step.resolve()),
                             "run_dir": str((tmp_path / "myrun").resolve()), "step": 40}
    # the trigger in prefect.yaml matches this resource id and event name
    import yaml

    deployments = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    trigger, = next(d for d in deployments if d["name"] == "evaluate")["triggers"]
    pattern = trigger["match"]["prefect.resource.id"]
    assert pattern.endswith("*") and ev["resource"]["prefect.resource.id"].startswith(pattern[:-1])
    assert trigger["expect"] == [ev["event"]]
    assert trigger["parameters"] == {"checkpoint": "{{ event.payload.checkpoint }}"}
