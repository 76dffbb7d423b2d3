"""Layers import one way: no circle between files, no arrow from a lower package to a higher one (tools/import_graph.py)."""

from __future__ import annotations

import importlib.util

from tests.conftest import REPO


def _graph_module():
    spec = importlib.util.spec_from_file_location("import_graph", REPO / "tools" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_circle_between_files_and_no_upward_arrow():
    g = _graph_module()
    edges = g.graph()
    assert g.circles(edges) == []
    assert g.upward(edges) == []


def test_every_package_has_a_layer():
    g = _graph_module()
    for name in g.modules():
        g.layer(g.package(name))  # KeyError names a package added without a place in LAYERS


def test_the_checker_sees_imports_inside_functions_and_refuses_a_circle(tmp_path, monkeypatch):
    g = _graph_module()
    pkg = tmp_path / "veotrace"
    (pkg / "sources").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sources" / "__init__.py").write_text("")
    (pkg / "sources" / "a.py").write_text("def f():\n    from veotrace.sources import b\n")
    (pkg / "sources" / "b.py").write_text("from veotrace.sources.a import f\n")
    (pkg / "engine.py").write_text("")
    (pkg / "sources" / "c.py").write_text("def g():\n    import veotrace.engine\n")
    monkeypatch.setattr(g, "ROOT", pkg)
    edges = g.graph()
    assert g.circles(edges) == [["veotrace.sources.a", "veotrace.sources.b"]]
    assert g.upward(edges) == [("veotrace.sources.c", "veotrace.engine")]
