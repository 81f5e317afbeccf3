"""Training a tiny biLM: the loss falls, no leakage, resume is exact, the output loads and
exports."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from spacy_elmo import BiLM, load_bilm
from spacy_elmo.bilm import batch_char_ids, words_char_ids
from spacy_elmo.pretrain import BiLanguageModel, FullSoftmax, dev_nll, train
from spacy_elmo.pretrain import corpus as corpus_module
from spacy_elmo.pretrain.config import bilm_options
from spacy_elmo.pretrain.corpus import (
    BOS_ID,
    EOS_ID,
    DevSet,
    TokenizedFile,
    TrainingCorpus,
    Vocab,
    make_tokenizer,
    sentence_batches,
    stream_batches,
)
from spacy_elmo.pretrain.progress import Progress

from ..helpers import FLOAT32_ATOL, tiny_config, toy_sentences, write_corpus


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    d = tmp_path_factory.mktemp("toy")
    return write_corpus(d / "train.txt", toy_sentences(400)), write_corpus(
        d / "dev.txt", toy_sentences(40, seed=1)
    )


def read_metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("scheme", ["stream", "sentences"])
def test_loss_falls(toy, tmp_path, scheme):
    train_path, dev_path = toy
    config = tiny_config(
        train_path,
        dev_path,
        training__scheme=scheme,
        training__max_steps=40,
        training__eval_every=10,
        training__dropout=0.1,
    )
    summary = train(config, tmp_path, progress_bar=False, log=lambda m: None)
    metrics = read_metrics(tmp_path)
    assert metrics[-1]["train_loss"] < metrics[0]["train_loss"] - 0.5
    assert metrics[-1]["dev"]["mean"] < metrics[0]["dev"]["mean"] * 0.7
    assert summary["dev"]["mean"] == metrics[-1]["dev"]["mean"]
    assert summary["policy"] == {"stream": "warm", "sentences": "zero"}[scheme]


@pytest.mark.parametrize("kind", ["sampled", "adaptive"])
def test_large_vocabulary_heads_normalise_in_eval_and_learn(toy, tmp_path, kind):
    from spacy_elmo.pretrain.heads import build_head

    torch.manual_seed(0)
    head = build_head(kind, 16, 300, n_samples=20, cutoffs=[50, 150]).eval()
    h = torch.randn(5, 16)
    nll = torch.stack([head(h, torch.full((5,), k)) for k in range(300)], dim=1)  # (5, 300)
    torch.testing.assert_close(torch.logsumexp(-nll, dim=1), torch.zeros(5), atol=1e-5, rtol=0)
    config = tiny_config(
        *toy,
        softmax__type=kind,
        softmax__n_samples=20,
        softmax__adaptive_cutoffs=[20, 60],
        training__max_steps=40,
        training__eval_every=10,
    )
    train(config, tmp_path, progress_bar=False, log=lambda m: None)
    metrics = read_metrics(tmp_path)
    assert metrics[-1]["dev"]["mean"] < metrics[0]["dev"]["mean"] * 0.7


@pytest.mark.parametrize("kind", ["sampled", "full", "adaptive"])
def test_the_training_loss_says_when_it_is_the_sampled_softmaxs(toy, tmp_path, capsys, kind):
    """The bar's loss and ppl, the report line and metrics.jsonl's train_loss are the loss of the
    softmax in training: a sampled one's is far below the full softmax's (dev perplexity's), and
    nothing said so. Now each says which softmax's loss it is."""
    config = tiny_config(
        *toy,
        softmax__type=kind,
        softmax__n_samples=8,
        softmax__adaptive_cutoffs=[20, 60],
        training__max_steps=4,
        training__eval_every=2,
    )
    logged = []
    train(config, tmp_path, progress_bar=True, log=logged.append)
    out, err = capsys.readouterr()
    sampled = kind == "sampled"
    metrics = read_metrics(tmp_path)
    assert [m["train_loss_softmax"] for m in metrics] == ["sampled" if sampled else "exact"] * 2
    reports = [line for line in out.splitlines() if line.startswith("step ")]
    assert len(reports) == 2
    label = "train loss (sampled softmax) " if sampled else "train loss "
    assert all(f"{label}{m['train_loss']:.3f};" in r for r, m in zip(reports, metrics))
    bar = err.replace("\r", "\n").strip().splitlines()[-1]
    assert (" loss (sampled)=" in bar and " ppl (sampled)=" in bar) == sampled, bar
    assert (" loss=" in bar and " ppl=" in bar) == (not sampled), bar
    logged.clear()
    train(config, tmp_path / "quiet", progress_bar=False, log=logged.append)
    logged_reports = [line for line in logged if line.startswith("step ")]
    assert len(logged_reports) == 2
    assert all(f"{label}{m['train_loss']:.3f};" in r for r, m in zip(logged_reports, metrics))


@pytest.mark.parametrize("scheme", ["stream", "sentences"])
def test_training_json_counts_the_epochs_begun(tmp_path, scheme):
    """training.json's epochs_started recorded the 0-based index of the epoch under way: 0 after a
    few steps of the first epoch. It counts the epochs begun: 1 within and at the end of the first,
    2 one step into the second."""
    train_path = write_corpus(tmp_path / "train.txt", toy_sentences(40))
    config = tiny_config(train_path, training__scheme=scheme)
    corpus = TrainingCorpus(train_path, make_tokenizer("whitespace"), 100)
    vocab = Vocab.build(corpus.counts, None)
    t = config["training"]
    per_epoch = sum(
        1
        for _ in corpus.batches(
            (0, 0, 0),
            0,
            vocab,
            None,
            scheme,
            t["batch_tokens"],
            t["window"],
            max_epochs=1,
            word_ids=words_char_ids,
        )
    )
    assert per_epoch > 2
    for steps, begun in [(2, 1), (per_epoch, 1), (per_epoch + 1, 2)]:
        out = tmp_path / f"steps{steps}"
        train(
            tiny_config(train_path, training__scheme=scheme, training__max_steps=steps),
            out,
            progress_bar=False,
            log=lambda m: None,
        )
        summary = json.loads((out / "model" / "training.json").read_text(encoding="utf-8"))
        assert (summary["steps"], summary["epochs_started"]) == (steps, begun)


@pytest.mark.parametrize("scheme", ["stream", "sentences"])
def test_files_of_a_small_corpus_are_mixed_in_every_batch(tmp_path, scheme):
    """Two files of disjoint words: with the corpus in memory, an epoch does not read them one after
    the other (which would train on one kind of text, then forget it for the other)."""
    rng = random.Random(0)
    files = [
        write_corpus(
            tmp_path / f"{prefix}.txt",
            [" ".join(f"{prefix}{rng.randrange(20)}" for _ in range(8)) for _ in range(300)],
        )
        for prefix in ("a", "b")
    ]
    corpus = TrainingCorpus(files, make_tokenizer("whitespace"), 100)
    assert corpus.n_units == 1 and corpus.pool.n_tokens == corpus.n_tokens == 2 * 300 * 8
    vocab = Vocab.build(corpus.counts, None)
    batches = corpus.batches((0, 0, 0), 0, vocab, None, scheme, 160, 8, word_ids=words_char_ids)
    for _, (_, batch) in zip(range(3), batches):
        words = {vocab.words[i][0] for i in batch.targets[batch.mask].tolist() if i > 2}
        assert words == {"a", "b"}


def test_no_leakage_in_bilm_outputs():
    """Changing tokens after t leaves the forward top layer (and its predictions) up to t unchanged;
    changing tokens before t leaves the backward one from t on unchanged."""
    torch.manual_seed(0)
    config = tiny_config("unused")
    bilm = BiLM(bilm_options(config))
    head = FullSoftmax(16, 50)
    sent = "the cat sat on the mat and then it slept".split()
    t = 5  # position in the row (<S> is position 0)
    later = sent[:t] + "dogs run fast very far away".split()[: len(sent) - t]
    earlier = "a big green frog jumps".split()[: t - 1] + sent[t - 1 :]
    P = bilm.options.projection_dim

    def top(words):
        out = bilm(torch.from_numpy(batch_char_ids([words])))
        return out.layers[-1][0]  # (T, 2P)

    base, after, before = top(sent), top(later), top(earlier)
    assert not torch.allclose(base[t + 1 :, :P], after[t + 1 :, :P])
    torch.testing.assert_close(base[: t + 1, :P], after[: t + 1, :P], rtol=0, atol=0)
    torch.testing.assert_close(
        head.weight @ base[t, :P], head.weight @ after[t, :P], rtol=0, atol=0
    )
    assert not torch.allclose(base[:t, P:], before[:t, P:])
    torch.testing.assert_close(base[t:, P:], before[t:, P:], rtol=0, atol=0)


def test_training_objective_matches_inference(toy):
    """The training path (directions stacked, targets shifted) gives the same NLL as reading the
    sentences through `BiLM.forward` and predicting next (forward) / previous (backward) tokens."""
    torch.manual_seed(0)
    train_path, _ = toy
    config = tiny_config(train_path)
    corpus = TrainingCorpus(train_path, make_tokenizer("whitespace"), 100)
    vocab = Vocab.build(corpus.counts, None)
    model = BiLanguageModel(BiLM(bilm_options(config)), FullSoftmax(16, len(vocab))).eval()
    words = model.bilm.word_ids
    _, batch = next(corpus.batches((0, 0, 0), 0, vocab, None, "sentences", 200, 10, word_ids=words))
    nll, _ = model(batch)
    f = corpus.unit(0)
    # the batch's sentences, recovered from its inputs
    sentences = []
    for row in range(batch.index.shape[1]):
        n = int(batch.mask[0, row].sum())
        chars = batch.chars[batch.index[0, row, 1:n]]
        sentences.append(
            [
                next(w for w in f.texts if np.array_equal(batch_char_ids([[w]])[0, 1], c.numpy()))
                for c in chars
            ]
        )
    dev = DevSet(sentences, [vocab.lookup(["<S>", *s, "</S>"]) for s in sentences])
    expected = dev_nll(model.bilm, model.head, dev, "zero", batch_size=7)
    torch.testing.assert_close(nll.double(), expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("scheme", ["stream", "sentences"])
def test_random_tokens_cannot_be_predicted(tmp_path, scheme):
    """On i.i.d. random words no model can beat the vocabulary size much; a leak of the target
    into the input would drive the perplexity towards 1."""
    rng = random.Random(0)
    words = [f"w{i}" for i in range(12)]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(6, 12))) for _ in range(300)]
    train_path = write_corpus(tmp_path / "train.txt", lines)
    config = tiny_config(
        train_path,
        train_path,
        training__scheme=scheme,
        training__max_steps=60,
        training__learning_rate=0.02,
    )
    summary = train(config, tmp_path / "out", progress_bar=False, log=lambda m: None)
    # words are uniform over 12 (the boundaries are predictable): a fair model stays near 12 / word
    assert summary["dev"]["forward"] > 7 and summary["dev"]["backward"] > 7


