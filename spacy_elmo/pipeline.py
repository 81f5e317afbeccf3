"""The `elmo` pipeline component: runs the frozen biLM over each Doc and stores the layers.

Per Doc: the non-whitespace tokens are cut into biLM input sequences (the Doc's sentences where
it has sentence boundaries, else a built-in split after sentence-final punctuation; sequences
longer than `max_length` become overlapping windows whose centres are kept). Whitespace tokens
stay out of the biLM and get zero vectors. All sequences of a batch of Docs go to the biLM
together, which sorts and packs them by length (no padding is computed); order is kept.

Where training annotates with the component (`[training] annotating_components`), the outputs
per sequence are cached (LRU, bounded in bytes), keyed by the biLM's fingerprint, its state policy
and the sequence's token texts: the biLM is frozen, so a training corpus is embedded once, not once
per epoch. At inference the cache is off unless `cache_at_inference` is set: repeated texts would
be answered from memory and speed measurements (`spacy benchmark speed` repeats its Docs) mislead.
"""

from __future__ import annotations

import threading
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
from spacy import util
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc
from spacy.vocab import Vocab
from thinc.api import Config, Model

from .bilm import ElmoEmbedder
from .bilm.finite import cast_finite
from .bilm.threads import check_threads, torch_threads
from .component_settings import (
    STORE_DTYPES,
    OwnPipeline,
    WeightsSetting,
    apply_training,
    check_read,
    check_settings,
    fixed_mix,
)
from .doc_data import ElmoDocData, token_orths, token_spans
from .doc_windows import Plan, doc_layers, doc_windows, window_texts
from .errors import ElmoConfigError, ElmoError
from .extensions import install_extensions
from .feature_cache import FeatureCache
from .files import write_atomic
from .layers import (
    MIX_NAME,
    Upstream,
    check_encoder_width,
    feature_paths,
    get_embedder,
    load_weights,
    set_sizes,
)
from .vector_hooks import HOOKS_STAY, set_vector_hooks
from .weights.pipeline import model_file
from .workers import CARRY_IN_WORKER, warn_in_spacy_worker, worker_threads

DEFAULT_MODEL_CONFIG = """
[model]
@architectures = "spacy_elmo.ElmoModel.v1"
options = null
state = null
batch_size = 64
token_cache_size = 50000
precision = "float32"
"""
DEFAULT_MODEL = Config().from_str(DEFAULT_MODEL_CONFIG)["model"]
_LOADING = threading.Lock()


