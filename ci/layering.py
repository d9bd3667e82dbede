#!/usr/bin/env python3
"""The import graph of src/ (the library), src/bin/reaper/ (the binary) and platform/src/: fails
on an import circle between modules, on the library naming anything of the binary, and on the
binary reaching past the library's public API (`reaper::` paths only; no `#[path]` into src/).

Modules are files (a folder's mod.rs is the folder). An edge A -> B is a `use`/path naming B
(`crate::x::y`, `super::y`, `self::y`) in A's file, tests (`#[cfg(test)] mod tests`, files named
tests.rs) excluded: a test may look from above. A module's edge to its own submodules is not
an import; an edge from a child to an ancestor is (it names its parent's items)."""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def modules(base, crate):
    """Maps module path (tuple) -> file, for a crate rooted at base/lib.rs or base/main.rs."""
    out = {}
    for dirpath, _, files in os.walk(base):
        for f in files:
            if not f.endswith(".rs"):
                continue
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, base)[:-3].split(os.sep)
            if crate == "lib" and rel[0] == "bin":
                continue
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            if rel and rel[-1] == "tests" or f.endswith("_tests.rs"):
                continue
            out[tuple(rel)] = full
    return out


def strip_tests(src):
    """Drops `#[cfg(test)] mod NAME { ... }` blocks and comments."""
    src = re.sub(r"//[^\n]*", "", src)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", src):
        if m.start() < i:
            continue
        out.append(src[i : m.start()])
        depth, j = 1, m.end()
        while j < len(src) and depth:
            depth += {"{": 1, "}": -1}.get(src[j], 0)
            j += 1
        i = j
    out.append(src[i:])
    return "".join(out)


PATH = re.compile(r"\b(crate|super|self)((?:::\s*(?:\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*))+)")
USE_GROUP = re.compile(r"\buse\s+(crate|super|self)::\{")


def reexports(root_src, known):
    """Names the crate root re-exports (`pub use a::b::{X, Y}`), each mapped to its module, so
    `crate::X` counts as an import of the module that defines X."""
    out = {}
    for m in re.finditer(r"pub(?:\([^)]*\))?\s+use\s+([^;]+);", root_src):
        spec = re.sub(r"\s+", "", m.group(1))
        base, _, group = spec.partition("::{")
        names = group.rstrip("}").split(",") if group else [base.split("::")[-1]]
        if not group:
            base = "::".join(base.split("::")[:-1])
        parts = [p for p in base.split("::") if p and p not in ("crate", "self")]
        best = None
        path = ()
        for seg in parts:
            path = path + (seg,)
            if path in known:
                best = path
        if best is None:
            continue
        for n in names:
            n = n.split("as")[-1] if "as" in n else n
            if n and n != "self":
                out[n] = best
    return out


def targets(mod, src, known, exported=None):
    """The modules `mod`'s source names."""
    found = set()
    for m in PATH.finditer(src):
        head, rest = m.group(1), m.group(2)
        if head == "crate":
            base = ()
        elif head == "super":
            base = mod[:-1]
        else:
            base = mod
        # `super::super::x`
        parts = [p.strip() for p in rest.split("::") if p.strip()]
        while parts and parts[0] == "super":
            base = base[:-1]
            parts = parts[1:]
        expanded = [parts]
        if parts and parts[-1].startswith("{"):
            inner = parts[-1][1:-1]
            expanded = [parts[:-1] + [x.strip().split("::")[0].split(" as ")[0]] for x in inner.split(",") if x.strip()]
        for p in expanded:
            path = base
            best = None
            for seg in p:
                path = path + (seg,)
                if path in known:
                    best = path
                else:
                    break
            if best is None and base == () and exported and p and p[0] in exported:
                best = exported[p[0]]
            if best is None and base in known and base != mod:
                best = base
            if best is not None and best != mod:
                found.add(best)
    return found


def graph(base, crate):
    known = modules(base, crate)
    exported = reexports(strip_tests(open(known[()]).read()), known) if () in known else {}
    g = {}
    for mod, f in known.items():
        src = strip_tests(open(f).read())
        edges = set()
        for t in targets(mod, src, known, exported):
            if t[: len(mod)] == mod:  # its own submodule
                continue
            edges.add(t)
        g[mod] = edges
    return g, known


def cycles(g):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
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
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in list(g):
        if v not in index:
            visit(v)
    return out


def name(crate, mod):
    return crate + ("::" + "::".join(mod) if mod else "")


def main():
    failures = []
    for crate, base, kind in (
        ("reaper_platform", "platform/src", "lib"),
        ("reaper", "src", "lib"),
        ("reaper(bin)", "src/bin/reaper", "bin"),
    ):
        g, known = graph(os.path.join(ROOT, base), kind)
        # Edges to a module's ancestors count; the crate root (lib.rs, re-exports) does not.
        for comp in cycles({m: {t for t in e if t} for m, e in g.items()}):
            failures.append(f"import circle in {crate}: " + " <-> ".join(sorted(name(crate, m) for m in comp)))
        n = sum(len(e) for e in g.values())
        print(f"{crate}: {len(known)} modules, {n} imports, no circle" if not any(crate in f for f in failures) else f"{crate}: circles")
    for dirpath, _, files in os.walk(os.path.join(ROOT, "src")):
        if os.path.join("src", "bin") in dirpath:
            continue
        for f in files:
            full = os.path.join(dirpath, f)
            if re.search(r"\bbin::|src/bin|mod\s+cli\b|mod\s+mcp\b", strip_tests(open(full).read())):
                failures.append(f"{os.path.relpath(full, ROOT)}: the library names the binary")
    for dirpath, _, files in os.walk(os.path.join(ROOT, "src/bin")):
        for f in files:
            full = os.path.join(dirpath, f)
            if re.search(r'#\[path\s*=\s*"[^"]*\.\./', open(full).read()):
                failures.append(f"{os.path.relpath(full, ROOT)}: #[path] reaches into the library's files")
    for f in failures:
        print(f, file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
