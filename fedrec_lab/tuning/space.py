"""A study's search space and start point, from the declarations of the method and of the
plug-ins and key groups it enables."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fedrec_flwr.schema import Dim, Group


def suggest(dim: Dim, trial: Any, key: str) -> Any:
    """Optuna's suggestion for one tuned key."""
    if dim.choices:
        return trial.suggest_categorical(key, list(dim.choices))
    if dim.integer:
        return trial.suggest_int(key, int(dim.low), int(dim.high), log=dim.log)
    return trial.suggest_float(key, dim.low, dim.high, log=dim.log)


def space_for(preset: dict[str, Any], plugin_only: bool = False) -> dict[str, Dim]:
    """The search space of a preset, from the declarations: its method's own
    (``search_space`` of the method's card, in its order), then, by key name, those of the
    enabled plug-ins (PLGC, SAM) and of the other key groups tuned for this method
    (``keep-personal-rows`` where the method keeps personal rows it only evaluates with, the
    rule :class:`~fedrec_flwr.config.RunConfig` enforces). ``plugin_only``: the plug-ins'
    alone, the method's keys held at the preset's (a plug-in preset's base, tuned)."""
    from fedrec_flwr.config import RunConfig, key_groups
    from fedrec_flwr.methods import build_method, enabled_plugins, method_card
    from fedrec_flwr.methods.layout import layout

    config = RunConfig.from_mapping(preset)
    method = build_method(config, num_items=1)
    enabled = {plugin.name for plugin in enabled_plugins(config)}

    def tuned(group: type[Group]) -> bool:
        if group.plugin is not None:
            return group.plugin in enabled
        return group.tuned is None or group.tuned(config, layout(method))

    groups = [group for group in key_groups() if group.search_space and tuned(group)]
    plugins = by_key_name(group for group in groups if group.plugin is not None)
    if plugin_only:
        if not plugins:
            with_knobs = sorted(g.plugin for g in key_groups() if g.plugin and g.search_space)
            raise ValueError(
                "--plugin-only: no enabled plug-in of this preset has a knob to tune (those "
                f"with knobs: {', '.join(with_knobs)}; DualPer has none: its preset is its "
                "base's with personalization = 'dual'). Tune the base preset instead."
            )
        return plugins
    space = {**method_card(config.method_name).search_space, **by_key_name(groups)}
    if not space:
        raise ValueError(
            f"method '{config.method_name}' has no search space: give its card a search_space "
            "(run-config key -> fedrec_flwr.schema.Dim)."
        )
    return space


def by_key_name(groups: Iterable[type[Group]]) -> dict[str, Dim]:
    """The search spaces of ``groups`` in one, ordered by key name (the order Optuna draws
    them in, whatever the order the groups were registered in)."""
    dims = [item for group in groups for item in group.search_space.items()]
    return dict(sorted(dims, key=lambda item: item[0]))


def preset_point(preset: dict[str, Any], space: dict[str, Dim]) -> dict[str, Any] | None:
    """The preset's own values of the tuned keys (its method's reference defaults, else the
    defaults, where it sets none), if they lie in the space: the study's first trial, so
    tuning cannot end below its start."""
    from fedrec_flwr.config import RunConfig

    method = {key: preset[key] for key in ("method",) if key in preset}
    defaults = RunConfig.from_mapping(method).to_mapping()
    point = {key: preset.get(key, defaults[key]) for key in space}
    if any(point[key] not in dim for key, dim in space.items()):
        return None
    return point