class Elmo(Pipe):
    """Stores ELMo on Docs: `doc._.elmo_data` (an `ElmoDocData`), seen through `doc._.elmo`,
    `doc._.elmo_layers`, `token._.elmo` and `span._.elmo`. Frozen: its `update` learns nothing."""

    def __init__(
        self,
        vocab: Vocab,
        model: Model[List[List[str]], List[np.ndarray]],
        name: str = "elmo",
        *,
        weights: WeightsSetting = None,
        mix: Union[str, List[float]] = "average",
        store: str = "float32",
        keep_layers: bool = True,
        save_layers: bool = False,
        use_sents: bool = True,
        max_length: int = 128,
        vector_hooks: bool = False,
        cache_mb: float = 1024,
        cache_at_inference: bool = False,
        threads: Optional[int] = None,
        nlp: Optional[Language] = None,
    ):
        check_settings(store, mix, max_length, cache_mb, keep_layers, save_layers)
        self.vocab, self.model, self.name = vocab, model, name
        self.weights = weights
        self.mix = mix if isinstance(mix, str) else [float(w) for w in mix]
        self.dtype = STORE_DTYPES[store]
        self.stored_what = f"the ELMo vectors of '{name}' (store={store!r})"  # errors name it
        self.keep_layers, self.save_layers = keep_layers, save_layers
        self.use_sents, self.max_length = use_sents, max_length
        self.vector_hooks = vector_hooks
        self.cache = FeatureCache(int(cache_mb * 2**20))
        self.caching = bool(cache_at_inference)  # turned on for training: `apply_training`
        self.own_pipeline, self.restored, self.training_read = OwnPipeline(nlp), False, False
        self.threads = check_threads(threads)
        self.listener_map: Dict[str, List[Model]] = {}
        install_extensions()

    # ------------------------------------------------------------------ weights
    @property
    def bilm(self) -> ElmoEmbedder:
        """The biLM's embedder, its weights loaded on first use from `weights` unless already
        initialized or loaded."""
        bilm = get_embedder(self.model)
        if bilm is None:
            if self.weights is None:
                raise ElmoConfigError(
                    f"the '{self.name}' component has no ELMo weights: add it with "
                    f"config={{'weights': PATH}} (or set [components.{self.name}] weights) and "
                    f"call nlp.initialize()"
                )
            with _LOADING:  # threads that make the first calls at once load once
                bilm = get_embedder(self.model) or self._load_weights()
        return bilm

    def _load_weights(self) -> ElmoEmbedder:
        """Load the `weights` setting into the model; an error names the setting."""
        try:
            with torch_threads(self.threads):
                return load_weights(self.model, self.weights)
        except ElmoError as err:
            raise type(err)(f"[components.{self.name}] weights: {err}") from None

    def initialize(
        self,
        get_examples: Optional[Callable] = None,
        *,
        nlp: Optional[Language] = None,
        # spelled out: spaCy checks `initialize`'s settings against these names in its own module
        weights: Optional[Union[str, List[str], Tuple[str, str]]] = None,
    ) -> None:
        """Load the weights (from `weights`, else the component's `weights` setting; a pipeline that
        was loaded from disk keeps its own), hand the biLM's sizes to the `ElmoFeatures` that listen
        to this component, and, when `nlp` is given, check the training wiring and turn the feature
        cache on where `[training] annotating_components` lists this component (`apply_training`;
        a frozen or sourced `elmo`, which spaCy does not initialize: `read_in_training`)."""
        if weights is not None:
            self.weights = weights
        if self.weights is not None:
            self._load_weights()
        self.cache.clear()
        bilm = self.bilm  # raises if there are no weights at all
        self.mix_weights(bilm.num_output_layers)  # a mix of the wrong length is an error now
        if self.listener_map and not self.keep_layers:
            raise ElmoConfigError(
                f"{self.name}: '{self.listening_components[0]}' mixes its layers, but it keeps "
                "only the mix (keep_layers = false): set keep_layers = true"
            )
        for component, mixes in self.listener_map.items():
            section = nlp.config["components"].get(component, {}) if nlp is not None else {}
            paths = feature_paths(section, f"components.{component}")
            for mix in mixes:
                set_sizes(mix, bilm.num_output_layers, bilm.output_dim, self.sizes_source(), paths)
            if nlp is not None and component in nlp.component_names:
                check_encoder_width(nlp.get_pipe(component).model, mixes, component, paths)
        if nlp is not None:
            self.training_read = True
            apply_training(self, nlp)
            check_read(nlp, self.name)

    def read_in_training(self) -> None:
        """A mix reads this component's layers in training: apply the training settings once, where
        `initialize` did not (with the pipeline whose factory made it, unless it was loaded)."""
        if not self.training_read:
            self.training_read = True
            apply_training(self, None if self.restored else self.own_pipeline.holding(self))

    # ------------------------------------------------------ listeners (spaCy's protocol)
    @property
    def listening_components(self) -> List[str]:
        """The components whose `ElmoFeatures` read this component's layers."""
        return list(self.listener_map)

    @property
    def listeners(self) -> List[Model]:
        """The `elmo_mix` layers of the listening components."""
        return [
            mix for component in self.listening_components for mix in self.listener_map[component]
        ]

    def add_listener(self, listener: Model, component_name: str) -> None:
        """Register an `elmo_mix` of `component_name`, which then takes null sizes from this
        component's biLM; another `elmo` it listened to lets it go (spaCy links in pipeline order,
        and a mix reads the layers of the last `elmo` before it, which replaced the others')."""
        previous = listener.attrs["upstream"].component()
        if previous is not None and previous is not self:
            previous.remove_listener(listener, component_name)
        mixes = self.listener_map.setdefault(component_name, [])
        if listener not in mixes:
            mixes.append(listener)
        listener.attrs["upstream"] = Upstream(self)

    def remove_listener(self, listener: Model, component_name: str) -> bool:
        mixes = self.listener_map.get(component_name, [])
        if listener not in mixes:
            return False
        mixes.remove(listener)
        if not mixes:
            del self.listener_map[component_name]
        return True

    def find_listeners(self, component) -> None:
        """Called by spaCy for each component after this one: register its `ElmoFeatures` mixes."""
        if isinstance(getattr(component, "model", None), Model):
            for node in component.model.walk():
                if node.name == MIX_NAME:
                    self.add_listener(node, component.name)

    def sizes_source(self) -> str:
        """How errors about sizes name this component's biLM."""
        return f"the biLM of '{self.name}' ({self.weights or 'loaded with the pipeline'})"

    # ------------------------------------------------------------------ running
    def __call__(self, doc: Doc) -> Doc:
        try:
            self.set_annotations([doc], self.predict([doc]))
        except Exception as err:
            self.get_error_handler()(self.name, self, [doc], err)
        return doc

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """Annotate Docs in batches of `batch_size`; all their sequences go to the biLM together."""
        for docs in util.minibatch(stream, size=batch_size):
            try:
                self.set_annotations(docs, self.predict(docs))
            except Exception as err:
                self.get_error_handler()(self.name, self, docs, err)
            yield from docs

    def update(self, examples: Iterable, *, drop: float = 0.0, sgd=None, losses=None) -> Dict:
        """Nothing to learn (the biLM is frozen; a reader learns its own mix): `nlp.update` and
        `spacy debug model` call this. -> `losses`, unchanged."""
        return {} if losses is None else losses

    def windows(self, doc: Doc) -> Plan:
        """A Doc's biLM inputs: the token indices of its non-whitespace tokens `(n,)`, and windows
        over them."""
        return doc_windows(doc, self.use_sents, self.max_length)

    def predict(self, docs: Sequence[Doc]) -> List[ElmoDocData]:
        """Docs -> one `ElmoDocData` each (nothing is set on the Docs), on `threads` torch
        threads."""
        with torch_threads(worker_threads(self.threads)):
            if self.bilm.state_policy.carries:
                warn_in_spacy_worker(CARRY_IN_WORKER)
            return self._predict(docs)

    def _predict(self, docs: Sequence[Doc]) -> List[ElmoDocData]:
        bilm = self.bilm
        plans = [self.windows(doc) for doc in docs]
        inputs = window_texts(docs, plans)
        outputs = iter(self._embed(bilm, inputs))
        mix_weights = self.mix_weights(bilm.num_output_layers)
        out = []
        for doc, plan in zip(docs, plans):
            outs = [next(outputs) for _ in plan[1]]
            layers = doc_layers(
                doc, plan, outs, bilm.num_output_layers, bilm.output_dim, self.dtype
            )
            spans, orths = token_spans(doc), token_orths(doc)
            data = ElmoDocData(layers, None, mix_weights, spans, self.save_layers, orths)
            if not self.keep_layers or self.dtype != np.float32:  # a float16 mix can overflow
                mixed = data.mix(self.stored_what)
                if not self.keep_layers:
                    data = ElmoDocData(None, mixed, mix_weights, spans, self.save_layers, orths)
            out.append(data)
        return out

    def _embed(self, bilm: ElmoEmbedder, inputs: List[List[str]]) -> List[np.ndarray]:
        """Token-text sequences -> read-only layers `(n_layers + 1, n, 2P)` in the storage dtype,
        via the cache."""
        if not self.caching or self.cache.max_bytes == 0 or not bilm.state_policy.allows_reuse:
            return self._computed(inputs)
        prefix = (bilm.fingerprint(), bilm.state_policy, bilm.precision)
        return self.cache.through(prefix, inputs, self._computed)

    def _computed(self, inputs: List[List[str]]) -> List[np.ndarray]:
        return [self._stored(a) for a in self.model.predict(inputs)] if inputs else []

    def _stored(self, arr: np.ndarray) -> np.ndarray:
        arr = cast_finite(arr, self.dtype, self.stored_what)
        arr.setflags(write=False)
        return arr

    def mix_weights(self, n_layers: int) -> np.ndarray:
        """The fixed mix of `doc._.elmo`: `(n_layers,)` float32."""
        return fixed_mix(self.mix, n_layers)

    def set_annotations(self, docs: Sequence[Doc], datas: Sequence[ElmoDocData]) -> None:
        for doc, data in zip(docs, datas):
            doc._.elmo_data = data
            if self.vector_hooks:
                set_vector_hooks(doc)
        if self.vector_hooks:
            warn_in_spacy_worker(HOOKS_STAY)

    # ------------------------------------------------------------------ serialization
    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        _ = self.bilm  # load the weights if they are not yet
        return util.to_bytes({"model": lambda: self.model.to_bytes()}, exclude)

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "Elmo":
        util.from_bytes(
            bytes_data, {"model": lambda b: self._restored(self.model.from_bytes(b))}, exclude
        )
        self.cache.clear()
        return self

    def to_disk(self, path, *, exclude: Iterable[str] = tuple()) -> None:
        """Write the biLM into the pipeline directory (`model`), so loading needs nothing else."""
        _ = self.bilm  # load the weights if they are not yet
        # whole: an interrupted save leaves the one before as it was; the settings are in the
        # pipeline's config.cfg
        util.to_disk(path, {"model": lambda p: write_atomic(p, self.model.to_bytes())}, exclude)

    def from_disk(self, path, *, exclude: Iterable[str] = tuple()) -> "Elmo":
        deserialize = {  # read from the pipeline's directory only, as load_bilm reads it
            "model": lambda p: self._restored(
                self.model.from_disk(model_file(p.parents[1], p.parent.name), p.parents[1])
            ),
        }
        util.from_disk(path, deserialize, exclude)
        self.cache.clear()
        return self

    def _restored(self, model: Model) -> None:
        """The biLM came with the pipeline: the component's `weights` (its training run's path) is
        not read again, by `initialize` either."""
        self.weights, self.restored = None, True


