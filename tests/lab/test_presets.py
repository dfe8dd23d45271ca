"""Plug-in presets hold their base method's preset outside the plug-in's own keys
(``python -m fedrec_lab.presets``): a re-tuned base cannot leave its plug-ins behind."""

from __future__ import annotations

import tomllib

import pytest

from fedrec_lab import presets

PLUGIN_PRESETS = presets.plugin_presets()


def test_stems_name_their_base():
    assert presets.base_stem("pfedrec-sam-plgc-lastfm2k-strict") == "pfedrec-lastfm2k-strict"
    assert presets.base_stem("fedmf-dual-ml100k-paper") == "fedmf-ml100k-paper"
    assert presets.base_stem("fedrecon-ml100k-strict") is None
    assert len(PLUGIN_PRESETS) >= 30


@pytest.mark.parametrize("preset", PLUGIN_PRESETS, ids=lambda p: p.stem)
def test_every_plugin_preset_is_in_step_with_its_base(preset):
    assert presets.drift(preset) == {}, "run `python -m fedrec_lab.presets sync`"


def test_sync_rewrites_base_keys_keeps_plugin_keys_and_comments(tmp_path):
    (tmp_path / "fedmf-ml100k-strict.toml").write_text(
        'method = "fedmf"\nlr = 0.3\nnum-negatives = 8\n'
    )
    plugin = tmp_path / "fedmf-sam-ml100k-strict.toml"
    plugin.write_text('# why\nmethod = "fedmf"\nlr = 2.0\nbatch-size = 64\nsam-rho-shared = 0.05\n')
    assert presets.main(["check", "--conf", str(tmp_path)]) == 1
    changed = presets.sync(plugin, tmp_path)
    assert set(changed) == {"lr", "num-negatives", "batch-size"}
    text = plugin.read_text()
    assert text.startswith("# why\n")
    assert tomllib.loads(text) == {
        "method": "fedmf",
        "lr": 0.3,
        "sam-rho-shared": 0.05,
        "num-negatives": 8,
    }
    assert presets.main(["check", "--conf", str(tmp_path)]) == 0


def test_a_key_left_at_its_default_is_not_drift(tmp_path):
    (tmp_path / "pfedrec-ml100k-strict.toml").write_text(
        'method = "pfedrec"\nkeep-personal-rows = "tuned"\n'
    )
    plugin = tmp_path / "pfedrec-plgc-ml100k-strict.toml"
    plugin.write_text('method = "pfedrec"\nplgc = true\n')
    assert presets.drift(plugin, tmp_path) == {}
