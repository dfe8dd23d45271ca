"""Plug-in presets follow their base method's preset.

A plug-in preset (``conf/<method>-<plug-ins>-<dataset>-<protocol>.toml``, e.g.
``pfedrec-sam-plgc-lastfm2k-strict``) measures the plug-in on top of its method as tuned:
every key of the base preset (``conf/<method>-<dataset>-<protocol>.toml``) holds the base's
value, and only the plug-in's own keys (:data:`PLUGIN_KEYS`) differ. When a base preset is
re-tuned, its plug-in presets follow with::

    python -m fedrec_lab.presets sync      # rewrite the plug-in presets' base keys
    python -m fedrec_lab.presets check     # list the drift, exit 1 if any
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

CONF = Path(__file__).resolve().parent.parent / "conf"
#: Stem parts naming a plug-in (between the method and the dataset).
PLUGINS = ("dual", "sam", "plgc")
#: Keys a plug-in preset sets on its own (its plug-ins' knobs).
PLUGIN_KEYS = frozenset(
    {
        "personalization",
        "sam-rho-private",
        "sam-rho-shared",
        "plgc",
        "plgc-alpha",
        "plgc-decorrelation",
        "plgc-persist",
    }
)
#: Keys a plug-in preset may add where its base sets none (a base without personal rows
#: has no ``keep-personal-rows``; DualPer or PLGC give it some).
PLUGIN_MAY_ADD = frozenset({"keep-personal-rows"})


def base_stem(stem: str) -> str | None:
    """The base preset of a plug-in preset's stem, or None if ``stem`` has no plug-in."""
    parts = stem.split("-")
    kept = [part for part in parts if part not in PLUGINS]
    return "-".join(kept) if len(kept) < len(parts) else None


def load(path: Path) -> dict[str, Any]:
    with path.open("rb") as handle:
        return tomllib.load(handle)


def set_keys(
    path: Path, values: dict[str, Any], drop: set[str] = frozenset(), note: str | None = None
) -> None:
    """Set ``values`` in a preset file (in place, else appended) and remove the ``drop``
    keys, keeping its other lines and comments; ``note`` becomes its first comment line."""
    lines, remaining = [], dict(values)
    for line in path.read_text().splitlines():
        key = line.split("=", 1)[0].strip()
        if "=" in line and not line.lstrip().startswith("#"):
            if key in remaining:
                line = f"{key} = {json.dumps(remaining.pop(key))}"
            elif key in drop:
                continue
        lines.append(line)
    lines += [f"{key} = {json.dumps(value)}" for key, value in remaining.items()]
    if note is not None:
        lines.insert(0, f"# {note}")
    path.write_text("\n".join(lines) + "\n")


def drift(path: Path, conf: Path = CONF) -> dict[str, tuple[Any, Any]]:
    """Keys where a plug-in preset departs from its base: ``{key: (base, plug-in)}``
    (``None`` for a key one side lacks and that has no default). Empty for a preset in
    step or without plug-in."""
    base = base_stem(path.stem)
    if base is None:
        return {}
    base_path = conf / f"{base}.toml"
    if not base_path.exists():
        raise FileNotFoundError(f"{path.name} has no base preset {base_path.name}")
    from fedrec_flwr.config import RunConfig

    defaults = RunConfig().to_mapping()  # a key left out holds its default
    want, have = load(base_path), load(path)
    out = {}
    for key in sorted(set(want) | set(have)):
        if key in PLUGIN_KEYS or (key not in want and key in PLUGIN_MAY_ADD):
            continue
        if want.get(key, defaults.get(key)) != have.get(key, defaults.get(key)):
            out[key] = (want.get(key), have.get(key))
    return out


def sync(path: Path, conf: Path = CONF) -> dict[str, tuple[Any, Any]]:
    """Rewrite a plug-in preset's base keys from its base preset, keeping its comments,
    order and plug-in keys; returns what changed."""
    changed = drift(path, conf)
    if not changed:
        return {}
    want = load(conf / f"{base_stem(path.stem)}.toml")
    set_keys(path, {k: want[k] for k in changed if k in want}, drop=set(changed) - set(want))
    return changed


def plugin_presets(conf: Path = CONF) -> list[Path]:
    return sorted(p for p in conf.glob("*.toml") if base_stem(p.stem) is not None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fedrec_lab.presets", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("action", choices=("check", "sync"))
    parser.add_argument("--conf", type=Path, default=CONF)
    args = parser.parse_args(argv)
    found = 0
    for path in plugin_presets(args.conf):
        changes = sync(path, args.conf) if args.action == "sync" else drift(path, args.conf)
        for key, (want, have) in changes.items():
            found += 1
            verb = "set" if args.action == "sync" else "differs:"
            print(f"{path.name}: {key} {verb} {have!r} -> {want!r} (base)")
    if args.action == "check" and found:
        print("Run `python -m fedrec_lab.presets sync` to bring them in step.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
