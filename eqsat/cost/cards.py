"""Which shipped profile a GPU takes: ``auto`` names the profile of the card torch sees.

A card is known by a word of its name (``torch.cuda.get_device_name``); a card no shipped profile was
measured on, or no GPU at all, is a clear error that asks for a profile by name.
"""

from __future__ import annotations

from typing import TypeVar

AUTO = "auto"  # the profile of the GPU torch sees
GPU_PROFILES = {"H200": "h200", "H100": "h100", "MI300X": "mi300x", "MI355X": "mi355x"}
"""A word of a GPU's name -> the shipped profile of that card (h200 and h100 measured on it)."""

P = TypeVar("P")


def gpu_profile_name(gpu: str | None = None) -> str:
    """The shipped profile of the GPU named ``gpu`` (default: the one torch sees)."""
    from eqsat.cost.roofline import profile_names  # which profiles ship: for the error only

    if gpu is None:
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"profile {AUTO!r} needs a GPU torch can see; name one of {profile_names()} instead")
        gpu = torch.cuda.get_device_name()
    words = set(gpu.upper().replace("-", " ").split())
    found = [name for word, name in GPU_PROFILES.items() if word in words]
    if len(found) != 1:
        raise ValueError(f"no shipped profile was measured on a {gpu!r} (known cards: "
                         f"{', '.join(sorted(GPU_PROFILES))}); name one of {profile_names()} or a .json path")
    return found[0]


def resolved(profile: P) -> P | str:
    """``profile`` itself (a name, a path or a ``Profile``), or for ``auto`` the GPU's profile's name."""
    return gpu_profile_name() if profile == AUTO else profile
