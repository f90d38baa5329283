"""A causal LM's answer is tokenized as the model continues its prompt with it: on a GPT-2-style
byte-level BPE (no prefix space), the prompt and the answer tokenized together give the prompt's tokens
and then exactly the target's; an answer past max_target_len keeps its beginning."""

from __future__ import annotations

import pytest

from rag.errors import ConfigError
from rag.models.causal_lm import CausalLMGenerator
from tests.test_causal_generator import tiny_lm

TEXTS = ["Title: Paris Passage: Paris is the capital of France. Question: what is the capital? Answer: Paris",
         "the river city of italy", "Answer: Germany", "Berlin Rome Parisian capitals of europe"] * 20


@pytest.fixture(scope="module")
def gpt2_bpe():
    """A byte-level BPE as GPT-2's: no prefix space, so "Paris" and " Paris" are other tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXTS, trainer=trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "<pad>", "</s>"],
                                                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                               show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", pad_token="<pad>", eos_token="</s>")


def _body(gen, targets):
    tok = gen.tokenizer
    special = {tok.bos_token_id, tok.eos_token_id, tok.pad_token_id}
    return [[int(i) for i in row if int(i) not in special] for row in gen.tokenize_targets(targets)]


@pytest.mark.parametrize("template", [None, "{title} {text} {question}"], ids=["default", "ends-in-a-field"])
def test_the_target_continues_the_prompt_as_the_tokenizer_reads_them_together(gpt2_bpe, template):
    options = {"template": template} if template else {}
    gen = CausalLMGenerator(tiny_lm("llama", len(gpt2_bpe)), gpt2_bpe, 200, 40, **options)
    answers = ["Paris", "the river city of italy", "Germany"]
    prompt = gen.source_text("Paris", "Paris is the capital of France.", "what is the capital?")
    for answer, body in zip(answers, _body(gen, answers)):
        together = gpt2_bpe(prompt + " " + answer, add_special_tokens=False)["input_ids"]
        alone = gpt2_bpe(prompt, add_special_tokens=False)["input_ids"]
        assert together == alone + body, answer
    # what the tokenizer does with the answer on its own: another first token ("Paris" is not " Paris")
    assert gpt2_bpe("Paris", add_special_tokens=False)["input_ids"] != _body(gen, ["Paris"])[0]


def test_after_a_template_ending_in_a_space_the_answer_follows_that_space_token(gpt2_bpe):
    gen = CausalLMGenerator(tiny_lm("llama", len(gpt2_bpe)), gpt2_bpe, 200, 40, template="Q: {question} Context: {title} {text} A: ")
    prompt = gen.source_text("Paris", "Paris is the capital of France.", "what is the capital?")
    assert gpt2_bpe(prompt, add_special_tokens=False)["input_ids"][-1] == gpt2_bpe.convert_tokens_to_ids("\u0120")  # its "Ġ"
    assert _body(gen, ["Paris"]) == [gpt2_bpe("Paris", add_special_tokens=False)["input_ids"]]


def test_a_long_answer_keeps_its_beginning(gpt2_bpe):
    gen = CausalLMGenerator(tiny_lm("llama", len(gpt2_bpe)), gpt2_bpe, 200, 6)
    answer = "the river city of italy and the capitals of europe"
    (body,) = _body(gen, [answer])
    whole = gen.continuation_ids([answer])[0]
    assert len(body) == 4 and body == whole[:4] and len(whole) > 4  # its first four tokens, not its last
    assert gpt2_bpe.decode(body).startswith(" the")


def test_a_template_whose_end_merges_with_the_answer_is_named():
    """A tokenizer that reads the template's end and the answer as one token: no answer tokens to train on."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "x": 3, " ab": 4, " ab c": 5}
    merged = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="x")),
                                     bos_token="<s>", pad_token="<pad>", eos_token="</s>")
    gen = CausalLMGenerator(tiny_lm("llama", len(merged)), merged, 64, 8, template="{title} {text} {question} ab")
    with pytest.raises(ConfigError, match=r"config key 'generator.prompt_template': the tokenizer merges the prompt's end ' ab' "
                                          r"with the answer 'c'"):
        gen.tokenize_targets(["c"])
