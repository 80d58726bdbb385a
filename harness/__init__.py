"""evalrun: accuracy-regression harness for speculative decoding on hybrid models in vLLM.

The package is laid out by stage of the data flow (docs/maintainers/architecture.md): ``config``
(YAML -> frozen types -> plan), ``records`` (the typed contract: samples, run record,
baselines), ``tasks``, ``models``, ``engine``, ``analysis``, ``report``, and the
orchestration modules ``runner``, ``selfcheck``, ``calibrate`` and ``cli``.
"""

from importlib import metadata as _metadata

try:
    #: The installed distribution's version (pyproject.toml ``[project] version``).
    __version__ = _metadata.version("evalrun")
except _metadata.PackageNotFoundError:  # a source tree on sys.path without installing
    __version__ = "0+unknown"
