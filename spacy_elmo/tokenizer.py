"""The spaCy tokenizer that `pretrain` and `embed` read text with: a language's own (`spacy.blank`),
keeping whole the tokens a biLM reads as one, which spaCy splits in three: `<S>`, `</S>` (the
sentence boundaries) and the corpus's unknown-word token (`<unk>` in PTB and WikiText; `embed`
keeps the one the model records, `BiLMOptions.unk_token`).

The `elmo` component reads the tokens of its pipeline's own tokenizer, which this leaves alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple

from .bilm.chars import BOS_TOKEN, EOS_TOKEN
from .bilm.options import UNK_TOKEN

if TYPE_CHECKING:
    from spacy.language import Language


def kept_whole(unk_token: Optional[str] = UNK_TOKEN) -> Tuple[str, ...]:
    """The token texts the tokenizer keeps whole: `<S>`, `</S>` and `unk_token` (None: none)."""
    return (BOS_TOKEN, EOS_TOKEN, *([unk_token] if unk_token else []))


def blank(lang: str, unk_token: Optional[str] = UNK_TOKEN) -> "Language":
    """`spacy.blank(lang)`, its tokenizer keeping `kept_whole(unk_token)` whole (spaCy's errors for
    a language it does not know, ImportError or ValueError, are the caller's)."""
    import spacy
    from spacy.symbols import ORTH

    nlp = spacy.blank(lang)
    for text in kept_whole(unk_token):
        nlp.tokenizer.add_special_case(text, [{ORTH: text}])
    return nlp


def spacy_name(lang: str, unk_token: Optional[str] = UNK_TOKEN) -> str:
    """What a run records of `blank(lang, unk_token)`'s tokenizer, naming what it keeps whole (a
    resumed run must tokenize alike)."""
    return f"spacy:{lang} keeping {' '.join(kept_whole(unk_token))}"
