"""Stop sequences of the few-shot ``Question: ... Answer: ...`` prompts.

The prompt format is vLLM's ``tests/evals/gsm8k/gsm8k_eval.py``
(``_build_gsm8k_prompts``; :func:`harness.tasks.gsm8k.build_prompt`), shared by the
``gsm8k``, ``synthetic`` and ``shape`` task kinds; every such request is sent with
:data:`STOP_SEQUENCES`, a chat request (``use_chat_completions``) with
:data:`VLLM_GSM8K_STOP_SEQUENCES`; a GSM8K task with ``vllm_rules`` (the vLLM form's)
sends what vLLM's script sends instead
(:func:`harness.tasks.vllm_gsm8k.vllm_stop_sequences`: that list in completions mode,
none in chat mode). The stop list is recorded with each task in the run record.
"""

from __future__ import annotations

__all__ = ["FEWSHOT_DELIMITER", "QUESTION_PREFIX", "STOP_SEQUENCES", "VLLM_GSM8K_STOP_SEQUENCES"]

FEWSHOT_DELIMITER = "\n\n"
"""What :func:`harness.tasks.gsm8k.build_prompt` puts between two solved examples (the blank line)."""

QUESTION_PREFIX = "Question:"
"""How :func:`harness.tasks.gsm8k.build_prompt` starts every question block."""

STOP_SEQUENCES: tuple[str, ...] = (FEWSHOT_DELIMITER + QUESTION_PREFIX,)
"""Stop strings: the few-shot delimiter the prompt really uses, the blank line before
the next ``Question:`` (``"\n\nQuestion:"``). It ends a completion that runs on into
an invented next question, and nothing else.

vLLM's gsm8k_eval.py (``get_answer``) stops at ``["Question", "Assistant:",
"<|separator|>"]`` instead: the bare word ``Question`` also cuts a completion whose
reasoning mentions it ("The question asks for ..." does not, but "Question: how
many ...?" restated in the working does), and ``Assistant:`` cuts a chat-style
restatement."""

VLLM_GSM8K_STOP_SEQUENCES: tuple[str, ...] = ("Question", "Assistant:", "<|separator|>")
"""The stop strings of vLLM's gsm8k_eval.py in completions mode (``get_answer``). evalrun's
native chat path (``use_chat_completions`` without ``vllm_rules``) sends them too, as vLLM's
script did before it stopped sending any in chat mode (its newest version: "the chat template
delimits the turn, and they would also cut off reasoning")."""
