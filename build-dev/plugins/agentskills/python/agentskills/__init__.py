"""agentskills (termd's agentskills plugin): the helpers every IPython kernel of the jupyter plugin imports
with `from agentskills import *` — a file viewer (open_file, goto_line, scroll_down, scroll_up), searches
(search_dir, search_file, find_file) and document readers (parse_pdf, parse_docx, parse_latex, parse_pptx).
Each function prints its result in the text formats OpenHands agents know and returns None."""

import os
import re
import zipfile
import xml.etree.ElementTree as ET

__all__ = [
    'open_file', 'goto_line', 'scroll_down', 'scroll_up',
    'search_dir', 'search_file', 'find_file',
    'parse_pdf', 'parse_docx', 'parse_latex', 'parse_pptx',
]

WINDOW = 100
_current_file = None
_current_line = 1


# ------------------------------------------------------------------ the file viewer

def _error(msg):
    print(f'ERROR: {msg}')


def _read_lines(path):
    """The file's lines with their ends; a last line without '\\n' gets one; an empty file is one empty line."""
    with open(path, encoding='utf-8', errors='replace') as f:
        text = f.read()
    if not text.endswith('\n'):
        text += '\n'
    return text.split('\n')[:-1]


def _count(path):
    return max(1, len(_read_lines(path)))