@pytest.mark.parametrize("scheme", ["stream", "sentences"])
def test_resume_is_bit_exact(toy, tmp_path, scheme):
    train_path, dev_path = toy
    kwargs = dict(
        training__scheme=scheme,
        training__dropout=0.2,
        training__max_steps=12,
        softmax__type="sampled",
        softmax__n_samples=20,
        training__optimizer="adagrad",
        training__learning_rate=0.2,
        training__eval_every=5,
    )
    train(
        tiny_config(train_path, dev_path, **kwargs),
        tmp_path / "a",
        progress_bar=False,
        log=lambda m: None,
    )
    kwargs["training__max_steps"] = 5
    train(
        tiny_config(train_path, dev_path, **kwargs),
        tmp_path / "b",
        progress_bar=False,
        log=lambda m: None,
    )
    kwargs["training__max_steps"] = 12
    train(
        tiny_config(train_path, dev_path, **kwargs),
        tmp_path / "b",
        resume=True,
        progress_bar=False,
        log=lambda m: None,
    )
    for name in ("weights.pt", "lm_head.pt"):
        a = torch.load(tmp_path / "a" / "model" / name, weights_only=True)
        b = torch.load(tmp_path / "b" / "model" / name, weights_only=True)
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), key


def test_a_pretrain_output_directory_loads_as_it_is(toy, tmp_path):
    """`load_bilm(OUT)` and the component's `weights = OUT` find the model that `pretrain OUT` saved
    in OUT/model; weights that name no model are one error naming the setting."""
    import spacy

    from spacy_elmo import ElmoFileError

    train_path, dev_path = toy
    train(
        tiny_config(train_path, dev_path, training__max_steps=3),
        tmp_path / "out",
        progress_bar=False,
        log=lambda m: None,
    )
    sentences = [s.split() for s in toy_sentences(3, seed=4)]
    for a, b in zip(
        load_bilm(tmp_path / "out").embed(sentences),
        load_bilm(tmp_path / "out" / "model").embed(sentences),
    ):
        np.testing.assert_array_equal(a, b)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(tmp_path / "out")})
    assert nlp("the cat saw a dog .")._.elmo.shape == (6, 32)
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        ElmoFileError, match=r"\[components.elmo\] weights: .*empty: no options file found"
    ):
        empty = spacy.blank("en")
        empty.add_pipe("elmo", config={"weights": str(tmp_path / "empty")})
        empty.initialize()


