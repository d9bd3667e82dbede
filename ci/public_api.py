#!/usr/bin/env python3
"""The `reaper` library's public API, one item per line, from rustdoc's JSON output.

Listed: every public path (`reaper::X`, `reaper::module::X`); for a struct its public fields and
for an enum its variants, with `#[non_exhaustive]` where it is; every public method and
associated function or constant with its signature; the traits each type implements, derived or
written (blanket impls such as `From<T> for T` left out, since they follow), and the auto traits
it has (`Send`, `Sync`, `Unpin`, `UnwindSafe`, `RefUnwindSafe`). Items of reaper-platform that
reaper re-exports are listed under their reaper path, as a user sees them. Types are written by
their public path (`reaper::Outcome`) or, outside the crate, the path that defines them
(`core::time::Duration`); the prelude's names are short (`Option`, `Vec`, `Clone`).

  ci/public_api.py            print the list
  ci/public_api.py --check    compare with ci/public-api.txt (CI); fail with the diff
  ci/public_api.py --update   rewrite ci/public-api.txt: a deliberate API change

The JSON comes from `cargo rustdoc -- --output-format json` (unstable; RUSTC_BOOTSTRAP=1 lets
the stable toolchain make it), built without default features: the library an embedder gets."""

import argparse
import difflib
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORMAT = 57  # rustdoc's JSON format version this reads (Rust 1.95)
SNAPSHOT = os.path.join(ROOT, "ci", "public-api.txt")
CRATE = "reaper"
# Crates of this workspace whose items reaper re-exports: read from their own JSON.
INLINED = ("reaper_platform",)

PRELUDE = {
    ("core", "option", "Option"): "Option",
    ("core", "result", "Result"): "Result",
    ("alloc", "string", "String"): "String",
    ("alloc", "vec", "Vec"): "Vec",
    ("alloc", "boxed", "Box"): "Box",
    ("core", "clone", "Clone"): "Clone",
    ("core", "marker", "Copy"): "Copy",
    ("core", "marker", "Send"): "Send",
    ("core", "marker", "Sync"): "Sync",
    ("core", "marker", "Sized"): "Sized",
    ("core", "marker", "Unpin"): "Unpin",
    ("core", "ops", "drop", "Drop"): "Drop",
    ("core", "ops", "function", "Fn"): "Fn",
    ("core", "ops", "function", "FnMut"): "FnMut",
    ("core", "ops", "function", "FnOnce"): "FnOnce",
    ("core", "default", "Default"): "Default",
    ("core", "cmp", "Eq"): "Eq",
    ("core", "cmp", "PartialEq"): "PartialEq",
    ("core", "cmp", "Ord"): "Ord",
    ("core", "cmp", "PartialOrd"): "PartialOrd",
    ("core", "convert", "From"): "From",
    ("core", "convert", "Into"): "Into",
    ("core", "convert", "TryFrom"): "TryFrom",
    ("core", "convert", "AsRef"): "AsRef",
    ("core", "convert", "AsMut"): "AsMut",
    ("core", "iter", "traits", "iterator", "Iterator"): "Iterator",
    ("core", "iter", "traits", "collect", "IntoIterator"): "IntoIterator",
    ("core", "panic", "unwind_safe", "UnwindSafe"): "UnwindSafe",
    ("core", "panic", "unwind_safe", "RefUnwindSafe"): "RefUnwindSafe",
}
# Implemented by the compiler beside a derive, unstable: not the crate's API.
SKIPPED = ("core::marker::StructuralPartialEq",)
# The stable auto traits; the unstable ones (Freeze, UnsafeUnpin) come and go with the toolchain.
AUTO = ("Send", "Sync", "Unpin", "UnwindSafe", "RefUnwindSafe")


def rustdoc_json(package, target_dir):
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    cmd = [
        "cargo", "rustdoc", "--quiet", "-p", package, "--lib", "--no-default-features",
        "--", "-Z", "unstable-options", "--output-format", "json",
    ]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)
    return os.path.join(target_dir, "doc", package.replace("-", "_") + ".json")


def target_dir():
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)["target_directory"]


