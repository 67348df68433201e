"""Stand-in for SGLang's hook registry (0.5.11+): dotted targets, AROUND hooks applied later."""

from __future__ import annotations

import enum
import pkgutil
from collections.abc import Callable
from typing import ClassVar


class HookType(enum.Enum):
    AROUND = "around"


class HookRegistry:
    _hooks: ClassVar[dict[str, list[tuple[HookType, Callable]]]] = {}
    _patched: ClassVar[set[str]] = set()

    @classmethod
    def register(cls, target: str, hook: Callable, hook_type: HookType = HookType.AROUND) -> None:
        cls._hooks.setdefault(target, []).append((hook_type, hook))

    @classmethod
    def apply_hooks(cls) -> None:
        for target, hooks in cls._hooks.items():
            if target in cls._patched:
                continue
            owner_path, attribute = target.rsplit(".", 1)
            owner = pkgutil.resolve_name(owner_path)
            function = getattr(owner, attribute)
            for _hook_type, hook in hooks:
                function = _around(function, hook)
            setattr(owner, attribute, function)
            cls._patched.add(target)


def _around(original: Callable, hook: Callable) -> Callable:
    def wrapper(*args, **kwargs):
        return hook(original, *args, **kwargs)

    wrapper.__wrapped__ = original
    return wrapper