@pytest.mark.parametrize("scheme, policy", [("stream", "auto"), ("sentences", "warm")])
def test_export_and_load_round_trip(toy, tmp_path, scheme, policy):
    """model-hdf5 loads as it is (warm) to model/'s outputs (a model read otherwise is refused
    before training: test_pretrain_cli)."""
    train_path, dev_path = toy
    config = tiny_config(
        train_path,
        dev_path,
        training__scheme=scheme,
        training__state_policy=policy,
        training__max_steps=5,
        training__export_hdf5=True,
    )
    summary = train(config, tmp_path, progress_bar=False, log=lambda m: None)
    own = load_bilm(tmp_path / "model")
    assert own.state_policy == summary["policy"] == "warm"
    hdf5 = load_bilm(tmp_path / "model-hdf5")
    sentences = [s.split() for s in toy_sentences(5, seed=3)]
    for a, b in zip(own.embed(sentences), hdf5.embed(sentences)):
        np.testing.assert_allclose(a, b, rtol=0, atol=FLOAT32_ATOL)


def test_init_from_saved_and_hdf5_models(toy, tmp_path, fixture_dir):
    train_path, dev_path = toy
    config = tiny_config(train_path, dev_path, training__max_steps=5, training__export_hdf5=True)
    train(config, tmp_path / "base", progress_bar=False, log=lambda m: None)
    base = load_bilm(tmp_path / "base" / "model")
    # a model saved here (or the output directory it is in): its weights, softmax and vocabulary
    # continue
    adapted = tiny_config(train_path, dev_path, training__max_steps=2)
    for i, source in enumerate((tmp_path / "base" / "model", tmp_path / "base")):
        logged, own = [], tmp_path / f"own{i}"
        summary = train(adapted, own, init_from=str(source), progress_bar=False, log=logged.append)
        assert summary["steps"] == 2
        assert f"vocabulary and softmax from {tmp_path / 'base' / 'model'}" in logged
        assert (own / "vocab.txt").read_text() == (
            tmp_path / "base" / "model" / "vocab.txt"
        ).read_text()
    # bilm-tf hdf5 weights (no softmax): a fresh softmax, the biLM's sizes (the config's [model]
    # left at the built-in default, which is not the user's)
    for source in (tmp_path / "base" / "model-hdf5", fixture_dir):
        out = tmp_path / ("hdf5" if source != fixture_dir else "fixture")
        train(
            tiny_config(train_path, dev_path, model=False, training__max_steps=2),
            out,
            init_from=str(source),
            progress_bar=False,
            log=lambda m: None,
        )
        assert load_bilm(out / "model").options == load_bilm(source).options
    assert load_bilm(tmp_path / "hdf5" / "model").options == base.options


