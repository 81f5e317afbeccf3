"""What a run trains, built from its config and `--init-from`: the output vocabulary, the biLM and
the softmax head."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Collection, Dict, NamedTuple, Optional, Tuple, Union

import torch
from thinc.api import Config

from ..bilm import BiLM, BiLMOptions
from ..bilm.chars import MAX_CHARS
from ..errors import ElmoConfigError
from ..weights import load_bilm
from ..weights.untrained import UNTRAINED_KEY
from .config import bilm_options, default_vocab_size, with_model_of
from .heads import build_head
from .outputs import (
    HEAD_FILE,
    RESUMED_HINT,
    VOCAB_FILE,
    recorded_init,
    recorded_options,
    saved_head,
)
from .vocab import SPECIALS, Vocab


def training_vocab(
    config: Config,
    counts: Counter,
    *,
    resumed_run: Optional[Path],
    start: Optional[Start],
    log: Callable[[str], None],
) -> Vocab:
    """The output vocabulary: the resumed run's, the `--init-from` model's (`start`, where its
    softmax is saved beside it; a `vocab.size` it does not have is warned of), or the `vocab.size`
    most frequent words of the training corpus's `counts`."""
    if resumed_run is not None:
        return Vocab.from_disk(resumed_run / VOCAB_FILE)
    size, unk = config["vocab"]["size"], config["corpus"]["unk_token"]
    if start is not None and start.softmax is not None:
        vocab = start.softmax.vocab
        log(f"vocabulary and softmax from {start.directory}")
        n_words = len(vocab) - len(SPECIALS)
        if size not in (None, n_words, default_vocab_size()):
            log(
                f"warning: vocab.size = {size} is not used: training goes on with the vocabulary "
                f"and softmax of {start.directory} ({n_words} words)"
            )
        return vocab
    vocab = Vocab.build(counts, size, unk, shrink=size == default_vocab_size())
    n_words = len(vocab) - len(SPECIALS)
    if size is not None and n_words < size:
        log(
            f"warning: vocab.size = {size} is larger than the {n_words} distinct words of the "
            f"training corpus: the output vocabulary keeps all of them"
        )
    return vocab


class Softmax(NamedTuple):
    """A softmax saved beside a model (`pretrain`'s): its weights, file and output vocabulary."""

    path: Path
    state: Dict[str, torch.Tensor]
    vocab: Vocab


class Start(NamedTuple):
    """The biLM that `--init-from` names, as the run read it (once: a model saved over it meanwhile
    changes nothing): its directory, sizes, weights, the softmax saved beside it (None: none) and
    the record of it that the run keeps."""

    directory: Path
    options: BiLMOptions
    weights: Dict[str, torch.Tensor]  # the biLM's state dict
    softmax: Optional[Softmax]
    record: Dict[str, Any]  # init_from (as given), directory, fingerprint (of `weights`)


def starting_bilm(init_dir: Path, init_from: str) -> Start:
    """The biLM in `init_dir` (`--init-from init_from`), checked to be one that pretrain can
    train, with its softmax and vocabulary where both are saved beside it and its record: where it
    is and its fingerprint before training. `initial_bilm` builds the network to train from it
    after the run's seed."""
    bilm = load_bilm(init_dir).network
    if bilm.options.char_table:
        raise ElmoConfigError(
            f"--init-from {init_from}: a model with a character table (ELMoForManyLangs) "
            "cannot be trained here; pretrain reads utf-8 bytes"
        )
    if bilm.options.max_characters_per_token != MAX_CHARS:
        raise ElmoConfigError(
            f"--init-from {init_from}: the model reads {bilm.options.max_characters_per_token} "
            f"characters per token; pretrain makes bilm-tf's {MAX_CHARS} (it would train on ids "
            "the model never reads)"
        )
    record = {
        "init_from": init_from,
        "directory": os.path.abspath(init_dir),
        "fingerprint": bilm.fingerprint(),
    }
    softmax = None
    if (init_dir / VOCAB_FILE).is_file() and (init_dir / HEAD_FILE).is_file():
        vocab = Vocab.from_disk(init_dir / VOCAB_FILE)
        softmax = Softmax(init_dir / HEAD_FILE, saved_head(init_dir / HEAD_FILE), vocab)
    return Start(init_dir, bilm.options, bilm.state_dict(), softmax, record)


def config_to_train(
    config: Config, given: Collection[str], start: Optional[Start], resumed_run: Optional[Path]
) -> Tuple[Config, Optional[Dict[str, Any]]]:
    """`config` with the `[model]` sizes that a run from `start` (or the resumed run that started
    from one) trains: the biLM's own; a `[model]` setting the user gave (`given`, or not the
    built-in default) that differs is an ElmoConfigError. Returns it and the record of where the
    run started (None: from scratch)."""
    if start is not None:
        source = f"--init-from {start.record['init_from']}"
        return with_model_of(config, start.options, given, source), start.record
    record = recorded_init(resumed_run) if resumed_run is not None else None
    options = recorded_options(resumed_run) if record is not None else None
    if record is None or options is None:
        return config, None
    source = f"--resume (a run from --init-from {record['init_from']})"
    return with_model_of(config, options, given, source), record


