"""Task kind ``gsm8k``: GSM8K's test split with few-shot prompts from its train split."""

from __future__ import annotations

import os
from pathlib import Path

from harness.config.schema import TaskSpec
from harness.tasks.base import PreparedTask, RequestTask, ShortDataError, check_enough
from harness.tasks.contamination import ContaminationError, find_overlaps
from harness.tasks.gsm8k import DataUnavailableError, build_requests, dataset_hash, load_gsm8k
from harness.tasks.kinds import task_kind
from harness.tasks.requests import Request
from harness.tasks.stops import STOP_SEQUENCES, VLLM_GSM8K_STOP_SEQUENCES
from harness.tasks.vllm_gsm8k import VLLM_INVALID, vllm_answer_value, vllm_stop_sequences

#: Questions in a GSM8K task whose ``num_questions`` is None (all): the test split's size.
GSM8K_TEST_SIZE = 1319


def _check_fewshot(name: str, spec: TaskSpec, available: int, data_dir: Path | None) -> None:
    """Refuse ``num_fewshot`` above the train split's size (a data error naming the key and
    the split's size, before :func:`harness.tasks.gsm8k.build_requests` would raise).

    Raises:
        ShortDataError: ``spec.num_fewshot > available``.
    """
    if spec.num_fewshot <= available:
        return
    src = str(data_dir or os.environ.get("EVALRUN_DATA_DIR") or "hub:openai/gsm8k (main)")
    where = src if src.startswith("hub:") else str(Path(src).expanduser() / "train.jsonl")
    raise ShortDataError(f"task {name}: {where} holds {available} train questions, the config asks for "
                         f"num_fewshot: {spec.num_fewshot}; refused: provide the full train split or lower num_fewshot")


@task_kind("gsm8k")
class Gsm8kTask(RequestTask[None]):
    """GSM8K (local ``test.jsonl`` / ``train.jsonl``, ``EVALRUN_DATA_DIR``, or the hub),
    scored under the ``#### N`` pipelines (:attr:`RequestTask.pipelines`)."""

    def prepare(self, name: str, spec: TaskSpec, data_dir: Path | None, allow_contamination: bool = False,
                base_dir: Path | None = None) -> PreparedTask[None]:
        """Load GSM8K, build the few-shot prompts and refuse short or contaminated data
        (see :func:`harness.tasks.prepare_task`)."""
        test = load_gsm8k("test", data_dir)
        train = load_gsm8k("train", data_dir) if spec.num_fewshot else []
        _check_fewshot(name, spec, len(train), data_dir)
        reqs = build_requests(test, train, spec.num_questions, spec.num_fewshot, task_name=name,
                              gen_prefix=spec.gen_prefix)
        used = test[: len(reqs)] + train[: spec.num_fewshot]
        src = str(data_dir or os.environ.get("EVALRUN_DATA_DIR") or "hub:openai/gsm8k (main)")
        where = src if src.startswith("hub:") else str(Path(src).expanduser() / "test.jsonl")
        check_enough(name, spec, len(test), where)
        ov = find_overlaps(name, test[: len(reqs)], train[: spec.num_fewshot], train or None)
        if ov.any and not allow_contamination:
            raise ContaminationError(
                f"task {name}: data {src}: {ov.describe()}. The model would be asked questions whose "
                "solutions are in front of it. Remove them from the data (test.jsonl / train.jsonl), "
                "or pass --allow-contamination to run anyway (recorded in the run record)."
            )
        if spec.vllm_rules:  # vLLM's stop strings as its gsm8k_eval.py sends them (none in chat mode)
            stop = vllm_stop_sequences(spec.use_chat_completions)
            _check_vllm_golds(name, reqs, where)
        else:  # chat: vLLM's completions-mode list; completions: evalrun's few-shot delimiter
            stop = VLLM_GSM8K_STOP_SEQUENCES if spec.use_chat_completions else tuple(STOP_SEQUENCES)
        return PreparedTask(tuple(reqs), stop, dataset_hash(used), src,
                            contamination=ov.to_json() if ov.any else None)

    def available(self, name: str, spec: TaskSpec, data_dir: Path | None) -> tuple[int, str] | None:
        """The local test split's size and file; None for hub data (counted when loaded).

        Raises:
            DataUnavailableError: a local GSM8K folder that is missing or malformed.
        """
        folder = data_dir or os.environ.get("EVALRUN_DATA_DIR") or None
        if not folder:
            return None
        if spec.num_fewshot:
            _check_fewshot(name, spec, len(load_gsm8k("train", data_dir)), data_dir)
        return len(load_gsm8k("test", data_dir)), str(Path(folder).expanduser() / "test.jsonl")

    def default_size(self) -> int | None:
        """:data:`GSM8K_TEST_SIZE`."""
        return GSM8K_TEST_SIZE


def _check_vllm_golds(name: str, reqs: list[Request], where: str) -> None:
    """Refuse, before any server starts, a gold answer vLLM's rule reads as invalid (vLLM's
    script refuses such data too: ``assert all(label != INVALID ...)``).

    Raises:
        DataUnavailableError: naming the task, the data and the question.
    """
    bad = [r.question_id for r in reqs if vllm_answer_value(r.gold) == VLLM_INVALID]
    if bad:
        raise DataUnavailableError(f"task {name}: {where}: vLLM's answer rule reads no integer in the gold "
                                   f"answer of {', '.join(bad[:5])}" + (f" and {len(bad) - 5} more" if len(bad) > 5
                                                                        else ""))
