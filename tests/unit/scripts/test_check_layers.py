"""scripts/check-layers: passes on the tree, fails (exit 1, file:line and the rule) on a forbidden include."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CHECK = ROOT / "scripts" / "check-layers"


def run(src):
    return subprocess.run([sys.executable, str(CHECK), str(src)], capture_output=True, text=True)


@pytest.fixture
def tree(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("*.o"))
    return src


def add_include(path, include):
    text = path.read_text()
    path.write_text(f'#include "{include}"\n' + text)


def test_the_tree_keeps_its_layers():
    r = run(ROOT / "src")
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize(
    "file,include,rule",
    [
        ("core/manager.cc", "runtime/jail/jail_runtime.h", "core talks to tiers only through runtime::Runtime"),
        ("core/reconcile.cc", "runtime/vm/vm_runtime.h", "core talks to tiers only through runtime::Runtime"),
        ("runtime/vm/vm_runtime.cc", "runtime/jail/launch.h", "never jail code"),
        ("runtime/jail/jail_runtime.cc", "runtime/vm/qmp.h", "never vm code"),
        ("runtime/host/network.cc", "runtime/jail/jail_runtime.h", "depend on neither"),
        ("runtime/host/cgroup_v2.cc", "core/manager.h", "below the manager"),
        ("api/router.cc", "bin/manager_factory.h", "nothing else uses it"),
        ("runtime/registry.h", "runtime/vm/vm_runtime.h", "the runtime seam names no tier"),
    ],
)
def test_a_forbidden_include_fails_with_its_place_and_rule(tree, file, include, rule):
    add_include(tree / file, include)
    r = run(tree)
    assert r.returncode == 1
    assert f'src/{file}:1: includes "{include}"' in r.stdout
    assert rule in r.stdout


def test_the_composition_root_may_know_every_tier(tree):
    add_include(tree / "bin" / "spaced.cc", "runtime/vm/vm_runtime.h")
    assert run(tree).returncode == 0


def test_a_missing_source_dir_is_a_usage_error(tmp_path):
    r = run(tmp_path / "nowhere")
    assert r.returncode == 2
    assert "is not a directory" in r.stderr