class Doc:
    """One crate's JSON."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        self.index, self.paths, self.root = d["index"], d["paths"], str(d["root"])
        self.name = self.index[self.root]["name"]
        self.format = d["format_version"]

    def item(self, i):
        return self.index.get(str(i))

    def public_tree(self):
        """{public path tuple: id} for every item reachable from the crate root."""
        out = {}

        def walk(mod_id, prefix, seen):
            for i in self.item(mod_id)["inner"]["module"]["items"]:
                it = self.item(i)
                kind = next(iter(it["inner"]))
                if kind == "use":
                    u = it["inner"]["use"]
                    if u["id"] is None or self.item(u["id"]) is None:
                        continue
                    if u["is_glob"]:
                        walk(u["id"], prefix, seen)
                        continue
                    path, target = prefix + (u["name"],), str(u["id"])
                else:
                    path, target = prefix + (it["name"],), str(i)
                out.setdefault(path, target)
                if "module" in self.item(target)["inner"] and target not in seen:
                    walk(target, path, seen | {target})

        walk(self.root, (self.name,), {self.root})
        return out


class Api:
    def __init__(self, main, others):
        self.main, self.others = main, {d.name: d for d in others}
        self.public = {}  # (crate, id) -> [public path tuples]
        self.foreign_uses = []  # (path, defining path) of re-exports from crates not inlined
        for name, d in self.others.items():
            d.by_path = {p: i for p, i in d.public_tree().items()}
            for i, s in d.paths.items():
                if s["crate_id"] == 0:
                    d.by_path.setdefault(tuple(s["path"]), i)
        self._walk(main, main.root, (main.name,), {main.root})
        for paths in self.public.values():
            paths.sort(key=lambda p: (len(p), p))
        # Items of other crates re-exported as they are: written by their reaper path.
        self.reexported = {}
        for path, defined in sorted(self.foreign_uses, key=lambda pd: (len(pd[0]), pd[0])):
            self.reexported.setdefault(defined, "::".join(path))

    def _register(self, doc, i, path):
        self.public.setdefault((doc.name, str(i)), [])
        if path not in self.public[(doc.name, str(i))]:
            self.public[(doc.name, str(i))].append(path)

    def _walk(self, doc, mod_id, prefix, seen):
        for i in doc.item(mod_id)["inner"]["module"]["items"]:
            it = doc.item(i)
            kind = next(iter(it["inner"]))
            if kind != "use":
                self._register(doc, i, prefix + (it["name"],))
                if kind == "module":
                    self._walk(doc, i, prefix + (it["name"],), seen)
                continue
            u = it["inner"]["use"]
            target = doc.item(u["id"]) if u["id"] is not None else None
            if target is not None:
                if u["is_glob"]:
                    self._walk(doc, u["id"], prefix, seen)
                    continue
                self._register(doc, u["id"], prefix + (u["name"],))
                if "module" in target["inner"] and str(u["id"]) not in seen:
                    self._walk(doc, u["id"], prefix + (u["name"],), seen | {str(u["id"])})
                continue
            defined = doc.paths.get(str(u["id"]), {}).get("path") if u["id"] is not None else None
            other = self.others.get(defined[0]) if defined else None
            if other is not None and tuple(defined) in other.by_path:
                oid = other.by_path[tuple(defined)]
                self._register(other, oid, prefix + (u["name"],))
                if "module" in other.item(oid)["inner"]:
                    self._walk(other, oid, prefix + (u["name"],), seen)
            else:
                self.foreign_uses.append((prefix + (u["name"],), tuple(defined or [u["source"]])))

    def canonical(self, doc, i):
        paths = self.public.get((doc.name, str(i)))
        return "::".join(paths[0]) if paths else None

    # -- rendering types ------------------------------------------------------------------

    def path_of(self, doc, p):
        """A `Path` (a resolved type or trait path) without its arguments."""
        i = p.get("id")
        if i is not None:
            pub = self.canonical(doc, i)
            if pub:
                return pub
            s = doc.paths.get(str(i))
            if s:
                full = tuple(s["path"])
                other = self.others.get(full[0])
                if other is not None and full in other.by_path:
                    pub = self.canonical(other, other.by_path[full])
                    if pub:
                        return pub
                if full in self.reexported:
                    return self.reexported[full]
                return PRELUDE.get(full, "::".join(full))
        return p["path"]

    def path(self, doc, p):
        return self.path_of(doc, p) + self.args(doc, p.get("args"))

    def args(self, doc, a):
        if not a:
            return ""
        if "angle_bracketed" in a:
            ab = a["angle_bracketed"]
            parts = [self.generic_arg(doc, x) for x in ab["args"]]
            for c in ab["constraints"]:
                name = c["name"] + self.args(doc, c.get("args"))
                b = c["binding"]
                if "equality" in b:
                    term = b["equality"]
                    parts.append(name + " = " + (self.ty(doc, term["type"]) if "type" in term else const_expr(term.get("constant"))))
                else:
                    parts.append(name + ": " + self.bounds(doc, b["constraint"]))
            return "<" + ", ".join(parts) + ">" if parts else ""
        if "parenthesized" in a:
            pa = a["parenthesized"]
            out = "(" + ", ".join(self.ty(doc, t) for t in pa["inputs"]) + ")"
            return out + (" -> " + self.ty(doc, pa["output"]) if pa.get("output") else "")
        return "(..)"

    def generic_arg(self, doc, x):
        if x == "infer":
            return "_"
        if "lifetime" in x:
            return x["lifetime"]
        if "type" in x:
            return self.ty(doc, x["type"])
        if "const" in x:
            return const_expr(x["const"])
        return "?"

    def bounds(self, doc, bs):
        out = []
        for b in bs:
            if "trait_bound" in b:
                tb = b["trait_bound"]
                s = self.hrtb(doc, tb.get("generic_params")) + self.path(doc, tb["trait"])
                out.append({"maybe": "?", "maybe_const": "~const "}.get(tb.get("modifier"), "") + s)
            elif "outlives" in b:
                out.append(b["outlives"])
            elif "use" in b:
                out.append("use<" + ", ".join(str(x.get("lifetime", x.get("param", x))) if isinstance(x, dict) else str(x) for x in b["use"]) + ">")
        return " + ".join(out)

    def hrtb(self, doc, params):
        names = [p["name"] for p in params or []]
        return "for<" + ", ".join(names) + "> " if names else ""

    def ty(self, doc, t):
        if t is None:
            return "()"
        if isinstance(t, str):
            return "_" if t == "infer" else t
        k, v = next(iter(t.items()))
        if k == "resolved_path":
            return self.path(doc, v)
        if k == "dyn_trait":
            parts = [self.hrtb(doc, x.get("generic_params")) + self.path(doc, x["trait"]) for x in v["traits"]]
            if v.get("lifetime"):
                parts.append(v["lifetime"])
            return "dyn " + " + ".join(parts)
        if k in ("generic", "primitive"):
            return v
        if k == "function_pointer":
            h = v["header"]
            pre = self.hrtb(doc, v.get("generic_params")) + ("unsafe " if h.get("is_unsafe") else "")
            return pre + "fn(" + ", ".join(self.ty(doc, x[1]) for x in v["sig"]["inputs"]) + ")" + self.ret(doc, v["sig"])
        if k == "tuple":
            inner = ", ".join(self.ty(doc, x) for x in v)
            return "(" + inner + ("," if len(v) == 1 else "") + ")"
        if k == "slice":
            return "[" + self.ty(doc, v) + "]"
        if k == "array":
            return "[" + self.ty(doc, v["type"]) + "; " + str(v["len"]) + "]"
        if k == "pat":
            return self.ty(doc, v["type"])
        if k == "impl_trait":
            return "impl " + self.bounds(doc, v)
        if k == "raw_pointer":
            return ("*mut " if v["is_mutable"] else "*const ") + self.ty(doc, v["type"])
        if k == "borrowed_ref":
            lt = v["lifetime"] + " " if v.get("lifetime") else ""
            return "&" + lt + ("mut " if v["is_mutable"] else "") + self.ty(doc, v["type"])
        if k == "qualified_path":
            self_ty = self.ty(doc, v["self_type"])
            name = v["name"] + self.args(doc, v.get("args"))
            if v.get("trait"):
                return "<" + self_ty + " as " + self.path(doc, v["trait"]) + ">::" + name
            return self_ty + "::" + name
        return k

    def ret(self, doc, sig):
        out = sig.get("output")
        return " -> " + self.ty(doc, out) if out is not None else ""

    def generics(self, doc, g):
        """(`<…>` after the name, ` where …` after the signature)."""
        params = []
        for p in g.get("params", []):
            kind = p["kind"]
            if "lifetime" in kind:
                o = kind["lifetime"].get("outlives") or []
                params.append(p["name"] + (": " + " + ".join(o) if o else ""))
            elif "type" in kind:
                if kind["type"].get("is_synthetic"):
                    continue
                b = self.bounds(doc, kind["type"].get("bounds", []))
                d = kind["type"].get("default")
                params.append(p["name"] + (": " + b if b else "") + (" = " + self.ty(doc, d) if d else ""))
            elif "const" in kind:
                params.append("const " + p["name"] + ": " + self.ty(doc, kind["const"]["type"]))
        where = []
        for w in g.get("where_predicates", []):
            if "bound_predicate" in w:
                bp = w["bound_predicate"]
                where.append(self.hrtb(doc, bp.get("generic_params")) + self.ty(doc, bp["type"]) + ": " + self.bounds(doc, bp["bounds"]))
            elif "lifetime_predicate" in w:
                lp = w["lifetime_predicate"]
                where.append(lp["lifetime"] + ": " + " + ".join(lp["outlives"]))
            elif "eq_predicate" in w:
                ep = w["eq_predicate"]
                where.append(self.ty(doc, ep["lhs"]) + " = " + self.ty(doc, ep["rhs"].get("type")))
        return ("<" + ", ".join(params) + ">" if params else ""), (" where " + ", ".join(where) if where else "")

    def fn(self, doc, it, path):
        f = it["inner"]["function"]
        h = f["header"]
        quals = "".join(
            q for q, on in (("const ", h.get("is_const")), ("async ", h.get("is_async")), ("unsafe ", h.get("is_unsafe"))) if on
        )
        abi = h.get("abi")
        if abi not in (None, "Rust"):
            quals += 'extern "' + (abi if isinstance(abi, str) else next(iter(abi))) + '" '
        gen, where = self.generics(doc, f["generics"])
        inputs = []
        for name, t in f["sig"]["inputs"]:
            if name == "self":
                if t == {"generic": "Self"}:
                    inputs.append("self")
                    continue
                if "borrowed_ref" in t and t["borrowed_ref"]["type"] == {"generic": "Self"}:
                    r = t["borrowed_ref"]
                    inputs.append("&" + (r["lifetime"] + " " if r.get("lifetime") else "") + ("mut " if r["is_mutable"] else "") + "self")
                    continue
            inputs.append(name + ": " + self.ty(doc, t))
        variadic = ", ..." if f["sig"].get("is_c_variadic") else ""
        return f"pub {quals}fn {path}{gen}({', '.join(inputs)}{variadic}){self.ret(doc, f['sig'])}{where}"

    # -- the listing ------------------------------------------------------------------------

    def lines(self):
        """[(sort key, line)] for every public item."""
        out = []
        for (crate, i), paths in sorted(self.public.items(), key=lambda kv: kv[1][0]):
            doc = self.main if crate == self.main.name else self.others[crate]
            it = doc.item(i)
            path = "::".join(paths[0])
            for alias in paths[1:]:
                out.append(((alias, 0, ()), f"pub use {'::'.join(alias)} = {path}"))
            for rank, line, *name in self.item_lines(doc, it, path):
                out.append(((paths[0], rank, tuple(name)), line))
        for path, defined in self.foreign_uses:
            out.append(((path, 0, ()), f"pub use {'::'.join(path)} = {'::'.join(defined)}"))
        out.sort(key=lambda kl: (kl[0], kl[1]))
        return [line for _, line in out]

    def marks(self, it):
        m = ""
        if "non_exhaustive" in it.get("attrs", []):
            m += " #[non_exhaustive]"
        if it.get("deprecation"):
            m += " #[deprecated]"
        return m

    def item_lines(self, doc, it, path):
        kind, v = next(iter(it["inner"].items()))
        marks = self.marks(it)
        if kind == "module":
            yield 0, f"pub mod {path}"
        elif kind == "function":
            yield 0, self.fn(doc, it, path) + marks
        elif kind == "constant":
            yield 0, f"pub const {path}: {self.ty(doc, v['type'])}" + (f" = {v['const']['expr']}" if v["const"].get("is_literal") else "")
        elif kind == "static":
            yield 0, f"pub static {'mut ' if v.get('is_mutable') else ''}{path}: {self.ty(doc, v['type'])}"
        elif kind == "type_alias":
            gen, where = self.generics(doc, v["generics"])
            yield 0, f"pub type {path}{gen} = {self.ty(doc, v['type'])}{where}"
        elif kind == "struct":
            gen, where = self.generics(doc, v["generics"])
            sk = v["kind"]
            if sk == "unit":
                yield 0, f"pub struct {path}{gen};{where}{marks}"
            elif "tuple" in sk:
                fields = [("pub " + self.ty(doc, doc.item(f)["inner"]["struct_field"])) if f is not None else "_" for f in sk["tuple"]]
                yield 0, f"pub struct {path}{gen}({', '.join(fields)}){where}{marks}"
            else:
                private = " // and private fields" if sk["plain"]["has_stripped_fields"] else ""
                yield 0, f"pub struct {path}{gen}{where}{marks}{private}"
                for f in sk["plain"]["fields"]:
                    fi = doc.item(f)
                    yield 1, f"pub {path}::{fi['name']}: {self.ty(doc, fi['inner']['struct_field'])}"
            yield from self.impl_lines(doc, v["impls"], path)
        elif kind == "enum":
            gen, where = self.generics(doc, v["generics"])
            hidden = " // and hidden variants" if v.get("has_stripped_variants") else ""
            yield 0, f"pub enum {path}{gen}{where}{marks}{hidden}"
            for var in v["variants"]:
                yield 1, self.variant(doc, doc.item(var), path)
            yield from self.impl_lines(doc, v["impls"], path)
        elif kind == "union":
            gen, where = self.generics(doc, v["generics"])
            yield 0, f"pub union {path}{gen}{where}{marks}"
            for f in v["fields"]:
                fi = doc.item(f)
                yield 1, f"pub {path}::{fi['name']}: {self.ty(doc, fi['inner']['struct_field'])}"
            yield from self.impl_lines(doc, v["impls"], path)
        elif kind == "trait":
            gen, where = self.generics(doc, v["generics"])
            sup = ": " + self.bounds(doc, v["bounds"]) if v.get("bounds") else ""
            yield 0, f"pub {'unsafe ' if v.get('is_unsafe') else ''}{'auto ' if v.get('is_auto') else ''}trait {path}{gen}{sup}{where}{marks}"
            for m in v["items"]:
                yield 2, self.assoc(doc, doc.item(m), path), doc.item(m)["name"]
        elif kind == "macro":
            yield 0, f"pub macro {path}!"
        else:
            yield 0, f"pub {kind} {path}"

    def variant(self, doc, var, path):
        vk = var["inner"]["variant"]["kind"]
        name = f"pub {path}::{var['name']}"
        if vk == "plain":
            d = var["inner"]["variant"].get("discriminant")
            out = name + (f" = {d['expr']}" if d else "")
        elif "tuple" in vk:
            out = name + "(" + ", ".join(self.ty(doc, doc.item(f)["inner"]["struct_field"]) if f is not None else "_" for f in vk["tuple"]) + ")"
        else:
            fields = [f"{doc.item(f)['name']}: {self.ty(doc, doc.item(f)['inner']['struct_field'])}" for f in vk["struct"]["fields"]]
            if vk["struct"].get("has_stripped_fields"):
                fields.append("..")
            out = name + " { " + ", ".join(fields) + " }"
        return out + self.marks(var)

    def assoc(self, doc, it, path):
        kind, v = next(iter(it["inner"].items()))
        full = f"{path}::{it['name']}"
        if kind == "function":
            return self.fn(doc, it, full) + self.marks(it)
        if kind == "assoc_const":
            return f"pub const {full}: {self.ty(doc, v['type'])}" + (f" = {v['value']}" if v.get("value") else "")
        if kind == "assoc_type":
            b = self.bounds(doc, v.get("bounds", []))
            return f"pub type {full}" + (": " + b if b else "") + (" = " + self.ty(doc, v["type"]) if v.get("type") else "")
        return f"pub {kind} {full}"

    def impl_lines(self, doc, impl_ids, path):
        traits, auto = [], []
        for i in impl_ids:
            im = doc.item(i)["inner"]["impl"]
            if im.get("blanket_impl") is not None:
                continue
            if im["trait"] is None:
                for m in im["items"]:
                    it = doc.item(m)
                    if it is not None and it.get("visibility") == "public":
                        yield 2, self.assoc(doc, it, path), it["name"]
                continue
            if self.path_of(doc, im["trait"]) in SKIPPED:
                continue
            name = ("!" if im.get("is_negative") else "") + self.path(doc, im["trait"])
            if im.get("is_synthetic"):
                if self.path_of(doc, im["trait"]) in AUTO:
                    auto.append(name)
                continue
            gen, where = self.generics(doc, im["generics"])
            for_ty = self.ty(doc, im["for"])
            if for_ty != path:
                # `impl Trait for &Type`, `for Box<Type>`…: the receiver is part of it.
                name += " for " + for_ty
            traits.append((gen + " " if gen else "") + name + where)
        if traits:
            yield 3, f"impl {path}: " + ", ".join(sorted(traits))
        if auto:
            yield 4, f"auto {path}: " + ", ".join(sorted(auto, key=lambda a: AUTO.index(a.lstrip("!"))))

    # -- counts -----------------------------------------------------------------------------

    def counts(self):
        top = set()
        kinds = {}
        for key, paths in self.public.items():
            doc = self.main if key[0] == self.main.name else self.others[key[0]]
            kind, v = next(iter(doc.item(key[1])["inner"].items()))
            if kind == "module":
                continue
            # What `reaper::` and its public modules export: `reaper::X`, `reaper::m::X`.
            if any(len(p) == 2 or (len(p) == 3 and self._is_module(p[:2])) for p in paths):
                top.add(key)
            k = kinds.setdefault(kind, [0, 0])
            k[0] += 1
            if kind in ("struct", "enum") and "non_exhaustive" in doc.item(key[1]).get("attrs", []):
                k[1] += 1
        return len(top) + len(self.foreign_uses), kinds

    def _is_module(self, path):
        for key, paths in self.public.items():
            if path in paths:
                doc = self.main if key[0] == self.main.name else self.others[key[0]]
                return "module" in doc.item(key[1])["inner"]
        return False


def const_expr(c):
    if not c:
        return "_"
    return c.get("value") or c.get("expr") or "_"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help=f"compare with {os.path.relpath(SNAPSHOT, ROOT)}")
    mode.add_argument("--update", action="store_true", help=f"rewrite {os.path.relpath(SNAPSHOT, ROOT)}")
    ap.add_argument("--json", nargs="+", metavar="FILE", help="rustdoc JSON files to read (reaper's first) instead of building them")
    args = ap.parse_args(argv)

    if args.json:
        files = args.json
    else:
        td = target_dir()
        files = [rustdoc_json("reaper", td)] + [rustdoc_json(c.replace("_", "-"), td) for c in INLINED]
    docs = [Doc(f) for f in files]
    if docs[0].format != FORMAT:
        print(
            f"note: rustdoc wrote JSON format {docs[0].format}; this script reads {FORMAT}. If the "
            "listing changed in form only, rewrite it (--update) in a commit of its own.",
            file=sys.stderr,
        )
    api = Api(docs[0], docs[1:])
    lines = api.lines()
    text = "".join(line + "\n" for line in lines)
    top, kinds = api.counts()
    structs, enums = kinds.get("struct", [0, 0]), kinds.get("enum", [0, 0])
    summary = (
        f"public API of {CRATE}: {top} items exported by `{CRATE}::` and its public modules "
        f"({structs[0]} structs, {structs[1]} of them #[non_exhaustive]; {enums[0]} enums, "
        f"{enums[1]} #[non_exhaustive]; {kinds.get('function', [0])[0]} functions); "
        f"{len(lines)} lines in {os.path.relpath(SNAPSHOT, ROOT)}"
    )

    if args.update:
        with open(SNAPSHOT, "w", encoding="utf-8") as f:
            f.write(text)
        print(summary)
        return 0
    if args.check:
        try:
            with open(SNAPSHOT, encoding="utf-8") as f:
                old = f.read()
        except FileNotFoundError:
            old = ""
        print(summary)
        if old == text:
            print("the public API is as listed")
            return 0
        sys.stdout.writelines(
            difflib.unified_diff(
                old.splitlines(keepends=True), text.splitlines(keepends=True),
                "ci/public-api.txt (checked in)", "the library now", n=1,
            )
        )
        print(
            "\nThe library's public API changed. If that is deliberate, record it: "
            "`python3 ci/public_api.py --update`, and commit ci/public-api.txt with the change "
            "(docs/library.md: API changes are deliberate).",
            file=sys.stderr,
        )
        return 1
    sys.stdout.write(text)
    print(summary, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
