"""``make ui-check``: look at the MLflow UI of a study in a real browser, as a person would.

Starts the lean server of :mod:`backtest.tracking.ui` on a free port against a store that holds a study,
drives headless Chromium through chromedriver (Selenium), and checks that

1. the experiment's runs list (the link ``make ui`` prints) opens on the headline view
   (:mod:`backtest.tracking.view`): its columns in order, the runs sorted by Sharpe, highest first, the
   study's runs among them by name;
2. the chart page of the study's ``fold/rank_ic`` per fold draws one line per run;
3. the compare-runs page of the study shows its runs by name, and renders for each run the root-level
   images they share (:data:`backtest.tracking.layout.COMPARE_IMAGES`; a note says when there are none);
4. one run's page draws a chart of each of its per-fold metrics (``fold/<name>``);
5. one run's artifact page opens ``reports/tearsheet.html``, ``reports/signal.html`` and
   ``reports/portfolio.html`` in the artifact tree and renders each.

Each page is saved as a PNG in the folder printed at the end (default ``outputs/ui-check/``).

The store: ``--uri`` if given; else the project's store when its latest study has two finished runs;
else a tiny store made in a temporary folder by a real two-run sweep of the smoke experiment (a few
minutes on two cores).

The browser: ``chromium`` and ``chromedriver`` on PATH (Debian: ``apt-get install --no-install-recommends
chromium chromium-driver``), or ``$UI_CHECK_CHROMIUM`` / ``$UI_CHECK_CHROMEDRIVER``, or else Debian's
packages unpacked without root into ``.cache/ui-browser/`` (``apt-get download`` + ``dpkg -x`` of
chromium, chromium-driver and the libraries this machine lacks). Selenium comes from the ``ui`` extra
(``pip install -e '.[ui]'``). What cannot be had is said, with how to get it, and the check exits 2; a
failed check exits 1.

Not part of the test suite (it needs a browser and minutes), nor of the installed package (it downloads
Debian packages): run it by hand from a checkout, ``make ui-check`` (``.venv/bin/python tools/ui_check.py
[--uri URI] [--out DIR] [--port N]``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from backtest import PROJECT_DIR
from backtest.tracking.layout import ARTIFACTS, COMPARE_IMAGES
from backtest.tracking.ui import (
    FOLD_METRIC,
    UiLinks,
    UiServer,
    free_port,
    run_charts_url,
    run_url,
    ui_links,
)
from backtest.tracking.view import HEADLINE_COLUMNS, SORT_METRIC, VIEW_NAME, column

BROWSER_DIR = PROJECT_DIR / ".cache" / "ui-browser"
DEFAULT_OUT = PROJECT_DIR / "outputs" / "ui-check"
DEBIAN_PACKAGES = ("chromium", "chromium-driver")
EXPERIMENT = "rankbacktest"
FOLD_CHART = FOLD_METRIC


class Missing(Exception):
    """Something the check needs cannot be had here; the message says how to get it."""


class CheckFailed(Exception):
    """The UI did not show what it should."""


# -- the browser -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Browser:
    chromium: Path
    chromedriver: Path
    library_path: str  # LD_LIBRARY_PATH for a browser unpacked without root ("" for an installed one)
    source: str  # how it was found, for the report


def find_browser(browser_dir: Path = BROWSER_DIR, *, fetch: bool = True) -> Browser:
    """Chromium and its chromedriver: from the environment, PATH, ``browser_dir``, or unpacked there.

    Raises
    ------
    Missing : none found and Debian's packages could not be unpacked; the message says how to get them.
    """
    chromium, driver = os.environ.get("UI_CHECK_CHROMIUM"), os.environ.get("UI_CHECK_CHROMEDRIVER")
    if chromium and driver:
        return Browser(Path(chromium), Path(driver), "", "UI_CHECK_CHROMIUM / UI_CHECK_CHROMEDRIVER")
    driver = shutil.which("chromedriver")
    chromium = next(
        (found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))), None
    )
    if driver and chromium:
        return Browser(Path(chromium), Path(driver), "", f"installed ({chromium}, {driver})")
    unpacked = _unpacked(browser_dir)
    if unpacked is None and fetch:
        _unpack_debian_packages(browser_dir)
        unpacked = _unpacked(browser_dir)
    if unpacked is None:
        raise Missing(_how_to_get_a_browser(browser_dir))
    return unpacked


def _unpacked(browser_dir: Path) -> Browser | None:
    root = browser_dir / "root"
    chromium = root / "usr/lib/chromium/chromium"
    # chromium-driver puts chromedriver in usr/lib/chromium (older releases) or usr/bin (bookworm's 150)
    driver = next(
        (path for path in (root / "usr/lib/chromium/chromedriver", root / "usr/bin/chromedriver") if path.is_file()),
        None,
    )
    if not chromium.is_file() or driver is None:
        return None
    library_dirs = sorted({str(path.parent) for path in root.rglob("*.so*") if path.is_file()})
    return Browser(chromium, driver, os.pathsep.join(library_dirs), f"Debian packages unpacked in {browser_dir}")


def _unpack_debian_packages(browser_dir: Path) -> None:
    """``apt-get download`` chromium, chromium-driver and the libraries they need that this machine lacks
    (as ``apt-get install --simulate`` lists them), and ``dpkg -x`` them into ``browser_dir/root``."""
    if not (shutil.which("apt-get") and shutil.which("dpkg")):
        return
    simulated = subprocess.run(
        ["apt-get", "install", "--simulate", "--no-install-recommends", *DEBIAN_PACKAGES],
        capture_output=True,
        text=True,
        check=False,
    )
    packages = [line.split()[1] for line in simulated.stdout.splitlines() if line.startswith("Inst ")]
    if simulated.returncode != 0 or not any(name == "chromium" for name in packages):
        print(f"apt-get cannot resolve {' '.join(DEBIAN_PACKAGES)}: {simulated.stderr.strip()[-400:]}", file=sys.stderr)
        return
    downloads = browser_dir / "debs"
    downloads.mkdir(parents=True, exist_ok=True)
    print(
        f"downloading {len(packages)} Debian packages (chromium and the libraries it lacks here) into {downloads} ...",
        flush=True,
    )
    fetched = subprocess.run(
        ["apt-get", "download", *packages], cwd=downloads, capture_output=True, text=True, check=False
    )
    if fetched.returncode != 0:
        print(f"apt-get download failed: {fetched.stderr.strip()[-400:]}", file=sys.stderr)
        return
    root = browser_dir / "root"
    for deb in sorted(downloads.glob("*.deb")):
        subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
    shutil.rmtree(downloads, ignore_errors=True)


def _how_to_get_a_browser(browser_dir: Path) -> str:
    return (
        "no Chromium with chromedriver found. Expected `chromium` and `chromedriver` on PATH, or "
        "UI_CHECK_CHROMIUM and UI_CHECK_CHROMEDRIVER set, or Debian's packages unpacked in "
        f"{browser_dir}/root. Get them with one of:\n"
        "  sudo apt-get install --no-install-recommends chromium chromium-driver   (Debian / Ubuntu, root)\n"
        f"  apt-get download <chromium, chromium-driver and their missing libraries> && dpkg -x each into "
        f"{browser_dir}/root   (no root; this check does it itself where apt-get can resolve the packages:\n"
        "   run `apt-get update` once as root first if apt's package lists are empty)"
    )


def open_driver(browser: Browser, *, width: int = 1600, height: int = 1000):  # -> selenium WebDriver
    """Headless Chromium driven through chromedriver (Selenium's own driver download is off)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        raise Missing(
            "Selenium is not installed in this environment. Fix: .venv/bin/python -m pip install -e '.[ui]' "
            "(make ui-check does it)."
        ) from None
    os.environ.setdefault("SE_OFFLINE", "true")  # no Selenium Manager download: the paths are given
    options = webdriver.ChromeOptions()
    options.binary_location = str(browser.chromium)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-extensions",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    env = dict(os.environ)
    if browser.library_path:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [browser.library_path, env.get("LD_LIBRARY_PATH")]))
    service = Service(executable_path=str(browser.chromedriver), env=env)
    return webdriver.Chrome(service=service, options=options)


