"""Issue 39: one owner for every argument rule. The library (selscan.h) words its rules once, in its
rule and status lists; the bindings (bindings/: the common layer, torch, TensorFlow, ONNX Runtime,
their Python packages) report them through the common layer (selscan_rule_string / selscan_status_string
and the diag), never with copies of the words. This test collects the texts from selscan.h and looks
for each in the string literals of every binding source (comments, docstrings and the tests, which
match messages, aside)."""
import io
import pathlib
import re
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[3]
HEADER = ROOT / "selscan.h"
SOURCES = [p for p in sorted((ROOT / "bindings").rglob("*"))
           if p.suffix in (".h", ".cc", ".cpp", ".cu", ".py") and "tests" not in p.relative_to(ROOT).parts]


def library_texts():
    """The rule and status texts of selscan.h's lists (SELSCAN__RULE_LIST, SELSCAN__STATUS_LIST), those
    of two words or more (a one-word text, "missing", "negative", is a word any message may use)."""
    text = HEADER.read_text().replace("\\\n", " ")  # the lists' line continuations
    macros = dict(re.findall(r"#define (SELSCAN_\w+) (\S+)", text))
    # a text: string literals and SELSCAN__XSTR(<macro>) (a macro's value as a literal), side by side
    piece = r'"[^"]*"|SELSCAN__XSTR\(\w+\)'
    rows = re.findall(rf"X\((SELSCAN_RULE_\w+),\s*((?:(?:{piece})\s*)+)\)", text)
    names = set(re.findall(r"X\((SELSCAN_RULE_\w+),", text))
    assert {n for n, _ in rows} == names, sorted(names - {n for n, _ in rows})  # every rule's text read
    rules = ["".join(m[1:-1] if m.startswith('"') else macros[m[len("SELSCAN__XSTR("):-1]]
                     for m in re.findall(piece, expr)) for _, expr in rows]
    statuses = re.findall(r'X\(SELSCAN_(?:OK|ERR_\w+),\s*"([^"]+)"\)', text)
    return sorted(t for t in set(rules + statuses) if " " in t)


def c_literals(src):
    """The string literals of C / C++ source, adjacent ones joined ("a" "b" is one), comments out."""
    out, i, n = [], 0, len(src)
    cur, last_end = None, -1
    while i < n:
        if src.startswith("//", i):
            i = src.find("\n", i)
            i = n if i < 0 else i
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif src[i] == "'":  # a character literal
            j = i + 1
            while j < n and src[j] != "'":
                j += 2 if src[j] == "\\" else 1
            i = j + 1
        elif src[i] == '"':
            j, buf = i + 1, []
            while j < n and src[j] != '"':
                if src[j] == "\\" and j + 1 < n:
                    buf.append(src[j:j + 2])
                    j += 2
                else:
                    buf.append(src[j])
                    j += 1
            piece = "".join(buf)
            if cur is not None and src[last_end:i].strip() == "":
                cur += piece
            else:
                if cur is not None:
                    out.append(cur)
                cur = piece
            i = last_end = j + 1
        else:
            i += 1
    if cur is not None:
        out.append(cur)
    return out


def py_literals(src):
    """The string literals of Python source (implicitly concatenated ones joined), docstrings (a
    string that is a statement of its own) out."""
    sig = [t for t in tokenize.generate_tokens(io.StringIO(src).readline)
           if t.type not in (tokenize.NL, tokenize.COMMENT)]
    out, k = [], 0
    while k < len(sig):
        if sig[k].type != tokenize.STRING:
            k += 1
            continue
        j = k
        while j + 1 < len(sig) and sig[j + 1].type == tokenize.STRING:
            j += 1
        before = sig[k - 1].type if k else tokenize.NEWLINE
        after = sig[j + 1].type if j + 1 < len(sig) else tokenize.NEWLINE
        statement = before in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING) and \
            after in (tokenize.NEWLINE, tokenize.ENDMARKER)
        if not statement:
            out.append("".join(t.string for t in sig[k:j + 1]))
        k = j + 1
    return out


def test_rule_texts_found():
    texts = library_texts()
    assert "does not divide dim" in texts and "not below n_cache" in texts and "wrong shape" in texts, texts
    assert "not 2 to 4" in texts and "no sequence (cu_seqlens needs n_seqs + 1 >= 2 offsets)" in texts, texts
    assert len(SOURCES) > 10 and any(p.name == "selscan_binding.h" for p in SOURCES)


def test_bindings_carry_no_copy_of_a_rule_text():
    texts = library_texts()
    found = []
    for path in SOURCES:
        src = path.read_text()
        lits = py_literals(src) if path.suffix == ".py" else c_literals(src)
        for lit in lits:
            for t in texts:
                if re.search(r"(?<![\w])" + re.escape(t) + r"(?![\w])", lit):
                    found.append(f"{path.relative_to(ROOT)}: {t!r} in {lit[:120]!r}")
    assert not found, "rule texts written in the bindings (ask selscan.h's instead):\n" + "\n".join(found)


def test_groups_divide_dim_written_once():
    """The rule of issue 39's count: "groups divide dim" is selscan.h's (its one check, its one text);
    no binding states it again, in code or in words."""
    pat = re.compile(r"dim\s*%\s*\w*G\w*|divide[sd]?\s+dim\b|divide dim")
    hits = [str(p.relative_to(ROOT)) for p in SOURCES if pat.search(p.read_text())]
    assert not hits, hits
