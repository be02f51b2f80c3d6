"""The package layout: imports point downward, no import circles, no module over 600 lines, a
protocol is a registered package, and ``import optuna_fedbo`` leaves the heavy libraries
unimported."""

from __future__ import annotations

import ast
from dataclasses import dataclass
import json
from pathlib import Path
import subprocess
import sys
from typing import ClassVar

from optuna.distributions import FloatDistribution
import pytest

import optuna_fedbo
from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FederationServer
from optuna_fedbo.federation import get_protocol
from optuna_fedbo.federation import Protocol
from optuna_fedbo.federation import ProtocolConfig
from optuna_fedbo.federation import register_protocol
from optuna_fedbo.federation.fedpne import FedPNEConfig
from optuna_fedbo.federation.fedpne import FedPNEServer
from optuna_fedbo.federation.fts import FTSConfig
from optuna_fedbo.federation.fts import FTSServer
from optuna_fedbo.federation.protocol import BUILTIN_PROTOCOLS
from optuna_fedbo.samplers import _fed
from optuna_fedbo.samplers import FedSampler

ROOT = Path(optuna_fedbo.__file__).parent
PROTOCOL_PACKAGES = tuple(BUILTIN_PROTOCOLS.values())


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, *, module_level_only: bool, type_checking: bool = False) -> set[str]:
    """Modules ``module`` imports (``from X import Y`` names ``X.Y`` when that is a module).

    ``if TYPE_CHECKING:`` blocks are skipped (never executed) unless ``type_checking``; function
    bodies are skipped when ``module_level_only``.
    """
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node) and not type_checking:
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(
                    f"{node.module}.{alias.name}"
                    for alias in node.names
                    if f"{node.module}.{alias.name}" in MODULES
                )
            if module_level_only and isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            ):
                if isinstance(node, ast.ClassDef):
                    visit(node.body)  # class bodies run at import time; methods do not
                continue
            for field in ("body", "orelse", "finalbody", "handlers"):
                child = getattr(node, field, None)
                if isinstance(child, list):
                    visit([c for c in child if isinstance(c, ast.AST)])  # type: ignore[misc]

    visit(ast.parse(MODULES[module].read_text()).body)
    return found


def _under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _offending(modules: list[str], forbidden: tuple[str, ...], module_level_only: bool) -> dict:
    return {
        m: sorted(
            i for i in _imports(m, module_level_only=module_level_only) if _under(i, *forbidden)
        )
        for m in modules
        if any(_under(i, *forbidden) for i in _imports(m, module_level_only=module_level_only))
    }


def test_core_and_privacy_know_nothing_of_optuna_or_the_federation() -> None:
    modules = [m for m in MODULES if _under(m, "optuna_fedbo.core", "optuna_fedbo.privacy")]
    assert len(modules) > 20
    forbidden = (
        "optuna",
        "optuna_fedbo.federation",
        "optuna_fedbo.samplers",
        "optuna_fedbo.simulation",
        "optuna_fedbo.search_space",
    )
    assert _offending(modules, forbidden, module_level_only=False) == {}


def test_privacy_never_imports_the_core() -> None:
    # DESIGN.md: noise draws and mechanism parameters live in privacy/; the core may use them.
    modules = [m for m in MODULES if _under(m, "optuna_fedbo.privacy")]
    assert _offending(modules, ("optuna_fedbo.core",), module_level_only=False) == {}


def test_secure_aggregation_core_imports_only_crypto_numpy_and_privacy() -> None:
    # The protocol core is pure (bytes and arrays in and out): a federation carries its messages
    # over the storage relay, so it must not know the federation, Optuna or the samplers.
    modules = [m for m in MODULES if _under(m, "optuna_fedbo.core.secagg")]
    assert len(modules) >= 8
    allowed = (
        "__future__",
        "optuna_fedbo.core.secagg",
        "optuna_fedbo.privacy",
        "numpy",
        "cryptography",
        "Crypto",
        *sys.stdlib_module_names,
    )
    found = {
        m: sorted(i for i in _imports(m, module_level_only=False) if not _under(i, *allowed))
        for m in modules
    }
    assert {m: i for m, i in found.items() if i} == {}