def test_a_run_from_init_from_resumes_without_it_to_the_same_weights(toy, tmp_path, fixture_dir):
    """The run records the biLM's sizes it started from: `--resume` alone rebuilds that biLM (the
    config's `[model]` left at the built-in default), and ends where an uninterrupted run ends."""
    train_path, dev_path = toy

    def config(steps):
        return tiny_config(
            train_path,
            dev_path,
            training__max_steps=steps,
            model=False,
            training__checkpoint_every=1,
        )

    quiet = dict(progress_bar=False, log=lambda m: None)
    train(config(3), tmp_path / "whole", init_from=str(fixture_dir), **quiet)
    train(config(2), tmp_path / "split", init_from=str(fixture_dir), **quiet)
    train(config(3), tmp_path / "split", resume=True, **quiet)
    whole, split = (load_bilm(tmp_path / run / "model") for run in ("whole", "split"))
    assert split.options == load_bilm(fixture_dir).options
    for name, values in whole.network.state_dict().items():
        assert torch.equal(values, split.network.state_dict()[name]), name


def test_a_run_from_init_from_loads_its_biLM_after_the_seed(
    toy, tmp_path, fixture_dir, monkeypatch
):
    """The biLM `--init-from` names is built from torch's generator after the run's seed, as it
    always was, so training's dropout draws what earlier releases drew: a tuned biLM is the same
    whatever version tunes it (the study keys its runs by the tuned biLM's fingerprint)."""
    import importlib

    trainer_module = importlib.import_module("spacy_elmo.pretrain.train")
    initial_bilm, states = trainer_module.initial_bilm, []

    def recorded(*args, **kwargs):
        bilm = initial_bilm(*args, **kwargs)
        states.append(torch.random.get_rng_state())
        return bilm

    monkeypatch.setattr(trainer_module, "initial_bilm", recorded)
    config = tiny_config(*toy, model=False)
    trainer_module.Trainer(config, tmp_path / "out", init_from=str(fixture_dir), progress_bar=False)
    torch.manual_seed(config["training"]["seed"])
    load_bilm(fixture_dir)
    assert torch.equal(states[0], torch.random.get_rng_state())


