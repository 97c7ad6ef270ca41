"""Every test is in exactly one tier (``fixtures/tiers.py``): collected over the whole tree,
none has no tier or two; ``nox -s tests`` and the plugin name the same tiers.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

from fixtures import tiers

TREE = ("properties", "lch", "fixtures/reproducers")


def collected(*args: str, cwd=tiers.ROOT) -> tuple[int, list[str]]:
    """``pytest --co -q`` here: its exit code and the test ids it printed."""
    env = {**os.environ, "PYTHONPATH": str(tiers.ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
                           *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode in (0, 5), done.stdout[-3000:] + done.stderr[-3000:]  # 5: none
    return done.returncode, [line for line in done.stdout.splitlines() if "::" in line]


def test_every_test_has_exactly_one_tier():
    _, wrong = collected("-m", tiers.not_one_tier(), *TREE)
    assert not wrong, (
        f"{len(wrong)} tests have no tier or two, e.g. {wrong[:5]}: name each file in one "
        "tier of FILES in fixtures/tiers.py, or give a test one tier's marker itself")


def test_a_test_with_no_tier_or_two_is_caught(tmp_path):
    (tmp_path / "test_made_up.py").write_text(
        "import pytest\n\n"
        "def test_untiered():\n    pass\n\n"
        "@pytest.mark.fast\ndef test_one():\n    pass\n\n"
        "@pytest.mark.fast\n@pytest.mark.slow\ndef test_two():\n    pass\n")
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["fixtures.pytest_plugin"]\n')
    _, wrong = collected("-m", tiers.not_one_tier(), "test_made_up.py", cwd=tmp_path)
    assert [w.split("::")[1] for w in wrong] == ["test_untiered", "test_two"]


def test_a_file_gets_its_tier_and_a_marker_replaces_it():
    assert tiers.tiers_of_file("properties/test_known_bugs.py") == ["catalogue"]
    assert tiers.tiers_of_file("fixtures/reproducers/found/test_x.py") == ["fast"]
    assert tiers.tiers_of_file("properties/test_new.py") == []
    docs = tiers.ROOT / "lch" / "test_docs.py"
    assert tiers.tiers_of(docs, []) == ["fast"] and tiers.tiers_of(docs, ["slow"]) == ["slow"]
    assert tiers.tiers_of(tiers.ROOT.parent / "elsewhere" / "test_x.py", []) == []


def test_every_named_file_exists():
    named = [f for files in tiers.FILES.values() for f in files]
    missing = [f for f in named if not (tiers.ROOT / f).exists()]
    assert not missing, f"fixtures/tiers.py names files that are gone: {missing}"
    assert len(named) == len(set(named)), "a file is named twice in fixtures/tiers.py"


def test_the_tests_session_knows_the_tiers():
    """noxfile.py keeps its own copy (nox imports no harness module): the same names, the
    same default."""
    tree = ast.parse((tiers.ROOT / "noxfile.py").read_text())
    values = {t.id: ast.literal_eval(node.value) for node in tree.body
              if isinstance(node, ast.Assign) for t in node.targets
              if isinstance(t, ast.Name) and t.id in ("TIERS", "DEFAULT_TIERS")}
    assert values == {"TIERS": tuple(tiers.TIERS), "DEFAULT_TIERS": tiers.DEFAULT}
