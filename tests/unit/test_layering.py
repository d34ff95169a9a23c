"""Import rules between the parts of fluss_spark, checked on the source with ``ast``."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path


PACKAGE = "fluss_spark"
SOURCE = Path(__file__).resolve().parents[2] / PACKAGE

#: Every first-level subpackage or module under fluss_spark, plus ``fluss_spark`` itself.
COMPONENTS = ("fluss_spark", "errors", "config", "clock", "retry", "protocol", "metadata",
              "transport", "client", "server", "connector", "tiering", "local", "cli", "testing")


@dataclass(frozen=True)
class Rule:
    """What the modules of one component may import from fluss_spark."""

    #: Dotted names under fluss_spark ("client", "server.security"); None allows any.
    allowed: tuple[str, ...] | None
    why: str
    #: Names under fluss_spark it must not import even when ``allowed`` is None.
    forbidden: tuple[str, ...] = ()
    #: Modules outside fluss_spark it must not import.
    forbidden_outside: tuple[str, ...] = ()


# A component may always import itself and the ``fluss_spark`` package (which only holds
# ``__version__``); anything else it imports must be listed here.
RULES: dict[str, Rule] = {
    "fluss_spark": Rule((), "every import of fluss_spark runs the package itself first"),
    "errors": Rule((), "errors is the bottom layer"),
    "config": Rule(("errors",), "config sits just above errors"),
    "clock": Rule(("errors", "config"), "clock sits just above errors and config"),
    "retry": Rule(("errors", "config", "clock"), "retry sits just above errors and config"),
    "protocol": Rule(("errors", "config"), "protocol is pure encoding and does no I/O",
                     forbidden_outside=("socket", "select", "selectors")),
    "metadata": Rule(("protocol", "errors", "config", "clock"),
                     "metadata (ZooKeeper) is used by servers, never by clients"),
    "transport": Rule(("protocol", "errors", "config"),
                      "transport carries frames for both sides and knows neither"),
    "client": Rule(("transport", "protocol", "errors", "config", "clock", "retry"),
                   "client talks to servers over the wire only"),
    "server": Rule(("transport", "protocol", "metadata", "errors", "config", "clock", "retry"),
                   "servers never use the client or anything above it"),
    "connector": Rule(("client", "errors", "config", "clock", "retry"),
                      "the Spark connector reaches the cluster through the client only"),
    "tiering": Rule(("connector", "client", "errors", "config", "clock", "retry"),
                    "tiering reaches the cluster through the client (and reuses the connector)"),
    "local": Rule(("client", "transport", "protocol", "errors", "config", "server.security"),
                  "local runs servers as processes; it needs only the users file of the servers"),
    "cli": Rule(None, "only the tests use the test fakes", forbidden=("testing",)),
    "testing": Rule(None, "the test fakes may stand in for anything"),
}

#: Modules outside fluss_spark that only the listed components may import.
ONLY_IN: dict[str, tuple[tuple[str, ...], str]] = {
    "kazoo": (("metadata", "testing"), "ZooKeeper is reached through metadata.MetadataStore only"
              " (the test support injects its connection faults)"),
}

#: (importing module, imported module) accepted although RULES forbid it; the design allows
#: each of these for now.
EXCEPTIONS: set[tuple[str, str]] = {
    # Lease ids are checked against the wire protocol's own rule before any request is sent.
    ("fluss_spark.connector.options", "fluss_spark.protocol.names"),
    # `tier migrate` reads the deprecated Parquet-manifest lake, whose manifests store the table
    # schema in the protocol's text form; only the protocol parses it.
    ("fluss_spark.tiering.legacy", "fluss_spark.protocol.types"),
}

#: (importing module, imported module) that break RULES or close an import cycle while the
#: code is being reorganised; each entry goes when its import does.
KNOWN_VIOLATIONS: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Import:
    """One imported module, where it is imported and whether that runs at import time."""

    importer: str
    imported: str
    line: int
    module_level: bool


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(SOURCE.rglob("*.py"))}


def component(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _is_type_checking(test: ast.expr) -> bool:
    return ast.unparse(test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def find_imports(source: str, module: str, is_package: bool,
                 known_modules: set[str]) -> list[Import]:
    """Every import in ``source``; ``from a import b`` names ``a.b`` when that is a module."""
    found: list[Import] = []
    package = module if is_package else module.rpartition(".")[0]

    def visit(node: ast.AST, module_level: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(Import(module, alias.name, node.lineno, module_level))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append(Import(module, sub if sub in known_modules else target, node.lineno,
                                    module_level))
        # Function bodies run later; a TYPE_CHECKING block never runs.
        inner = module_level and not isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                visit(stmt, False)
            for stmt in node.orelse:
                visit(stmt, inner)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(source), True)
    return found


def all_imports() -> list[Import]:
    modules = source_modules()
    known = set(modules)
    out: list[Import] = []
    for name, path in modules.items():
        out += find_imports(path.read_text(), name, path.name == "__init__.py", known)
    return out


def _under(module: str, dotted: str) -> bool:
    full = f"{PACKAGE}.{dotted}" if dotted != PACKAGE else PACKAGE
    return module == full or module.startswith(full + ".")


def rule_breaks(imp: Import) -> str | None:
    """Why ``imp`` breaks a rule, or None."""
    src = component(imp.importer)
    top = imp.imported.split(".")[0]
    rule = RULES.get(src)
    if rule is None:
        return f"no rule for component {src!r}: add it to RULES in {Path(__file__).name}"
    if top == PACKAGE:
        if component(imp.imported) in (src, PACKAGE):
            return None
        if any(_under(imp.imported, f) for f in rule.forbidden):
            return f"{src} must not import {', '.join(rule.forbidden)}: {rule.why}"
        if rule.allowed is None or any(_under(imp.imported, a) for a in rule.allowed):
            return None
        allowed = ", ".join(rule.allowed) or "nothing else"
        return f"{src} may import only {allowed}: {rule.why}"
    if top in rule.forbidden_outside:
        return f"{src} must not import {', '.join(rule.forbidden_outside)}: {rule.why}"
    if top in ONLY_IN:
        where, why = ONLY_IN[top]
        if src not in where:
            return f"{top} is imported only in {', '.join(where)}: {why}"
    return None


def _describe(imp: Import, why: str) -> str:
    return f"{imp.importer} (line {imp.line}) imports {imp.imported}; rule: {why}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


Edge = tuple[str, str, tuple[str, str]]   # from node, to node, the import that made it


def _ours(imports: list[Import], skip_known: bool) -> list[Import]:
    return [i for i in imports if i.imported.split(".")[0] == PACKAGE
            and not (skip_known and (i.importer, i.imported) in KNOWN_VIOLATIONS)]


def _component_graph(imports: list[Import], skip_known: bool = True) -> list[Edge]:
    """Component -> component, from imports anywhere in a module."""
    return [(component(i.importer), component(i.imported), (i.importer, i.imported))
            for i in _ours(imports, skip_known) if component(i.importer) != component(i.imported)]


def _module_graph(imports: list[Import], skip_known: bool = True) -> list[Edge]:
    """Module -> module, from the imports that run when a module is imported."""
    known = set(source_modules())
    return [(i.importer, i.imported, (i.importer, i.imported)) for i in _ours(imports, skip_known)
            if i.module_level and i.imported in known and i.imported != i.importer]


def _adjacency(edges: list[Edge]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for src, dst, _ in edges:
        graph.setdefault(src, set()).add(dst)
    return graph


def _cycle_edges(edges: list[Edge]) -> set[tuple[str, str]]:
    """The imports behind edges whose two ends are in one cycle."""
    where = {node: n for n, scc in enumerate(_cycles(_adjacency(edges))) for node in scc}
    return {imp for src, dst, imp in edges if src in where and where[src] == where.get(dst)}


# -- the checks ------------------------------------------------------------------------------------
def test_every_component_has_a_rule():
    found = {component(m) for m in source_modules()}
    assert found <= set(RULES), f"components without a rule: {sorted(found - set(RULES))}"
    assert set(RULES) == set(COMPONENTS)


def test_imports_follow_the_layering_rules():
    broken = []
    for imp in all_imports():
        why = rule_breaks(imp)
        pair = (imp.importer, imp.imported)
        if why is not None and pair not in EXCEPTIONS and pair not in KNOWN_VIOLATIONS:
            broken.append(_describe(imp, why))
    assert not broken, "imports that break the layering rules:\n" + "\n".join(broken)


def test_exceptions_still_happen_and_still_break_a_rule():
    breaking = {(i.importer, i.imported) for i in all_imports() if rule_breaks(i) is not None}
    stale = sorted(EXCEPTIONS - breaking)
    assert not stale, f"remove from EXCEPTIONS, these imports are gone or now allowed: {stale}"


def test_known_violations_still_break_a_rule_or_close_a_cycle():
    imports = all_imports()
    offending = {(i.importer, i.imported) for i in imports if rule_breaks(i) is not None}
    offending |= _cycle_edges(_component_graph(imports, skip_known=False))
    offending |= _cycle_edges(_module_graph(imports, skip_known=False))
    stale = sorted(KNOWN_VIOLATIONS - offending)
    assert not stale, f"remove from KNOWN_VIOLATIONS, these imports are fixed: {stale}"


def test_only_the_test_fakes_import_the_test_fakes():
    offenders = [_describe(i, "only tests and fluss_spark.testing import fluss_spark.testing")
                 for i in all_imports()
                 if _under(i.imported, "testing") and component(i.importer) != "testing"]
    assert not offenders, "\n".join(offenders)


def test_no_import_cycle_between_components():
    cycles = _cycles(_adjacency(_component_graph(all_imports())))
    assert cycles == [], f"components import each other in a cycle: {cycles}"


def test_no_import_cycle_between_modules_at_module_level():
    cycles = _cycles(_adjacency(_module_graph(all_imports())))
    assert cycles == [], f"modules import each other at import time: {cycles}"


# -- the checker itself ----------------------------------------------------------------------------
# The module names below are made up: the checks must not depend on today's modules.
def test_find_imports_sees_function_level_relative_and_from_imports():
    source = (
        "import socket\n"
        "from fluss_spark.client import sample_module, SampleClass\n"
        "from . import layout\n"
        "from ..errors import ApiError\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from fluss_spark.server import settings\n"
        "class A:\n"
        "    import json\n"
        "def f():\n"
        "    import kazoo.client\n"
        "    from fluss_spark.server.tablet import sample_tablet\n"
    )
    known = {"fluss_spark.client.sample_module", "fluss_spark.metadata.layout",
             "fluss_spark.server.settings", "fluss_spark.server.tablet.sample_tablet"}
    got = {(i.imported, i.line, i.module_level)
           for i in find_imports(source, "fluss_spark.metadata.store", False, known)}
    assert got == {
        ("socket", 1, True),
        ("fluss_spark.client.sample_module", 2, True),
        ("fluss_spark.client", 2, True),
        ("fluss_spark.metadata.layout", 3, True),
        ("fluss_spark.errors", 4, True),
        ("typing", 5, True),
        ("fluss_spark.server.settings", 7, False),
        ("json", 9, True),
        ("kazoo.client", 11, False),
        ("fluss_spark.server.tablet.sample_tablet", 12, False),
    }


def test_rule_messages_name_both_modules_and_the_rule():
    imp = Import("fluss_spark.client.sample", "fluss_spark.server.sample", 7, False)
    why = rule_breaks(imp)
    assert why is not None and why.startswith("client may import only transport, protocol")
    assert _describe(imp, why) == (
        "fluss_spark.client.sample (line 7) imports fluss_spark.server.sample; rule: client may "
        "import only transport, protocol, errors, config, clock, retry: client talks to servers "
        "over the wire only")
    assert rule_breaks(Import("fluss_spark.protocol.framing", "socket", 3, True)) == (
        "protocol must not import socket, select, selectors: protocol is pure encoding and does "
        "no I/O")
    assert rule_breaks(Import("fluss_spark.client.embedded.connection", "socket", 3, True)) is None
    assert rule_breaks(Import("fluss_spark.server.process", "kazoo.client", 3, False)) == (
        "kazoo is imported only in metadata, testing: ZooKeeper is reached through "
        "metadata.MetadataStore only (the test support injects its connection faults)")
    assert rule_breaks(Import("fluss_spark.local.embedded", "fluss_spark.server.security", 1,
                              False)) is None
    assert rule_breaks(Import("fluss_spark.local.embedded", "fluss_spark.server.sample", 1,
                              False)) is not None
    assert rule_breaks(Import("fluss_spark.cli.common", "fluss_spark.testing.tablet", 1,
                              False)) == "cli must not import testing: only the tests use the " \
                                         "test fakes"


def test_cycles_are_found():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
