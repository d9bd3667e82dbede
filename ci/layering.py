#!/usr/bin/env python3
"""The layering of src/ (the library), cli/src/ (the binary) and platform/src/.

Always enforced (any finding fails):
- the library never names the binary (`bin::`, `cli/src`, `mod cli`, `mod mcp`), and its
  package has no binary (src/bin/, src/main.rs: binaries are the package reaper-cli's, cli/);
- the binary reaches the library through its public API only (no `#[path]` into src/).

Ratcheted (findings listed in ci/layering-allowed.txt pass; see "Modes"; the list is empty
and the file gone, so every finding fails):
- circles: no import circle between modules. A folder is one module: the edges of its files
  (mod.rs and its siblings) are the folder's, and an edge between two files of one folder is
  internal. A subfolder is a module of its own, and its edges to its parent folder count like any
  other: a parent that uses its subfolder while the subfolder names the parent back is a circle.
  A top-level file is a module. The crate root (lib.rs, main.rs) is the crate's table of
  contents, not a module: a name it re-exports counts as an edge to the module that defines it.
  An edge is a path naming a module: `use` trees, `crate::…`, `super::…`, `self::…`, and a bare
  `child::…` naming a submodule. A path names the module it goes through and, for a name that
  module imports or re-exports (`use x::Y`, `pub use`, `as`), the module defining it too. A finding is an edge that lies on a circle (both ends in one strongly
  connected component), so removing an import never adds one.
- words: the library (src/ and platform/src) does not speak the binary's words
  in string literals: its long flags (`--memory-max`: every `#[arg(long …)]` of the binary, its
  aliases, and timeout(1)'s getopt table) and its commands (`reaper doctor`: the `Subcommand`
  enum's variants but a hidden one: the guardian's `reaper guardian PID START` is the command
  line the library execs, its own word). Checked: string literals (raw and byte strings too) in code
  that is compiled outside tests. Not checked: comments, doc comments and attributes (docs may
  explain how the binary uses an item), `#[cfg(test)]` items, `#[test]` functions, files named
  tests.rs or *_tests.rs, short flags (`-v` is too common in text to tell), and `--word`s the
  binary does not have (`systemd --user` is another program's).
Tests and test-only code are left out of both: a test may look from above.

Modes:
  ci/layering.py            CI: fails on a circle edge or a word not in the allowlist, and on an
                            allowlist entry that no longer occurs (remove it: --shrink), so the
                            list can only shrink. With no allowlist file, or an empty one, every
                            finding fails: that is strict mode, reached by deleting the file once
                            the refactor has emptied it.
  ci/layering.py --report   every finding with where it is (files, lines, a circle through each
                            edge); never fails on circles or words.
  ci/layering.py --shrink   drops the allowlist's entries that no longer occur; adds nothing
                            (a new finding still fails).
  ci/layering.py --record   rewrites the allowlist with every finding: only when the check itself
                            changes, never to let a new finding in.
  --root DIR, --allowlist FILE: check another tree (ci/test_layering.py's fixtures)."""

import argparse
import os
import re
import sys
from collections import deque

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = (
    ("reaper_platform", "platform/src", "lib"),
    ("reaper", "src", "lib"),
    ("reaper(bin)", "cli/src", "bin"),
)
LIBRARY = ("src", "platform/src")  # where the binary's words must not be spoken
BINARY = "cli/src"
ALLOWLIST = os.path.join("ci", "layering-allowed.txt")

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


# ---------------------------------------------------------------------------------------------
# Rust source: comments, literals, attributes, test-only items


class Source:
    """One file: `masked` is the text with comments blanked and each string or char literal's
    contents blanked (same length, newlines kept, so offsets and lines stay); `literals` are the
    string literals as (start, end, value)."""

    CHAR = re.compile(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F_]{1,6}\}|.)|[^\\'\n])'")
    RAW = re.compile(r'(?:b|c)?r(#*)"')
    STR = re.compile(r'(?:b|c)?"')

    def __init__(self, path, text=None):
        self.path = path
        self.text = open(path, encoding="utf-8").read() if text is None else text
        self.masked, self.literals = self._lex(self.text)
        self._lines = None
        self.attrs = self._attributes()
        self.tests = self._test_items()

    @staticmethod
    def _blank(s):
        return re.sub(r"[^\n]", " ", s)

    def _lex(self, src):
        out, lits, i, n = [], [], 0, len(src)
        while i < n:
            c = src[i]
            if src.startswith("//", i):
                j = src.find("\n", i)
                j = n if j < 0 else j
                out.append(" " * (j - i))
                i = j
                continue
            if src.startswith("/*", i):
                depth, j = 1, i + 2
                while j < n and depth:
                    if src.startswith("/*", j):
                        depth, j = depth + 1, j + 2
                    elif src.startswith("*/", j):
                        depth, j = depth - 1, j + 2
                    else:
                        j += 1
                out.append(self._blank(src[i:j]))
                i = j
                continue
            prev = src[i - 1] if i else " "
            if c in "bcr\"" and not (prev.isalnum() or prev == "_"):
                m = self.RAW.match(src, i)
                if m:
                    close = '"' + m.group(1)
                    j = src.find(close, m.end())
                    j = n if j < 0 else j + len(close)
                    lits.append((i, j, src[m.end() : j - len(close)]))
                    out.append(src[i : m.end()] + self._blank(src[m.end() : j - len(close)]) + close)
                    i = j
                    continue
                m = self.STR.match(src, i)
                if m:
                    j = m.end()
                    while j < n and src[j] != '"':
                        j += 2 if src[j] == "\\" else 1
                    body = src[m.end() : j]
                    # `\` at a line's end joins the next line without its leading whitespace.
                    lits.append((i, j + 1, re.sub(r"\\\n\s*", "", body)))
                    out.append(src[i : m.end()] + self._blank(body) + '"')
                    i = j + 1
                    continue
            if c == "'":
                m = self.CHAR.match(src, i)
                if m:  # else a lifetime or a label
                    out.append("'" + " " * (m.end() - i - 2) + "'")
                    i = m.end()
                    continue
            out.append(c)
            i += 1
        return "".join(out), lits

    def line(self, offset):
        return self.text.count("\n", 0, offset) + 1

    def _attributes(self):
        """(start, end) of every `#[…]` and `#![…]`."""
        out = []
        for m in re.finditer(r"#!?\s*\[", self.masked):
            end = match_close(self.masked, m.end() - 1)
            out.append((m.start(), end))
        return out

    TEST_ATTR = re.compile(
        r"#\s*\[\s*(?:cfg\s*\(\s*(?:test|all\s*\((?:[^()]|\([^()]*\))*\btest\b(?:[^()]|\([^()]*\))*\))\s*\)"
        r"|(?:\w+::)*test\b[^\]]*)\s*\]"
    )

    def _test_items(self):
        """(start, end) of every item compiled for tests only: `#[cfg(test)]`,
        `#[cfg(all(test, …))]`, `#[test]`, `#[tokio::test]`, through the item's closing brace or
        semicolon."""
        out = []
        s = self.masked
        for m in self.TEST_ATTR.finditer(s):
            if re.search(r"\bnot\s*\(", m.group(0)):
                continue
            j, depth = m.end(), 0
            while j < len(s):
                ch = s[j]
                if ch in "([":
                    depth += 1
                elif ch in ")]":
                    depth -= 1
                elif ch == ";" and depth == 0:
                    j += 1
                    break
                elif ch == "{" and depth == 0:
                    j = match_close(s, j)
                    break
                j += 1
            out.append((m.start(), j))
        return out

    @staticmethod
    def _inside(offset, ranges):
        return any(a <= offset < b for a, b in ranges)

    def code(self):
        """The masked text without test-only items (blanked)."""
        s = self.masked
        for a, b in sorted(self.tests, reverse=True):
            s = s[:a] + self._blank(s[a:b]) + s[b:]
        return s

    def checked_literals(self):
        """String literals in code compiled outside tests, attributes left out."""
        return [
            (a, v)
            for a, _, v in self.literals
            if not self._inside(a, self.tests) and not self._inside(a, self.attrs)
        ]


def match_close(s, i):
    """The offset just past the bracket matching the one at s[i]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack, j = [], i
    while j < len(s):
        ch = s[j]
        if ch in pairs:
            stack.append(pairs[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
            if not stack:
                return j + 1
        j += 1
    return len(s)


# ---------------------------------------------------------------------------------------------
# Modules, paths, the import graph


def is_test_file(f):
    return f == "tests.rs" or f.endswith("_tests.rs")


class Crate:
    def __init__(self, name, base, kind):
        self.name, self.base, self.kind = name, base, kind
        self.files = {}  # file -> module path
        self.folders = set()  # module paths that are folders
        for dirpath, dirs, files in os.walk(base):
            dirs.sort()
            for f in sorted(files):
                if not f.endswith(".rs") or is_test_file(f):
                    continue
                full = os.path.join(dirpath, f)
                rel = os.path.relpath(full, base)[:-3].split(os.sep)
                if rel[-1] in ("mod", "lib", "main"):
                    rel = rel[:-1]
                self.files[full] = tuple(rel)
                if len(rel) > 1:
                    self.folders.add(tuple(rel[:-1]))
        self.sources = {f: Source(f) for f in self.files}
        # `#[path = "x.rs"] mod name;` (the guardian's stand-in elsewhere than Linux): x.rs is
        # `name`, and its edges are that module's.
        self.alternates = set()
        for f, mod in list(self.files.items()):
            for m in re.finditer(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;', self.sources[f].text):
                target = os.path.normpath(os.path.join(os.path.dirname(f), m.group(1)))
                if target in self.files:
                    self.files[target] = mod + (m.group(2),)
                    self.alternates.add(target)
        for f, mod in self.files.items():
            if os.path.basename(f) == "mod.rs" or os.path.isdir(f[:-3]):
                self.folders.add(mod)
        self.known = set(self.files.values()) | self.folders
        self.uses = {f: list(use_statements(self.sources[f].code())) for f in self.files}
        # What each module imports or re-exports, by the name it goes by there.
        self.imports = {}
        for f, mod in self.files.items():
            table = self.imports.setdefault(mod, {})
            for _, paths in self.uses[f]:
                for segs, alias in paths:
                    if alias not in (None, "self", "*", "_"):
                        table.setdefault(alias, (mod, segs))

    def node(self, mod):
        """The module a module path belongs to: its folder, or itself at the top level."""
        if mod in self.folders or len(mod) <= 1:
            return mod
        return mod[:-1]

    def resolve(self, mod, segs, depth=0):
        """The modules path `segs`, written in module `mod`, names: the module the path goes
        through and, for a name that module imports or re-exports, the module defining it.
        Empty for other crates."""
        if not segs:
            return []
        head, rest = segs[0], list(segs[1:])
        if head == "crate":
            base = ()
        elif head == "super":
            base = mod[:-1]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
        elif head == "self":
            base = mod
        elif mod + (head,) in self.known:
            base, rest = mod, list(segs)
        else:
            return []
        path = base
        while rest and path + (rest[0],) in self.known:
            path, rest = path + (rest[0],), rest[1:]
        out = [path]
        if rest and depth < 8:
            imported = self.imports.get(path, {}).get(rest[0])
            if imported and imported[1] != list(segs):
                out += self.resolve(imported[0], imported[1], depth + 1)
        return out

    def graph(self):
        """{node: {node: (file, line, path)}}: the first place each edge is made."""
        g = {}
        for f, mod in sorted(self.files.items(), key=lambda fm: (fm[0] in self.alternates, fm[0])):
            if mod == ():
                continue  # the crate root: declarations and re-exports
            src, me = self.sources[f], self.node(mod)
            edges = g.setdefault(me, {})
            for segs, offset in paths_in(src, self.uses[f]):
                for t in self.resolve(mod, segs):
                    t = self.node(t)
                    if t == () or t == me or t in edges:
                        continue
                    edges[t] = (f, src.line(offset), "::".join(segs))
        for f, mod in self.files.items():
            if mod != ():
                g.setdefault(self.node(mod), {})
        return g


def use_statements(code):
    """(offset, [(segments, alias)]) for each `use` declaration."""
    for m in re.finditer(r"\buse\s+", code):
        end = m.end()
        depth = 0
        while end < len(code):
            if code[end] == "{":
                depth += 1
            elif code[end] == "}":
                depth -= 1
            elif code[end] == ";" and depth <= 0:
                break
            end += 1
        toks = re.findall(r"::|[{},*]|" + IDENT, code[m.end() : end])
        yield m.start(), expand_tree(toks)


def expand_tree(toks):
    """A use tree's tokens -> [(segments, alias)]."""
    out = []

    def tree(i, prefix):
        segs = list(prefix)
        while i < len(toks):
            t = toks[i]
            if t == "::":
                i += 1
            elif t == "{":
                i += 1
                while i < len(toks) and toks[i] != "}":
                    i = tree(i, segs)
                    if i < len(toks) and toks[i] == ",":
                        i += 1
                return i + 1
            elif t == "*":
                out.append((segs, "*"))
                return i + 1
            elif t in (",", "}"):
                break
            else:
                segs.append(t)
                i += 1
                if i < len(toks) and toks[i] == "as":
                    out.append((segs if segs[-1] != "self" else segs[:-1], toks[i + 1]))
                    return i + 2
        if segs:
            name = segs[-1]
            out.append((segs[:-1] if name == "self" else segs, segs[-2] if name == "self" and len(segs) > 1 else name))
        return i

    tree(0, [])
    return [(s, a) for s, a in out if s]


PATH = re.compile(r"(?<![\w:])(" + IDENT + r")((?:\s*::\s*" + IDENT + r")+)")


def paths_in(src, uses):
    """Every path a file names: its `use` trees, then the paths in its code."""
    code = src.code()
    for offset, paths in uses:
        for segs, _ in paths:
            yield segs, offset
    # `use` declarations blanked, so a brace group's inner paths are not read as bare ones.
    for m in re.finditer(r"\buse\s+[^;]*;", code):
        code = code[: m.start()] + " " * (m.end() - m.start()) + code[m.end() :]
    for m in PATH.finditer(code):
        segs = [m.group(1)] + [p.strip() for p in m.group(2).split("::") if p.strip()]
        yield segs, m.start()


def components(g):
    """Strongly connected components with more than one node (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(out)


def shortest(g, start, goal, within):
    """A shortest path start -> goal inside `within`."""
    prev, q = {start: None}, deque([start])
    while q:
        v = q.popleft()
        if v == goal:
            path = []
            while v is not None:
                path.append(v)
                v = prev[v]
            return path[::-1]
        for w in sorted(g.get(v, ())):
            if w in within and w not in prev:
                prev[w] = v
                q.append(w)
    return None


def mod_name(mod):
    return "::".join(mod)


# ---------------------------------------------------------------------------------------------
# The binary's words


def kebab(name):
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"-\1", name.removeprefix("r#")).replace("_", "-").lower()


def binary_words(root):
    """The binary's long flags (`--name`) and commands (`reaper name`)."""
    flags, commands = {"--help", "--version"}, set()
    for dirpath, _, files in os.walk(os.path.join(root, BINARY)):
        for f in files:
            if not f.endswith(".rs") or is_test_file(f):
                continue
            src = Source(os.path.join(dirpath, f))
            code = src.code()
            lit = {a: v for a, _, v in src.literals}
            for a, b in src.attrs:
                attr = code[a:b]
                inner = re.match(r"#\s*\[\s*(arg|clap)\s*\(", attr)
                if not inner:
                    continue
                # `long = "x"` and the aliases: the literals of their values.
                named = {}
                for m in re.finditer(r"\b(long|alias|visible_alias|aliases|visible_aliases)\s*=\s*(\[[^\]]*\]|\"\s*\")", attr):
                    named.setdefault(m.group(1), []).extend(
                        v for o, v in sorted(lit.items()) if a + m.start(2) <= o < a + m.end(2)
                    )
                if "long" in named:
                    flags.update("--" + v for v in named["long"])
                elif re.search(r"\blong\b(?!\s*=)", attr):
                    # `long` alone: the field's name, past the attributes after this one.
                    j = b
                    while True:
                        more = re.match(r"\s*#\s*\[", code[j:])
                        if not more:
                            break
                        j = match_close(code, j + more.end() - 1)
                    field = re.match(r"\s*(?:pub(?:\s*\([^)]*\))?\s+)?(?:r#)?(" + IDENT + r")\s*:", code[j:])
                    if field:
                        flags.add("--" + kebab(field.group(1)))
                for k in ("alias", "visible_alias", "aliases", "visible_aliases"):
                    flags.update("--" + v for v in named.get(k, []))
            # timeout(1)'s getopt table: ("kill-after", true), …
            for m in re.finditer(r'\(\s*"([a-z][a-z0-9-]+)"\s*,\s*(?:true|false)\s*\)', src.text):
                flags.add("--" + m.group(1))
            for m in re.finditer(r"#\s*\[\s*derive\s*\([^)]*\bSubcommand\b[^)]*\)\s*\]", code):
                e = re.compile(r"(?:\s*#\s*\[[^\]]*\])*\s*(?:pub(?:\([^)]*\))?\s+)?enum\s+\w+\s*\{").match(code, m.end())
                if not e:
                    continue
                body = code[e.end() : match_close(code, e.end() - 1) - 1]
                for variant in split_top(body):
                    attrs = ""
                    while True:
                        more = re.match(r"\s*#\s*\[", variant)
                        if not more:
                            break
                        end = match_close(variant, more.end() - 1)
                        attrs, variant = attrs + variant[:end], variant[end:]
                    name = re.match(r"\s*([A-Z]\w*)", variant)
                    # A hidden command is the library's own entry point (the guardian it execs as
                    # `reaper guardian PID START`), not a face a user types.
                    if name and not re.search(r"\bhide\s*=\s*true\b", attrs):
                        commands.add("reaper " + kebab(name.group(1)))
    return flags, commands


def split_top(body):
    """`body` split at its top-level commas."""
    parts, depth, start = [], 0, 0
    for j, ch in enumerate(body):
        depth += (ch in "({[") - (ch in ")}]")
        if ch == "," and depth == 0:
            parts.append(body[start:j])
            start = j + 1
    parts.append(body[start:])
    return parts


def word_findings(root, flags, commands):
    """[(relpath, line, word, literal)] for every word of the binary in a library literal."""
    words = re.compile(
        r"(?<![\w-])(" + "|".join(re.escape(f) for f in sorted(flags, key=len, reverse=True)) + r")(?![\w-])"
        + r"|\b(" + "|".join(re.escape(c).replace(r"\ ", r"\s+") for c in sorted(commands, key=len, reverse=True)) + r")(?![\w-])"
    )
    out = []
    for base in LIBRARY:
        for dirpath, dirs, files in os.walk(os.path.join(root, base)):
            dirs.sort()
            for f in sorted(files):
                if not f.endswith(".rs") or is_test_file(f):
                    continue
                full = os.path.join(dirpath, f)
                src = Source(full)
                for offset, value in src.checked_literals():
                    for m in words.finditer(value):
                        word = re.sub(r"\s+", " ", m.group(1) or m.group(2))
                        out.append((os.path.relpath(full, root), src.line(offset), word, value))
    return out


# ---------------------------------------------------------------------------------------------
# Findings, the allowlist, the modes


def parse_allowlist(path):
    entries = {}
    if not os.path.exists(path):
        return entries
    for raw in open(path, encoding="utf-8"):
        line = raw.split("#", 1)[0].rstrip() if raw.lstrip().startswith("#") else raw.rstrip("\n")
        if not line.strip():
            continue
        m = re.match(r"^(.*?)(?: \((\d+)\))?$", line.strip())
        entries[m.group(1)] = int(m.group(2) or 1)
    return entries


def write_allowlist(path, entries):
    with open(path, "w", encoding="utf-8") as out:
        out.write(
            "# ci/layering.py's findings on the code when its check came in: import circles (an edge on\n"
            "# a circle) and the binary's words in the library's strings (file: word (times)).\n"
            "# This list may only shrink: CI fails on a finding not listed here, and on a line that no\n"
            "# longer occurs (`python3 ci/layering.py --shrink` removes those). Once it is empty,\n"
            "# delete this file: every finding then fails.\n"
        )
        for key in sorted(entries):
            n = entries[key]
            out.write(f"{key} ({n})\n" if n != 1 or key.startswith("word ") else f"{key}\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--report", action="store_true", help="print every finding; never fail on circles or words")
    mode.add_argument("--shrink", action="store_true", help="drop allowlist entries that no longer occur")
    mode.add_argument("--record", action="store_true", help="rewrite the allowlist with every finding")
    ap.add_argument("--root", default=ROOT)
    ap.add_argument("--allowlist")
    args = ap.parse_args(argv)
    root = os.path.abspath(args.root)
    allow_path = args.allowlist or os.path.join(root, ALLOWLIST)

    hard, found, details = [], {}, []

    for crate, base, kind in CRATES:
        base_dir = os.path.join(root, base)
        if not os.path.isdir(base_dir):
            continue
        c = Crate(crate, base_dir, kind)
        g = c.graph()
        comps = components({v: set(e) for v, e in g.items()})
        n_edges = sum(len(e) for e in g.values())
        on = 0
        for comp in comps:
            members = set(comp)
            details.append(f"circle in {crate}: " + ", ".join(mod_name(m) for m in comp))
            for v in comp:
                for w, (f, line, path) in sorted(g[v].items()):
                    if w not in members:
                        continue
                    on += 1
                    back = shortest(g, w, v, members)
                    found[f"circle {crate}: {mod_name(v)} -> {mod_name(w)}"] = 1
                    details.append(
                        f"  {mod_name(v)} -> {mod_name(w)}  ({os.path.relpath(f, root)}:{line} {path}); "
                        f"back: {' -> '.join(mod_name(x) for x in back)}"
                    )
        print(
            f"{crate}: {len(c.files)} files in {len(g)} modules (a folder is one), {n_edges} imports, "
            + (f"{len(comps)} circle(s) through {sum(len(x) for x in comps)} modules, {on} edges on them" if comps else "no circle")
        )

    for binary in ("src/bin", "src/main.rs"):
        if os.path.exists(os.path.join(root, binary)):
            hard.append(f"{binary}: the library's package has no binary (the binary is cli/, reaper-cli)")
    for dirpath, _, files in os.walk(os.path.join(root, "src")):
        for f in files:
            if not f.endswith(".rs"):
                continue
            full = os.path.join(dirpath, f)
            src = Source(full)
            text = src.text
            for a, b in sorted(src.tests, reverse=True):
                text = text[:a] + text[b:]
            text = re.sub(r"//[^\n]*", "", text)
            if re.search(r"\bbin::|cli/src|mod\s+cli\b|mod\s+mcp\b", text):
                hard.append(f"{os.path.relpath(full, root)}: the library names the binary")
    for dirpath, _, files in os.walk(os.path.join(root, BINARY)):
        for f in files:
            full = os.path.join(dirpath, f)
            if re.search(r'#\[path\s*=\s*"[^"]*\.\./', open(full, encoding="utf-8").read()):
                hard.append(f"{os.path.relpath(full, root)}: #[path] reaches into the library's files")

    if os.path.isdir(os.path.join(root, BINARY)):
        flags, commands = binary_words(root)
        words = word_findings(root, flags, commands)
        for rel, line, word, value in words:
            key = f"word {rel}: {word}"
            found[key] = found.get(key, 0) + 1
            details.append(f"word {rel}:{line}: {word}  in {json_quote(value)}")
        print(
            f"the binary's words: {len(flags)} flags, {len(commands)} commands; "
            f"{len(words)} in the library's string literals"
        )

    allowed = parse_allowlist(allow_path)
    new = {k: n - allowed.get(k, 0) for k, n in found.items() if n > allowed.get(k, 0)}
    stale = {k: n - found.get(k, 0) for k, n in allowed.items() if found.get(k, 0) < n}
    rel_allow = os.path.relpath(allow_path, root)

    if args.report:
        for d in details:
            print(d)
    elif args.record:
        write_allowlist(allow_path, found)
        print(f"{rel_allow}: {len(found)} entries written")
    elif args.shrink:
        kept = {k: min(n, found.get(k, 0)) for k, n in allowed.items() if found.get(k, 0)}
        if allowed:
            write_allowlist(allow_path, kept)
        print(f"{rel_allow}: {len(allowed) - len(kept)} entries removed, {sum(stale.values())} occurrences dropped")
        stale = {}

    failures = list(hard)
    if not args.report and not args.record:
        for k in sorted(new):
            failures.append(f"new: {k}" + (f" (+{new[k]})" if new[k] > 1 or k.startswith("word ") else ""))
        for k in sorted(stale):
            failures.append(f"gone (remove it from {rel_allow}: ci/layering.py --shrink): {k}")
        if new:
            failures.append(
                "a new import circle or binary word in the library: `python3 ci/layering.py --report` says "
                "where; a circle edge is broken by moving what both sides need below them; a word is the "
                "binary's to say (return a typed value, and let the face print the flag)"
            )
        known = sum(min(n, allowed.get(k, 0)) for k, n in found.items())
        if known:
            print(
                f"{known} known findings in {rel_allow} (the list may only shrink; "
                "`python3 ci/layering.py --report` lists them)"
            )
    for f in failures:
        print(f, file=sys.stderr)
    return 1 if failures else 0


def json_quote(s):
    s = re.sub(r"\s+", " ", s)
    return '"' + (s if len(s) <= 100 else s[:97] + "...") + '"'


if __name__ == "__main__":
    sys.exit(main())
