"""Character-level tokenizer with Qwen-style special tokens and chat template.

Tiny test models need a tokenizer that is built offline, is deterministic and
round-trips text exactly, yet exercises the same code paths (special tokens,
chat template, pad/eos handling) as a real Qwen3 tokenizer.

Id layout (fixed, so saved tiny models stay compatible):

* ``0``: ``UNK_TOKEN`` (``"<unk>"``), which every character outside ``CHARSET`` maps to.
* ``1 .. len(CHARSET)``: one id per character of ``CHARSET``, in that order.
* then ``SPECIAL_TOKENS`` followed by ``THINK_TOKENS`` as added tokens.

With the default ``CHARSET`` (98 characters) that gives 104 ids in total:
``<|endoftext|>`` = 99 (pad), ``<|im_start|>`` = 100, ``<|im_end|>`` = 101 (eos),
``<think>`` = 102, ``</think>`` = 103.
"""

from __future__ import annotations

import string

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

# Printable ASCII without the rarely used vertical tab / form feed.
CHARSET: str = string.ascii_letters + string.digits + string.punctuation + " \t\n\r"
UNK_TOKEN = "<unk>"
PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
EOS_TOKEN = IM_END = "<|im_end|>"
# Control tokens: stripped by ``decode(..., skip_special_tokens=True)``.
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, IM_START, IM_END)
# Like Qwen3, the think markers are single-id added tokens but *not* special,
# so ``skip_special_tokens=True`` keeps them and reasoning stays parseable.
THINK_TOKENS: tuple[str, ...] = ("<think>", "</think>")

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)


def _backend() -> Tokenizer:
    """Build the raw `tokenizers` object: one id per character, fused on decode."""
    vocab = {UNK_TOKEN: 0}
    for ch in CHARSET:
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    # Oniguruma lacks the (?s) flag, so "[\s\S]" is the "any char incl. newline" regex.
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    # Fuse concatenates tokens verbatim; the default decoder would insert spaces.
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    return tok


def build_tokenizer(model_max_length: int = 1024) -> PreTrainedTokenizerFast:
    """Return the character-level tokenizer wrapped for `transformers`.

    ``bos_token`` is ``None`` as in Qwen3: sequences start with ``<|im_start|>``
    from the chat template, not with a BOS id. Padding side is the library
    default (right); callers that batch prompts for generation pad left themselves.
    """
    tok = PreTrainedTokenizerFast(
        tokenizer_object=_backend(),
        unk_token=UNK_TOKEN,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        bos_token=None,
        extra_special_tokens=[IM_START],  # so all_special_tokens lists every control token
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok
