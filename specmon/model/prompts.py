"""The fixed benchmark prompt sets shipped with specmon.

A prompt set is versioned and never edited once released (a change is a new file,
``prompts_v2.json``): results are only comparable when measured with the same set, so the
ledger stores the version and a digest of the file next to every benchmark.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from importlib import resources

from specmon.model.errors import UsageError

DEFAULT_PROMPT_SET = "v1"


@dataclass(frozen=True, slots=True)
class Prompt:
    id: str
    length: str  # "short" | "medium" | "long"
    text: str


@dataclass(frozen=True, slots=True)
class PromptSet:
    version: str
    seed: int
    digest: str  # sha256 of the shipped file, so an edited copy can never pass as the same set
    prompts: tuple[Prompt, ...]

    def schedule(self, count: int, seed: int | None = None) -> list[Prompt]:
        """``count`` prompts in a fixed order: whole shuffled rounds of the set, from the seed.

        Every length is covered once per round, so even a short benchmark mixes lengths, and
        the same (version, seed, count) always gives the same requests.
        """
        rng = random.Random(self.seed if seed is None else seed)
        out: list[Prompt] = []
        while len(out) < count:
            round_ = list(self.prompts)
            rng.shuffle(round_)
            out.extend(round_)
        return out[:count]


def available_prompt_sets() -> list[str]:
    names = []
    for entry in resources.files("specmon.model").iterdir():
        name = entry.name
        if name.startswith("prompts_") and name.endswith(".json"):
            names.append(name[len("prompts_") : -len(".json")])
    return sorted(names)


def load_prompt_set(version: str = DEFAULT_PROMPT_SET) -> PromptSet:
    """The shipped prompt set ``version`` (e.g. "v1"); a clear error for an unknown one."""
    resource = resources.files("specmon.model").joinpath(f"prompts_{version}.json")
    if not resource.is_file():
        known = ", ".join(available_prompt_sets()) or "none"
        raise UsageError(f"unknown prompt set {version!r}; shipped: {known}")
    raw = resource.read_bytes()
    data = json.loads(raw)
    prompts = tuple(
        Prompt(id=str(p["id"]), length=str(p["length"]), text=str(p["text"]))
        for p in data["prompts"]
    )
    return PromptSet(
        version=str(data["version"]),
        seed=int(data["seed"]),
        digest=hashlib.sha256(raw).hexdigest(),
        prompts=prompts,
    )
