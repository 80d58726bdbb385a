"""A server for this variant, for this purpose (:class:`VariantServer`): the one lifecycle of
every vLLM server a run starts, whether for a variant's first pass
(:mod:`harness.run.variant_steps`), the noise rerun that starts it again, or the sampled
scorer (:mod:`harness.run.sampled_steps`).

Entered, it takes the variant's device set (:meth:`VariantServer.ready_to_launch`: given to the first
pass by the pool's job, leased here for a server started again), waits for the pre-launch
check's answer, makes the session (:class:`harness.engine.session.VariantSession`) and starts
it; left, it stops the server and gives the devices back before the caller judges anything.
Every purpose's files have one naming rule (:class:`Purpose`): ``logs/<config>/<variant>[.<purpose>].log``
and the plugin's reports in ``<variant>[.<purpose>]``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from harness.config.plan import VariantPlan
from harness.engine.session import VariantSession
from harness.faults.plugin import NOISE_SEED_ENV, REPORT_ENV
from harness.records.numerics_noise import server_seed
from harness.run.context import ConfigRun

__all__ = ["Purpose", "FIRST_PASS", "RERUN", "SCORING", "VariantServer", "on_devices", "make_session"]


@dataclass(frozen=True)
class Purpose:
    """Why a variant's server starts.

    Attributes:
        suffix: ``""`` for the first pass, else the word in its files and name
            (``rerun``: ``<variant>.rerun.log``, session ``<config>/<variant> (rerun)``).
        speculative: whether the session reads speculative-decoding counters; None: as
            the variant is configured (the scorer's server never speculates).
    """

    suffix: str
    speculative: bool | None = None

    def label(self, variant_id: str) -> str:
        """The server's name in messages and the pool: ``<config>/<variant>[ (<suffix>)]``."""
        return f"{variant_id} ({self.suffix})" if self.suffix else variant_id

    def file_stem(self, variant: str) -> str:
        """The stem of its log file and plugin report folder: ``<variant>[.<suffix>]``."""
        return f"{variant}.{self.suffix}" if self.suffix else variant


#: The variant's first pass (its devices come with its job, :func:`harness.engine.pool.run_jobs`).
FIRST_PASS = Purpose("")
#: The noise rerun (``noise_runs_when: unexplained``): the variant's server started again.
RERUN = Purpose("rerun")
#: The sampled verdict's scorer: a non-speculative variant's server started again.
SCORING = Purpose("scoring", speculative=False)


def on_devices(variant_plan: VariantPlan, devices: tuple[str, ...]) -> VariantPlan:
    """``variant_plan`` with ``CUDA_VISIBLE_DEVICES`` set to its own device set (unchanged without one)."""
    if not devices:
        return variant_plan
    return dataclasses.replace(variant_plan, env={**variant_plan.env, "CUDA_VISIBLE_DEVICES": ",".join(devices)})


def make_session(run: ConfigRun, variant_plan: VariantPlan, name: str, argv: list[str], env: dict[str, str],
                 log_path: Path, speculative: bool | None = None) -> VariantSession:
    """A session (not started yet) of ``variant_plan``'s server named ``name``, with the config's
    start-up wait, request timeout and concurrency; ``speculative`` None: as ``variant_plan`` is."""
    c = run.plan.config
    return VariantSession(
        name, argv, env, log_path,
        startup_timeout=c.startup_max_wait_seconds,
        request_timeout=c.request_timeout_seconds,
        max_concurrency=c.max_concurrency,
        speculative=variant_plan.speculative_config is not None if speculative is None else speculative,
        on_wait=run.progress.waiting(f"{name}: waiting for /health"),
    )


class VariantServer:
    """A server for this variant, for this purpose: a context manager around one server's
    life (devices, launch gate, start, stop, devices back).

    Attributes:
        run, purpose: the config's run and why the server starts.
        variant: the variant (with ``CUDA_VISIBLE_DEVICES`` once it holds a device set).
        name: ``<config>/<variant>[ (<purpose>)]`` (:meth:`Purpose.label`), also the pool key.
        argv: the server command, the config's model replaced by the resolved one.
        log_path: ``logs/<config>/<variant>[.<purpose>].log``.
        session: the session once :meth:`__enter__` made it (None before; kept after an
            exception so the caller can read its server's fate).

    Raises (from ``with``):
        harness.engine.server.ServerStartError: the server did not start (it is stopped
            and its devices given back first).
    """

    def __init__(
        self, run: ConfigRun, variant_plan: VariantPlan, purpose: Purpose, devices: tuple[str, ...] = ()
    ) -> None:
        c = run.plan.config
        self.run, self.purpose = run, purpose
        self.variant = on_devices(variant_plan, devices)
        self.name = purpose.label(variant_plan.id)
        self.argv = [run.model_ref if a == c.model else a for a in variant_plan.argv]
        self.log_path = run.folder.log(c.name, variant_plan.name, purpose.suffix)
        self.session: VariantSession | None = None
        self._leased = bool(devices) or purpose == FIRST_PASS  # the first pass's job holds its devices
        self._released = False
        self._ready = False
        recorder = run.ctx.recorder
        noise = recorder.record.numerics_noise if recorder is not None else None
        #: this server start's noise seed (recorded in ``numerics_noise.seeds``), None without noise
        self.noise_seed = server_seed(noise, self.name) if noise is not None else None

    @property
    def env(self) -> dict[str, str]:
        """The server's environment: the variant's, where the plugin writes its reports, and
        with numerics noise this start's seed (``EVALRUN_NUMERICS_NOISE`` itself comes
        from evalrun's environment, which the server inherits)."""
        c, variant_plan = self.run.plan.config, self.variant
        env = {
            **variant_plan.env,
            REPORT_ENV: str(self.run.folder.plugin(c.name, variant_plan.name, self.purpose.suffix)),
        }
        if self.noise_seed is not None:
            env[NOISE_SEED_ENV] = str(self.noise_seed)
        return env

    def ready_to_launch(self) -> None:
        """Take a device set of the pool for a server started again (blocks until one is
        free; not without a pool or when the devices were given), then wait for the
        pre-launch check's answer. Once; :meth:`__enter__` calls it (a caller that times
        the start-up alone calls it first)."""
        if self._ready:
            return
        self._ready = True
        run = self.run
        try:
            if not self._leased and run.pool is not None and run.servers is not None:
                self._leased = True
                devices = run.pool.acquire(self.name, run.servers.need(self.variant.id))
                self.variant = on_devices(self.variant, devices)
            if run.opts.launch_gate is not None:  # no server starts before the pre-launch check's answer
                run.opts.launch_gate.before_launch()
        except BaseException:  # a signal or a refusal while waiting: the devices go back
            self.release()
            raise

    def release(self) -> None:
        """Give the devices back to the pool, once (before the caller judges anything)."""
        if self._released:
            return
        self._released = True
        if self.run.pool is not None:
            self.run.pool.release(self.name)

    def __enter__(self) -> VariantSession:
        run = self.run
        self.ready_to_launch()
        self.session = make_session(run, self.variant, self.name, self.argv, self.env, self.log_path,
                                    self.purpose.speculative)
        run.place.at("server", config=run.plan.config.name, variant=self.variant.name, task=None)
        try:
            return self.session.__enter__()
        except BaseException:
            self.release()
            raise

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            assert self.session is not None
            self.session.__exit__(kind, exc, tb)
        finally:
            self.release()
