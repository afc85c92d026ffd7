"""Byte-level BPE tokenizers (the `tokenizers` library): trained from a text, or read from a file.

A job's ``[data] tokenizer`` is ``"char"`` (the default, see `data.text_dataset`),
``"bpe"`` (a byte-level BPE trained from the job's own text with at most
``vocab_size`` tokens) or the path of a ``tokenizer.json``. Training is
deterministic: the same text and size give the same ``tokenizer.json`` bytes (checked
in tests), so client, provider and auditor build the same tokenizer; the bytes are
also one array of the data set, so its root commits to them (`data.bpe_dataset`) and
any difference in a party's build shows as a different data root.

Nothing is downloaded: the vocabulary comes from the user's text or the named file.
"""
from __future__ import annotations

from typing import Any

import numpy as np

MIN_FREQUENCY = 2  # a pair seen once is not worth a merge


class TokenizerError(ValueError):
    """A tokenizer that cannot be built or read, or that does not fit the job's vocabulary."""


def _lib() -> Any:
    try:
        import tokenizers  # noqa: PLC0415 - only jobs with a BPE tokenizer need it
    except ImportError as exc:
        raise TokenizerError("a BPE tokenizer needs the tokenizers package (pip install tokenizers)") from exc
    return tokenizers


def train_bpe(text: str, vocab_size: int) -> bytes:
    """The ``tokenizer.json`` bytes of a byte-level BPE trained on `text` (at most `vocab_size` tokens)."""
    tk = _lib()
    alphabet = tk.pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet):
        raise TokenizerError(f"data.vocab_size: a byte-level BPE needs at least {len(alphabet)} tokens, got {vocab_size}")
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=MIN_FREQUENCY, show_progress=False,
                                     initial_alphabet=alphabet, special_tokens=[])
    tokenizer.train_from_iterator([text], trainer=trainer)
    return tokenizer.to_str().encode("utf-8")


def load_tokenizer(raw: bytes, where: str = "tokenizer") -> Any:
    """A `tokenizers.Tokenizer` from ``tokenizer.json`` bytes (TokenizerError naming `where` if unreadable)."""
    tk = _lib()
    try:
        return tk.Tokenizer.from_str(raw.decode("utf-8"))
    except Exception as exc:  # the library raises its own exception type for a bad file
        raise TokenizerError(f"{where}: not a readable tokenizer.json ({str(exc)[:200]})") from None


def encode(raw: bytes, text: str, vocab_size: int, where: str = "tokenizer") -> np.ndarray:
    """Token ids of `text` (uint16 when they fit, else int32), all below `vocab_size`."""
    tokenizer = load_tokenizer(raw, where)
    have = tokenizer.get_vocab_size(with_added_tokens=True)
    if have > vocab_size:
        raise TokenizerError(f"{where}: has {have} tokens, more than data.vocab_size = {vocab_size}")
    ids = np.asarray(tokenizer.encode(text).ids, dtype=np.int64)
    return ids.astype(np.uint16 if vocab_size <= 1 << 16 else np.int32)


def decode(raw: bytes, ids: np.ndarray) -> str:
    return load_tokenizer(raw).decode([int(i) for i in ids])
