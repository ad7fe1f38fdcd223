"""The MLflow UI helpers (backtest.tracking.ui): the experiment-kind tag, the links to the latest study, the
server's command line; marked slow: the real lean server (its process count, /health and the REST API).

The browser check itself (``make ui-check``, tools/ui_check.py) is not part of the suite."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import urllib.request
from pathlib import Path
from urllib.parse import unquote

import mlflow
import pandas as pd
import pytest

from backtest.errors import ConfigError
from backtest.tracking import Tracker, prepare_store
from backtest.tracking.store import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG
from backtest.tracking.ui import (
    SERVER_ENV,
    UiServer,
    artifacts_destination,
    compare_url,
    experiment_url,
    free_port,
    server_command,
    server_env,
    ui_command,
    ui_links,
)
from backtest.tracking.view import VIEW_TAG

BASE = "http://127.0.0.1:5000"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite store per module (creating the schema costs ~1.5 s); tests use their own experiments."""
    return tmp_path_factory.mktemp("ui-store")


def _uri(store: Path) -> str:
    return f"sqlite:///{store / 'mlruns.db'}"


def _fold_metrics() -> pd.DataFrame:
    return pd.DataFrame(
        {"rank_ic": [0.03, -0.01, 0.02], "ic": [0.02, 0.0, 0.01]}, index=pd.Index([0, 1, 2], name="fold")
    )


def _sweep(tracker: Tracker, study: str, n: int = 2, *, nested: bool = True) -> tuple[str, list[str], list[str]]:
    """A sweep's parent run (run_kind=sweep) and ``n`` child runs of ``study``; returns (parent, ids, names)."""
    parent = tracker.create_run(f"sweep-{study} ({n} trials)", kind="sweep", study=study, n_trials=n)
    ids, names = [], []
    for trial in range(n):
        name = f"{study} seed={trial}"
        with tracker.start_run(name, parent_run_id=parent.run_id if nested else None, study=study, n_trials=n) as run:
            run.log_fold_metrics(_fold_metrics())
        ids.append(run.run_id)
        names.append(name)
    parent.end()
    return parent.run_id, ids, names


# -- the experiment kind ---------------------------------------------------------------------------


def test_a_new_experiment_is_tagged_as_model_training(store: Path) -> None:
    experiment_id = prepare_store(_uri(store), "kind-new", project_dir=store)
    experiment = mlflow.MlflowClient(_uri(store)).get_experiment(experiment_id)
    assert experiment.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND == "custom_model_development"


def test_an_existing_experiment_without_the_tag_gains_it_and_a_set_kind_is_kept(store: Path) -> None:
    client = mlflow.MlflowClient(_uri(store))
    prepare_store(_uri(store), "kind-seed", project_dir=store)  # the schema exists before the raw client writes
    bare = client.create_experiment("kind-old", artifact_location=(store / "old").as_uri())
    assert EXPERIMENT_KIND_TAG not in client.get_experiment(bare).tags
    assert prepare_store(_uri(store), "kind-old", project_dir=store) == bare
    assert client.get_experiment(bare).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND

    chosen = client.create_experiment("kind-chosen", tags={EXPERIMENT_KIND_TAG: "genai_development"})
    prepare_store(_uri(store), "kind-chosen", project_dir=store)
    assert client.get_experiment(chosen).tags[EXPERIMENT_KIND_TAG] == "genai_development"


# -- the headline view ----------------------------------------------------------------------------


def _view(client: mlflow.MlflowClient, experiment_id: str) -> dict:
    envelope = json.loads(client.get_experiment(experiment_id).tags[VIEW_TAG])
    return {**envelope, "state": json.loads(envelope["state"])}


def test_a_new_experiment_carries_the_headline_view_sorted_by_sharpe(store: Path) -> None:
    experiment_id = prepare_store(_uri(store), "view-new", project_dir=store)
    view = _view(mlflow.MlflowClient(_uri(store)), experiment_id)
    assert VIEW_TAG == "mlflow.sharedViewState.headline"
    assert view["name"] == "Headline: Sharpe, rank IC, DSR, baselines" and view["createdAt"] == view["updatedAt"]
    assert view["state"] == {
        "searchFilter": "tags.run_kind = 'backtest'",
        "orderByKey": "metrics.`sharpe`",
        "orderByAsc": False,
        "selectedColumns": [
            "metrics.`sharpe`",
            "metrics.`sharpe_ex_best_month`",
            "metrics.`sharpe_ci_low`",
            "metrics.`sharpe_ci_high`",
            "metrics.`rank_ic_mean`",
            "metrics.`rank_ic_se`",
            "metrics.`dsr`",
            "metrics.`baseline_factor_rank_ic_mean`",
            "metrics.`baseline_linear_rank_ic_mean`",
            "params.`features.name`",
            "tags.`comparable`",
        ],
        "columnOrder": ["attributes.`Run Name`", *view["state"]["selectedColumns"]],
        "columnWidths": {"attributes.`Run Name`": 320},
    }


def test_an_experiment_without_the_view_or_with_an_old_one_gains_this_one_and_a_current_one_is_kept(
    store: Path,
) -> None:
    client = mlflow.MlflowClient(_uri(store))
    prepare_store(_uri(store), "view-seed", project_dir=store)
    bare = client.create_experiment("view-old", artifact_location=(store / "view-old").as_uri())
    client.set_experiment_tag(bare, VIEW_TAG, json.dumps({"name": "x", "createdAt": 1, "state": "{}"}))
    prepare_store(_uri(store), "view-old", project_dir=store)
    assert _view(client, bare)["state"]["orderByKey"] == "metrics.`sharpe`"

    before = client.get_experiment(bare).tags[VIEW_TAG]
    prepare_store(_uri(store), "view-old", project_dir=store)
    assert client.get_experiment(bare).tags[VIEW_TAG] == before  # not rewritten: same dates


