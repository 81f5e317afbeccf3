"""What the evaluate step records of a trained pipeline: test scores, speed, size and every learned
ELMo mix."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional


def evaluate(model_dir: Path, test_path: Path, metric: str, config: Optional[Dict] = None) -> Dict:
    """Scores on the test set, words/s of the whole pipeline (cold caches), its size on disk, and
    its learned ELMo mixes (`mixes`, see `learned_mixes`) where it has any. `config`: overrides for
    `spacy.load`."""
    import spacy
    from spacy.tokens import Doc, DocBin
    from spacy.training import Example

    nlp = spacy.load(model_dir, config=config or {})
    gold = list(DocBin().from_disk(test_path).get_docs(nlp.vocab))
    examples = [
        Example(
            Doc(nlp.vocab, words=[t.text for t in ref], spaces=[bool(t.whitespace_) for t in ref]),
            ref,
        )
        for ref in gold
    ]
    # runs the whole pipeline once, from cold caches; "speed" is its words/s
    scores = nlp.evaluate(examples)
    keep = {
        k: v for k, v in scores.items() if k in (metric, "tag_acc", "ents_f", "ents_p", "ents_r")
    }
    size = sum(f.stat().st_size for f in model_dir.rglob("*") if f.is_file())
    record = {"test": keep, "words_per_s": scores["speed"], "pipeline_mb": size / 2**20}
    mixes = learned_mixes(nlp)
    if mixes:
        record["mixes"] = mixes
    return record


def learned_mixes(nlp) -> List[Dict]:
    """Every ElmoFeatures mix of the pipeline, in pipeline and config order: its config `path`, the
    biLM `layers` it mixes, its `weights` softmax(s) over all the biLM's layers (0 for a layer it
    does not mix) and `gamma`."""
    from thinc.api import Model

    from spacy_elmo.layers import MIX_NAME, feature_paths, learned_mix
    from spacy_elmo.layers.mix import mixed_layers

    out = []
    for name, component in nlp.pipeline:
        model = getattr(component, "model", None)
        if not isinstance(model, Model):
            continue
        # a config's models are made in its order, so the mixes' ids follow the order of their
        # config blocks
        mixes = sorted(
            (node for node in model.walk() if node.name == MIX_NAME), key=lambda node: node.id
        )
        paths = feature_paths(nlp.config["components"].get(name, {}), f"components.{name}")
        if len(mixes) != len(paths):
            raise ValueError(
                f"component '{name}' has {len(mixes)} ELMo mix(es) but its config names "
                f"{len(paths)} ElmoFeatures block(s): {paths}"
            )
        for path, mix in zip(paths, mixes):
            out.append(
                {
                    "path": path,
                    "layers": list(mixed_layers(mix)),
                    "weights": [float(w) for w in learned_mix(mix)],
                    "gamma": float(mix.get_param("gamma")[0]),
                }
            )
    return out