def initial_bilm(
    config: Config, start: Optional[Start], resumed: Optional[BiLMOptions] = None
) -> BiLM:
    """The biLM to train: a resumed run's (of its recorded sizes `resumed`; its checkpoint holds the
    weights), the one `--init-from` names (`start`: its weights, as `starting_bilm` read them), or a
    new one as the config's `model` section says, initialized from torch's random generator. Either
    way the network is built from that generator (after the run's seed), and training's dropout
    draws from it next. It reads its tokens lowercased where `corpus.lowercase` says, and records
    `corpus.unk_token`."""
    lowercase = config["corpus"]["lowercase"]  # the text it is trained on
    unk_token = config["corpus"]["unk_token"] or None  # as `bilm_options` records it
    if resumed is not None:
        return BiLM(replace(resumed, lowercase=lowercase, unk_token=unk_token))
    if start is None:
        return BiLM(bilm_options(config))
    if start.options.lowercase != lowercase:
        # the generator's draws as when the model was loaded here, then rebuilt in the other case
        BiLM(start.options)
    # `init-random`'s label is left out: trained from here on
    extra = {k: v for k, v in start.options.extra.items() if k != UNTRAINED_KEY}
    bilm = BiLM(replace(start.options, lowercase=lowercase, unk_token=unk_token, extra=extra))
    bilm.load_state_dict(start.weights)
    return bilm


def initial_head(
    softmax: Dict[str, Any],
    bilm: BiLM,
    vocab_size: int,
    rng: torch.Generator,
    init: Union[Start, Path, None],
    log: Callable[[str], None],
) -> torch.nn.Module:
    """The softmax head that the config's `softmax` section says, over `vocab_size` words of
    `bilm`'s top layer, drawing its samples from `rng`; its weights those saved beside the model a
    run starts from (`init`: as `starting_bilm` read it, or the directory that a resumed run
    names) where there are some. Adaptive cutoffs at or above `vocab_size` are left out, with a
    warning to `log` (the built-in ones meet a vocabulary shrunk to a small corpus); none left is
    an error."""
    cutoffs = list(softmax["adaptive_cutoffs"])
    beyond = [c for c in cutoffs if c >= vocab_size]
    if softmax["type"] == "adaptive" and beyond and len(beyond) < len(cutoffs):
        cutoffs = cutoffs[: len(cutoffs) - len(beyond)]
        log(
            f"warning: softmax.adaptive_cutoffs {', '.join(map(str, beyond))} are not below the "
            f"{vocab_size} words of the output vocabulary: the softmax's clusters start at "
            f"{cutoffs}"
        )
    try:
        head = build_head(
            softmax["type"],
            bilm.options.projection_dim,
            vocab_size,
            softmax["n_samples"],
            cutoffs,
            rng,
        )
    except ValueError as err:
        raise ElmoConfigError(str(err)) from None
    if isinstance(init, Start):
        if init.softmax is not None:
            load_head(head, init.softmax.path, init.softmax.state, softmax["type"])
    elif init is not None and (init / HEAD_FILE).is_file():  # the directory a resumed run names
        try:
            load_head(head, init / HEAD_FILE, saved_head(init / HEAD_FILE), softmax["type"])
        except ElmoConfigError as err:
            raise ElmoConfigError(f"{err}{RESUMED_HINT}") from None
    return head


def load_head(
    head: torch.nn.Module, path: Path, state: Dict[str, torch.Tensor], softmax_type: str
) -> None:
    """Load the softmax weights `state`, saved at `path`, into `head`, which must be of their type
    and sizes; an ElmoConfigError says which differs."""
    saved = {k: tuple(getattr(v, "shape", ())) for k, v in state.items()}
    wanted = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    if saved == wanted:
        head.load_state_dict(state)
        return
    if saved.keys() != wanted.keys():
        raise ElmoConfigError(
            f"{path}: the saved softmax is not of softmax.type = {softmax_type!r}; set it to the "
            "type it was trained with"
        )
    if "weight" in wanted and len(saved["weight"]) == 2:  # full and sampled: (entries, width)
        (n_saved, width_saved), (n, width) = saved["weight"], wanted["weight"]
        if n_saved != n:
            raise ElmoConfigError(
                f"{path}: the saved softmax predicts {n_saved} entries of an output vocabulary, "
                f"this run's vocabulary has {n}: continue from the softmax of this vocabulary"
            )
        if width_saved != width:
            raise ElmoConfigError(
                f"{path}: the saved softmax reads {width_saved}-wide biLM outputs, this run's "
                f"biLM gives {width}: continue from the softmax trained with this biLM"
            )
    name = next(k for k in wanted if saved[k] != wanted[k])
    raise ElmoConfigError(
        f"{path}: the saved softmax's {name} is {list(saved[name])}, this run's is "
        f"{list(wanted[name])} (softmax.type {softmax_type!r}, softmax.adaptive_cutoffs and the "
        "output vocabulary must be those it was trained with)"
    )
