"""The name registries: decorator registration, discovery, duplicate and unknown-name errors."""

from __future__ import annotations

import sys
import textwrap

import pytest

from privauditor.tasks.infra.errors import PrivauditorError, UnknownNameError, closest
from privauditor.tasks.infra.registry import Registry


@pytest.fixture
def plugin_package(tmp_path, monkeypatch):
    """A throwaway plugin package with two plugin files and one private helper module."""
    package = tmp_path / "fakeplugins"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from privauditor.tasks.infra.registry import Registry\nTHINGS = Registry('thing', __name__)\n"
    )
    for stem in ("alpha_beta", "gamma"):
        (package / f"{stem}.py").write_text(
            textwrap.dedent(f"""
                from . import THINGS

                @THINGS.register("{stem}")
                class Plugin:
                    pass
            """)
        )
    (package / "_helper.py").write_text("raise RuntimeError('private modules are not plugins')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package
    for name in [m for m in sys.modules if m.startswith("fakeplugins")]:
        del sys.modules[name]


def test_discovery_finds_every_plugin_file_without_a_list(plugin_package):
    import fakeplugins

    assert fakeplugins.THINGS.names() == ["alpha_beta", "gamma"]
    assert fakeplugins.THINGS.get("gamma").__module__ == "fakeplugins.gamma"


def test_unknown_name_lists_known_names_and_closest_match(plugin_package):
    import fakeplugins

    with pytest.raises(UnknownNameError) as info:
        fakeplugins.THINGS.get("alpha_betta")
    message = str(info.value)
    assert "unknown thing 'alpha_betta'" in message
    assert "did you mean 'alpha_beta'?" in message
    assert "known: alpha_beta, gamma" in message
    assert "\n" not in message
    assert isinstance(info.value, PrivauditorError) and info.value.exit_code == 2


def test_no_suggestion_when_nothing_is_close(plugin_package):
    import fakeplugins

    with pytest.raises(UnknownNameError) as info:
        fakeplugins.THINGS.get("zzzzzz")
    assert "did you mean" not in str(info.value)


def test_duplicate_registration_is_an_error():
    registry: Registry[object] = Registry("thing", "privauditor.tasks.attacks")
    registry.add("a", object)
    with pytest.raises(ValueError, match="registered twice"):
        registry.add("a", int)


def test_closest_is_case_insensitive():
    assert closest("TINY-LLAMA", ["tiny-llama", "tiny-opt"]) == "tiny-llama"
    assert closest("qqq", ["tiny-llama"]) is None


def test_discovery_from_many_threads_at_once_sees_every_plugin():
    """In a fresh interpreter, eight threads ask for eight attacks at once (as an attack actor's threads
    do): each gets its plugin, none sees a half-discovered registry."""
    import subprocess
    import sys

    script = (
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from privauditor.tasks.attacks import build_attack\n"
        "names = ['loss', 'reference', 'zlib', 'neighbourhood', 'min_k', 'min_k_pp', 'gradnorm', 'loss']\n"
        "with ThreadPoolExecutor(8) as pool:\n"
        "    built = list(pool.map(build_attack, names))\n"
        "print(','.join(type(b).__module__.rsplit('.', 1)[1] for b in built))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr.strip().splitlines()[-1:]
    assert done.stdout.strip() == "loss,reference,zlib,neighbourhood,min_k,min_k_pp,gradnorm,loss"
