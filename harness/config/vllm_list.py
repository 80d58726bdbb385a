"""A ``--config-list-file`` read as vLLM's GSM8K conftest reads it, for the pytest plugin.

vLLM's ``tests/evals/gsm8k/conftest.py`` (``pytest_generate_tests``, unchanged from the
December 2025 "Generalize gsm8k test args" commit to the newest stored version) resolves a
relative list path against the test's own folder first (``Path(__file__).parent /
config_list_file``), then the working directory (``Path.cwd() / config_list_file``); an
absolute path is taken as it is. It then reads the list line by line (``line.strip()``;
blank lines and lines *starting* with ``#`` skipped, no inline comments), takes each entry
beside the list (``config_list_path.parent / line``), keeps those that exist and prints
``  ✗ Missing: <path>`` for the others, which are not tests. Nothing is looked up anywhere
else: evalrun's own ``model_lists/`` and ``configs/`` are never a substitute.

"The test's own folder" is vLLM's GSM8K test folder (the folder holding vLLM's
``test_gsm8k_correctness.py``), so vLLM's CI spelling ``--config-list-file=configs/<list>``
run from vLLM's ``tests/`` finds ``tests/evals/gsm8k/configs/<list>`` as vLLM's conftest
does (:func:`vllm_test_dir`); where no vLLM checkout is found it is evalrun's project root
(which holds ``model_lists/`` and ``configs/``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness.config.reader import MAX_RECORD_BYTES, UnreadableFile, read_text

#: vLLM's GSM8K test file, whose folder is "the test's own folder" of vLLM's conftest.
VLLM_TEST_FILE = "test_gsm8k_correctness.py"
#: Where vLLM's GSM8K test folder is looked for, relative to the working directory: run
#: from vLLM's ``tests/`` (as vLLM's CI does), from the repository root, or from the
#: folder itself.
VLLM_TEST_DIR_CANDIDATES = ("evals/gsm8k", "tests/evals/gsm8k", ".")


#: What vLLM's conftest prints when it parametrizes nothing.
NO_CONFIGS = "No config files found, test will be skipped"


def vllm_test_dir(cwd: Path) -> Path | None:
    """vLLM's GSM8K test folder seen from ``cwd``: the first of
    :data:`VLLM_TEST_DIR_CANDIDATES` that holds :data:`VLLM_TEST_FILE`, else None."""
    for rel in VLLM_TEST_DIR_CANDIDATES:
        d = cwd / rel
        if (d / VLLM_TEST_FILE).is_file():
            return d if rel != "." else cwd
    return None


@dataclass(frozen=True)
class VllmListRead:
    """A list as vLLM's conftest read it.

    Attributes:
        list_path: the path vLLM's conftest looked at (``Looking for config list at:``).
        found: whether that list exists.
        configs: the entries that exist beside the list, in list order (the tests).
        missing: ``(line number, path)`` of the entries that do not (not tests).
        log: the lines vLLM's conftest prints for this list, in its words.
        unreadable: why the list could not be read (a named pipe, a folder, over the
            bound; :mod:`harness.config.reader`), else None.
    """

    list_path: Path
    found: bool
    configs: list[Path] = field(default_factory=list)
    missing: list[tuple[int, Path]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    unreadable: str | None = None


def resolve_as_vllm(config_list_file: str, test_dir: Path, cwd: Path) -> Path:
    """The list path vLLM's conftest looks at: absolute as given; relative, ``test_dir /
    name`` when it exists, else ``cwd / name``."""
    p = Path(config_list_file)
    if p.is_absolute():
        return p
    in_test_dir = test_dir / config_list_file
    return in_test_dir if in_test_dir.exists() else cwd / config_list_file


def read_as_vllm(config_list_file: str, test_dir: Path, cwd: Path) -> VllmListRead:
    """Read ``config_list_file`` exactly as vLLM's conftest does (module docstring). A
    ``.yaml``/``.yml`` given as the list is read as a list too, as there (its lines are
    not config names, so they are reported missing: pass a list).

    Returns:
        :class:`VllmListRead`; never raises for a missing list or entry (the caller
        decides: the plugin refuses a run with no test).
    """
    path = resolve_as_vllm(config_list_file, test_dir, cwd)
    log = [f"Looking for config list at: {path}"]
    if not path.exists():
        return VllmListRead(path, False, log=[*log, f"Config list file not found: {path}", NO_CONFIGS])
    configs: list[Path] = []
    missing: list[tuple[int, Path]] = []
    try:  # the one reader: a named pipe or a folder is named, never waited on
        text = read_text(path, MAX_RECORD_BYTES, "config list")
    except UnreadableFile as e:
        return VllmListRead(path, True, log=[*log, str(e), NO_CONFIGS], unreadable=str(e))
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        config_path = path.parent / line
        log.append(f"Checking config file: {config_path}")
        if config_path.exists():
            configs.append(config_path)
            log.append(f"  ✓ Found: {config_path}")
        else:
            missing.append((lineno, config_path))
            log.append(f"  ✗ Missing: {config_path}")
    if not configs:
        log.append(NO_CONFIGS)
    return VllmListRead(path, True, configs, missing, log)
