"""Makes the tiny model the real-vLLM tests serve, deterministically and offline.

Run with the vLLM venv's Python (it has torch, transformers and tokenizers):
    python make-tiny-model.py OUTPUT_DIR
    python make-tiny-model.py --hidden 256 --intermediate 512 --layers 4 OUTPUT_DIR

The second form makes a larger model with the same tokenizer, for `npm run bench:cache -- --model`:
one whose prefill costs measurable time on a CPU (about 0.1 ms per prompt token here against the
tiny model's 0.025), so that a cached prefix is worth something to the picker's cost model.

A random Llama (vocab 2048, hidden 128, intermediate 256, 2 layers, 4 heads: vLLM's CPU attention
needs a head size of at least 32) with seeded weights, saved as safetensors, and a byte-level BPE
tokenizer of 2,048 tokens trained with `tokenizers` on text generated here from a fixed seed, with
bos/eos/pad tokens and a chat template. Its answers are gibberish, but the same at temperature 0 on
every machine; its tokenizer splits English-like text the way real ones do (several characters per
token), so prompt lengths, cache blocks and prefix sharing behave as with a real model.

Same inputs, same bytes: the corpus comes from a seeded generator, the BPE trainer is
deterministic for a given corpus, and the weights come from a seeded CPU generator. The installer
keys the cached model on this file's hash, so changing anything here makes a new model.
"""

import argparse
import json
import random
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SEED = 31
VOCAB_SIZE = 2048
BOS, EOS, PAD = "<|begin|>", "<|end|>", "<|pad|>"
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]

# A chat template in the shape most chat models use: a role marker, the content, the end token.
# Content given as a list of parts is joined from its text parts (vLLM passes either form).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}"
    "{% endif %}"
    "{{ eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

# Words of the kind test prompts use (support, billing, code): the trained merges then cut such
# prompts into realistic tokens.
WORDS = """
the of and to a in is you that it for on are with as be this was have or at by from not but
can your all will an which their there if has more one about would what when so no out up
time them some could into than then its only other new also how our two may first well any
these way use want need help please thanks question answer system user assistant support
billing invoice account customer order price tariff contract month year day week today team
service server model request response error retry cache token prompt context window memory
queue replica cluster pod node gateway route envoy picker ready health metric latency stream
short long fast slow higher lower last next every never always quickly clearly politely
explain describe summarise translate write read check compare list count find keep send
handbook policy ticket refund payment balance report manager office product feature release
code function value string number array object file line test build deploy config
French English German Spanish Italian two three four five six seven eight nine ten hundred
""".split()
PUNCTUATION = [".", ",", "?", "!", ":", ";"]


def corpus(lines: int) -> list[str]:
    """English-like sentences, numbers and a little code, from a fixed seed."""
    rng = random.Random(SEED)
    out = []
    for i in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 18))]
        if rng.random() < 0.2:
            words.insert(rng.randrange(len(words)), str(rng.randint(0, 99999)))
        sentence = " ".join(words)
        sentence = sentence[0].upper() + sentence[1:] + rng.choice(PUNCTUATION)
        if i % 7 == 0:
            sentence += f" value_{rng.randint(0, 999)} = f({rng.choice(WORDS)}, {rng.randint(0, 9)})"
        out.append(sentence)
    return out


def make_tokenizer(out: Path) -> PreTrainedTokenizerFast:
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[BOS, EOS, PAD, *ROLE_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus(20_000), trainer=trainer)
    # Like Llama's tokenizer: a plain prompt (the completions API) starts with the BOS token; the chat
    # template writes its own, and vLLM tokenizes a rendered chat without adding special tokens.
    bpe.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bpe.token_to_id(BOS))]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=ROLE_TOKENS,
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    return tokenizer


def make_model(out: Path, tokenizer: PreTrainedTokenizerFast, size: argparse.Namespace) -> None:
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=size.hidden,
        intermediate_size=size.intermediate,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.heads,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="Makes the test bed's tiny model (or a larger one with the same tokenizer).")
    parser.add_argument("output_dir")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--intermediate", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    # vLLM's CPU attention needs a head size (hidden / heads) of at least 32.
    parser.add_argument("--heads", type=int, default=4)
    args = parser.parse_args()
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    tokenizer = make_tokenizer(out)
    make_model(out, tokenizer, args)
    print(json.dumps({"vocab": len(tokenizer), "bos": tokenizer.bos_token_id, "eos": tokenizer.eos_token_id}))


if __name__ == "__main__":
    main()
