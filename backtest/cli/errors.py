"""The user's mistakes as one line with a fix: Hydra's composition errors and the library's errors.

A typo'd key, an unknown option, an override that does not parse, a key a group's target does not accept,
or any :class:`backtest.errors.BacktestError` ends the main job with ``error: <message>`` on stderr and exit
status 2 (:func:`refuse`), never a traceback. :func:`user_error` finds the error behind what Hydra raised
and words it: the key or option that was wrong, what the config has instead (the closest name first), and
the override that fixes it.
"""

from __future__ import annotations

import difflib
import inspect
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import hydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import (
    ConfigCompositionException,
    HydraException,
    MissingConfigException,
    OverrideParseException,
)
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from backtest.cli.argv import main_job_command
from backtest.cli.compose import CONF_DIR
from backtest.errors import BacktestError, ConfigError

#: the exit status of a run refused for the user's data or config
EXIT_USER_ERROR = 2


def refuse(err: BaseException) -> NoReturn:
    """Print ``err`` as the one-line ``error: ...`` and exit with :data:`EXIT_USER_ERROR`."""
    print(f"error: {err}", file=sys.stderr)
    sys.exit(EXIT_USER_ERROR)


def user_error(exc: BaseException, cfg: DictConfig | None = None) -> BacktestError | None:
    """The BacktestError behind ``exc``, if any: a project error (Hydra wraps errors raised while
    instantiating), Hydra's composition errors (a typo'd key, an unknown option, an override that does not
    parse) and a key a group's target does not accept (with ``cfg``: named with the experiment that set it).
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, BacktestError):
            return seen
        if isinstance(seen, MissingConfigException):
            return _unknown_option(seen)
        if isinstance(seen, OverrideParseException):
            return _unparsable_override(seen)
        if isinstance(seen, ConfigCompositionException):
            return _bad_override(seen)
        if isinstance(seen, TypeError) and "unexpected keyword" in str(seen):
            return _unexpected_key(seen, cfg)
        if isinstance(seen, OmegaConfBaseException):
            return ConfigError(
                f"{seen}\n  fix: set the missing or wrong key on the command line, e.g. "
                "data=parquet data.path=/abs/path/panel.parquet"
            )
        seen = seen.__cause__ or seen.__context__
    return None


def text_in_a_number(cfg: DictConfig, overrides: Sequence[str] | None = None) -> ConfigError | None:
    """An override of this job that gives text where the config holds a number or a boolean (``seed=abc``,
    ``data.n_stocks=abc``, ``engine.checkpoints=yes``), as one line with a fix; None when there is none.

    Hydra takes any text for any key; the part that reads the value would fail later with a traceback (or
    read any text as true). What the config holds is found by composing it again without the job's
    text-valued keys (its group choices kept), so that every numeric key is checked, whichever group or
    experiment sets it; a value is judged as it resolves in ``cfg``, the job's config. Call it inside Hydra
    (a job, or a sweep's callback), before anything is built; ``overrides`` are the job's (default: those
    of the running Hydra job).
    """
    from hydra import compose
    from hydra.core.hydra_config import HydraConfig

    if overrides is None:
        if not HydraConfig.initialized():
            return None
        overrides = list(HydraConfig.get().overrides.task)
    texts: dict[str, str] = {}
    keep: list[str] = []
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        value = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        if isinstance(value, str) and not override.is_delete() and not (Path(CONF_DIR) / key).is_dir():
            texts[key] = value  # resolved: ${oc.env:SEED} is judged by the text it gives
        else:
            keep.append(override.input_line)
    if not texts:
        return None
    try:
        held_by_config = compose(config_name="config", overrides=keep)
    except Exception:  # only a check: the part that reads the value still refuses it
        return None
    for key, value in texts.items():
        held = OmegaConf.select(held_by_config, key, default=None, throw_on_resolution_failure=False)
        if isinstance(held, bool):
            expected, fix = "true or false", f"{key}={str(held).lower()} or {key}={str(not held).lower()}"
        elif isinstance(held, (int, float)):
            expected, fix = "a number", f"{key}={held}, or another number (unquoted)"
        else:
            continue
        return ConfigError(
            f"{key}: expected {expected} (the config holds {held!r}), received the text {value!r}\n  fix: {fix}"
        )
    return None


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0].rstrip(".") if str(exc).strip() else type(exc).__name__


def _command_line_overrides() -> list[str]:
    """The Hydra overrides of this process's command line (flags such as ``-m`` or ``--cfg`` left out)."""
    from hydra._internal.utils import get_args_parser

    try:
        args, _ = get_args_parser().parse_known_args(sys.argv[1:])
    except SystemExit:  # argparse refused the flags: Hydra reports it itself
        return []
    return list(args.overrides)


def _unknown_option(exc: MissingConfigException) -> ConfigError:
    """``features=nope``: Hydra's many-line 'Could not find' as one line naming the group's options."""
    text = str(exc)
    missing = re.search(r"Could not find '([^']+)'", text)
    options = re.findall(r"^\t(\S+)$", text.split("Config search path:")[0], flags=re.MULTILINE)
    if missing is None or "/" not in missing.group(1) or not options:
        return ConfigError(f"{_first_line(exc)}\n  fix: check the option names; conf/ holds one folder per group")
    group, option = missing.group(1).rsplit("/", 1)
    close = difflib.get_close_matches(option, options, n=1)
    typed = next(  # as the user wrote the group: +study=... adds a group that the defaults do not list
        (t.split("=", 1)[0] for t in _command_line_overrides() if t.split("=", 1)[0].lstrip("+~") == group), group
    )
    return ConfigError(
        f"unknown option {typed}={option}: the group '{group}' has {', '.join(options)} (conf/{group}/)"
        f"\n  fix: {_fixed_command(f'{typed}={option}', f'{typed}={close[0] if close else options[0]}', group)}"
        f"{'' if close else '  (or another option listed)'}"
    )


def _fixed_command(wrong: str, right: str, group: str) -> str:
    """The command line of this process with the override ``wrong`` replaced by ``right``, to paste as it is; a
    study (a sweep) gets the ``-m`` it runs with."""
    args = [right if arg == wrong else arg for arg in sys.argv[1:]]
    if group == "study" and not {"-m", "--multirun"} & set(args):
        args.insert(0, "-m")
    return main_job_command(args)


def _unparsable_override(exc: OverrideParseException) -> ConfigError:
    bad = []
    for text in _command_line_overrides():
        try:
            OverridesParser.create().parse_overrides([text])
        except OverrideParseException:
            bad.append(text)
    which = f"the override {bad[0]!r}" if bad else "an override"
    return ConfigError(
        f"{which} does not parse: {_first_line(exc)}\n  fix: write key=value; quote a value with "
        "spaces, brackets or commas (key='a,b'); grammar: "
        "https://hydra.cc/docs/1.2/advanced/override_grammar/basic"
    )


def _bad_override(exc: ConfigCompositionException) -> ConfigError:
    """``backtest.retrain_evry=5`` (a key that does not exist) or a value of the wrong type, in one line."""
    cause = exc.__cause__
    unknown = re.match(r"Could not override '([^']+)'", str(exc))
    if unknown is None:
        detail = f": {_first_line(cause)}" if cause is not None else ""
        return ConfigError(
            f"{_first_line(exc)}{detail}\n  fix: correct that override; `python -m backtest --cfg job` "
            "shows every key with its value"
        )
    key = unknown.group(1)
    parent, _, leaf = key.rpartition(".")
    value = next(
        (t.split("=", 1)[1] for t in _command_line_overrides() if t.split("=", 1)[0] == key and "=" in t), "<value>"
    )
    known = _keys_of(parent, skip=key)
    close = difflib.get_close_matches(leaf, known, n=1)
    where = f"the '{parent}' group has no key '{leaf}'" if parent else f"the config has no group or key '{leaf}'"
    fix = f"{parent + '.' if parent else ''}{close[0]}={value} (did you mean {close[0]}?); " if close else ""
    return ConfigError(
        f"unknown config key {key}: {where}\n  fix: {fix}`python -m backtest --cfg job` lists the keys; "
        f"adding a new key takes a leading + (+{key}={value})"
    )


def _keys_of(parent: str, skip: str) -> list[str]:
    """Keys of the config node ``parent`` composed from the command line without ``skip`` (for hints)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    try:
        parsed = OverridesParser.create().parse_overrides(_command_line_overrides())
        keep = [
            o.input_line
            for o in parsed
            if not o.is_sweep_override() and o.key_or_group != skip and not o.key_or_group.startswith("hydra")
        ]
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = compose(config_name="config", overrides=keep)
        node = OmegaConf.select(cfg, parent) if parent else cfg
    except Exception:  # only a hint: without it the message still names the key
        return []
    return [str(k) for k in node.keys()] if isinstance(node, DictConfig) else []


def _unexpected_key(exc: TypeError, cfg: DictConfig | None) -> ConfigError:
    """A key the group's target does not take; when the chosen experiment set it, say so."""
    plain = ConfigError(
        f"{exc}\n  fix: remove the unknown key; `python -m backtest --cfg job` shows the keys each group accepts"
    )
    found = re.search(r"(\w+)\(\) got an unexpected keyword argument '(\w+)'", str(exc))
    if found is None or cfg is None:
        return plain
    function, key = found.groups()
    from hydra.core.hydra_config import HydraConfig

    choices = HydraConfig.get().runtime.choices if HydraConfig.initialized() else {}
    experiment = choices.get("experiment")
    path = Path(CONF_DIR) / "experiment" / f"{experiment}.yaml"
    if not experiment or not path.is_file():
        return plain
    injected = OmegaConf.load(path)
    for group in cfg:
        node, target = cfg.get(group), None
        if isinstance(node, DictConfig):
            target = str(node.get("_target_", ""))
        if not target or not target.endswith(f".{function}") or not isinstance(injected.get(group), DictConfig):
            continue
        if key not in injected[group]:
            continue
        try:
            accepted = inspect.signature(hydra.utils.get_object(target)).parameters
        except (ValueError, TypeError, ImportError, HydraException):
            accepted = {}
        rejected = [f"{group}.{k}" for k in injected[group] if k not in accepted] or [f"{group}.{key}"]
        option = choices.get(group, "?")
        return ConfigError(
            f"{group}.{key} is set by experiment={experiment} (conf/experiment/{experiment}.yaml), and the chosen "
            f"{group}={option} ({target}) does not accept it: {exc}\n  fix: drop experiment={experiment}, or remove "
            f"the keys it sets that {group}={option} does not take: {' '.join('~' + k for k in rejected)}"
        )
    return plain