@Language.factory(
    "elmo",
    assigns=["doc._.elmo_data"],
    default_config={
        "model": DEFAULT_MODEL,
        "weights": None,
        "mix": "average",
        "store": "float32",
        "keep_layers": True,
        "save_layers": False,
        "use_sents": True,
        "max_length": 128,
        "vector_hooks": False,
        "cache_mb": 1024,
        "cache_at_inference": False,
        "threads": None,
    },
)
def make_elmo(
    nlp: Language,
    name: str,
    model: Model,
    weights: WeightsSetting,
    mix: Union[str, List[float]],
    store: str,
    keep_layers: bool,
    save_layers: bool,
    use_sents: bool,
    max_length: int,
    vector_hooks: bool,
    cache_mb: float,
    cache_at_inference: bool,
    threads: Optional[int],
) -> Elmo:
    """The `elmo` factory. `weights`: anything `spacy_elmo.load_bilm` accepts, loaded by
    `initialize` or on first use (never by `spacy.load` or `from_bytes`, which read the biLM from
    the pipeline). `threads`: torch threads for the biLM (null: torch's default, 1 in the workers
    of `n_process`; 1 on a shared machine). `cache_mb`: the feature cache's bound, used while
    training and, with `cache_at_inference`, at inference too."""
    return Elmo(
        nlp.vocab,
        model,
        name,
        weights=weights,
        mix=mix,
        store=store,
        keep_layers=keep_layers,
        save_layers=save_layers,
        use_sents=use_sents,
        max_length=max_length,
        vector_hooks=vector_hooks,
        cache_mb=cache_mb,
        cache_at_inference=cache_at_inference,
        threads=threads,
        nlp=nlp,
    )
