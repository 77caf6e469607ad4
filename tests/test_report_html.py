"""The HTML reports open from disk with no network: no script or stylesheet from a CDN, math typeset
by the MathJax copy in the report folder (reports/<gpu>/_static/mathjax/), which the runner's export
(:func:`attnlab.report.export_html`) puts there."""

import importlib.util
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from attnlab import report
from attnlab.paths import REPO_ROOT

REPORTS = REPO_ROOT / "reports"
PAGES = sorted(p for p in REPORTS.glob("*/*.html") if not report.is_local_folder(p.parent))
MATHJAX_JS = f"{report.MATHJAX_DIR}/tex-svg.js"
REMOTE = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.I)   # http://, https://, protocol-relative //
#: Macros whose TeX extension MathJax would fetch at run time (autoload), from files not in the copy.
AUTOLOADED = {"toggle", "mathtip", "texttip", "bbox", "boldsymbol", "bra", "ket", "braket", "set", "Bra", "Ket",
              "Braket", "Set", "ketbra", "Ketbra", "cancel", "bcancel", "xcancel", "cancelto", "color",
              "definecolor", "textcolor", "colorbox", "fcolorbox", "enclose", "xtwoheadrightarrow",
              "xtwoheadleftarrow", "xmapsto", "xlongequal", "xtofrom", "Newextarrow", "href", "class", "style",
              "cssId", "ce", "pu", "unicode", "verb", "require"}


class _Refs(HTMLParser):
    """What a page loads: script sources, stylesheet links, and the text of its scripts and styles."""

    def __init__(self):
        super().__init__()
        self.scripts: list[str] = []
        self.stylesheets: list[str] = []
        self.code: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self._in = "script"
            if a.get("src") is not None:
                self.scripts.append(a["src"])
        elif tag == "style":
            self._in = "style"
        elif tag == "link" and "stylesheet" in (a.get("rel") or "").lower().split():
            self.stylesheets.append(a.get("href") or "")

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._in = None

    def handle_data(self, data):
        if self._in:
            self.code.append(data)


def _refs(page: Path) -> _Refs:
    parser = _Refs()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def test_there_are_committed_pages():
    assert PAGES, "no committed HTML reports under reports/<gpu>/"


@pytest.mark.parametrize("page", PAGES, ids=[f"{p.parent.name}/{p.stem}" for p in PAGES])
def test_committed_pages_load_nothing_from_the_network(page):
    refs = _refs(page)
    remote = [u for u in refs.scripts + refs.stylesheets if REMOTE.match(u)]
    assert not remote, f"{page.name} loads {remote} from the network: re-export it with attnlab.report.export_html"
    code = "\n".join(refs.code)
    imports = re.findall(r"""(?:@import\s+(?:url\()?|\bimport\s*\(\s*)["']?((?:[a-z]+:)?//[^"')\s]+)""", code, re.I)
    assert not imports, f"{page.name} imports {imports} from the network"


@pytest.mark.parametrize("page", PAGES, ids=[f"{p.parent.name}/{p.stem}" for p in PAGES])
def test_committed_pages_load_mathjax_from_their_own_folder(page):
    refs = _refs(page)
    assert MATHJAX_JS in refs.scripts, f"{page.name} does not load {MATHJAX_JS}: re-export it"
    folder = page.parent.resolve()
    for ref in refs.scripts + refs.stylesheets:
        target = (page.parent / ref.split("?")[0].split("#")[0]).resolve()
        assert target.is_relative_to(folder), f"{page.name} loads {ref}, outside its report folder"
        assert target.is_file(), f"{page.name} loads {ref}, which is not in the repository"
    assert (page.parent / report.MATHJAX_DIR / "LICENSE").is_file(), "MathJax's licence must travel with it"


def test_the_mathjax_copies_are_small_and_match_the_package():
    copies = sorted({p.parent / report.MATHJAX_DIR for p in PAGES})
    for copy in copies:
        size = sum(f.stat().st_size for f in copy.rglob("*") if f.is_file())
        assert size < 3_000_000, f"{copy} holds {size} bytes: vendor the one bundle the pages load"
        assert sorted(f.name for f in copy.iterdir()) == sorted(report.MATHJAX_FILES)
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("django-static-mathjax (test extra) is not installed")
    source = report.mathjax_source()
    for copy in copies:
        for name, src in source.items():
            assert (copy / name).read_bytes() == src.read_bytes(), (
                f"{copy / name} differs from the installed django-static-mathjax: rebuild the pages with "
                f"attnlab.report.rebuild_html('{copy.parents[1].relative_to(REPO_ROOT)}')")


