"""The subsystem manifests (``sim/manifests/``) are the one place a subsystem is declared:
every central registry equals what they say, a new subsystem's manifest shows in all of them
without an edit anywhere else, and a manifest naming what does not exist fails in one line
that names the manifest and the fix."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import sim.manifests
from fixtures.known_bugs import CATALOGUE, catalogue
from lch import history, suites
from properties.harness import HarnessMachine
from properties.machines import HUNT_MACHINES, MACHINES, machine_for
from sim import targets
from sim.manifests import ManifestError, all_manifests, check_references, vllm_suites
from sim.native.bugs import BUG_SWITCHES, bug_subsystems
from sim.ports import PORTS

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = all_manifests()


def cross_cutting() -> list[str]:
    """The noxfile's ``CROSS_CUTTING_VLLM_SUITES``, read without importing nox."""
    for node in ast.parse((ROOT / "noxfile.py").read_text()).body:
        if (isinstance(node, ast.Assign)
                and getattr(node.targets[0], "id", "") == "CROSS_CUTTING_VLLM_SUITES"):
            return ast.literal_eval(node.value)
    raise AssertionError("noxfile.py defines no CROSS_CUTTING_VLLM_SUITES")


# -- (a) the registries are the manifests' -------------------------------------------------

def test_every_manifest_names_what_exists():
    for manifest in MANIFESTS:
        check_references(manifest)
        assert issubclass(machine_for(manifest.name), HarnessMachine), manifest.name


def test_targets_are_the_manifests():
    assert targets.SUBSYSTEMS == tuple(m.name for m in MANIFESTS)
    assert targets.implemented_pairs() == sorted(
        (base, m.name) for m in MANIFESTS for base in m.factories)
    for manifest in MANIFESTS:
        for base, ref in manifest.factories.items():
            module, _, name = ref.partition(":")
            assert targets._FACTORIES[(base, manifest.name)] is getattr(
                importlib.import_module(module), name), (base, manifest.name)


def test_ports_and_machines_are_the_manifests():
    assert list(PORTS) == list(targets.SUBSYSTEMS)
    assert MACHINES == {m.name: m.machine for m in MANIFESTS}
    assert list(MACHINES) == list(targets.SUBSYSTEMS)
    # Each subsystem's machine by its name, then its further machines as <subsystem>.<name>.
    assert HUNT_MACHINES == {name: ref for m in MANIFESTS for name, ref in
                             [(m.name, m.machine), *((f"{m.name}.{k}", r)
                                                     for k, r in m.machines.items())]}


def test_bug_switches_and_catalogue_are_the_manifests():
    for manifest in MANIFESTS:
        for bug in manifest.bugs:
            assert bug_subsystems(bug) == (manifest.name, *manifest.also_acts_in), bug
    assert sorted(BUG_SWITCHES) == sorted(b for m in MANIFESTS for b in m.bugs)
    assert CATALOGUE == catalogue(MANIFESTS)
    # Every subsystem with a switch has a catalogue, whose entries are exactly its switches.
    for manifest in MANIFESTS:
        ids = [bug.id for bug in CATALOGUE if bug.subsystem == manifest.name]
        assert sorted(ids) == sorted(manifest.bugs), manifest.name
    # A switch acting in another subsystem is run there by the catalogue test.
    for bug in CATALOGUE:
        assert [also[0] for also in bug.also_caught_by] == list(bug_subsystems(bug.id)[1:])


def test_history_and_mutation_subjects_are_the_manifests():
    columns = [c for m in MANIFESTS for c in m.history]
    assert history.COLUMNS == tuple(c.name for c in columns)
    assert history.HUNTED == tuple(c.name for c in columns if c.hunted)
    assert history.SUITES == {s: c.name for c in columns for s in c.suites}
    assert set(history.HUNTED) <= set(targets.SUBSYSTEMS)      # a hunt drives a subsystem
    for manifest in MANIFESTS:          # and the further machines it names are the manifest's
        for column in manifest.history:
            assert set(column.hunt_machines) <= set(manifest.machines), column.name
            assert history.HUNT_SCOPES.get(column.name, ()) == (
                column.hunt_scope() if column.hunted else ())
    expected = {}
    for manifest in MANIFESTS:
        if manifest.mutation_subjects:
            module, _, name = manifest.mutation_subjects.partition(":")
            expected.update(getattr(importlib.import_module(module), name)(suites.Subject))
    assert suites.CLASSES == expected


