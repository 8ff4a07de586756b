"""Tests of the agentskills plugin: every kernel of termd-jupyter imports it when agentskills is enabled,
and each function prints the formats agents know (file viewer, searches, document readers), on files the
tests write."""
import os
import zipfile

import pytest

from jupyter_driver import Plugin, body


@pytest.fixture(scope="module")
def plug():
    p = Plugin(cwd="/", plugins="jupyter,agentskills")
    yield p
    p.close()


def run(plug, code, cwd=None):
    a = plug.run(code, cwd=cwd)
    assert a["observation"] == "run_ipython", a
    return body(a)


def call(plug, fn, *args, cwd=None):
    return run(plug, "%s(%s)" % (fn, ", ".join(repr(x) for x in args)), cwd=cwd)


def numbered(a, b, fmt="line %d"):
    return "\n".join("%d|%s" % (i, fmt % i) for i in range(a, b + 1))


@pytest.fixture
def big(tmp_path):
    f = tmp_path / "big.txt"
    f.write_text("".join("line %d\n" % i for i in range(1, 251)))
    return str(f)


def test_not_imported_without_the_plugin(tmp_path):
    p = Plugin(cwd=str(tmp_path), plugins="jupyter")
    try:
        assert "NameError" in body(p.run("open_file"))
    finally:
        p.close()


def test_open_file_small_whole(plug, tmp_path):
    f = tmp_path / "small.py"
    f.write_text("a = 1\nb = 2\nc = 3")     # no newline at the end
    assert call(plug, "open_file", str(f)) == (
        "[File: %s (3 lines total)]\n(this is the beginning of the file)\n1|a = 1\n2|b = 2\n3|c = 3\n"
        "(this is the end of the file)" % f)


def test_open_file_relative_path_is_shown_absolute(plug, tmp_path):
    (tmp_path / "rel.txt").write_text("x\n")
    out = call(plug, "open_file", "rel.txt", cwd=str(tmp_path))
    assert out.startswith("[File: %s (1 lines total)]\n" % (tmp_path / "rel.txt"))


def test_open_file_first_window_and_scroll_hint(plug, big):
    assert call(plug, "open_file", big) == (
        "[File: %s (250 lines total)]\n(this is the beginning of the file)\n%s\n(150 more lines below)\n"
        "[Use `scroll_down` to view the next 100 lines of the file!]" % (big, numbered(1, 100)))


def test_open_file_centred_with_context(plug, big):
    assert call(plug, "open_file", big, 120, 10) == (
        "[File: %s (250 lines total)]\n(114 more lines above)\n%s\n(125 more lines below)\n"
        "[Use `scroll_down` to view the next 100 lines of the file!]" % (big, numbered(115, 125)))


def test_goto_scroll_down_and_up(plug, big):
    call(plug, "open_file", big)
    assert call(plug, "goto_line", 200) == (
        "[File: %s (250 lines total)]\n(150 more lines above)\n%s\n(this is the end of the file)"
        % (big, numbered(151, 250)))
    call(plug, "open_file", big)
    assert call(plug, "scroll_down") == (
        "[File: %s (250 lines total)]\n(100 more lines above)\n%s\n(49 more lines below)"
        % (big, numbered(101, 201)))
    assert call(plug, "scroll_down") == (
        "[File: %s (250 lines total)]\n(150 more lines above)\n%s\n(this is the end of the file)"
        % (big, numbered(151, 250)))
    assert call(plug, "scroll_up") == (
        "[File: %s (250 lines total)]\n(100 more lines above)\n%s\n(49 more lines below)"
        % (big, numbered(101, 201)))


