"""Presets (``python -m fedrec_lab.presets``): a plug-in preset extends its base and states only
what differs; ``conf/flat/`` holds each extending preset resolved, for plain ``flwr run``."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from fedrec_flwr.methods import Plugin, register_plugin, unregister_plugin
from fedrec_lab import presets

EXTENDING = presets.extending()


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def test_stems_name_their_base():
    assert presets.base_stem("pfedrec-sam-plgc-lastfm2k-strict") == "pfedrec-lastfm2k-strict"
    assert presets.base_stem("fedmf-dual-ml100k-paper") == "fedmf-ml100k-paper"
    assert presets.base_stem("fedrecon-ml100k-strict") is None


def test_the_plugin_words_of_stems_are_the_registered_plugins_preset_words():
    assert presets.plugin_words() == ("dual", "sam", "nosam", "plgc")
    register_plugin(Plugin("half", "", bool, method=lambda config, items, m: m, presets=("half",)))
    try:
        assert presets.base_stem("fedmf-half-ml100k-paper") == "fedmf-ml100k-paper"
    finally:
        unregister_plugin("half")
    assert presets.base_stem("fedmf-half-ml100k-paper") is None


def test_every_plugin_preset_extends_and_the_folder_has_no_problem():
    plugin = [p for p in presets.presets() if presets.base_stem(p.stem) is not None]
    assert len(plugin) >= 30 and set(plugin) <= set(EXTENDING)
    assert presets.problems() == []


@pytest.mark.parametrize("preset", EXTENDING, ids=lambda p: p.stem)
def test_each_extending_preset_resolves_to_its_committed_flat_copy(preset):
    """conf/flat/ was first generated from the flat presets these replace: a resolved preset
    that changed (a base re-tuned included) shows here as a diff of committed files."""
    flat = preset.parent / presets.FLAT / preset.name
    resolved = presets.resolve(preset)
    assert tomllib.loads(flat.read_text()) == resolved
    assert presets.EXTENDS not in resolved and "method" in resolved


def test_resolve_reads_the_base_first_through_a_chain(tmp_path):
    write(tmp_path, "a", '# root\nmethod = "fedmf"\nlr = 0.3\nnum-negatives = 8\n')
    write(tmp_path, "b", 'extends = "a"\nlr = 2.0\nsam-rho-shared = 0.05\n')
    leaf = write(tmp_path, "c", 'extends = "b"\nnum-negatives = 4\nplgc = true\n')
    assert [p.stem for p in presets.chain(leaf)] == ["c", "b", "a"]
    resolved = presets.resolve(leaf)
    assert resolved == {
        "method": "fedmf",
        "lr": 2.0,
        "num-negatives": 4,
        "sam-rho-shared": 0.05,
        "plgc": True,
    }
    assert list(resolved) == ["method", "lr", "num-negatives", "sam-rho-shared", "plgc"]


def test_unknown_bases_and_cycles_are_refused_naming_the_files(tmp_path):
    lost = write(tmp_path, "lost", 'extends = "nowhere"\nlr = 1.0\n')
    with pytest.raises(
        presets.PresetError, match=r"lost\.toml: extends = 'nowhere'.*nowhere\.toml"
    ):
        presets.resolve(lost)
    write(tmp_path, "x", 'extends = "y"\n')
    write(tmp_path, "y", 'extends = "x"\n')
    with pytest.raises(presets.PresetError, match=r"cycle: .*x\.toml -> .*y\.toml -> .*x\.toml"):
        presets.resolve(tmp_path / "x.toml")
    write(tmp_path, "self", 'extends = "self"\n')
    with pytest.raises(presets.PresetError, match="cycle"):
        presets.resolve(tmp_path / "self.toml")
    bad = write(tmp_path, "bad", "extends = 3\n")
    with pytest.raises(presets.PresetError, match="not a preset name"):
        presets.resolve(bad)


def test_check_lists_what_a_preset_folder_gets_wrong(tmp_path):
    write(tmp_path, "fedmf-ml100k-strict", 'method = "fedmf"\nlr = 0.3\nnum-negative = 8\n')
    write(tmp_path, "fedmf-sam-ml100k-strict", 'method = "fedmf"\nsam-rho-shared = 0.05\n')
    write(tmp_path, "fedmf-dual-ml100k-strict", 'extends = "fedmf-ml100k-strict"\nlr = 0.3\n')
    write(tmp_path, "pfedrec-ml100k-strict", 'method = "pfedrec"\nnum-negatives = 0\n')
    found = presets.problems(tmp_path)
    assert presets.main(["check", "--conf", str(tmp_path)]) == 1
    text = "\n".join(found)
    assert "fedmf-ml100k-strict.toml: 'num-negative' is no run-config key" in text
    assert "(did you mean 'num-negatives'?)" in text
    assert "fedmf-sam-ml100k-strict.toml: a plug-in preset extends its method's preset" in text
    assert "extends = 'fedmf-ml100k-strict'" in text
    assert "fedmf-dual-ml100k-strict.toml: lr = 0.3 restates fedmf-ml100k-strict.toml" in text
    assert "pfedrec-ml100k-strict.toml: num-negatives" in text  # RunConfig refuses it
    assert "flat/fedmf-dual-ml100k-strict.toml: missing" in text


def test_a_plugin_key_overriding_with_another_value_or_type_is_no_restatement(tmp_path):
    write(tmp_path, "fedmf-ml100k-paper", 'method = "fedmf"\nlr = 1.0\n')
    write(tmp_path, "fedmf-dual-ml100k-paper", 'extends = "fedmf-ml100k-paper"\nlr = 2.0\n')
    assert presets.preset_problems(tmp_path / "fedmf-dual-ml100k-paper.toml") == []
    assert not presets.same_value(1, 1.0) and not presets.same_value(True, 1)


def test_build_writes_flat_copies_and_removes_stale_ones(tmp_path):
    write(tmp_path, "fedmf-ml100k-paper", 'method = "fedmf"\nlr = 1.0\n')
    write(tmp_path, "fedmf-dual-ml100k-paper", 'extends = "fedmf-ml100k-paper"\nlr = 2.0\n')
    flat = tmp_path / presets.FLAT
    flat.mkdir()
    (flat / "gone.toml").write_text('method = "fedmf"\n')
    assert presets.main(["build", "--conf", str(tmp_path)]) == 0
    assert sorted(p.name for p in flat.iterdir()) == ["fedmf-dual-ml100k-paper.toml"]
    text = (flat / "fedmf-dual-ml100k-paper.toml").read_text()
    assert "do not edit" in text and "flwr run . --run-config" in text
    assert tomllib.loads(text) == {"method": "fedmf", "lr": 2.0}
    assert presets.problems(tmp_path) == [] and presets.build(tmp_path) == []
    (flat / "fedmf-dual-ml100k-paper.toml").write_text(text.replace("2.0", "3.0"))
    assert presets.flat_problems(tmp_path) == [
        f"{flat / 'fedmf-dual-ml100k-paper.toml'}: out of date with fedmf-dual-ml100k-paper.toml;"
        f" regenerate it: `{presets.BUILD}`"
    ]


def test_set_keys_keeps_comments_and_in_an_extending_preset_only_what_differs(tmp_path):
    write(tmp_path, "fedmf-ml100k-strict", '# base\nmethod = "fedmf"\nlr = 0.3\n')
    plugin = write(
        tmp_path, "fedmf-sam-ml100k-strict", '# why\nextends = "fedmf-ml100k-strict"\nlr = 2.0\n'
    )
    presets.build(tmp_path)
    presets.set_keys(plugin, {"lr": 0.3, "sam-rho-shared": 0.05}, note="tuned: x")
    text = plugin.read_text()
    assert text.startswith("# tuned: x\n# why\n")
    assert tomllib.loads(text) == {"extends": "fedmf-ml100k-strict", "sam-rho-shared": 0.05}
    assert presets.flat_problems(tmp_path) == []  # the flat copy followed


def test_show_prints_the_resolved_preset(capsys):
    assert presets.main(["show", str(EXTENDING[0])]) == 0
    assert tomllib.loads(capsys.readouterr().out) == presets.resolve(EXTENDING[0])
