"""The console's colour themes, defined in TOML files rather than code so operators can add one.

One copy: ``specmon/tui/themes/``, shipped with the package. The checkout's top-level
``themes/`` is a link to it, so a theme edited there is the packaged one, and an editable
install shows it without a reinstall.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomllib
from textual.theme import Theme

from specmon.model.errors import ConfigError

PACKAGED_THEMES_DIR = Path(__file__).resolve().parent / "themes"

# Short names accepted in specmon.toml (`ui.theme = "dark"`) for the shipped themes.
THEME_ALIASES: dict[str, str] = {
    "dark": "specmon-dark",
    "light": "specmon-light",
    "high-contrast": "specmon-high-contrast",
}
DEFAULT_THEME = "specmon-dark"

_COLOUR_KEYS = (
    "primary",
    "secondary",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
    "success",
    "warning",
    "error",
)


def themes_dir() -> Path:
    """Where theme files are read from: the package's one copy."""
    return PACKAGED_THEMES_DIR


def theme_from_toml(path: Path) -> Theme:
    """One theme file to a Textual theme; a broken file is a ConfigError naming it."""
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read theme: {exc}", path=str(path)) from None
    if not isinstance(data.get("name"), str) or not isinstance(data.get("primary"), str):
        raise ConfigError("a theme needs string keys 'name' and 'primary'", path=str(path))
    unknown = set(data) - {*_COLOUR_KEYS, "name", "dark", "luminosity_spread", "text_alpha"}
    unknown.discard("variables")
    if unknown:
        raise ConfigError(f"unknown theme keys: {', '.join(sorted(unknown))}", path=str(path))
    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        raise ConfigError("[variables] must be a table", path=str(path))
    kwargs: dict[str, Any] = {k: str(data[k]) for k in _COLOUR_KEYS if k in data}
    return Theme(
        name=data["name"],
        dark=bool(data.get("dark", True)),
        luminosity_spread=float(data.get("luminosity_spread", 0.15)),
        text_alpha=float(data.get("text_alpha", 0.95)),
        variables={str(k): str(v) for k, v in variables.items()},
        **kwargs,
    )


def load_themes(directory: Path | None = None) -> list[Theme]:
    """Every ``*.toml`` theme in the directory, sorted by file name (the `t` cycle order)."""
    folder = directory if directory is not None else themes_dir()
    return [theme_from_toml(path) for path in sorted(folder.glob("*.toml"))]


def resolve_theme_name(name: str | None, available: list[str]) -> str:
    """The theme to start with: the config's choice (short or full name), else the default."""
    if not name:
        return DEFAULT_THEME
    full = THEME_ALIASES.get(name, name)
    if full not in available:
        raise ConfigError(
            f"ui.theme: unknown theme {name!r}; known: {', '.join(sorted(available))}"
        )
    return full