def test_viewer_errors(plug, big, tmp_path):
    missing = str(tmp_path / "nope.txt")
    assert call(plug, "open_file", missing) == "ERROR: File %s not found." % missing
    assert call(plug, "open_file", big, 251) == "ERROR: Line number must be between 1 and 250"
    assert call(plug, "open_file", big, 0) == "ERROR: Line number must be between 1 and 250"
    assert call(plug, "goto_line", 999) == "ERROR: Line number must be between 1 and 250."
    run(plug, "import agentskills; agentskills._current_file = None")
    for fn in ("goto_line(3)", "scroll_down()", "scroll_up()"):
        assert run(plug, fn) == "ERROR: No file open. Use the open_file function first."
    assert run(plug, "search_file('x')") == "ERROR: No file specified or open. Use the open_file function first."


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "proj"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "a.py").write_text("import os\nneedle = 1\n")
    (root / "pkg" / "b.py").write_text("x = 'needle'\n\n  needle()  \n")
    (root / "pkg" / "sub" / "c_test.py").write_text("nothing here\n")
    (root / ".hidden.py").write_text("needle\n")
    (root / ".git" / "config").write_text("needle\n")
    return root


def test_search_dir(plug, tree):
    d = str(tree)
    assert call(plug, "search_dir", "needle", d) == "\n".join([
        '[Found 3 matches for "needle" in %s]' % d,
        "%s/a.py (Line 2): needle = 1" % d,
        "%s/pkg/b.py (Line 1): x = 'needle'" % d,
        "%s/pkg/b.py (Line 3): needle()" % d,
        '[End of matches for "needle" in %s]' % d])
    assert call(plug, "search_dir", "absent-term", d) == 'No matches found for "absent-term" in %s' % d
    assert call(plug, "search_dir", "x", d + "/nodir") == "ERROR: Directory %s/nodir not found" % d
    # the default folder is the kernel's cwd
    assert call(plug, "search_dir", "import os", cwd=d) == (
        '[Found 1 matches for "import os" in ./]\n./a.py (Line 1): import os\n[End of matches for "import os" in ./]')


def test_search_dir_too_many_files(plug, tmp_path):
    d = tmp_path / "many"
    d.mkdir()
    for i in range(101):
        (d / ("f%03d.txt" % i)).write_text("hit\n")
    assert call(plug, "search_dir", "hit", str(d)) == (
        'More than 101 files matched for "hit" in %s. Please narrow your search.' % d)


def test_search_file(plug, tree):
    f = str(tree / "pkg" / "b.py")
    assert call(plug, "search_file", "needle", f) == (
        '[Found 2 matches for "needle" in %s]\nLine 1: x = \'needle\'\nLine 3: needle()\n'
        '[End of matches for "needle" in %s]' % (f, f))
    assert call(plug, "search_file", "zzz", f) == '[No matches found for "zzz" in %s]' % f
    assert call(plug, "search_file", "x", f + ".gone") == "ERROR: File %s.gone not found." % f
    # without a path: the open file
    call(plug, "open_file", str(tree / "a.py"))
    assert call(plug, "search_file", "import") == (
        '[Found 1 matches for "import" in %s]\nLine 1: import os\n[End of matches for "import" in %s]'
        % (tree / "a.py", tree / "a.py"))


def test_find_file(plug, tree):
    d = str(tree)
    assert call(plug, "find_file", "b.py", d) == (
        '[Found 1 matches for "b.py" in %s]\n%s/pkg/b.py\n[End of matches for "b.py" in %s]' % (d, d, d))
    assert call(plug, "find_file", "_test", d) == (
        '[Found 1 matches for "_test" in %s]\n%s/pkg/sub/c_test.py\n[End of matches for "_test" in %s]' % (d, d, d))
    assert call(plug, "find_file", "zzz", d) == '[No matches found for "zzz" in %s]' % d
    assert call(plug, "find_file", "a", d + "/x") == "ERROR: Directory %s/x not found" % d


# ---------------------------------------------------------------- readers

