"""The headline view of an experiment's runs list: the columns a researcher reads first, sorted by Sharpe.

MLflow's UI (3.17) keeps a saved view of the runs list as an experiment tag
``mlflow.sharedViewState.<key>`` and opens it from a link that carries ``viewStateShareKey=<key>``. The tag's
value is an envelope ``{"name", "createdAt", "updatedAt", "state"}`` whose ``state`` is the JSON of the
page's search facets (``orderByKey``, ``orderByAsc``, ``searchFilter``, ...) and UI state
(``selectedColumns``, ``columnOrder``, ...); a column is named ``<metrics|params|tags>.`<key>```. Fields left
out take the UI's defaults.

Every experiment the project creates carries :data:`VIEW_TAG` (:func:`backtest.tracking.prepare_store`), and
the experiment link that ``make ui`` prints opens it (:func:`backtest.tracking.ui.experiment_url`): the
backtest runs (a sweep's parent runs, which hold no Sharpe, are filtered out, so a study's runs are listed
flat among the others) with

- ``sharpe``, ``sharpe_ex_best_month`` and the Sharpe's bootstrap interval (``sharpe_ci_low``,
  ``sharpe_ci_high``);
- ``rank_ic_mean`` and its Newey-West standard error ``rank_ic_se``; ``dsr``;
- the baselines' rank IC on the same folds (``baseline_factor_rank_ic_mean``, ``baseline_linear_rank_ic_mean``);
- the feature set (param ``features.name``) and the tag ``comparable``;

sorted by ``sharpe``, highest first.

>>> column("metrics", "sharpe")
'metrics.`sharpe`'
>>> state = headline_view_state()
>>> state["orderByKey"], state["orderByAsc"], state["searchFilter"]
('metrics.`sharpe`', False, "tags.run_kind = 'backtest'")
>>> state["selectedColumns"][:3]
['metrics.`sharpe`', 'metrics.`sharpe_ex_best_month`', 'metrics.`sharpe_ci_low`']
"""

from __future__ import annotations

import json
from typing import Any

#: the key of the headline view: the link's ``viewStateShareKey`` and the tag's suffix
VIEW_KEY = "headline"
#: the experiment tag that holds it (MLflow's prefix for shared and saved views)
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
#: the name the UI lists it under
VIEW_NAME = "Headline: Sharpe, rank IC, DSR, baselines"
#: the link parameter that opens a shared view
VIEW_URL_PARAM = "viewStateShareKey"

#: the columns, in the order shown: (kind, key) with kind one of metrics, params, tags
HEADLINE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("metrics", "sharpe"),
    ("metrics", "sharpe_ex_best_month"),
    ("metrics", "sharpe_ci_low"),
    ("metrics", "sharpe_ci_high"),
    ("metrics", "rank_ic_mean"),
    ("metrics", "rank_ic_se"),
    ("metrics", "dsr"),
    ("metrics", "baseline_factor_rank_ic_mean"),
    ("metrics", "baseline_linear_rank_ic_mean"),
    ("params", "features.name"),
    ("tags", "comparable"),
)
#: the metric the view sorts by, highest first
SORT_METRIC = "sharpe"
#: the runs it lists: backtests (a sweep's parent run has no headline metrics)
RUN_FILTER = "tags.run_kind = 'backtest'"
#: the run-name column, wide enough for a trial's name (``LambdaRankRanker-all portfolio.top_k=3``), in pixels
RUN_NAME_COLUMN = "attributes.`Run Name`"
RUN_NAME_WIDTH = 320


def column(kind: str, key: str) -> str:
    """The UI's name of a column (its canonical sort key): ``<kind>.`<key>```."""
    return f"{kind}.`{key}`"


def headline_view_state() -> dict[str, Any]:
    """The view state of the headline view (the JSON the UI applies; other fields keep its defaults)."""
    columns = [column(kind, key) for kind, key in HEADLINE_COLUMNS]
    return {
        "searchFilter": RUN_FILTER,
        "orderByKey": column("metrics", SORT_METRIC),
        "orderByAsc": False,
        "selectedColumns": columns,
        "columnOrder": [RUN_NAME_COLUMN, *columns],
        "columnWidths": {RUN_NAME_COLUMN: RUN_NAME_WIDTH},
    }


def headline_view_tag(created_at_ms: int) -> str:
    """The value of :data:`VIEW_TAG`: the saved-view envelope around :func:`headline_view_state`.

    >>> json.loads(headline_view_tag(0))["name"]
    'Headline: Sharpe, rank IC, DSR, baselines'
    """
    state = json.dumps(headline_view_state(), separators=(",", ":"))
    return json.dumps({"name": VIEW_NAME, "createdAt": created_at_ms, "updatedAt": created_at_ms, "state": state})


def is_current(tag_value: str | None) -> bool:
    """True when ``tag_value`` holds this version's headline view (its state, whatever its dates).

    >>> is_current(headline_view_tag(123)), is_current(None), is_current('{"state": "{}"}')
    (True, False, False)
    """
    if not tag_value:
        return False
    try:
        return json.loads(json.loads(tag_value)["state"]) == headline_view_state()
    except (ValueError, KeyError, TypeError):
        return False
