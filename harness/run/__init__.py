"""The run machinery: the runner sequences a plan's configs (:mod:`harness.run.runner`),
each config's steps (:mod:`harness.run.config_steps`), each variant's
(:mod:`harness.run.variant_steps`) and the sampled scorer (:mod:`harness.run.sampled_steps`);
the run's options and state (:mod:`harness.run.context`), its outcome
(:mod:`harness.run.outcome`), resuming an earlier attempt (:mod:`harness.run.resume`) and
joining shards (:mod:`harness.run.merge`)."""
