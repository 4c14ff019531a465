"""The shape ARCHITECTURE.md promises: folders are layers, a module imports only
from its own folder and the layers below it, no import cycle, no module but
``_client.py`` reaching into the Client's privates nor any module into another
object's privates it does not own, and no module over 600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "liftbridge"

# Each folder (or top-level module) and its layer: a module may import from its own
# folder and from any lower layer, never from a higher one or a sibling of its layer.
LAYERS: dict[str, int] = {
    "liftbridge._errors": 0,
    "liftbridge.__version__": 0,
    "liftbridge._locks": 0,
    "liftbridge._handover": 0,
    "liftbridge._transport": 1,
    "liftbridge._core": 2,
    "liftbridge._publish": 3,
    "liftbridge._consume": 3,
    "liftbridge._groups": 4,
    "liftbridge._client": 5,
    "liftbridge": 6,  # __init__: the one public surface
    "liftbridge.__main__": 7,
    "liftbridge.cli": 7,
    "liftbridge.spark": 7,
    "liftbridge.testing": 7,
}

# Imports the layering allows although they point up, each with its reason.
EXCEPTIONS: dict[tuple[str, str], str] = {
    # NatsStreamPublisher is made with a Client: core_of() and attach() are the one seam
    # through which it reaches the client's router and ack timer (the client closes it first).
    ("liftbridge._publish._nats_stream", "liftbridge._client"): "core_of(), attach()",
}

# Integrations stand on the public surface (and may use one another: the command
# line's ``python -m liftbridge``).
INTEGRATIONS = 7
INTEGRATION_FOLDERS = tuple(k for k, v in LAYERS.items() if v == INTEGRATIONS)

MAX_LINES = 600
# Modules over the limit today, each to be split by its owner; the list only shrinks.
OVERSIZE: set[str] = set()


def _imports(path: Path) -> set[str]:
    """The ``liftbridge`` modules a module imports (``TYPE_CHECKING`` blocks too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "liftbridge" or node.module.startswith("liftbridge."):
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("liftbridge"))
    return found


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("").as_posix().replace("/", ".")
    name = "liftbridge." + rel
    return name.removesuffix(".__init__") if name != "liftbridge.__init__" else "liftbridge"


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {
        name: {m for m in _imports(path) if m in modules and m != name}
        for name, path in modules.items()
    }


def _layer_of(module: str) -> str:
    """The longest LAYERS key ``module`` falls under."""
    best = ""
    for key in LAYERS:
        if (module == key or module.startswith(key + ".")) and len(key) > len(best):
            best = key
    if not best:
        raise AssertionError(f"{module} is in no layer: add its folder to LAYERS")
    return best


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _layer_violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, imported in sorted(graph.items()):
        if module == "liftbridge":
            continue  # the surface re-exports from every layer
        own = _layer_of(module)
        for target in sorted(imported):
            theirs = _layer_of(target)
            if theirs == own or (module, target) in EXCEPTIONS:
                continue
            if LAYERS[theirs] >= LAYERS[own] and not (
                LAYERS[own] == INTEGRATIONS and theirs in ("liftbridge", *INTEGRATION_FOLDERS)
            ):
                bad.append(f"{module} -> {target}")
    return bad


def test_the_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_the_sdk() -> None:
    graph = _graph()
    assert "liftbridge._core._router" in graph["liftbridge._client"]  # the walk found them
    assert _cycle(graph) is None


def test_the_layer_rule_catches_an_upward_import() -> None:
    graph = {
        "liftbridge._core._router": {"liftbridge._publish._lanes"},
        "liftbridge._publish._lanes": {"liftbridge._consume._cursors"},
        "liftbridge._consume._cursors": {"liftbridge._core._router"},
    }
    assert _layer_violations(graph) == [
        "liftbridge._core._router -> liftbridge._publish._lanes",
        "liftbridge._publish._lanes -> liftbridge._consume._cursors",
    ]


def test_every_module_imports_only_its_folder_and_lower_layers() -> None:
    graph = _graph()
    assert len(graph) > 50 and "liftbridge._transport._http2" in graph
    assert _layer_violations(graph) == []


def test_every_folder_is_in_a_layer() -> None:
    for name in _modules():
        _layer_of(name)  # raises for a module no layer names


class _PrivateReach(ast.NodeVisitor):
    """``x._private`` where ``x`` is not ``self``/``cls`` and not a module: a reach
    into another object's internals. Reads the AST, so ``router._channels`` counts
    as much as ``client._router``."""

    def __init__(self, modules: set[str]) -> None:
        self.modules = modules
        self.found: list[tuple[int, str]] = []

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        private = attr.startswith("_") and not attr.startswith("__")
        if private and isinstance(node.value, ast.Name):
            owner = node.value.id
            if owner not in ("self", "cls") and owner not in self.modules:
                self.found.append((node.lineno, f"{owner}.{attr}"))
        elif private and isinstance(node.value, ast.Attribute):
            # self._client._router and the like
            inner = node.value
            if isinstance(inner.value, ast.Name) and inner.value.id == "self":
                self.found.append((node.lineno, f"self.{inner.attr}.{attr}"))
        self.generic_visit(node)


def _module_aliases(tree: ast.Module) -> set[str]:
    """Names a module binds to modules (``import x``, ``from pkg import _mod``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                if a.name.startswith("_") or node.module in ("liftbridge_api",):
                    names.add(a.asname or a.name)
    return names


# namedtuple's own API, which starts with an underscore to stay out of field names.
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make"}


def _owned(tree: ast.Module) -> set[str]:
    """The private names a module's own classes define (methods, class attributes,
    ``self._x = ...``): reaching those from elsewhere in the module is the class
    talking to another instance of itself or to its own helper."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _reaches(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    visitor = _PrivateReach(_module_aliases(tree))
    visitor.visit(tree)
    own = _owned(tree) | NAMEDTUPLE_API
    rel = path.relative_to(PACKAGE).as_posix() if path.is_relative_to(PACKAGE) else path.name
    return [
        f"{rel}:{line}: {text}" for line, text in visitor.found if text.rsplit(".", 1)[1] not in own
    ]