# -- the store -------------------------------------------------------------------------------------


def usable_links(uri: str, base_url: str) -> UiLinks | None:
    """The links of ``uri``'s latest study if it has at least two finished runs, else None."""
    import mlflow

    try:
        links = ui_links(uri, EXPERIMENT, base_url)
    except Exception:  # no store, no schema: not usable
        return None
    if links.study is None:
        return None
    client = mlflow.MlflowClient(tracking_uri=uri)
    finished = [run_id for run_id in links.study.run_ids if client.get_run(run_id).info.status == "FINISHED"]
    return links if len(finished) >= 2 else None


def make_tiny_store(folder: Path) -> str:
    """A store holding one study: a real two-run sweep of the smoke experiment (a book of 5 stocks and
    one of 3)."""
    uri = f"sqlite:///{folder / 'mlruns.db'}"
    command = [
        sys.executable,
        "-m",
        "backtest",
        "-m",
        "experiment=smoke",
        "portfolio.top_k=5,3",
        f"tracking.uri={uri}",
        f"hydra.sweep.dir={folder / 'multirun'}",
    ]
    log = folder / "sweep.log"
    print(f"making a tiny store with one study (a few minutes): {' '.join(command)}\n  log: {log}", flush=True)
    with log.open("wb") as output:
        done = subprocess.run(command, cwd=PROJECT_DIR, stdout=output, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise CheckFailed(f"the sweep that makes the tiny store failed (exit {done.returncode}); see {log}")
    return uri


# -- the pages -------------------------------------------------------------------------------------


def wait_for(driver, what: str, condition: Callable[[], object], timeout_s: float = 60.0) -> object:
    """Poll ``condition`` (a React page renders after its data arrives) until it is truthy."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # stale elements while React re-renders
            last_error = exc
        time.sleep(0.5)
    raise CheckFailed(
        f"timed out after {timeout_s:.0f} s waiting for {what}" + (f" (last error: {last_error})" if last_error else "")
    )


def page_text(driver) -> str:
    return driver.execute_script("return document.body ? document.body.innerText : ''") or ""


def shows_all(driver, texts: Sequence[str]) -> Callable[[], bool]:
    return lambda: all(text in page_text(driver) for text in texts)


def scroll_to_text(driver, text: str) -> bool:
    """Scroll the innermost element whose own text is ``text`` into view; False when there is none."""
    return bool(
        driver.execute_script(
            """
        const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
        while (walker.nextNode()) {
          if (walker.currentNode.textContent.trim() === arguments[0]) {
            walker.currentNode.parentElement.scrollIntoView({block: 'start'});
            return true;
          }
        }
        return false;
        """,
            text,
        )
    )


def header_columns(driver) -> list[str]:
    """The runs list's column ids (``metrics.`sharpe```, ...) in the order shown."""
    return driver.execute_script(
        "return [...document.querySelectorAll('.ag-header-cell[col-id]')]"
        "  .sort((a, b) => a.getBoundingClientRect().left - b.getBoundingClientRect().left)"
        "  .map(c => c.getAttribute('col-id'));"
    )


def column_cells(driver, column_id: str) -> list[str]:
    """The texts of one column's cells, top row first."""
    return driver.execute_script(
        "return [...document.querySelectorAll(`.ag-row .ag-cell[col-id='${arguments[0]}']`)]"
        "  .sort((a, b) => a.getBoundingClientRect().top - b.getBoundingClientRect().top)"
        "  .map(c => c.innerText.trim());",
        column_id,
    )


def close_assistant(driver) -> None:
    """Close MLflow 3's assistant side panel (it takes a third of the window) when it is open."""
    driver.execute_script(
        "const b = document.querySelector(\"button[data-component-id='mlflow.assistant.chat_panel.close']\");"
        "if (b) b.click();"
    )
    time.sleep(0.5)


def check_pages(driver, links: UiLinks, out: Path, tearsheet_run: str, fold_keys: Sequence[str]) -> list[str]:
    """Open the pages, assert what they show, save screenshots; return notes for the report. ``fold_keys``:
    the per-fold metrics of the study's first run, whose charts its page must draw."""
    from selenium.webdriver.common.by import By

    study, notes, shots = links.study, [], []
    assert study is not None and links.experiment_id is not None

    def shot(name: str) -> None:
        path = out / name
        driver.save_screenshot(str(path))
        shots.append(path.name)

    # 1. the runs list in the model-training view, on the headline view: its columns in order, sorted by Sharpe,
    #    the study's runs listed flat (the view lists backtests only, so no sweep row hides them)
    driver.get(links.experiment_url)
    wait_for(driver, f"the headline view {VIEW_NAME!r} of the runs list", shows_all(driver, ["Run Name", VIEW_NAME]))
    close_assistant(driver)
    wait_for(driver, f"the runs list to show {study.run_names}", shows_all(driver, study.run_names))
    expected = [column(kind, key) for kind, key in HEADLINE_COLUMNS]
    try:
        wait_for(
            driver,
            f"the headline columns in order, {expected}",
            lambda: [c for c in header_columns(driver) if c in expected] == expected,
            timeout_s=30,
        )
    except CheckFailed as exc:
        raise CheckFailed(f"{exc}; the runs list shows the columns {header_columns(driver)}") from None
    sort_key = column("metrics", SORT_METRIC)
    sharpe = [float(text) for text in column_cells(driver, sort_key) if text]
    if len(sharpe) < 2 or sharpe != sorted(sharpe, reverse=True):
        raise CheckFailed(f"the runs list is not sorted by {SORT_METRIC}, highest first: {sharpe}")
    notes.append(
        f"runs list: the headline view, its {len(expected)} columns in order, sorted by {SORT_METRIC} {sharpe}"
    )
    time.sleep(1.0)
    shot("01-runs.png")

    # 2. the per-fold chart of the study's runs: one line per run over the folds
    driver.get(links.fold_chart_url)
    wait_for(
        driver,
        f"the {FOLD_CHART!r} chart of {study.run_names}",
        shows_all(driver, [FOLD_CHART, *[f"{name} ({FOLD_CHART})" for name in study.run_names]]),
    )
    wait_for(driver, "the chart's lines", lambda: driver.find_elements(By.CSS_SELECTOR, "svg .scatterlayer .trace"))
    time.sleep(1.0)
    shot("02-fold-chart.png")

    # 3. the compare-runs page: run names, and the root-level images every run has
    driver.get(links.compare_url)
    wait_for(driver, f"the compare page to show {study.run_names}", shows_all(driver, study.run_names))
    time.sleep(1.0)
    shot("03-compare.png")
    wait_for(
        driver,
        "the compare page's artifacts section",
        lambda: "Select a file to preview" in page_text(driver) or "No common artifacts" in page_text(driver),
    )
    common = [name for name in COMPARE_IMAGES.values() if name in page_text(driver)]
    if common:
        image = COMPARE_IMAGES["fold_rank_ic"] if COMPARE_IMAGES["fold_rank_ic"] in common else common[0]
        entry = wait_for(
            driver,
            f"{image!r} in the compare page's artifact list",
            lambda: driver.find_elements(By.CSS_SELECTOR, f"[data-testid=artifact-tree-node][artifact-name='{image}']"),
        )[0]
        # the tree's click handler sits on the node's row; a script click reaches it where it is scrolled away
        driver.execute_script(
            "const row = arguments[0].parentElement; row.scrollIntoView({block: 'center'});row.click();", entry
        )
        wait_for(
            driver,
            f"{image!r} rendered for every run",
            lambda: (
                driver.execute_script(
                    "return [...document.images].filter(i => i.complete && i.naturalWidth > 100).length"
                )
                >= len(study.run_ids)
            ),
        )
        notes.append(f"compare page lists the root-level images {', '.join(common)}; {image} rendered for each run")
    else:
        scroll_to_text(driver, "No common artifacts to display.")
        notes.append(
            "compare page: 'No common artifacts to display.' (no root-level file common to the runs; "
            f"log the charts at the root: {', '.join(COMPARE_IMAGES.values())})"
        )
    time.sleep(1.0)
    shot("04-compare-artifacts.png")

    # 4. one run's page: a chart of each per-fold metric over the folds
    driver.get(run_charts_url(links.base_url, links.experiment_id, study.run_ids[0]))
    legends = {f"{study.run_names[0]} ({key})" for key in fold_keys}
    seen: set[str] = set()
    polls = [0]

    def all_charts_seen() -> bool:  # the page draws the charts near the window only: scroll through them,
        # down from the last legend drawn and up from the first, in turn (the page may open scrolled)
        seen.update(legend for legend in legends if legend in page_text(driver))
        polls[0] += 1
        driver.execute_script(
            "const legends = [...document.querySelectorAll('*')].filter(e => e.children.length === 0"
            "  && arguments[0].includes(e.textContent.trim()));"
            "if (legends.length && arguments[1]) legends[legends.length - 1].scrollIntoView({block: 'start'});"
            "else if (legends.length) legends[0].scrollIntoView({block: 'end'});",
            sorted(legends),
            polls[0] % 2 == 0,
        )
        return seen == legends

    try:
        wait_for(driver, f"the run page's charts of {fold_keys}", all_charts_seen)
    except CheckFailed as exc:
        raise CheckFailed(f"{exc}; drawn: {sorted(seen)}") from None
    close_assistant(driver)
    scroll_to_text(driver, FOLD_CHART.split("/", 1)[1])
    time.sleep(1.0)
    shot("05-run-fold-charts.png")
    notes.append(f"run page: {len(fold_keys)} per-fold charts ({', '.join(fold_keys)})")

    # 5. one run's artifacts: the tearsheet, the signal page and the portfolio page in the tree, rendered
    for page, expected, png in (
        ("tearsheet", "Sharpe", "06-tearsheet.png"),
        ("signal", "Daily rank IC", "07-signal.png"),
        ("portfolio", "Equity with and without costs", "08-portfolio.png"),
    ):
        artifact = ARTIFACTS.report(page)
        driver.get("about:blank")  # the app routes within its page: load the artifact's address afresh
        driver.get(run_url(links.base_url, links.experiment_id, tearsheet_run, artifact))
        wait_for(driver, f"the artifact tree to show {artifact!r}", shows_all(driver, [f"{page}.html", artifact]))
        frame = wait_for(
            driver, f"the {page} page to render in its frame", lambda: driver.find_elements(By.CSS_SELECTOR, "iframe")
        )[0]
        driver.switch_to.frame(frame)
        try:
            content = f"the {page} page's content ({expected!r})"
            wait_for(driver, content, lambda text=expected: text in page_text(driver))
        finally:
            driver.switch_to.default_content()
        time.sleep(1.0)
        shot(png)
    notes.append(f"screenshots in {out}: {', '.join(shots)}")
    return notes


# -- command line ----------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/ui_check.py", description=__doc__.split("\n")[0])
    parser.add_argument("--uri", help="store to look at (default: the project's, else a tiny one made here)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"screenshots (default {DEFAULT_OUT})")
    parser.add_argument("--port", type=int, default=0, help="server port (default: a free one)")
    args = parser.parse_args(argv)

    try:
        browser = find_browser()
        print(f"browser: {browser.source}")
        driver = open_driver(browser)
        from selenium.common.exceptions import WebDriverException
    except Missing as exc:
        print(f"ui-check: missing: {exc}", file=sys.stderr)
        return 2
    port = args.port or free_port()
    base_url = f"http://127.0.0.1:{port}"
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.png"):
        old.unlink()
    try:
        with tempfile.TemporaryDirectory(prefix="rankbacktest-ui-check-") as tmp:
            uri = args.uri
            if uri is None:
                from backtest.tracking import resolve_tracking_uri

                project_uri = resolve_tracking_uri(None, PROJECT_DIR)
                uri = project_uri if usable_links(project_uri, base_url) else make_tiny_store(Path(tmp))
            links = usable_links(uri, base_url)
            if links is None:
                raise CheckFailed(f"the store {uri} holds no study with two finished runs")
            print(f"store: {uri}\nstudy: {links.study.name} ({len(links.study.run_ids)} runs)")
            server = UiServer(uri, port=port, log_path=Path(tmp) / "server.log")
            with server:
                print(f"server: {server.url}, {len(server.processes())} processes")
                tearsheet_run = _run_with(uri, links.study.run_ids, ARTIFACTS.report("tearsheet"))
                fold_keys = _fold_keys(uri, links.study.run_ids[0])
                notes = check_pages(driver, links, args.out, tearsheet_run, fold_keys)
    except (CheckFailed, WebDriverException) as exc:
        shot = args.out / "failed.png"
        driver.save_screenshot(str(shot))
        print(f"ui-check: FAILED: {exc}\n  the page at that moment: {shot}", file=sys.stderr)
        return 1
    finally:
        driver.quit()
    for note in notes:
        print(note)
    print(f"ui-check: passed; screenshots in {args.out}")
    return 0


def _fold_keys(uri: str, run_id: str) -> list[str]:
    import mlflow

    return sorted(
        key for key in mlflow.MlflowClient(tracking_uri=uri).get_run(run_id).data.metrics if key.startswith("fold/")
    )


def _run_with(uri: str, run_ids: Sequence[str], artifact: str) -> str:
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    folder = artifact.rsplit("/", 1)[0]
    for run_id in run_ids:
        if any(info.path == artifact for info in client.list_artifacts(run_id, folder)):
            return run_id
    raise CheckFailed(f"no run of the study has {artifact!r}")


if __name__ == "__main__":
    sys.exit(main())