def make_pdf(path, pages):
    """a small PDF with one line of Helvetica text per page"""
    objs = []
    n = len(pages)
    kids = " ".join("%d 0 R" % (4 + 2 * i) for i in range(n))
    objs.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objs.append(("<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, n)).encode())
    objs.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, text in enumerate(pages):
        stream = ("BT /F1 12 Tf 20 100 Td (%s) Tj ET" % text).encode()
        objs.append(("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 200] /Contents %d 0 R "
                     "/Resources << /Font << /F1 3 0 R >> >> >>" % (5 + 2 * i)).encode())
        objs.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    out = b"%PDF-1.4\n"
    offsets = []
    for i, o in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + o + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    with open(path, "wb") as f:
        f.write(out)


def have(module):
    import importlib.util
    return importlib.util.find_spec(module) is not None


@pytest.mark.skipif(not have("pypdf"), reason="python3-pypdf is not installed (make deps)")
def test_parse_pdf(plug, tmp_path):
    f = str(tmp_path / "doc.pdf")
    make_pdf(f, ["Hello page one", "Second page text"])
    assert call(plug, "parse_pdf", f) == (
        "[Reading PDF file from %s]\n@@ Page 1 @@\nHello page one\n\n@@ Page 2 @@\nSecond page text" % f)


@pytest.mark.skipif(not have("docx"), reason="python3-docx is not installed (make deps)")
def test_parse_docx(plug, tmp_path):
    import docx
    f = str(tmp_path / "doc.docx")
    d = docx.Document()
    d.add_paragraph("First paragraph")
    d.add_paragraph("Second one")
    d.save(f)
    assert call(plug, "parse_docx", f) == (
        "[Reading DOCX file from %s]\n@@ Page 1 @@\nFirst paragraph\n\n@@ Page 2 @@\nSecond one" % f)


@pytest.mark.skipif(not have("pylatexenc"), reason="python3-pylatexenc is not installed (make deps)")
def test_parse_latex(plug, tmp_path):
    from pylatexenc.latex2text import LatexNodes2Text
    src = "\\section{Intro}\nHello \\textbf{bold} world.\n"
    f = tmp_path / "doc.tex"
    f.write_text(src)
    want = LatexNodes2Text().latex_to_text(src).strip()
    out = call(plug, "parse_latex", str(f))
    assert out == "[Reading LaTex file from %s]\n%s" % (f, want)
    assert "Hello bold world." in out and "\\textbf" not in out


P_NS = "http://schemas.openxmlformats.org/presentationml/2006/main"
A_NS = "http://schemas.openxmlformats.org/drawingml/2006/main"
R_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"


def make_pptx(path, slides):
    """a minimal .pptx: slides = [[[paragraph, ...] per text shape] per slide]; slide files are named in
    reverse so that the order must come from presentation.xml"""
    n = len(slides)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("[Content_Types].xml",
                   '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
                   '<Default Extension="xml" ContentType="application/xml"/></Types>')
        ids = "".join('<p:sldId id="%d" r:id="rId%d"/>' % (256 + i, 10 + i) for i in range(n))
        z.writestr("ppt/presentation.xml", '<?xml version="1.0"?><p:presentation xmlns:p="%s" xmlns:r="%s">'
                   "<p:sldIdLst>%s</p:sldIdLst></p:presentation>" % (P_NS, R_NS, ids))
        rels = "".join('<Relationship Id="rId%d" Type="%s/slide" Target="slides/slide%d.xml"/>'
                       % (10 + i, R_NS, n - i) for i in range(n))
        z.writestr("ppt/_rels/presentation.xml.rels", '<?xml version="1.0"?><Relationships xmlns='
                   '"http://schemas.openxmlformats.org/package/2006/relationships">%s</Relationships>' % rels)
        for i, shapes in enumerate(slides):
            sps = ""
            for paras in shapes:
                ps = "".join("<a:p>%s</a:p>" % "".join("<a:r><a:t>%s</a:t></a:r>" % w for w in para.split("|"))
                             for para in paras)
                sps += "<p:sp><p:nvSpPr/><p:spPr/><p:txBody><a:bodyPr/>%s</p:txBody></p:sp>" % ps
            sps += "<p:pic><p:nvPicPr/></p:pic>"
            z.writestr("ppt/slides/slide%d.xml" % (n - i),
                       '<?xml version="1.0"?><p:sld xmlns:p="%s" xmlns:a="%s"><p:cSld><p:spTree><p:nvGrpSpPr/>'
                       "<p:grpSpPr/>%s</p:spTree></p:cSld></p:sld>" % (P_NS, A_NS, sps))


def test_parse_pptx(plug, tmp_path):
    f = str(tmp_path / "deck.pptx")
    make_pptx(f, [[["Title one"], ["first point", "second |point"]], [["Closing"]]])
    assert call(plug, "parse_pptx", f) == (
        "[Reading PowerPoint file from %s]\n@@ Slide 1 @@\nTitle one\nfirst point\nsecond point\n"
        "@@ Slide 2 @@\nClosing" % f)


def test_readers_on_missing_and_broken_files(plug, tmp_path):
    missing = str(tmp_path / "none")
    for fn, what in (("parse_pdf", "PDF"), ("parse_docx", "DOCX"), ("parse_latex", "LaTex")):
        assert call(plug, fn, missing) == "[Reading %s file from %s]\nERROR: File %s not found." % (what, missing, missing)
    out = call(plug, "parse_pptx", missing)
    assert out.startswith("[Reading PowerPoint file from %s]\nError reading PowerPoint file: " % missing)
    junk = tmp_path / "junk.pdf"
    junk.write_bytes(b"this is no pdf")
    out = call(plug, "parse_pdf", str(junk))
    assert out.startswith("[Reading PDF file from %s]\n" % junk) and "ERROR: " in out
    out = call(plug, "parse_pptx", str(junk))
    assert "Error reading PowerPoint file: " in out


def test_reader_says_when_its_library_is_missing(plug, tmp_path):
    f = str(tmp_path / "x.pdf")
    make_pdf(f, ["t"])
    code = ("import sys\nsaved = {m: sys.modules.get(m) for m in ('pypdf', 'PyPDF2', 'docx')}\n"
            "sys.modules.update({'pypdf': None, 'PyPDF2': None, 'docx': None})\n"
            "try:\n    parse_pdf(%r)\n    parse_docx(%r)\nfinally:\n"
            "    for m, v in saved.items():\n        sys.modules.pop(m)\n        if v is not None: sys.modules[m] = v\n"
            % (f, f))
    assert run(plug, code) == (
        "[Reading PDF file from %s]\n"
        "ERROR: parse_pdf needs the Python module pypdf (Debian package python3-pypdf), which is not installed.\n"
        "[Reading DOCX file from %s]\n"
        "ERROR: parse_docx needs the Python module docx (Debian package python3-docx), which is not installed." % (f, f))


def test_setup_installs_nothing_when_readers_are_there(tmp_path):
    import subprocess
    from jupyter_driver import plugin_dir
    if not all(have(m) for m in ("pypdf", "docx", "pylatexenc")):
        pytest.skip("the readers' Debian packages are not all installed (make deps)")
    env = {"PATH": "/usr/bin:/bin", "PKG_MANAGER": "", "TERMD_JUPYTER_PYTHON": "/usr/bin/python3"}
    r = subprocess.run(["/bin/sh", os.path.join(plugin_dir(), "agentskills", "setup.sh")], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "nothing to install" in r.stderr


def test_setup_never_fails_for_a_missing_reader(tmp_path):
    import subprocess
    from jupyter_driver import plugin_dir
    b = tmp_path / "bin"   # harmless tools only: no package manager, a python3 without ipykernel or readers
    b.mkdir()
    for t in ("sh", "dirname", "cut", "id"):
        os.symlink("/usr/bin/" + t if os.path.exists("/usr/bin/" + t) else "/bin/" + t, b / t)
    (b / "python3").write_text("#!/bin/sh\nexit 1\n")
    (b / "python3").chmod(0o755)
    env = {"PATH": str(b), "PKG_MANAGER": "", "TERMD_JUPYTER_PYTHON": str(b / "python3")}
    r = subprocess.run(["/bin/sh", os.path.join(plugin_dir(), "agentskills", "setup.sh")], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "cannot install" in r.stderr and "pypdf" in r.stderr