def test_shared_federation_machinery_never_imports_a_protocol_package() -> None:
    # Shared modules find protocols through the registry (optuna_fedbo.federation.protocol).
    shared = [
        m
        for m in MODULES
        if _under(m, "optuna_fedbo.federation")
        and not _under(m, *PROTOCOL_PACKAGES)
        and m not in ("optuna_fedbo.federation", "optuna_fedbo.federation.cli")
    ]
    assert "optuna_fedbo.federation.server" in shared
    assert "optuna_fedbo.federation.federation" in shared
    forbidden = PROTOCOL_PACKAGES + ("optuna_fedbo.samplers", "optuna_fedbo.simulation")
    assert _offending(shared, forbidden, module_level_only=False) == {}


def test_protocol_packages_never_import_samplers_simulation_or_each_other() -> None:
    for package in PROTOCOL_PACKAGES:
        modules = [m for m in MODULES if _under(m, package)]
        assert modules
        others = tuple(p for p in PROTOCOL_PACKAGES if p != package)
        forbidden = others + ("optuna_fedbo.samplers", "optuna_fedbo.simulation")
        assert _offending(modules, forbidden, module_level_only=False) == {}


def test_the_federation_package_and_samplers_never_import_the_simulation() -> None:
    # The simulation drivers build samplers: an entry point above them, re-exported lazily.
    modules = [m for m in MODULES if _under(m, "optuna_fedbo.federation", "optuna_fedbo.samplers")]
    assert _offending(modules, ("optuna_fedbo.simulation",), module_level_only=True) == {}


def test_no_module_is_over_600_lines() -> None:
    lengths = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    assert {m: n for m, n in lengths.items() if n > 600} == {}


def test_the_protocol_registry_imports_nothing_above_it() -> None:
    # The bottom of optuna_fedbo.federation: no optuna-fedbo module, not even for annotations,
    # and none by name (importlib); the built-in protocols are imported by the package itself.
    registry = "optuna_fedbo.federation.protocol"
    imported = _imports(registry, module_level_only=False, type_checking=True)
    assert sorted(i for i in imported if _under(i, "optuna_fedbo")) == []
    assert "importlib" not in imported and "__import__" not in MODULES[registry].read_text()
    package = _imports("optuna_fedbo.federation", module_level_only=True)
    assert set(PROTOCOL_PACKAGES) <= package