def test_init_from_missing_path(toy, tmp_path):
    from spacy_elmo import ElmoFileError

    with pytest.raises(ElmoFileError, match="not found"):
        train(tiny_config(*toy), tmp_path, init_from=str(tmp_path / "nope"), progress_bar=False)


def test_init_from_a_published_name_reads_the_cache(toy, tmp_path, fixture_dir, monkeypatch):
    from spacy_elmo import ElmoFileError
    from spacy_elmo.weights import hub

    monkeypatch.setenv("SPACY_ELMO_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ElmoFileError, match="python -m spacy_elmo download small"):
        train(tiny_config(*toy), tmp_path / "none", init_from="small", progress_bar=False)
    directory = tmp_path / "cache" / "small"
    directory.mkdir(parents=True)
    (options_name, _), (weights_name, _) = hub.published_files("small")
    shutil.copy(fixture_dir / "options.json", directory / options_name)
    shutil.copy(fixture_dir / "lm_weights.hdf5", directory / weights_name)
    config = tiny_config(*toy, model=False, training__max_steps=1, training__learning_rate=1e-12)
    train(config, tmp_path / "out", init_from="small", progress_bar=False, log=lambda m: None)
    before, after = load_bilm(fixture_dir), load_bilm(tmp_path / "out" / "model")
    assert after.options == before.options
    for (name, a), b in zip(before.state_dict().items(), after.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-9, msg=name)  # one step of lr 1e-12


@pytest.mark.parametrize("name", ["corpus.txt", "corpus.txt.gz"])
def test_a_byte_order_mark_is_not_text(tmp_path, name):
    """A UTF-8 byte order mark at the start of a corpus file is dropped, not read as part of its
    first token."""
    import gzip

    from spacy_elmo.pretrain.corpus import read_lines

    data = "\ufeffThe cat\nsat .\n".encode("utf-8")
    (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    assert list(read_lines(tmp_path / name)) == ["The cat\n", "sat .\n"]


def sentences_file(lengths):
    """A `TokenizedFile` of sentences of `lengths`, every token its own text (ids 2, 3, ...)."""
    ids = np.arange(2, 2 + sum(lengths), dtype=np.int32)
    sentences = np.split(ids, np.cumsum(lengths)[:-1])
    texts = ["<S>", "</S>", *(f"w{i}" for i in ids)]
    return TokenizedFile(Path("x.txt"), texts, np.ones(len(texts), dtype=np.int64), sentences)


def sentence_rows(f, batch_tokens, rank=0, world=1):
    """The batches of `sentence_batches` over `f` (sentences in file order): (batch, the indices of
    its sentences)."""
    out_ids = np.arange(len(f.texts))  # targets are text ids
    makers = sentence_batches(
        f,
        np.arange(len(f.sentences)),
        out_ids,
        batch_tokens,
        rank,
        world,
        np.random.RandomState(0),
        words_char_ids,
    )
    batches = [make() for make in makers]
    firsts = {int(s[0]): i for i, s in enumerate(f.sentences)}
    return [(b, [firsts[int(row[0])] for row in b.targets[0]]) for b in batches]


@pytest.mark.parametrize("batch_tokens,rows", [(4, 1), (8, 2), (9, 2), (12, 3)])
def test_sentence_batches_fill_their_padded_positions_up_to_batch_tokens(batch_tokens, rows):
    """A row of a sentence of n words takes n + 1 positions; a batch holds as many rows as fit in
    batch_tokens, a batch of one sentence included, and every sentence is read once."""
    f = sentences_file([3] * 12)
    batches = sentence_rows(f, batch_tokens)
    assert sorted(k for _, ks in batches for k in ks) == list(range(12))
    for batch, _ in batches:
        assert batch.index.shape == (2, rows, 4) and rows * 4 <= batch_tokens


def test_a_sentence_row_predicts_each_word_then_the_closing_boundary_both_ways():
    f = sentences_file([2, 4])
    [(batch, ks)] = sentence_rows(f, 100)
    assert batch.n_predicted == 2 + 1 + 4 + 1
    for row, k in enumerate(ks):
        s = f.sentences[k].tolist()
        n = len(s) + 1
        assert batch.mask[:, row].sum(1).tolist() == [n, n] and not batch.mask[:, row, n:].any()
        assert batch.targets[0, row, :n].tolist() == [*s, EOS_ID]
        assert batch.targets[1, row, :n].tolist() == [*s[::-1], BOS_ID]
        texts = [f.texts[i] for i in [BOS_ID, *s]]
        assert torch.equal(
            batch.chars[batch.index[0, row, :n]], torch.from_numpy(words_char_ids(texts))
        )


def test_sentence_batches_come_shuffled_not_by_length():
    """Batches are grouped by length, then shuffled: an epoch does not run from its shortest
    sentences to its longest."""
    f = sentences_file(list(range(1, 13)))
    lengths = [batch.index.shape[2] for batch, _ in sentence_rows(f, 14)]
    assert len(lengths) > 3 and lengths != sorted(lengths), lengths


def test_the_ranks_share_each_sentence_batch_row_by_row():
    f = sentences_file([3] * 12)
    ranks = [sentence_rows(f, 8, rank, 2) for rank in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == 3
    for (_, ka), (_, kb) in zip(*ranks):
        assert len(ka) == len(kb) == 2 and not set(ka) & set(kb)
    assert sorted(k for r in ranks for _, ks in r for k in ks) == list(range(12))


def test_stream_windows_predict_the_next_token_of_each_part_both_ways():
    """bilm-tf's packing: the stream cut into rows, window i of a row predicting its tokens
    i*window + 1 ... (i+1)*window, direction 1 the same of the reversed row; a window needs the
    token after it."""
    f = sentences_file([2, 2, 2])  # a stream of 12 tokens: 2 rows of 6
    stream = np.concatenate([[BOS_ID, *s, EOS_ID] for s in f.sentences])
    parts = stream.reshape(2, 6)
    makers = stream_batches(f, np.arange(3), np.arange(len(f.texts)), 2, 3, 0, 1, words_char_ids)
    assert len(makers) == 1  # (6 - 1) // 3: the second window has no token after its last
    batch = makers[0]()
    assert batch.index.shape == batch.targets.shape == batch.mask.shape == (2, 2, 3)
    assert batch.targets[0].tolist() == parts[:, 1:4].tolist()
    assert batch.targets[1].tolist() == parts[:, ::-1][:, 1:4].tolist()


def lettered_files(tmp_path, letters, n=30):
    """One corpus file per letter, of words of that letter only."""
    rng = random.Random(0)
    return [
        write_corpus(
            tmp_path / f"{letter}.txt",
            [" ".join(f"{letter}{rng.randrange(20)}" for _ in range(8)) for _ in range(n)],
        )
        for letter in letters
    ]


def corpus_batches(corpus, start, max_epochs, scheme="sentences"):
    """The vocabulary of `corpus`, and (position after, batch) of each batch from `start`."""
    vocab = Vocab.build(corpus.counts, None)
    return vocab, list(
        corpus.batches(
            start, 0, vocab, None, scheme, 40, 8, max_epochs=max_epochs, word_ids=words_char_ids
        )
    )


def read_corpus(corpus, start, max_epochs):
    """(position after, letters of the batch's predicted words) of each batch from `start`."""
    vocab, batches = corpus_batches(corpus, start, max_epochs)
    return [
        (tuple(p), {vocab.words[i][0] for i in b.targets[b.mask].tolist() if i > 2})
        for p, b in batches
    ]


@pytest.mark.parametrize("scheme", ["stream", "sentences"])
def test_each_epoch_reads_the_sentences_in_a_new_order(tmp_path, scheme):
    corpus = TrainingCorpus(lettered_files(tmp_path, "a"), make_tokenizer("whitespace"), 100)
    epochs = [[], []]
    for p, b in corpus_batches(corpus, (0, 0, 0), 2, scheme)[1]:
        epochs[p.epoch - (p.file == p.batch == 0)].append(b.targets[b.mask].tolist())
    assert len(epochs[0]) == len(epochs[1]) > 1
    assert sorted(map(sorted, epochs[0])) != sorted(map(sorted, epochs[1]))


def test_a_large_corpus_is_read_file_by_file_in_a_new_order_each_epoch(tmp_path, monkeypatch):
    """Past MAX_CACHED_TOKENS the files are units read one after the other: every file whole once
    an epoch, in an order drawn per epoch; a run resumed inside a file reads the next ones whole,
    and the position after a file's last batch is the next file's first."""
    monkeypatch.setattr(corpus_module, "MAX_CACHED_TOKENS", 100)
    corpus = TrainingCorpus(lettered_files(tmp_path, "abc"), make_tokenizer("whitespace"), 100)
    assert corpus.n_units == 3 and corpus.pool is None
    batches = read_corpus(corpus, (0, 0, 0), 4)
    assert all(len(letters) == 1 for _, letters in batches)
    orders = []
    for epoch in range(4):
        letters = [next(iter(ls)) for p, ls in batches if p[0] == epoch and p != (epoch, 0, 0)]
        letters += [next(iter(ls)) for p, ls in batches if p == (epoch + 1, 0, 0)]
        orders.append("".join(dict.fromkeys(letters)))
    assert sorted(orders[0]) == ["a", "b", "c"] and len(set(orders)) > 1, orders
    ends = [p for p, _ in batches[:-1] if p[0] == 0 and p[2] == 0]
    assert ends == [(0, 1, 0), (0, 2, 0)]
    assert Progress(epoch=0, file=1, batch=0).epochs_started == 1
    per_file = [sum(1 for p, _ in batches if p[:2] == (0, i) and p[2] > 0) + 1 for i in range(3)]
    resumed = read_corpus(corpus, (0, 0, 1), 1)
    assert len(resumed) == sum(per_file) - 1 and resumed == batches[1 : sum(per_file)]
