"""The Airflow DAG shipped in deploy/airflow/dags: it loads without errors, imports nothing
of the crawler, and ``dag.test()`` runs one full cycle against the test web.

Airflow runs in a subprocess with AIRFLOW_HOME (and its SQLite metadata DB) under
tmp_path: its settings are read once per process, and nothing is written to the repo.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cycles.tables.segment import segment_state
from cycles.storage.store import Store
from testweb.harness import TestWeb
from tests.conftest import write_seeds
from tests.support.cli import write_web_config

REPO = Path(__file__).resolve().parents[1]
DAGS = REPO / "deploy" / "airflow" / "dags"
DAG_FILE = DAGS / "crawl_dag.py"

needs_airflow = pytest.mark.skipif(importlib.util.find_spec("airflow") is None,
                                   reason="apache-airflow is not installed (pip install -e '.[airflow]')")


def airflow_env(tmp_path: Path) -> dict:
    return {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS), "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "PYTHONPATH": str(REPO), "CRAWL_DAG_ID": "crawl"}


def run_python(script: str, env: dict, cwd: Path, timeout: float = 400) -> dict:
    """Run ``script`` in a fresh interpreter; it prints its findings as the last line, in JSON."""
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_dag_file_imports_only_airflow_and_the_standard_library():
    tree = ast.parse(DAG_FILE.read_text())
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 0}
    outside = {m for m in modules if m.split(".")[0] not in sys.stdlib_module_names | {"airflow", "__future__"}}
    assert modules and not outside, outside


LOAD = """
import json, os
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
dag = bag.dags.get("crawl")
tasks = {t.task_id: t for t in dag.tasks} if dag else {}
print(json.dumps({
    "errors": {k: v[-300:] for k, v in bag.import_errors.items()}, "dags": sorted(bag.dags),
    "max_active_runs": dag.max_active_runs, "catchup": dag.catchup,
    "tasks": {i: {"upstream": sorted(t.upstream_task_ids), "retries": t.retries,
                  "timeout_s": t.execution_timeout.total_seconds() if t.execution_timeout else None,
                  "mapped": type(t).__name__.startswith("Mapped") or hasattr(t, "expand_input"),
                  "outlets": [getattr(o, "uri", str(o)) for o in t.outlets]} for i, t in tasks.items()},
    "params": sorted(dag.params.keys())}))
"""


@needs_airflow
@pytest.mark.web  # starts an interpreter that imports Airflow (~6 s)
def test_dagbag_loads_the_dag_without_errors(tmp_path):
    found = run_python(LOAD, airflow_env(tmp_path), tmp_path, timeout=180)
    assert found["errors"] == {} and found["dags"] == ["crawl"]
    assert found["max_active_runs"] == 1 and found["catchup"] is False
    tasks = found["tasks"]
    assert tasks["generate"]["upstream"] == [] and tasks["fetch"]["upstream"] == ["generate"]
    assert tasks["mark_fetched"]["upstream"] == ["fetch"] and tasks["update"]["upstream"] == ["mark_fetched"]
    assert tasks["fetch"]["mapped"] and not tasks["update"]["mapped"]
    assert tasks["compact"]["upstream"] == ["update"]  # deltas and the link DB, when due (docs/incremental.md)
    assert all(t["retries"] >= 1 and t["timeout_s"] for t in tasks.values())
    assert tasks["update"]["outlets"] and tasks["update"]["outlets"][0].endswith("/data/pages")
    assert {"data", "config", "crawl"} <= set(found["params"])


RUN = """
import json, os, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.models import TaskInstance
from airflow.utils.session import create_session
dag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"]).dags["crawl"]
run = dag.test(run_conf=json.loads(sys.argv[1]))
with create_session() as session:
    tis = session.query(TaskInstance).filter(TaskInstance.run_id == run.run_id).all()
    states = sorted([t.task_id, t.map_index, str(t.state)] for t in tis)
    try:
        from airflow.models.asset import AssetEvent, AssetModel
        events = [m.uri for e, m in session.query(AssetEvent, AssetModel).filter(AssetEvent.asset_id == AssetModel.id)]
    except ImportError:  # Airflow 2.x
        from airflow.models.dataset import DatasetEvent, DatasetModel
        events = [m.uri for e, m in session.query(DatasetEvent, DatasetModel).filter(DatasetEvent.dataset_id == DatasetModel.id)]
print(json.dumps({"state": str(run.state), "tis": states, "events": events}))
"""


@needs_airflow
@pytest.mark.web
def test_dag_test_runs_one_cycle_against_the_test_web(tmp_path):
    data = tmp_path / "data"
    env = {**airflow_env(tmp_path), "CRAWL_DATA": str(data)}  # the asset's URI is made when the file is parsed
    migrate = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    with TestWeb(hosts=4, pages=3, page_bytes=2000, special=False, max_seconds=280) as web:
        config = write_web_config(tmp_path / "crawl.toml", web)
        crawl = f"{sys.executable} -m cycles"
        inject = subprocess.run([*crawl.split(), "--data", str(data), "inject", write_seeds(tmp_path / "seeds.txt",
                                web.seeds())], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert inject.returncode == 0, inject.stderr
        conf = {"data": str(data), "config": str(config), "crawl": crawl}
        script = RUN.replace("json.loads(sys.argv[1])", repr(conf))
        found = run_python(script, env, tmp_path)
        requested = web.requested_urls()
    assert found["state"] == "success", found
    store = Store(data)
    [segment] = store.segments()
    assert segment_state(store, segment) == "updated"
    partitions = sorted(int(p.name[5:10]) for p in (data / "segments" / segment / "fetchlist").iterdir())
    fetches = [ti for ti in found["tis"] if ti[0] == "fetch"]
    assert sorted(ti[1] for ti in fetches) == list(range(len(partitions))) and len(partitions) >= 2
    assert all(ti[2] == "success" for ti in found["tis"]) and len(found["tis"]) == 4 + len(partitions)
    assert set(web.seeds()) <= requested  # what the server saw: every seed, fetched by the mapped tasks
    status = subprocess.run([*crawl.split(), "--data", str(data), "status", "--json"], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert json.loads(status.stdout)["by_status"]["fetched"] == 4
    assert (data / "pages" / f"{segment}.parquet").exists()
    assert found["events"] == [f"file://{data}/pages"]  # the pages feed, published as an asset event
    assert not any(p.name in ("airflow", "airflow.db", "logs") for p in REPO.iterdir())
