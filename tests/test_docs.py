"""The documentation site (mkdocs.yml, docs/, tools/gen_docs.py): every command has a page in the nav, every
option of every command is on its page, every page is in the nav, the README stays short, and the figures are
what tools/docs_figures.py draws (slow). `.ci/run` builds the site itself with `properdocs build --strict`.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

DOCS = REPO / "docs"


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "tools" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _gen_docs()


def _nav() -> list[str]:
    """The pages mkdocs.yml's nav lists (paths under docs/)."""
    text = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text[text.index("\nnav:"):]
    return re.findall(r"([\w./-]+\.md)\s*$", nav, re.M)


@pytest.mark.parametrize("name", gen.commands())
def test_every_command_has_its_text_and_a_page_in_the_nav(name):
    assert (DOCS / "_commands" / f"{name}.md").exists(), f"docs/_commands/{name}.md: write what `veotrace {name}` answers"
    assert f"commands/{name}.md" in _nav(), f"mkdocs.yml's nav has no commands/{name}.md"


@pytest.mark.parametrize("name", gen.commands())
def test_every_option_is_on_its_command_page(name):
    page = gen.command_page(name, with_output=False)
    cmd = gen.app_command(name)
    for p in cmd.params:
        if p.param_type_name == "option" and not p.hidden:
            for flag in [*p.opts, *p.secondary_opts]:
                assert f"`{flag}`" in page, f"commands/{name}.md does not list {flag}"
            assert (p.help or "").strip(), f"veotrace {name} {p.opts[0]} has no help: its page would say nothing"
        elif p.param_type_name == "argument":
            assert f"`{p.human_readable_name}" in page


def test_no_command_text_without_a_command():
    names = set(gen.commands())
    texts = {p.stem for p in (DOCS / "_commands").glob("*.md")}
    assert texts <= names, f"docs/_commands/ has texts for no command: {sorted(texts - names)}"


def test_every_written_page_is_in_the_nav():
    nav = set(_nav())
    generated = set(gen.pages(with_output=False))
    written = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if not p.relative_to(DOCS).parts[0] == "_commands"}
    assert written <= nav, f"pages not in mkdocs.yml's nav: {sorted(written - nav)}"
    assert nav <= written | generated, f"nav entries with no page: {sorted(nav - written - generated)}"


def test_the_command_index_names_every_command():
    index = gen.index_page()
    for name in gen.commands():
        assert f"]({name}.md)" in index


def test_the_api_reference_covers_every_api_function():
    import veotrace

    page = gen.api_page()
    for name in veotrace.__all__:
        assert f"## `veotrace.{name}`" in page, name


def test_the_readme_is_short_and_links_the_docs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 150
    for target in re.findall(r"\]\(((?:docs|tools)/[^)#]+|CONTRIBUTING\.md|CHANGELOG\.md)\)", readme):
        assert (REPO / target).exists(), target
    assert "docs/images/" in readme and (REPO / "docs/images/real-fragmentation.svg").exists()


@pytest.mark.slow
def test_the_figures_are_what_the_script_draws():
    r = subprocess.run([sys.executable, str(REPO / "tools" / "docs_figures.py"), "--check"], capture_output=True, text=True,
                       cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
