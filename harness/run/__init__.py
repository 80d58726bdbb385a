"""The run machinery: the runner sequences a plan's configs (:mod:`harness.run.runner`),
each config's steps (:mod:`harness.run.config_steps`), each variant's
(:mod:`harness.run.variant_steps`) and the sampled scorer (:mod:`harness.run.sampled_steps`),
every server on one lifecycle (:mod:`harness.run.serving`); the run's options and state
(:mod:`harness.run.context`: :class:`~harness.run.context.RunContext` holds what was module
state), its outcome (:mod:`harness.run.outcome`), resuming an earlier attempt
(:mod:`harness.run.resume`) and joining shards (:mod:`harness.run.merge`). Callers start a
run through the front door, :func:`harness.api.run`."""
