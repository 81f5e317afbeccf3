"""The character ids `pretrain` feeds its biLM, in training steps and at dev perplexity, are the
ones the trained model computes for the same tokens at inference (its own encoder): with
`corpus.lowercase`, an upper-case `corpus.unk_token`, `<S>` and `</S>` too."""

from __future__ import annotations

from torch.nn.modules.module import register_module_forward_pre_hook

from spacy_elmo import BiLM, load_bilm
from spacy_elmo.pretrain import BiLanguageModel

from ..helpers import override_args, run_pretrain, toy_sentences, write_corpus


def with_unk(lines, every: int):
    """`lines` with their second word `<UNK>` in one of `every`."""
    out = []
    for i, line in enumerate(lines):
        words = line.split()
        if i % every == 0:
            words[1] = "<UNK>"
        out.append(" ".join(words))
    return out


def rows(ids) -> set:
    """The ids of each token `(..., width)` (padding, all 0, left out) as a set of tuples."""
    return {tuple(r) for r in ids.reshape(-1, ids.shape[-1]).tolist() if any(r)}


def test_training_and_dev_feed_the_ids_the_trained_model_reads(tmp_path, capsys):
    """Training fed `<UNK>` as written, the saved model (which lowercases) reads it as `<unk>`:
    ids it was never trained on. Now every id training and dev perplexity feed is one the saved
    model gives the same tokens, and those of `<UNK>`, `<S>`, `</S>` and "John" (read as "john")
    are among them."""
    train_lines = ["John saw the Dog on Monday .", *with_unk(toy_sentences(40), 3)]
    dev_lines = ["The Dog <UNK> John .", *with_unk(toy_sentences(10, seed=1), 2)]
    train = write_corpus(tmp_path / "train.txt", train_lines)
    dev = write_corpus(tmp_path / "dev.txt", dev_lines)
    fed, read = [], []

    def record(module, args):
        if isinstance(module, BiLanguageModel) and module.training:
            fed.append(args[0].chars.numpy().copy())  # a training step's batch
        elif isinstance(module, BiLM) and not module.training:
            read.append(args[0].numpy().copy())  # dev perplexity, the warm-up text

    overrides = dict(training__max_steps=None, training__max_epochs=1, training__eval_every=3)
    args = override_args(train, dev, corpus__lowercase=True, corpus__unk_token="<UNK>", **overrides)
    handle = register_module_forward_pre_hook(record)
    try:
        code, err = run_pretrain([tmp_path / "out", "--no-progress", *args], capsys)
    finally:
        handle.remove()
    assert code == 0, err
    model = load_bilm(tmp_path / "out" / "model").network
    assert model.options.lowercase
    at_inference = rows(model.char_ids([line.split() for line in train_lines]))
    fed = set().union(*map(rows, fed))
    musts = rows(model.word_ids(["<UNK>", "<S>", "</S>", "John"]))
    assert musts <= fed and fed <= at_inference
    dev_sentences = [line.split() for line in dev_lines]
    at_inference = rows(model.char_ids([*dev_sentences, *model.warmup]))
    read = set().union(*map(rows, read))
    assert musts <= read and read <= at_inference
