"""Data sets by name, registered with their facts (`pazo.catalog.register_dataset`: schema, the kind
of input, shape and classes where fixed, public split). Each loader takes its typed config (its
schema's dataclass, beside the loader) and the run's random streams (splits draw from the `split`
stream, public augmentation from a substream of `public`); `build_dataset` then carves the
validation split from the private set (`validation` stream, `pazo.data.validation`)."""
from __future__ import annotations

from pazo.data.base import DataBundle, DatasetSchema, TensorSplit
from pazo.data.cifar10 import Cifar10Schema, load_cifar10_bundle
from pazo.data.digits import DigitsSchema, load_digits_bundle
from pazo.data.hf_text import HfTextSchema, load_hf_text_bundle
from pazo.data.image_folder import ImageFolderSchema, load_image_folder_bundle
from pazo.data.imdb import ImdbSchema, load_imdb_bundle
from pazo.data.mnli import MnliSchema, load_mnli_bundle
from pazo.data.prompt_tasks import PromptTaskSchema
from pazo.data.tiny_imagenet import TinyImagenetSchema, load_tiny_imagenet_bundle
from pazo.data.torchvision_data import TorchvisionSchema, load_torchvision_bundle
from pazo.catalog import DATASETS, register_dataset
from pazo.data.validation import carve_validation


@register_dataset("digits", schema=DigitsSchema, produces="image", input_shape=(1, 8, 8), classes=10)
def _digits(cfg: DigitsSchema, streams) -> DataBundle:
    return load_digits_bundle(streams.numpy["split"], test_fraction=cfg.test_fraction,
                              public_fraction=cfg.public_fraction,
                              public_imbalance=cfg.public_imbalance)


def _image_loader(load):
    """Image loaders draw their splits from the `split` stream and augment public batches with a
    generator of their own on the `public` stream."""
    def build(cfg, streams) -> DataBundle:
        return load(cfg, streams.numpy["split"], streams.torch_generator("public", substream=2))
    return build


def _text_loader(load):
    def build(cfg, streams) -> DataBundle:
        return load(cfg, streams.numpy["split"])
    return build


register_dataset("cifar10", schema=Cifar10Schema, produces="image", input_shape=(3, 32, 32),
                 classes=10)(_image_loader(load_cifar10_bundle))
register_dataset("tiny_imagenet", schema=TinyImagenetSchema, produces="image",
                 classes=200)(_image_loader(load_tiny_imagenet_bundle))
register_dataset("torchvision", schema=TorchvisionSchema, produces="image")(_image_loader(load_torchvision_bundle))
register_dataset("image_folder", schema=ImageFolderSchema, produces="image")(_image_loader(load_image_folder_bundle))
register_dataset("imdb", schema=ImdbSchema, produces="tokens", classes=2)(_text_loader(load_imdb_bundle))
register_dataset("hf_text", schema=HfTextSchema, produces="tokens")(_text_loader(load_hf_text_bundle))


@register_dataset("mnli", schema=MnliSchema, produces="mlm_prompt", classes=3)
def _mnli(cfg: MnliSchema, streams) -> DataBundle:
    from pazo.pretrained import load_pretrained

    tokenizer = load_pretrained(cfg.tokenizer, "tokenizer", cfg.download, key="model.path (dataset.tokenizer)",
                                download_key="dataset.download", model_class="AutoModelForMaskedLM")
    return load_mnli_bundle(cfg, streams.numpy["split"], tokenizer, streams.numpy["validation"])


def _prompt_task(cfg: PromptTaskSchema, streams) -> DataBundle:
    from pazo.data.prompt_tasks import load_prompt_bundle, model_kind
    from pazo.pretrained import load_pretrained

    family = {"causal": "AutoModelForCausalLM", "masked": "AutoModelForMaskedLM"}[model_kind(cfg.model_kind)]
    tokenizer = load_pretrained(cfg.tokenizer, "tokenizer", cfg.download, key="model.path (dataset.tokenizer)",
                                download_key="dataset.download", model_class=family)
    return load_prompt_bundle(cfg, streams, tokenizer)


# prompted tasks for language models (pazo.data.prompt_tasks); SQuAD is answered by generation
register_dataset("sst2", schema=PromptTaskSchema, produces="lm_prompt", classes=2)(_prompt_task)
register_dataset("glue_prompt", schema=PromptTaskSchema, produces="lm_prompt")(_prompt_task)
register_dataset("squad", schema=PromptTaskSchema, produces="lm_generation")(_prompt_task)


def build_dataset(cfg: DatasetSchema, streams) -> DataBundle:
    """The splits of the data set `cfg` (the run's typed `dataset` section: an instance of the data
    set's registered schema) describes; the validation split is carved here, once for every data set."""
    data = DATASETS.get(cfg.name)(cfg, streams)
    return carve_validation(data, cfg.val_fraction, streams.numpy["validation"])


__all__ = ["DATASETS", "DataBundle", "DatasetSchema", "TensorSplit", "build_dataset", "register_dataset"]
