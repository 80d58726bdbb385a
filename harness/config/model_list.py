"""Model lists: one config per line (vLLM's ``models-*.txt``), found by name in
``model_lists/`` or ``configs/`` (:func:`resolve_list_path`), read
(:func:`read_model_list`) and loaded (:func:`load_model_list`), with the nearest names
(:func:`nearest_names`) when a list or config is not found.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import yaml

from harness.config.loader import load_config
from harness.config.reader import MAX_RECORD_BYTES, present, read_text
from harness.config.schema import ConfigError, ModelConfig

#: Folder of the repository that holds ``configs/`` and ``model_lists/``.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
CONFIGS_DIR = PROJECT_ROOT / "configs"
MODEL_LISTS_DIR = PROJECT_ROOT / "model_lists"


def nearest_names(name: str, candidates: list[str], n: int = 3) -> list[str]:
    """The candidates closest to ``name``: those whose stem starts with or contains
    the name's stem first, then :func:`difflib.get_close_matches` (ratio >= 0.6) on
    the stems, case-insensitive; at most ``n``, no repeats.

    Args:
        name: what the user typed (a file name or stem).
        candidates: file names to choose from (e.g. ``Model-MTP.yaml``).

    Returns:
        Candidate names in order of closeness.
    """
    def stem(x: str) -> str:
        return Path(x).stem.lower() if Path(x).suffix in (".yaml", ".yml", ".txt") else x.lower()

    key = stem(Path(name).name)
    stems = {stem(c): c for c in candidates}
    out = [c for c in candidates if key and stem(c).startswith(key)]
    out += [c for c in candidates if key and key in stem(c) and c not in out]
    out += [stems[x] for x in difflib.get_close_matches(key, list(stems), n=n) if stems[x] not in out]
    return out[:n]


def _known_files() -> list[str]:
    return sorted([x.name for x in MODEL_LISTS_DIR.glob("*.txt")]
                  + [x.name for x in CONFIGS_DIR.glob("*.y*ml")])


def resolve_list_path(name: str | Path) -> Path:
    """Find a model list or a config: as given (absolute or relative to the cwd), else
    by name in ``model_lists/``, else in ``configs/`` (a name without suffix also
    tries ``.txt`` and ``.yaml``). A file that exists relative to the working
    directory always wins over evalrun's built-in list of the same name, so
    ``--config models-h200.txt`` run inside vLLM's ``tests/evals/gsm8k/configs/`` reads
    vLLM's list. The path returned is absolute (the plan and the run record name it).

    Raises:
        ConfigError: naming every place looked in and the nearest list and config
            names (:func:`nearest_names`) when nothing is found.
    """
    p = Path(name)
    tried = [p]
    if present(p):  # anything there (a pipe too): read it, and the one reader says what it is
        return p.resolve()
    if not p.is_absolute():
        # a list by name in model_lists/, or a single config by name in configs/
        names = [p] if p.suffix else [p, p.with_name(p.name + ".txt"), p.with_name(p.name + ".yaml")]
        for q in [d / x for x in names for d in (MODEL_LISTS_DIR, CONFIGS_DIR)]:
            tried.append(q)
            if present(q):
                return q.resolve()
    near = nearest_names(str(name), _known_files())
    hint = f"; nearest names: {', '.join(near)}" if near else ""
    raise ConfigError(
        f"model list or config '{name}' not found (looked in: {', '.join(str(t) for t in tried)}){hint}; "
        f"available lists: {', '.join(sorted(x.name for x in MODEL_LISTS_DIR.glob('*.txt'))) or 'none'}"
    )


def read_model_list(path: str | Path) -> list[Path]:
    """Read a model list: one config per line, ``#`` comments and blank lines ignored.

    An entry resolves against the list's own folder (vLLM keeps configs beside its
    lists, and its conftest looks nowhere else); only a list of evalrun's own
    ``model_lists/`` resolves its entries in evalrun's ``configs/``. An entry missing
    beside any other list is an error, never evalrun's config of that name. A
    ``.yaml``/``.yml`` given as the list is taken as a one-entry list.

    Returns:
        The config paths, in list order.

    Raises:
        ConfigError: the list is missing or empty, or names files that do not exist
            (every missing entry is named, with its line number).
    """
    path = resolve_list_path(path)
    if path.suffix in (".yaml", ".yml"):
        return [path]
    entries: list[Path] = []
    missing: list[str] = []
    try:
        text = read_text(path, MAX_RECORD_BYTES, "model list")
    except OSError as e:
        raise ConfigError(str(e)) from None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        own = path.parent.resolve() == MODEL_LISTS_DIR.resolve()
        cands = [path.parent / line, CONFIGS_DIR / line] if own else [path.parent / line]
        if Path(line).is_absolute():
            cands = [Path(line)]
        found = next((c for c in cands if present(c)), None)
        if found is None:
            pool = sorted({x.name for d in {c.parent for c in cands} if d.is_dir() for x in d.glob("*.y*ml")})
            near = nearest_names(line, pool)
            missing.append(
                f"  {path}:{lineno}: '{line}' (looked in {', '.join(str(c.parent) for c in cands)})"
                + (f"; nearest names: {', '.join(near)}" if near else "")
            )
        else:
            entries.append(Path(os.path.normpath(found)))  # ``../configs/x.yaml`` names configs/x.yaml
    if missing:
        raise ConfigError(f"{path}: {len(missing)} missing config(s):\n" + "\n".join(missing))
    if not entries:
        raise ConfigError(f"{path}: the model list names no config (only comments or blank lines)")
    return entries


#: A model list's own false-alarm budget: a comment line ``# evalrun: false_alarm_budget 0.02``
#: (a comment, so vLLM's conftest, which reads every other line as a config, ignores it).
LIST_BUDGET = "# evalrun: false_alarm_budget"


def list_budget(path: str | Path) -> float | None:
    """The list's ``false_alarm_budget`` directive (:data:`LIST_BUDGET`), or None.

    A directive is a comment whose text starts with ``evalrun:`` (any case, any spacing
    after ``#``); ``false_alarm_budget`` is the only one a list has.

    Raises:
        ConfigError: a directive that is not ``false_alarm_budget <number in (0, 1)>``, or
            a second one (each naming the list and the line).
    """
    p = resolve_list_path(path)
    if p.suffix in (".yaml", ".yml"):
        return None
    found: float | None = None
    for lineno, raw in enumerate(read_text(p, MAX_RECORD_BYTES, "model list").splitlines(), 1):
        text = raw.strip()
        if not text.startswith("#"):
            continue
        body = text[1:].strip()
        if not body.lower().startswith("evalrun:"):
            continue
        key, _, val = body[len("evalrun:"):].strip().partition(" ")
        where = f"{p}:{lineno}: '{text}'"
        if key.rstrip(":=") != "false_alarm_budget":
            raise ConfigError(f"{where}: a list's only evalrun directive is '{LIST_BUDGET} <number in (0, 1)>' "
                              f"(not {key!r}); write other settings in the configs")
        if found is not None:
            raise ConfigError(f"{where}: a second false_alarm_budget directive (the list has one budget)")
        try:
            b = float(val.strip().lstrip(":=").strip())
        except ValueError:
            b = -1.0
        if not 0.0 < b < 1.0:
            raise ConfigError(f"{where}: false_alarm_budget must be a number in (0, 1)")
        found = b
    return found


def _sets_budget(path: Path) -> bool:
    """The config file writes ``false_alarm_budget`` itself (top level or in ``evalrun:``)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return False
    if not isinstance(data, dict):
        return False
    ev = data.get("evalrun")
    return "false_alarm_budget" in data or (isinstance(ev, dict) and "false_alarm_budget" in ev)


def load_model_list(path: str | Path) -> list[ModelConfig]:
    """Read a model list and load every config in it; a list's own budget directive
    (:func:`list_budget`) applies to every config that does not write ``false_alarm_budget``.

    Raises:
        ConfigError: from :func:`read_model_list` or :func:`load_config`; all
            config errors of the list are collected into one message.
    """
    return load_configs(read_model_list(path), path)


def load_configs(paths: list[Path], list_path: str | Path) -> list[ModelConfig]:
    """Load the configs at ``paths`` (entries of the model list ``list_path``); the list's
    budget directive (:func:`list_budget`) applies to every config that does not write
    ``false_alarm_budget``.

    Raises:
        ConfigError: every config error collected into one message, or two configs
            with the same name (naming the list).
    """
    configs: list[ModelConfig] = []
    errors: list[str] = []
    for p in paths:
        try:
            configs.append(load_config(p))
        except ConfigError as e:
            errors.append(str(e))
    if errors:
        raise ConfigError("\n".join(errors))
    names = [c.name for c in configs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"{list_path}: config names appear twice: {', '.join(dupes)}")
    return with_list_budget(configs, list_path)  # for a selection (-k, --select, --shard) too


def with_list_budget(configs: list[ModelConfig], list_path: str | Path) -> list[ModelConfig]:
    """``configs`` with the list's budget directive (:func:`list_budget`) set on each that
    does not write ``false_alarm_budget`` itself (the pytest plugin's items too).

    Raises:
        ConfigError: a bad directive (:func:`list_budget`).
    """
    b = list_budget(list_path)
    if b is None:
        return configs
    return [c if _sets_budget(c.path) else c.model_copy(update={"false_alarm_budget": b}) for c in configs]