def test_the_reach_finder_reads_the_ast(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text(
        "from liftbridge._core import _retry\n"
        "def f(router, client):\n"
        "    _retry.x\n"
        "    router._channels.get()\n"
        "    return client._router\n"
    )
    tree = ast.parse(sample.read_text())
    visitor = _PrivateReach(_module_aliases(tree))
    visitor.visit(tree)
    assert [text for _, text in visitor.found] == ["router._channels", "client._router"]
    assert _reaches(sample) == [
        f"{sample.name}:4: router._channels",
        f"{sample.name}:5: client._router",
    ]


def test_no_module_reaches_into_another_objects_privates() -> None:
    offenders = [
        reach
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "_client.py"
        for reach in _reaches(path)
    ]
    assert offenders == []


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.name)
def test_no_module_over_600_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    name = _module_name(path)
    if name in OVERSIZE:
        assert lines > MAX_LINES, f"{name} is within the limit now: take it off OVERSIZE"
    else:
        assert lines <= MAX_LINES, f"{name} has {lines} lines (at most {MAX_LINES})"


# ------------------------------------------------------- the transport layer --

TRANSPORT = "liftbridge._transport"
TRANSPORT_ONLY = ("grpc", "hpack", "h2")
"""Libraries only the transport layer may import (their submodules too)."""
GRPC_STUBS = "_pb2_grpc"
"""The ending of a generated gRPC stub module (``liftbridge_api.api_pb2_grpc``):
it imports grpc itself, so only the transport layer may import it. The
messages (``api_pb2``) carry no grpc and go everywhere."""
TRANSPORT_PRIVATE = ("liftbridge._transport._http2", "liftbridge._transport._status")
"""Transport modules only the transport layer may import: the own HTTP/2
client (``_http2``, ``_http2_reader``, ``_http2_wire``) and the gRPC status
reading. Everything above goes through ``_channels`` and ``_stream``."""


def _transport_reaches(path: Path) -> set[str]:
    """What of the transport's own a module imports: the libraries in
    ``TRANSPORT_ONLY``, the modules in ``TRANSPORT_PRIVATE`` and generated
    gRPC stubs (read from the AST, ``TYPE_CHECKING`` blocks too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        for name in names:
            top = name.split(".")[0]
            if top in TRANSPORT_ONLY:
                found.add(top)
            found.update(p for p in TRANSPORT_PRIVATE if name == p or name.startswith(p))
            if name.endswith(GRPC_STUBS):
                found.add(name)
    return found


def test_the_transport_finder_reads_the_ast(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import grpc.experimental\n"
        "from hpack import Decoder\n"
        "from liftbridge._transport._http2_reader import FrameReader\n"
        "from liftbridge._transport._channels import Channels\n"
        "from liftbridge_api import api_pb2, api_pb2_grpc\n"
        "import liftbridge_api.api_pb2_grpc as stubs\n"
        "x = 'import h2'  # a string, not an import\n"
    )
    assert _transport_reaches(module) == {
        "grpc",
        "hpack",
        "liftbridge._transport._http2",
        "liftbridge_api.api_pb2_grpc",
    }


def test_only_the_transport_layer_imports_grpc_hpack_or_the_http2_client() -> None:
    bad = []
    for name, path in sorted(_modules().items()):
        if name == TRANSPORT or name.startswith(TRANSPORT + "."):
            continue
        bad += [f"{name} imports {each}" for each in sorted(_transport_reaches(path))]
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------ the core boundary --

CORE = "liftbridge._core"


def _over_the_core(graph: dict[str, set[str]]) -> list[str]:
    """Imports of the transport by modules above the core (the features, the
    client, the public surface, the integrations): they stand on
    the core, which opens their streams (``Router.open_stream``) and NATS
    connections (``_core/_nats_connection.py``) and re-exports the transport's
    names they need (``_router.py``, ``_nats_connection.py``,
    ``_liveness.py``)."""
    bad = []
    for module, imported in sorted(graph.items()):
        if not LAYERS[CORE] < LAYERS[_layer_of(module)] <= INTEGRATIONS:
            continue
        bad += [f"{module} -> {t}" for t in sorted(imported) if _layer_of(t) == TRANSPORT]
    return bad


def test_the_boundary_rule_catches_a_feature_importing_the_transport() -> None:
    graph = {
        "liftbridge._publish._nats_stream": {
            "liftbridge._core._nats_connection",
            "liftbridge._transport._nats_socket",
        },
        "liftbridge._groups._member": {"liftbridge._transport"},
        "liftbridge._client": {"liftbridge._transport._tls"},
        "liftbridge._core._router": {"liftbridge._transport._channels"},
        "liftbridge.testing._node": {"liftbridge._transport._tls"},
    }
    assert _over_the_core(graph) == [
        "liftbridge._client -> liftbridge._transport._tls",
        "liftbridge._groups._member -> liftbridge._transport",
        "liftbridge._publish._nats_stream -> liftbridge._transport._nats_socket",
        "liftbridge.testing._node -> liftbridge._transport._tls",
    ]


def test_features_reach_the_transport_only_through_the_core() -> None:
    graph = _graph()
    assert "liftbridge._transport._channels" in graph["liftbridge._core._router"]  # edges found
    assert _over_the_core(graph) == []