def _window(path, target, window, from_top):
    """The block shown around a line: a line above, numbered lines, a line below (rstripped)."""
    global _current_line
    lines = _read_lines(path)
    total = len(lines)
    _current_line = min(max(target, 1), total)
    if from_top:
        start, end = _current_line, min(total, _current_line + window)
    else:
        half = max(1, window // 2)
        start, end = max(1, _current_line - half), min(total, _current_line + half)
    if start == 1:
        end = min(total, start + window - 1)
    if end == total:
        start = max(1, end - window + 1)
    out = [f'({start - 1} more lines above)' if start > 1 else '(this is the beginning of the file)']
    out += [f'{i}|{lines[i - 1]}' for i in range(start, end + 1)]
    out.append(f'({total - end} more lines below)' if end < total else '(this is the end of the file)')
    return '\n'.join(out).rstrip()


def _header(total):
    return f'[File: {os.path.abspath(_current_file)} ({total} lines total)]\n'


def _have_current():
    if not _current_file or not os.path.isfile(_current_file):
        _error('No file open. Use the open_file function first.')
        return False
    return True


def open_file(path, line_number=1, context_lines=WINDOW):
    """Opens a file and shows up to context_lines (at most 100) lines around line_number.

    Args:
        path: the file to open (an absolute path is best).
        line_number: the line to centre the view on (default 1).
        context_lines: how many lines to show, 1 to 100 (default 100).
    """
    global _current_file, _current_line
    if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
        _error(f'File {path} not found.')
        return
    _current_file = os.path.abspath(path)
    total = _count(_current_file)
    if line_number is None:
        line_number = 1
    if not isinstance(line_number, int) or isinstance(line_number, bool) or not 1 <= line_number <= total:
        _error(f'Line number must be between 1 and {total}')
        return
    _current_line = line_number
    if not isinstance(context_lines, int) or context_lines < 1:
        context_lines = WINDOW
    out = _header(total) + _window(_current_file, _current_line, min(context_lines, 100), False)
    if out.endswith('more lines below)'):
        out += '\n[Use `scroll_down` to view the next 100 lines of the file!]'
    print(out)


def goto_line(line_number):
    """Moves the view of the open file to show line_number.

    Args:
        line_number: the line to show.
    """
    if not _have_current():
        return
    total = _count(_current_file)
    if not isinstance(line_number, int) or isinstance(line_number, bool) or not 1 <= line_number <= total:
        _error(f'Line number must be between 1 and {total}.')
        return
    print(_header(total) + _window(_current_file, line_number, WINDOW, False))


def _scroll(delta):
    if not _have_current():
        return
    total = _count(_current_file)
    line = min(max(_current_line + delta, 1), total)
    print(_header(total) + _window(_current_file, line, WINDOW, True))


def scroll_down():
    """Moves the view of the open file down by 100 lines."""
    _scroll(WINDOW)


def scroll_up():
    """Moves the view of the open file up by 100 lines."""
    _scroll(-WINDOW)


# ------------------------------------------------------------------ searches

def _walk(dir_path):
    """(root, file names) under dir_path in a stable order, hidden files and folders left out."""
    for root, dirs, files in os.walk(dir_path):
        dirs[:] = sorted(d for d in dirs if not d.startswith('.'))
        yield root, sorted(f for f in files if not f.startswith('.'))


def search_dir(search_term, dir_path='./'):
    """Searches every file under dir_path for search_term and lists the matching lines.

    Args:
        search_term: the text to look for.
        dir_path: the folder to search (default: the current folder).
    """
    if not os.path.isdir(dir_path):
        _error(f'Directory {dir_path} not found')
        return
    matches = []
    for root, files in _walk(dir_path):
        for name in files:
            path = os.path.join(root, name)
            try:
                with open(path, encoding='utf-8', errors='ignore') as f:
                    for n, line in enumerate(f, 1):
                        if search_term in line:
                            matches.append((path, n, line.strip()))
            except OSError:
                continue
    if not matches:
        print(f'No matches found for "{search_term}" in {dir_path}')
        return
    nfiles = len({m[0] for m in matches})
    if nfiles > 100:
        print(f'More than {nfiles} files matched for "{search_term}" in {dir_path}. Please narrow your search.')
        return
    out = [f'[Found {len(matches)} matches for "{search_term}" in {dir_path}]']
    out += [f'{p} (Line {n}): {text}' for p, n, text in matches]
    out.append(f'[End of matches for "{search_term}" in {dir_path}]')
    print('\n'.join(out))


def search_file(search_term, file_path=None):
    """Searches one file (default: the open file) for search_term and lists the matching lines.

    Args:
        search_term: the text to look for.
        file_path: the file to search (default: the file open_file opened).
    """
    if file_path is None:
        file_path = _current_file
    if file_path is None:
        _error('No file specified or open. Use the open_file function first.')
        return
    if not os.path.isfile(file_path):
        _error(f'File {file_path} not found.')
        return
    matches = [(n, line.strip()) for n, line in enumerate(_read_lines(file_path), 1) if search_term in line]
    if not matches:
        print(f'[No matches found for "{search_term}" in {file_path}]')
        return
    out = [f'[Found {len(matches)} matches for "{search_term}" in {file_path}]']
    out += [f'Line {n}: {text}' for n, text in matches]
    out.append(f'[End of matches for "{search_term}" in {file_path}]')
    print('\n'.join(out))


def find_file(file_name, dir_path='./'):
    """Lists the files under dir_path whose name contains file_name.

    Args:
        file_name: the name (or part of it) to look for.
        dir_path: the folder to search (default: the current folder).
    """
    if not os.path.isdir(dir_path):
        _error(f'Directory {dir_path} not found')
        return
    found = [os.path.join(root, f) for root, files in _walk(dir_path) for f in files if file_name in f]
    if not found:
        print(f'[No matches found for "{file_name}" in {dir_path}]')
        return
    print('\n'.join([f'[Found {len(found)} matches for "{file_name}" in {dir_path}]'] + found +
                    [f'[End of matches for "{file_name}" in {dir_path}]']))


# ------------------------------------------------------------------ document readers

def _missing(what, module, package):
    _error(f'{what} needs the Python module {module} (Debian package {package}), which is not installed.')


def _readable(file_path):
    if not isinstance(file_path, (str, os.PathLike)) or not os.path.isfile(file_path):
        _error(f'File {file_path} not found.')
        return False
    return True


def parse_pdf(file_path):
    """Prints the text of a PDF file, page by page.

    Args:
        file_path: the PDF file.
    """
    print(f'[Reading PDF file from {file_path}]')
    if not _readable(file_path):
        return
    try:
        import pypdf as pdflib
    except ImportError:
        try:
            import PyPDF2 as pdflib
        except ImportError:
            _missing('parse_pdf', 'pypdf', 'python3-pypdf')
            return
    try:
        reader = pdflib.PdfReader(file_path)
        text = ''
        for i, page in enumerate(reader.pages):
            text += f'@@ Page {i + 1} @@\n' + (page.extract_text() or '') + '\n\n'
    except Exception as e:  # a damaged file is reported, not raised
        _error(f'Cannot read PDF file {file_path}: {e}')
        return
    print(text.strip())


def parse_docx(file_path):
    """Prints the paragraphs of a Word (.docx) file.

    Args:
        file_path: the .docx file.
    """
    print(f'[Reading DOCX file from {file_path}]')
    if not _readable(file_path):
        return
    try:
        import docx
    except ImportError:
        _missing('parse_docx', 'docx', 'python3-docx')
        return
    try:
        doc = docx.Document(file_path)
    except Exception as e:
        _error(f'Cannot read DOCX file {file_path}: {e}')
        return
    print(''.join(f'@@ Page {i + 1} @@\n{p.text}\n\n' for i, p in enumerate(doc.paragraphs)))


def parse_latex(file_path):
    """Prints a LaTeX file as plain text.

    Args:
        file_path: the .tex file.
    """
    print(f'[Reading LaTex file from {file_path}]')
    if not _readable(file_path):
        return
    try:
        from pylatexenc.latex2text import LatexNodes2Text
    except ImportError:
        _missing('parse_latex', 'pylatexenc', 'python3-pylatexenc')
        return
    with open(file_path, encoding='utf-8', errors='replace') as f:
        data = f.read()
    try:
        text = LatexNodes2Text().latex_to_text(data)
    except Exception as e:
        _error(f'Cannot read LaTeX file {file_path}: {e}')
        return
    print(text.strip())


_P = 'http://schemas.openxmlformats.org/presentationml/2006/main'
_A = 'http://schemas.openxmlformats.org/drawingml/2006/main'
_R = 'http://schemas.openxmlformats.org/officeDocument/2006/relationships'
_PKG_REL = 'http://schemas.openxmlformats.org/package/2006/relationships'


def _pptx_slides(path):
    """[[shape text, ...] per slide] read straight from the .pptx zip (python-pptx is not in Debian 12):
    slides in presentation order, the text of each top-level shape (p:sp) as python-pptx's shape.text gives
    it — paragraphs joined by newlines, line breaks as vertical tabs."""
    with zipfile.ZipFile(path) as z:
        pres = ET.fromstring(z.read('ppt/presentation.xml'))
        rels = ET.fromstring(z.read('ppt/_rels/presentation.xml.rels'))
        target = {r.get('Id'): r.get('Target') for r in rels.iter(f'{{{_PKG_REL}}}Relationship')}
        slides = []
        lst = pres.find(f'{{{_P}}}sldIdLst')
        for sid in (lst if lst is not None else []):
            t = target.get(sid.get(f'{{{_R}}}id'), '')
            name = os.path.normpath(os.path.join('ppt', t)).replace(os.sep, '/') if not t.startswith('/') else t[1:]
            root = ET.fromstring(z.read(name))
            tree = root.find(f'{{{_P}}}cSld/{{{_P}}}spTree')
            texts = []
            for sp in (tree if tree is not None else []):
                if sp.tag != f'{{{_P}}}sp':
                    continue
                paras = []
                body = sp.find(f'{{{_P}}}txBody')
                for p in (body.findall(f'{{{_A}}}p') if body is not None else []):
                    s = ''
                    for el in p:
                        if el.tag == f'{{{_A}}}r' or el.tag == f'{{{_A}}}fld':
                            t_el = el.find(f'{{{_A}}}t')
                            s += (t_el.text or '') if t_el is not None else ''
                        elif el.tag == f'{{{_A}}}br':
                            s += '\v'
                    paras.append(s)
                texts.append('\n'.join(paras))
            slides.append(texts)
        return slides


def parse_pptx(file_path):
    """Prints the text of each slide of a PowerPoint (.pptx) file.

    Args:
        file_path: the .pptx file.
    """
    print(f'[Reading PowerPoint file from {file_path}]')
    try:
        try:
            from pptx import Presentation
        except ImportError:
            Presentation = None
        out = []
        if Presentation is not None:
            for i, slide in enumerate(Presentation(str(file_path)).slides):
                out.append(f'@@ Slide {i + 1} @@')
                out += [shape.text for shape in slide.shapes if hasattr(shape, 'text')]
        else:
            if not os.path.isfile(file_path):
                raise FileNotFoundError(f"No such file: '{file_path}'")
            for i, texts in enumerate(_pptx_slides(file_path)):
                out.append(f'@@ Slide {i + 1} @@')
                out += texts
        print('\n'.join(out))
    except Exception as e:
        print(f'Error reading PowerPoint file: {e}')


def _doc():
    """name(signature):\\n    docstring — the same listing agents get as the skills' documentation."""
    import inspect
    parts = []
    for name in __all__:
        fn = globals()[name]
        doc = inspect.cleandoc(fn.__doc__ or '')
        parts.append(f'{name}{inspect.signature(fn)}:\n' + re.sub('^', '    ', doc, flags=re.M))
    return '\n\n'.join(parts)


DOCUMENTATION = _doc()