def test_no_import_circle_between_modules() -> None:
    # Every import that runs counts, at module level or inside a function (a lazy import closes
    # a circle as surely, only later). ``if TYPE_CHECKING:`` imports never run and are left
    # out: they name the class that owns a helper module for its annotations (e.g. lease.py and
    # Federation), which is no dependency at run time.
    graph = {
        m: sorted(i for i in _imports(m, module_level_only=False) if i in MODULES and i != m)
        for m in MODULES
    }
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in graph[module]:
            if state.get(target) == 1:
                circles.append(stack[stack.index(target) :] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in graph:
        if module not in state:
            visit(module)
    assert circles == []


#: What users import first: every package and the command line.
ENTRY_MODULES = sorted(
    [name for name, path in MODULES.items() if path.name == "__init__.py"]
    + ["optuna_fedbo.federation.cli"]
)


def test_every_entry_module_imports_first_in_a_fresh_package() -> None:
    # Import each package (and the CLI) first, optuna_fedbo's modules dropped from sys.modules
    # before each, so that an import that works only after another module was imported shows
    # up as an ImportError. (Circles, lazy imports included, are refused statically above, so
    # no module's import order depends on which one is imported first; trying every one of
    # the modules first cost 90 s of CPU.)
    script = (
        "import importlib, json, sys\n"
        f"modules = {ENTRY_MODULES!r}\n"
        "failed = {}\n"
        "for name in modules:\n"
        "    for loaded in [m for m in sys.modules if m.split('.')[0] == 'optuna_fedbo']:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as error:\n"
        "        failed[name] = repr(error)\n"
        "print(json.dumps(failed))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {}


def test_import_optuna_fedbo_leaves_heavy_libraries_unimported() -> None:
    script = (
        "import sys, json\n"
        "import optuna_fedbo, optuna_fedbo.federation, optuna_fedbo.samplers\n"
        "heavy = ('dp_accounting', 'scipy', 'sklearn', 'torch', 'matplotlib')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in heavy)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_lazy_public_names_resolve() -> None:
    import optuna_fedbo.federation as federation
    import optuna_fedbo.privacy as privacy
    from optuna_fedbo.privacy._moments import MomentsAccountant
    from optuna_fedbo.simulation import simulate
    from optuna_fedbo.simulation import simulate_fedpne

    assert federation.simulate is simulate is optuna_fedbo.simulate
    assert federation.simulate_fedpne is simulate_fedpne is optuna_fedbo.simulate_fedpne
    assert privacy.MomentsAccountant is MomentsAccountant
    with pytest.raises(AttributeError):
        federation.no_such_name  # noqa: B018
    with pytest.raises(AttributeError):
        privacy.no_such_name  # noqa: B018


def test_builtin_protocols_are_registered() -> None:
    assert get_protocol("fts").config is FTSConfig
    assert get_protocol("fts").server is FTSServer
    assert get_protocol("fedpne").config is FedPNEConfig
    assert get_protocol("fedpne").server is FedPNEServer
    with pytest.raises(ValueError, match="Unknown protocol kind 'nope'"):
        get_protocol("nope")


@dataclass(frozen=True)
class _EchoConfig(ProtocolConfig):
    kind: ClassVar[str] = "test-echo"

    rounds: int = 3


class _EchoChannel:
    def __init__(self, federation: Federation) -> None:
        self.federation = federation


class _EchoServer(FederationServer):
    def __init__(self, federation: Federation, **kwargs: object) -> None:
        self._start(
            federation,
            round_timeout=None,
            min_uploads=1,
            discard_uploads=True,
            heartbeat_interval=5.0,
        )

    @property
    def open_round(self) -> int:
        return 0


class _EchoSampler(FedSampler):
    protocol_kind = "test-echo"

    def __init__(self, federation: Federation, client_id: str) -> None:
        super().__init__(independent_sampler=None, warn_independent_sampling=False, seed=0)
        self._participate(federation, client_id, lease_ttl=60.0)

    def infer_relative_search_space(self, study, trial) -> dict:
        return {}

    def sample_relative(self, study, trial, search_space) -> dict:
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self._sample_outside(study, trial, param_name, param_distribution)


def test_a_third_protocol_plugs_in_through_the_registry(monkeypatch) -> None:
    protocol = Protocol(
        kind="test-echo", config=_EchoConfig, server=_EchoServer, channel=_EchoChannel
    )
    register_protocol(protocol)
    register_protocol(protocol)  # idempotent
    with pytest.raises(ValueError, match="already registered"):
        register_protocol(Protocol("test-echo", _EchoConfig, FederationServer, _EchoChannel))
    federation = Federation.create(
        "echo",
        search_space={"x": FloatDistribution(0.0, 1.0)},
        n_clients=2,
        protocol=_EchoConfig(rounds=5),
    )
    loaded = Federation.load("echo", federation.storage)
    assert loaded.protocol == _EchoConfig(rounds=5)
    server = FederationServer(federation)
    assert type(server) is _EchoServer and server.epoch == 1
    assert isinstance(federation.channel, _EchoChannel)
    assert federation.join("a").subregion == 0
    # Its participant sampler: the FedSampler subclass that names the protocol.
    sampler = FedSampler(federation, "b")
    assert type(sampler) is _EchoSampler and sampler.participant.index == 1
    sampler.finish()
    monkeypatch.delitem(_fed._PARTICIPANTS, "test-echo")
    with pytest.raises(ValueError, match="No participant sampler for protocol 'test-echo'"):
        FedSampler(federation, "b")
    with pytest.raises(ValueError, match="not FTS"):
        federation.features()
    with pytest.raises(ValueError, match="is not FTS"):
        Federation.create(
            "echo-dp",
            search_space={"x": FloatDistribution(0.0, 1.0)},
            n_clients=2,
            protocol=_EchoConfig(),
            privacy=optuna_fedbo.DPConfig(noise_multiplier=1.0, sample_rate=0.5, clip_norm=1.0),
        )
