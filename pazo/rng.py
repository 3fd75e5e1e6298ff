"""Named, independent random streams for one run.

Data sampling, public batches, directions and DP noise each get their own stream spawned from the
run seed with numpy's SeedSequence, so none can be predicted from another (the original DPZero code
drew its noise from the direction stream).

The secret streams (`SECRET`: the Poisson sampling of private batches and the DP noise) are spawned
from the seed together with the run's computation fingerprint (`pazo.run.fingerprint`, a hash of the
config less the keys that say only how or where it runs, its values cast to their schema types)
and, once the model is built, the digests of the private data, the public data and the initial
parameters (`key_to`; docs/design/noise-key.md): runs of one sweep that differ in a
hyperparameter draw independent noise and batches, a run on other data or from other weights
draws other ones, and the same config, seed, data and weights draw the same ones again. The public streams
(directions, public batches, initialisation, splits) follow from the seed alone, so such runs
share their data splits, initial model and directions. With `secure`
(privacy.secure_mode) the secret streams are seeded from the operating system's entropy instead:
nothing in the config or the logs then reveals which examples a step used or the noise it added.

New streams go at the end of `STREAMS`: SeedSequence children are numbered, so the existing
streams keep their seeds (and every recorded run its numbers).
"""
from __future__ import annotations

import secrets

import numpy as np
import torch

STREAMS = ("data", "public", "directions", "noise", "init", "split", "validation")


class RandomStreams:
    #: the streams whose draws the guarantee needs secret: Poisson batches and DP noise
    SECRET = ("data", "noise")

    def __init__(self, seed: int, secure: bool = False, fingerprint: str | None = None):
        """`fingerprint`: the run's computation fingerprint (hex), mixed into the secret streams'
        seeds; a run always has one (`pazo.run.build.build_run`). None (unit tests, tools that
        build no run) seeds them from the seed alone."""
        self.seed = seed
        self.seeds = _spawned_seeds(np.random.SeedSequence(seed))
        if secure:
            for name in self.SECRET:
                self.seeds[name] = secrets.randbits(63)
        elif fingerprint is not None:
            keyed = _spawned_seeds(np.random.SeedSequence([seed, int(fingerprint, 16)]))
            self.seeds.update({name: keyed[name] for name in self.SECRET})
        self.secure, self.fingerprint = secure, fingerprint
        self.numpy = {name: np.random.default_rng(s) for name, s in self.seeds.items()}
        self.torch_generators: list[torch.Generator] = []  # in creation order, for checkpoints
        self._handed_out: set[str] = set()

    def key_to(self, *digests: str) -> None:
        """Key the secret streams with the digests (hex) of what else decides the released values,
        before any secret draw: a run's private data, public data and initial parameters
        (`pazo.run.build.build_run`), a library loop's private data (`pazo.private`). Their seeds
        are then spawned from the seed, the fingerprint and these digests, in order: a seeded
        computation that differs in any of them draws other noise and batches. The digests stay
        inside the process (the public fingerprint is the config's)."""
        if self.secure or self.fingerprint is None:
            return
        if any(name in self.SECRET for name in self._handed_out):
            raise RuntimeError("the secret streams are keyed before any of them is handed out")
        keyed = _spawned_seeds(np.random.SeedSequence([self.seed, int(self.fingerprint, 16),
                                                       *(int(digest, 16) for digest in digests)]))
        for name in self.SECRET:
            self.seeds[name] = keyed[name]
            self.numpy[name] = np.random.default_rng(keyed[name])

    def torch_generator(self, name: str, device: str | torch.device = "cpu", substream: int = 0) -> torch.Generator:
        """A torch generator on `name`'s stream; distinct `substream`s give independent generators
        (e.g. scalar and vector noise of one method), not copies of one sequence."""
        seed = self.seeds[name] if substream == 0 else int(
            np.random.SeedSequence([self.seeds[name], substream]).generate_state(1, dtype=np.uint64)[0] >> 1)
        self._handed_out.add(name)
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        self.torch_generators.append(gen)
        return gen

    def state(self) -> dict:
        """Every stream's position: numpy generators and the torch generators handed out so far."""
        return {"numpy": {name: g.bit_generator.state for name, g in self.numpy.items()},
                "torch": [g.get_state() for g in self.torch_generators]}

    def load_state(self, state: dict) -> None:
        """Continue every stream where `state` left it (the same generators, created in the same
        order by the same run, must exist)."""
        if len(state["torch"]) != len(self.torch_generators):
            raise ValueError(f"checkpoint holds {len(state['torch'])} torch generators, the run has "
                             f"{len(self.torch_generators)}")
        for name, s in state["numpy"].items():
            self.numpy[name].bit_generator.state = s
        for gen, s in zip(self.torch_generators, state["torch"]):
            gen.set_state(s)

    def draw_seeds(self, name: str, count: int) -> list[int]:
        """Fresh 63-bit seeds from a stream (e.g. one per zeroth-order direction): the numbers of
        `integers(0, 2**63 - 1, size=count)` on the stream's generator, drawn by `bounded_draws`
        (numpy's own call costs 70 us between forward passes, a step's worth on a small model)."""
        return bounded_draws(self.numpy[name].bit_generator, SEED_BOUND, count)


def _spawned_seeds(root: np.random.SeedSequence) -> dict[str, int]:
    """A 63-bit seed per stream, from the children of `root` numbered in `STREAMS` order."""
    return {name: int(child.generate_state(1, dtype=np.uint64)[0] >> 1)
            for name, child in zip(STREAMS, root.spawn(len(STREAMS)))}


#: seeds are drawn from [0, SEED_BOUND)
SEED_BOUND = 2**63 - 1
_UINT64 = 2**64 - 1


def bounded_draws(bit_generator: np.random.BitGenerator, bound: int, count: int) -> list[int]:
    """`count` integers uniform in [0, bound), for 2^32 < bound < 2^64: the numbers, and the use of
    the bit generator, of numpy's `Generator.integers(0, bound, size=count)` (Lemire's multiply-and-
    reject on 64-bit words, numpy's method for such a range), in Python integers. A test checks it
    against numpy, the rejection branch included."""
    if not 2**32 < bound < 2**64:
        raise ValueError(f"bound must be in (2^32, 2^64), got {bound}")
    threshold = (_UINT64 - (bound - 1)) % bound   # products whose low word is below it are redrawn
    out = []
    for _ in range(count):
        product = bit_generator.random_raw() * bound
        while product & _UINT64 < threshold:
            product = bit_generator.random_raw() * bound
        out.append(product >> 64)
    return out
