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
  seen (seeded by prompt, variant flags and pass), while the text and the answer stay
  the same; two passes then differ on 2Q(1-Q) of the questions (Q = 0.0811: 15%)
* ``corrupt``         state corruption: every answer diverges at token 1 and gives a
  wrong answer (``#### 7``)
"""

import hashlib
import json
import os
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
spec = "--speculative-config" in args
mode = os.environ.get("FAKE_MODE", "ok")
if spec and os.environ.get("FAKE_SPEC_MODE"):  # a mode for speculative variants only
    mode = os.environ["FAKE_SPEC_MODE"]
count = 0
lock = threading.Lock()
drafts = accepted = 0
seen: dict[str, int] = {}
flags = " ".join(a for a in args if a.startswith("--") and "scheduling" in a) + (" spec" if spec else "")

if mode == "exit_on_start":
    print("fake vllm: simulated start-up failure (CUDA out of memory)", flush=True)
    sys.exit(3)


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
            return self._send(200, {})
        if self.path == "/v1/models":
            return self._send(200, {"data": [{"id": "fake"}]})
        if self.path == "/version":
            return self._send(200, {"version": "0.0.fake"})
        if self.path.startswith("/server_info"):
            cfg = {
                "scheduler_config": {"async_scheduling": "--async-scheduling" in args},
                "model_config": {"dtype": "torch.float32", "max_model_len": 2048},
                "device_config": {"device": "cpu"},
                "cache_config": {"enable_prefix_caching": False},
                "speculative_config": {"method": "mtp", "num_speculative_tokens": 2} if spec else None,
            }
            return self._send(200, {"vllm_config": cfg})
        if self.path == "/metrics":
            text = ""
            if spec:
                for name, v in (("drafts", drafts), ("draft_tokens", 2 * drafts), ("accepted_tokens", accepted)):
                    text += f"# TYPE vllm:spec_decode_num_{name} counter\n"
                    text += f'vllm:spec_decode_num_{name}_total{{engine="0",model_name="fake"}} {v}\n'
                text += "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n"
                text += f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="fake",position="0"}} {accepted}\n'
                text += f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="fake",position="1"}} 0\n'
            return self._send(200, text, "text/plain")
        self._send(404, {"error": "not found"})

    def do_POST(self):
        global count, drafts, accepted
        n = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(n)
        with lock:
            count += 1
            k = count
            prompt = json.loads(body or b"{}").get("prompt", "")
            seen[prompt] = seen.get(prompt, 0) + 1
            npass = seen[prompt]
            drafts += 4
            accepted += 2
        if mode.startswith("crash_after:") and k > int(mode.split(":")[1]):
            os._exit(1)
        if mode.startswith("hang_after:") and k > int(mode.split(":")[1]):
            time.sleep(3600)
        if mode.startswith("http500_every:") and k % int(mode.split(":")[1]) == 0:
            return self._send(500, {"error": "simulated engine error"})
        ids = [5, 6, 7, 8]
        text = " 2 + 3 = 5 #### 5"
        if mode.startswith("benign_noise:"):
            key = hashlib.sha256(f"{prompt}|{flags}|{npass}".encode()).hexdigest()
            if random.Random(key).random() < float(mode.split(":")[1]):
                ids = [5, 6, 7, 9]
        elif mode == "corrupt":
            ids, text = [5, 1, 1, 1], " 2 + 3 = 7 #### 7"
        self._send(200, {"choices": [{"text": text, "token_ids": ids, "finish_reason": "stop"}]})


class Server(ThreadingHTTPServer):
    # uvicorn's backlog is 2048; the default of 5 drops connections at 100 in flight
    # (the kernel's SYN retries then add seconds per request)
    request_queue_size = 2048


Server(("127.0.0.1", port), H).serve_forever()
