"""The generator's tokenizer: a byte-level BPE trained on the corpus (wrapped as a BART
tokenizer), saved in the state the run tokenizes with, and the single tokens FEVER's labels map to."""

from __future__ import annotations

from pathlib import Path


SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def label_token(label: str) -> str:
    """The single output token a classification label maps to (FEVER)."""
    return "<" + label.replace(" ", "_") + ">"


def train_tokenizer(texts, vocab_size: int, extra_tokens: list[str], out_dir: Path):
    """Byte-level BPE trained on ``texts`` (lower-cased), wrapped as a BART tokenizer."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=SPECIALS + extra_tokens,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>", mask_token="<mask>", additional_special_tokens=extra_tokens)
    fast.save_pretrained(out_dir)
    return fast


def save_tokenizer(tokenizer, folder: str | Path, max_length: int) -> None:
    """Save ``tokenizer`` to ``folder`` in the state the run tokenizes its inputs with (padding to the
    longest, truncation at ``max_length``), whatever its last call was: a fast tokenizer's
    tokenizer.json records the padding and truncation of its last call."""
    if getattr(tokenizer, "is_fast", False):
        from transformers.tokenization_utils_base import TruncationStrategy
        from transformers.utils import PaddingStrategy

        tokenizer.set_truncation_and_padding(PaddingStrategy.LONGEST, TruncationStrategy.LONGEST_FIRST,
                                             max_length=max_length, stride=0, pad_to_multiple_of=None,
                                             padding_side=None)
    tokenizer.save_pretrained(folder)


def ensure_label_tokens(tokenizer, model, labels: list[str]) -> list[int]:
    """Make every label one token (adding tokens and resizing embeddings where needed)."""
    toks = [label_token(lb) for lb in labels]
    missing = [t for t in toks if tokenizer.convert_tokens_to_ids(t) in (None, tokenizer.unk_token_id)]
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": list(tokenizer.additional_special_tokens) + missing})
        model.resize_token_embeddings(len(tokenizer))
    return [tokenizer.convert_tokens_to_ids(t) for t in toks]