def test_nox_vllm_suites_are_the_manifests():
    derived = vllm_suites(cross_cutting())
    # Every subsystem vLLM has (a vllm factory) runs in the vllm session, and in history.
    for manifest in MANIFESTS:
        if "vllm" in manifest.factories:
            assert manifest.vllm_suites, f"{manifest.source}: no vllm_suites"
        assert set(manifest.vllm_suites) <= set(derived)
    for path in [*derived, *history.SUITES]:
        assert (ROOT / path.split("::")[0]).exists(), path
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    assigned = {node.targets[0].id: ast.unparse(node.value) for node in tree.body
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}
    assert assigned["VLLM_SUITES"] == "vllm_suites(CROSS_CUTTING_VLLM_SUITES)"
    if importlib.util.find_spec("nox") is not None:      # the noxfile itself, where nox is
        assert noxfile_vllm_suites() == derived


def noxfile_vllm_suites() -> list[str]:
    """``VLLM_SUITES`` as the noxfile computes it in an interpreter of its own (``-I``: no
    PYTHONPATH, no checkout on the path, as nox loads it)."""
    code = ("import importlib.util, json; "
            "spec = importlib.util.spec_from_file_location('noxfile', 'noxfile.py'); "
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
            "print(json.dumps(m.VLLM_SUITES))")
    done = subprocess.run([sys.executable, "-I", "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_manifests_import_the_standard_library_only():
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
         "import sim.manifests as m; m.all_manifests(); "
         "print(sorted({'attrs', 'torch', 'hypothesis', 'vllm', 'properties', 'fixtures', "
         "'lch'} & {name.split('.')[0] for name in sys.modules}))"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


# -- (b) a new subsystem is its own files ---------------------------------------------------

TOY = '''
from sim.manifests.subsystem import Column, Subsystem

SUBSYSTEM = Subsystem(
    name="toy_cache",
    rank=65,
    factories={"model": "sim.factories.encoder_cache:make_model",
               "native": "sim.factories.encoder_cache:make_native"},
    small_world=dict(cache_size=2),
    port="sim.ports:EncoderCachePort",
    machine="properties.encoder_cache_machine:EncoderCacheMachine",
    worlds="properties.encoder_cache_worlds",
    shrink="properties.encoder_cache_shrink",
    vllm_suites=("properties/test_toy_cache.py",),
    history=(Column("toy_cache", ("properties/test_toy_cache.py",), hunted=True),),
    tests={"machines": ("properties/test_toy_cache.py",)},
)
'''

REGISTRIES = '''
import json, sys
import sim.manifests
sim.manifests.__path__.append(sys.argv[1])      # the new manifest's folder, nothing else
from lch import history
from properties.machines import MACHINES
from sim import targets
from sim.manifests import vllm_suites
from sim.ports import PORTS
from fixtures.tiers import tiers_of_file
print(json.dumps(dict(
    tiers=tiers_of_file("properties/test_toy_cache.py"),
    subsystems=targets.SUBSYSTEMS, machines=MACHINES, ports=list(PORTS),
    pairs=targets.implemented_pairs(), built=type(targets.make("model", "toy_cache",
                                                               cache_size=2)).__name__,
    columns=history.COLUMNS, hunted=history.HUNTED, suites=history.SUITES,
    nox=vllm_suites(json.loads(sys.argv[2])))))
'''


def test_a_new_subsystem_shows_everywhere_from_its_manifest_alone(tmp_path):
    (tmp_path / "toy_cache.py").write_text(TOY)
    before = sorted(p.name for p in (ROOT / "sim" / "manifests").iterdir())
    done = subprocess.run([sys.executable, "-c", REGISTRIES, str(tmp_path),
                           json.dumps(cross_cutting())], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    # By rank: between the secondary tiers (60) and the prefix cache (70).
    assert got["subsystems"] == [*targets.SUBSYSTEMS[:-1], "toy_cache", "prefix_cache"]
    assert got["machines"]["toy_cache"] == "properties.encoder_cache_machine:EncoderCacheMachine"
    assert "toy_cache" in got["ports"]
    assert ["model", "toy_cache"] in got["pairs"] and ["vllm", "toy_cache"] not in got["pairs"]
    assert got["built"] == "EncoderCacheModel"
    assert got["columns"] == [*history.COLUMNS[:-1], "toy_cache", "prefix_cache"]
    assert got["hunted"] == [*history.HUNTED[:-1], "toy_cache", "prefix_cache"]
    assert got["suites"]["properties/test_toy_cache.py"] == "toy_cache"
    assert "properties/test_toy_cache.py" in got["nox"]
    assert got["tiers"] == ["machines"]
    assert sorted(p.name for p in (ROOT / "sim" / "manifests").iterdir()) == before


def test_the_design_docs_example_is_a_manifest():
    """The worked example in docs/design.md ("Adding a subsystem") declares a real record."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text[text.index("## Adding a subsystem"):]
    code = textwrap.dedent(section.split("```python\n", 1)[1].split("```", 1)[0])
    scope: dict = {}
    exec(compile(code, "docs/design.md", "exec"), scope)
    assert isinstance(scope["SUBSYSTEM"], sim.manifests.Subsystem)
    assert scope["SUBSYSTEM"].rank > max(m.rank for m in MANIFESTS)


# -- (c) a manifest naming what does not exist -----------------------------------------------

@pytest.fixture
def extra_manifests(tmp_path, monkeypatch):
    """A folder on the manifests package's path: a manifest written there is discovered."""
    monkeypatch.setattr(sim.manifests, "__path__", [*sim.manifests.__path__, str(tmp_path)])
    yield tmp_path
    for name in [n for n in sys.modules if n.startswith("sim.manifests.toy_")]:
        del sys.modules[name]


@pytest.mark.parametrize("field, ref, says", [
    ("machine", "properties.toy_cache_machine:ToyCacheMachine",
     "machine names module 'properties.toy_cache_machine', which does not exist; create "
     "properties/toy_cache_machine.py or fix the reference"),
    ("machine", "properties.encoder_cache_machine:ToyCacheMachine",
     "machine names 'properties.encoder_cache_machine:ToyCacheMachine', but "
     "properties.encoder_cache_machine defines no 'ToyCacheMachine'; define it there or fix "
     "the reference"),
    ("machines", {"tiering": "properties.encoder_cache_machine:ToyTieringMachine"},
     "machines['tiering'] names 'properties.encoder_cache_machine:ToyTieringMachine', but "
     "properties.encoder_cache_machine defines no 'ToyTieringMachine'; define it there or fix "
     "the reference"),
    ("factories", {"model": "sim.factories.encoder_cache:make_toy"},
     "factories['model'] names 'sim.factories.encoder_cache:make_toy', but "
     "sim.factories.encoder_cache defines no 'make_toy'; define it there or fix the reference"),
])
def test_a_manifest_naming_nothing_fails_in_one_line(extra_manifests, field, ref, says):
    text = TOY.replace('name="toy_cache"', 'name="toy_broken"')
    if field == "machine":
        text = text.replace('machine="properties.encoder_cache_machine:EncoderCacheMachine"',
                            f"machine={ref!r}")
    elif field == "machines":
        text = text.replace("    small_world=", f"    machines={ref!r},\n    small_world=")
    else:
        text = text.replace(text[text.index("factories="):text.index("    small_world=")],
                            f"factories={ref!r},\n")
    (extra_manifests / "toy_broken.py").write_text(textwrap.dedent(text))
    manifest = next(m for m in all_manifests() if m.name == "toy_broken")
    with pytest.raises(ManifestError) as caught:
        check_references(manifest)
    message = str(caught.value)
    assert "\n" not in message
    assert message == f"{extra_manifests / 'toy_broken.py'}: {says}"
    if field == "factories":     # the target registry, built from it, says the same
        with pytest.raises(ManifestError, match="make_toy"):
            targets.factories(all_manifests())


def test_a_manifest_misnamed_or_without_a_record_fails_in_one_line(extra_manifests):
    (extra_manifests / "toy_misnamed.py").write_text(TOY)      # declares "toy_cache"
    with pytest.raises(ManifestError, match="toy_misnamed.py: declares subsystem 'toy_cache'; "
                                            "name the file toy_cache.py"):
        all_manifests()
    (extra_manifests / "toy_misnamed.py").unlink()
    (extra_manifests / "toy_empty.py").write_text("NOTHING = 1\n")
    with pytest.raises(ManifestError, match=r"toy_empty.py: defines no SUBSYSTEM"):
        all_manifests()


def test_a_switch_declared_twice_fails_in_one_line(extra_manifests):
    from sim.native.bugs import bug_switches
    (extra_manifests / "toy_twice.py").write_text(
        TOY.replace('name="toy_cache"', 'name="toy_twice"').replace(
            "    vllm_suites=", '    bugs=("enc-stale-freed",),\n    vllm_suites='))
    with pytest.raises(ManifestError, match="toy_twice.py: bug switch 'enc-stale-freed' is "
                                            "already declared by encoder_cache"):
        bug_switches(all_manifests())
