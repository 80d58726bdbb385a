"""The tiny model's character-level tokenizer: every printable ASCII character plus tab and
newline is one token, ``<|endoftext|>`` (id 0) is eos and pad, ``<unk>`` (id 1) the rest,
reserved tokens pad the vocabulary (:mod:`harness.models.tiny` describes the model)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.models.recipe import TinyModelError

#: Special tokens, in id order: ``<|endoftext|>`` (eos and pad) is 0, ``<unk>`` is 1.
EOS_TOKEN = "<|endoftext|>"
UNK_TOKEN = "<unk>"


def tokenizer_alphabet() -> list[str]:
    """Return the character tokens in id order: tab, newline, then ASCII 32..126.

    Their ids start at 2 (0 is ``<|endoftext|>``, 1 is ``<unk>``): 97 characters,
    99 ids with the two special tokens.
    """
    return ["\t", "\n"] + [chr(c) for c in range(32, 127)]


#: Ids below this are the special tokens and the characters; ids from here up to the
#: model's ``vocab_size`` are reserved tokens ``<|reserved_<k>|>``.
NUM_BASE_TOKENS = 2 + 97


def reserved_token(k: int) -> str:
    """Return the text of reserved token ``k`` (id ``NUM_BASE_TOKENS + k``)."""
    return f"<|reserved_{k}|>"


def padded_vocab_size(multiple: int) -> int:
    """Return :data:`NUM_BASE_TOKENS` rounded up to a multiple of ``multiple`` (128 for 64)."""
    return -(-NUM_BASE_TOKENS // multiple) * multiple


def build_tokenizer_json(vocab_size: int | None = None) -> str:
    """Build the character-level tokenizer and return its ``tokenizer.json`` text.

    A ``tokenizers`` BPE model with no merges over :func:`tokenizer_alphabet`, no
    normaliser, no pre-tokeniser and no post-processor (no BOS is added), so every
    character becomes one token and characters outside the alphabet become
    ``<unk>``. The decoder is ``decoders.Fuse()`` (plain concatenation): no spaces are
    inserted between characters. ``<|endoftext|>`` (id 0) and ``<unk>`` (id 1) are
    special added tokens, matched whole in input text and skipped by
    ``skip_special_tokens``.

    Ids ``NUM_BASE_TOKENS .. vocab_size - 1`` (the model's padding rows) are
    non-special added tokens ``<|reserved_<k>|>``, so every id the model can emit
    decodes to text that encodes back to the same id.

    Args:
        vocab_size: total ids; ``None`` means :data:`NUM_BASE_TOKENS` (no reserved
            tokens).

    Raises:
        ValueError: when ``vocab_size < NUM_BASE_TOKENS``.
        TinyModelError: when the ``tokenizers`` library is missing.
    """
    try:
        from tokenizers import AddedToken, Tokenizer, decoders, models
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise TinyModelError(f"building the tiny tokenizer needs the 'tokenizers' library: {e}") from e
    size = NUM_BASE_TOKENS if vocab_size is None else vocab_size
    if size < NUM_BASE_TOKENS:
        raise ValueError(f"vocab_size {size} < {NUM_BASE_TOKENS} base tokens")
    vocab = {EOS_TOKEN: 0, UNK_TOKEN: 1}
    for ch in tokenizer_alphabet():
        vocab[ch] = len(vocab)
    assert len(vocab) == NUM_BASE_TOKENS
    reserved = [reserved_token(k) for k in range(size - NUM_BASE_TOKENS)]
    for t in reserved:
        vocab[t] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK_TOKEN, fuse_unk=False))
    tok.decoder = decoders.Fuse()

    def added(t: str, special: bool) -> AddedToken:
        return AddedToken(t, special=special, normalized=False, single_word=False, lstrip=False, rstrip=False)

    tok.add_special_tokens([added(t, True) for t in (EOS_TOKEN, UNK_TOKEN)])
    if reserved:
        tok.add_tokens([added(t, False) for t in reserved])
    return tok.to_str(pretty=True)


def write_tokenizer(out: Path, vocab_size: int, model_max_length: int) -> int:
    """Write tokenizer files into ``out`` via ``PreTrainedTokenizerFast.save_pretrained``.

    Returns the tokenizer's size (number of ids, = ``vocab_size``).
    ``tokenizer_class`` is written as ``PreTrainedTokenizerFast`` (transformers 5
    calls it ``TokenizersBackend``; the older name loads in transformers 4 and 5).
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(build_tokenizer_json(vocab_size)),
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
        padding_side="left",
    )
    tok.save_pretrained(str(out))
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg["clean_up_tokenization_spaces"] = False
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    # special_tokens_map.json is read by older transformers; write it when absent.
    stm = out / "special_tokens_map.json"
    if not stm.exists():
        stm.write_text(
            json.dumps({"eos_token": EOS_TOKEN, "pad_token": EOS_TOKEN, "unk_token": UNK_TOKEN}, indent=2) + "\n",
            encoding="utf-8",
        )
    return len(tok)
