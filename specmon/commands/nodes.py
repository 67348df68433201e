"""Which profile `--profile` means to the host commands: a server spanning several nodes (and
the controller over them), or, for `connect`/`watch`, a one-host server specmon usually finds
already running (the profile's ``attach`` key)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING

from specmon.model.errors import UsageError

if TYPE_CHECKING:
    from specmon.launch.config import Config, Profile
    from specmon.session.multinode import MultiNodeController


def nodes_profile(args: argparse.Namespace, config: Config) -> Profile | None:
    """The profile named by ``--profile`` when it spans nodes (None otherwise); a HOST given
    with it must be one of its nodes."""
    name = getattr(args, "profile", None)
    if not name:
        return None
    profile = config.profile(name)
    if not profile.nodes:
        return None
    given = getattr(args, "hosts", None) or [getattr(args, "host", None)]
    for host in given:
        if host and host not in profile.nodes:
            raise UsageError(
                f"{host!r} is not a node of profile {name!r} "
                f"(its nodes: {', '.join(profile.nodes)})"
            )
    return profile


def attach_profile(args: argparse.Namespace, config: Config) -> Profile | None:
    """The one-host profile named by ``--profile`` when it has an ``attach`` key: `connect`
    and `watch` follow the server it names (``--attach`` wins: config.attach_for). None
    otherwise: no ``--profile``, one with nodes (nodes_profile's), or one without ``attach``
    (looked up, then ignored, as before the key existed)."""
    name = getattr(args, "profile", None)
    if not name:
        return None
    profile = config.profile(name)
    if profile.nodes or profile.attach is None:
        return None
    return profile


def controller_from_args(
    args: argparse.Namespace, config: Config, profile: Profile
) -> MultiNodeController:
    """The controller over ``profile``'s nodes, with the command's connection arguments."""
    from specmon.session import SessionOptions
    from specmon.session.multinode import open_nodes

    options = SessionOptions()
    if args.gpu_agent:
        options = replace(options, gpu_agent=args.gpu_agent)
    if args.state_dir:
        options = replace(options, state_dir=args.state_dir)
    return open_nodes(
        profile,
        config,
        options=options,
        known_hosts=args.known_hosts,
        ssh_config=tuple(args.ssh_config) if args.ssh_config else None,
        identity_files=tuple(args.identity or ()),
    )