def _math(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    return re.findall(r"\$\$.+?\$\$|\$[^$]+\$|\\\(.+?\\\)|\\\[.+?\\\]", text, re.S)


@pytest.mark.parametrize("page", PAGES, ids=[f"{p.parent.name}/{p.stem}" for p in PAGES])
def test_the_math_needs_no_tex_extension_outside_the_copy(page):
    # a results-first page shows a subset of its notebook's math
    ipynb = page.with_name(page.name.replace(".summary.html", ".html")).with_suffix(".ipynb")
    if not ipynb.is_file():
        pytest.skip("no executed notebook beside the page")
    used = {m for expr in _math(ipynb) for m in re.findall(r"\\([A-Za-z]+)", expr)}
    assert not used & AUTOLOADED, (f"{page.name} uses \\{sorted(used & AUTOLOADED)}, whose MathJax extension is "
                                   f"not in {report.MATHJAX_DIR}: add it there or write the math without it")


def _notebook_with_math(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("Cost $O(N^2 d)$ and $$\\sum_i x_i^\\top y_i$$"),
                nbformat.v4.new_code_cell("1 + 1", execution_count=1,
                                          outputs=[nbformat.v4.new_output("execute_result", {"text/plain": "2"},
                                                                          execution_count=1)])]
    nbformat.write(nb, path)
    return path


def test_export_html_writes_a_page_that_needs_no_network(tmp_path):
    page = report.export_html(_notebook_with_math(tmp_path / "01_x.ipynb"))
    assert page == tmp_path / "01_x.html"
    refs = _refs(page)
    assert refs.scripts == [MATHJAX_JS] and not refs.stylesheets
    text = page.read_text()
    assert "$O(N^2 d)$" in text and 'inlineMath: [["$", "$"]' in text
    assert all((tmp_path / report.MATHJAX_DIR / name).is_file() for name in report.MATHJAX_FILES)
    assert report.page_needs_mathjax(page)


def test_rebuild_html_reexports_every_executed_notebook(tmp_path):
    _notebook_with_math(tmp_path / "01_x.ipynb")
    _notebook_with_math(tmp_path / "02_y.FAILED.ipynb")
    (tmp_path / "01_x.html").write_text('<script src="https://cdn.example/mathjax.js"></script>')
    pages = report.rebuild_html(tmp_path)
    assert [p.name for p in pages] == ["01_x.html", "02_y.FAILED.html"]
    assert all(_refs(p).scripts == [MATHJAX_JS] for p in pages)


def test_a_page_exported_elsewhere_gets_mathjax_where_it_is_installed(tmp_path):
    """The Ray path: the worker's page arrives alone; installing it puts the MathJax copy beside it."""
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    out.mkdir()
    page = report.export_html(_notebook_with_math(work / "01_x.ipynb"))
    run = report.NotebookRun("01_x", status="passed")
    report.install_outputs(out, run, work / "01_x.ipynb", page)
    assert (out / "01_x.html").is_file() and (out / MATHJAX_JS).is_file() and not run.error
    plain = tmp_path / "plain"
    plain.mkdir()
    (work / "02_y.ipynb").write_text("{}")
    (work / "02_y.html").write_text("<html>no math</html>")
    report.install_outputs(plain, report.NotebookRun("02_y", status="passed"), work / "02_y.ipynb", work / "02_y.html")
    assert not (plain / report.MATHJAX_DIR).exists()


def test_without_the_package_the_committed_copy_is_used(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    source = report.mathjax_source()
    assert set(source) == set(report.MATHJAX_FILES)
    assert all(p.is_relative_to(REPORTS) and p.is_file() for p in source.values())


def test_the_results_first_page_has_results_but_no_code(tmp_path):
    import nbformat

    path = tmp_path / "01_x.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 01 — x\n\nWhat this notebook shows."),
        nbformat.v4.new_code_cell("mode = 'auto'", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("nb.show_source('a.cu')", execution_count=1, outputs=[
            nbformat.v4.new_output("display_data", {"text/markdown": "`kernels/a.cu`\n```cuda\nint secret_kernel;\n```"})]),
        nbformat.v4.new_code_cell("print(log)", execution_count=2, outputs=[
            nbformat.v4.new_output("stream", name="stdout", text="".join(f"log line {i}\n" for i in range(40)))]),
        nbformat.v4.new_code_cell("display(table)", execution_count=3, outputs=[
            nbformat.v4.new_output("display_data", {"text/markdown": "- **speedup**: 1.5 — **met**."})]),
    ]
    nbformat.write(nb, path)
    page = report.export_html(path)
    short = report.summary_path(page)
    assert short == tmp_path / "01_x.summary.html" and short.is_file()
    text = short.read_text()
    assert "What this notebook shows" in text and "— <strong>met</strong>" in text   # prose and verdicts stay
    assert "secret_kernel" not in text and "1 source listing(s)" in text            # listings go
    assert "display(table)" not in text and "mode = " not in text                     # no code, no parameters
    assert "log line 5" in text and "log line 39" not in text and "more lines in the full page" in text
    assert 'href="01_x.html"' in text
    assert "secret_kernel" in page.read_text()                                        # the full page keeps all
    refs = _refs(short)
    assert refs.scripts == [MATHJAX_JS] and not refs.stylesheets


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_committed_pages_colour_diffs_and_scroll_wide_tables(page):
    """Every committed page carries the export's own style: deleted and inserted diff lines in colour,
    wide tables scrolling inside their output (re-export with rebuild_html after changing it)."""
    text = page.read_text(encoding="utf-8")
    assert ".highlight .gd { color:" in text and ".highlight .gi { color:" in text, page.name
    assert "overflow-x: auto" in text, page.name