# -- links -----------------------------------------------------------------------------------------


def test_links_point_at_the_latest_sweep_and_its_runs(store: Path) -> None:
    tracker = Tracker(_uri(store), "links", project_dir=store)
    _sweep(tracker, "older")
    parent, ids, names = _sweep(tracker, "newer", n=3)
    with tracker.start_run("one-off"):  # a backtest outside any study is not part of it
        pass

    links = ui_links(tracker.uri, "links", BASE)
    assert links.study is not None
    assert (links.study.name, links.study.parent_run_id) == ("newer", parent)
    assert list(links.study.run_ids) == ids and list(links.study.run_names) == names
    eid = tracker.experiment_id
    assert links.experiment_url == (
        f"{BASE}/#/experiments/{eid}/runs?workflowType=machine_learning&viewStateShareKey=headline"
    )

    compare = links.compare_url
    assert compare.startswith(f"{BASE}/#/compare-runs?runs=")
    query = dict(part.split("=", 1) for part in compare.split("?", 1)[1].split("&"))
    assert json.loads(unquote(query["runs"])) == ids
    assert json.loads(unquote(query["experiments"])) == [eid]
    assert query["workflowType"] == "machine_learning"
    chart = dict(part.split("=", 1) for part in links.fold_chart_url.split("?", 1)[1].split("&"))
    assert links.fold_chart_url.startswith(f"{BASE}/#/metric/?")
    assert json.loads(unquote(chart["runs"])) == ids and json.loads(unquote(chart["metric"])) == "fold/rank_ic"
    assert chart["x_axis"] == "step"

    printed = "\n".join(links.lines())
    assert all(url in printed for url in (compare, links.experiment_url, links.fold_chart_url))
    assert "'newer'" in printed


def test_links_find_a_study_whose_runs_lost_their_nesting(store: Path) -> None:
    tracker = Tracker(_uri(store), "unnested", project_dir=store)
    _, ids, _ = _sweep(tracker, "copied", nested=False)
    assert list(ui_links(tracker.uri, "unnested", BASE).study.run_ids) == ids


def test_links_without_a_study_or_an_experiment(store: Path) -> None:
    tracker = Tracker(_uri(store), "no-study", project_dir=store)
    with tracker.start_run("one-off"):
        pass
    links = ui_links(tracker.uri, "no-study", BASE)
    assert links.study is None and links.compare_url is None
    assert "none yet" in "\n".join(links.lines())
    missing = ui_links(tracker.uri, "never-made", BASE)
    assert missing.experiment_id is None and "not in this store yet" in missing.lines()[0]


def test_url_formats_match_the_ui_routes() -> None:
    assert compare_url(BASE, ["r1"], ["3"]) == (
        f"{BASE}/#/compare-runs?runs=%5B%22r1%22%5D&experiments=%5B%223%22%5D&workflowType=machine_learning"
    )
    assert experiment_url(BASE + "/", "3") == (
        f"{BASE}/#/experiments/3/runs?workflowType=machine_learning&viewStateShareKey=headline"
    )


# -- the server's command line ---------------------------------------------------------------------


def test_server_command_is_local_lean_and_on_the_project_store(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    command = server_command(uri, port=5123, project_dir=tmp_path)
    assert command[1:4] == ["-m", "mlflow", "server"]
    options = dict(zip(command[4::2], command[5::2]))
    assert options == {  # the store is in the environment, never on the command line
        "--artifacts-destination": str(tmp_path / "mlartifacts"),
        "--host": "127.0.0.1",
        "--port": "5123",
        "--workers": "1",
        "--uvicorn-opts": "--no-access-log",
    }
    env = server_env(uri, {"PATH": "/bin", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "true"})
    assert env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false" and env["PATH"] == "/bin"
    assert env["MLFLOW_BACKEND_STORE_URI"] == uri
    assert SERVER_ENV["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    assert artifacts_destination("postgresql://u@h/db", tmp_path) == tmp_path / "mlartifacts"
    with pytest.raises(ConfigError, match="running server already"):
        server_command("http://127.0.0.1:5000")


def test_the_printed_ui_command_pastes_into_a_shell_whatever_the_store_path(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'my runs; $(touch x)' / 'mlruns.db'}"
    command = ui_command(uri, project_dir=tmp_path)
    assert shlex.split(command) == ["python", "-m", "backtest.tracking.ui", "serve", "--uri", uri]
    echoed = subprocess.run(["sh", "-c", f"printf '%s\\n' {command}"], cwd=tmp_path, capture_output=True, text=True)
    assert echoed.stdout.splitlines()[-1] == uri and not (tmp_path / "x").exists()  # one word, nothing ran


# -- the real server -------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_lean_server_runs_as_two_processes_and_answers(tmp_path: Path) -> None:
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlruns.db'}", "served", project_dir=tmp_path)
    _sweep(tracker, "served")
    server = UiServer(tracker.uri, port=free_port(), project_dir=tmp_path, log_path=tmp_path / "server.log")
    with server:
        processes = server.processes()
        assert len(processes) == 2, processes  # mlflow server + uvicorn; no job runner, no huey consumers
        with urllib.request.urlopen(f"{server.url}/health", timeout=10) as response:
            assert response.status == 200
        request = urllib.request.Request(f"{server.url}/api/2.0/mlflow/experiments/get-by-name?experiment_name=served")
        with urllib.request.urlopen(request, timeout=10) as response:
            experiment = json.load(response)["experiment"]
        tags = {tag["key"]: tag["value"] for tag in experiment.get("tags", [])}
        assert tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    assert not any(os.path.exists(f"/proc/{pid}") for pid in processes)
