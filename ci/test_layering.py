#!/usr/bin/env python3
"""Tests of ci/layering.py: tiny crates in a temporary directory, checked as the real tree is.
Each kind of finding is caught (a folder-level circle, a subfolder naming its parent, each of the
four circles the library had when the check came in, a flag and a command in a library string),
clean code passes, what is not checked is not, and the allowlist ratchets."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

CREATED = []
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "layering.py")

# The binary: its flags and commands are the words the library must not speak.
BINARY = {
    "cli/src/main.rs": """
        mod cli;
        #[derive(clap::Subcommand)]
        enum Cmd {
            /// Run CMD.
            Run(cli::RunArgs),
            Doctor,
            #[command(hide = true)]
            Guardian { pid: i32 },
        }
        fn main() {}
    """,
    "cli/src/cli.rs": """
        #[derive(clap::Args)]
        pub struct RunArgs {
            /// The memory cap.
            #[arg(long, value_name = "SIZE")]
            pub memory_max: Option<String>,
            #[arg(short = 't', long = "time-out", visible_alias = "kill-after")]
            pub t: Option<String>,
            #[arg(long)]
            #[arg(value_name = "R")]
            pub r#repeat: u32,
        }
    """,
}

CLEAN = {
    "src/lib.rs": """
        mod a;
        mod b;
        pub use a::X;
    """,
    "src/a/mod.rs": """
        mod inner;
        mod sub;
        pub struct X;
        pub fn go() { inner::f(); sub::leaf(); crate::b::g(); }
    """,
    "src/a/inner.rs": """
        use super::X;
        pub fn f() -> X { X }
    """,
    "src/a/sub/mod.rs": """
        pub fn leaf() {}
    """,
    "src/b.rs": """
        //! Says `reaper doctor` and --memory-max in docs: allowed.
        /// Set with --memory-max (`reaper run --memory-max 1G`).
        #[doc = "--memory-max, in an attribute"]
        pub fn g() -> &'static str {
            // --memory-max in a comment
            /* --memory-max /* nested */ reaper doctor */
            let _c = '"';
            let _l: &'static str = "memory max, no flag; systemd --user is not the binary's";
            let _u = "http://host/--memory-maxed";
            "the cap"
        }
        #[cfg(test)]
        mod tests {
            #[test]
            fn t() { assert_eq!("--memory-max", "--memory-max"); }
        }
        #[test]
        fn lone() { let _ = "reaper doctor"; }
        #[cfg(all(test, target_os = "linux"))]
        const T: &str = "--time-out";
    """,
    "src/a/tests.rs": """
        fn t() { let _ = "--memory-max"; crate::b::g(); }
    """,
    "platform/src/lib.rs": """
        pub mod x;
    """,
    "platform/src/x.rs": """
        pub fn y() -> &'static str { "fine" }
    """,
}


def crate(files):
    d = tempfile.mkdtemp(prefix="layering-test-")
    CREATED.append(d)
    for path, text in {**BINARY, **files}.items():
        full = os.path.join(d, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(textwrap.dedent(text))
    return d


def check(root, *args):
    p = subprocess.run(
        [sys.executable, SCRIPT, "--root", root, *args], capture_output=True, text=True, timeout=60
    )
    return p.returncode, p.stdout, p.stderr


def read(path):
    with open(path) as f:
        return f.read()


class Layering(unittest.TestCase):
    @classmethod
    def tearDownClass(cls):
        for d in CREATED:
            shutil.rmtree(d, ignore_errors=True)

    def test_clean_code_passes(self):
        rc, out, err = check(crate(CLEAN))
        self.assertEqual((rc, err), (0, ""), out)
        self.assertIn("reaper: ", out)
        self.assertIn("no circle", out)
        self.assertIn("0 in the library's string literals", out)

    def test_vocabulary(self):
        """The flags and commands are read from the binary, aliases and raw names included."""
        rc, out, _ = check(crate(CLEAN))
        # --help, --version, --memory-max, --time-out, --kill-after, --repeat; run, doctor.
        self.assertIn("6 flags, 2 commands", out)

    def test_folder_circle(self):
        """a/x.rs -> b -> a/y.rs: no two files name each other, the folder and b do."""
        files = dict(CLEAN)
        files["src/a/mod.rs"] = "mod x;\nmod y;\n"
        files["src/a/x.rs"] = "pub fn f() { crate::b::g(); }\n"
        files["src/a/y.rs"] = "pub fn h() {}\n"
        files["src/b.rs"] = "pub fn g() { crate::a::y::h(); }\n"
        files["src/lib.rs"] = "mod a;\nmod b;\n"
        rc, out, err = check(crate(files))
        self.assertEqual(rc, 1, out)
        self.assertIn("new: circle reaper: a -> b", err)
        self.assertIn("new: circle reaper: b -> a", err)

    def test_subfolder_names_parent(self):
        """A parent that uses its subfolder, which names the parent back."""
        files = dict(CLEAN)
        files["src/a/sub/mod.rs"] = "pub fn leaf() { let _ = super::X; }\n"
        rc, out, err = check(crate(files))
        self.assertEqual(rc, 1, out)
        self.assertIn("new: circle reaper: a -> a::sub", err)
        self.assertIn("new: circle reaper: a::sub -> a", err)

    def test_subfolder_names_parent_through_an_import(self):
        """`use super::super::X` from a file of the subfolder, and a re-exported name."""
        files = dict(CLEAN)
        files["src/a/sub/mod.rs"] = "mod deep;\npub fn leaf() {}\n"
        files["src/a/sub/deep.rs"] = "use crate::X as Y;\nfn z(_: Y) {}\n"
        rc, _, err = check(crate(files))
        self.assertEqual(rc, 1)
        self.assertIn("new: circle reaper: a::sub -> a", err)

    def test_the_four_circles_of_the_library(self):
        """The shapes the library had when the check came in, file for file."""
        files = {
            "src/lib.rs": """
                mod command; mod supervise; mod run; mod options; mod guardian;
                mod containment; mod runs;
                pub use command::Command;
                pub use guardian::Guardian;
            """,
            # command -> supervise -> run -> command: `Run::start(&mut Command)`.
            "src/command.rs": "use crate::supervise::Plan;\npub struct Command { plan: Plan }\n",
            "src/supervise.rs": "pub struct Plan;\npub fn next(r: &crate::run::Run) {}\n",
            "src/run/mod.rs": "mod start;\npub struct Run;\n",
            "src/run/start.rs": "impl super::Run {\n    pub fn start(cmd: &mut crate::Command) {}\n}\n",
            # options -> guardian -> containment -> options: `Arc<Guardian>` in the options.
            "src/options.rs": "pub struct ContainOptions { g: Option<std::sync::Arc<crate::Guardian>> }\n",
            "src/guardian/mod.rs": "use crate::containment::Watcher;\npub struct Guardian;\nimpl Watcher for Guardian {}\n",
            "src/containment/mod.rs": "pub mod cgroup;\nmod select;\npub trait Watcher {}\n",
            "src/containment/select.rs": "use crate::options::ContainOptions;\npub fn contain(_: &ContainOptions) {}\n",
            # containment <-> runs: the run cgroup's name parsed and formatted twice.
            "src/containment/cgroup/mod.rs": "pub mod create;\npub mod place;\n",
            "src/containment/cgroup/create.rs": "pub fn name() -> String { crate::runs::next_seq().to_string() }\n",
            "src/containment/cgroup/place.rs": "pub fn parse(_: &str) {}\n",
            "src/runs/mod.rs": "mod id;\npub fn next_seq() -> u64 { 0 }\n",
            "src/runs/id.rs": "use crate::containment::cgroup::place;\npub fn of(s: &str) { place::parse(s) }\n",
            # cli <-> mcp in the binary: `show_size`.
            "cli/src/main.rs": BINARY["cli/src/main.rs"].replace("mod cli;", "mod cli;\nmod mcp;"),
            "cli/src/cli/mod.rs": "pub mod mcp;\npub mod parse;\n" + BINARY["cli/src/cli.rs"],
            "cli/src/cli/mcp.rs": "pub fn main() { crate::mcp::serve() }\n",
            "cli/src/cli/parse.rs": "pub fn show_size(_: u64) -> String { String::new() }\n",
            "cli/src/mcp/mod.rs": "mod progress;\npub fn serve() {}\n",
            "cli/src/mcp/progress.rs": "use crate::cli::parse::show_size;\n",
        }
        root = crate(files)
        os.remove(os.path.join(root, "cli/src/cli.rs"))
        rc, _, err = check(root)
        self.assertEqual(rc, 1)
        for edge in (
            "reaper: command -> supervise", "reaper: supervise -> run", "reaper: run -> command",
            "reaper: options -> guardian", "reaper: guardian -> containment", "reaper: containment -> options",
            "reaper: containment::cgroup -> runs", "reaper: runs -> containment::cgroup",
            "reaper(bin): cli -> mcp", "reaper(bin): mcp -> cli",
        ):
            self.assertIn(f"new: circle {edge}\n", err)

    def test_flag_and_command_words(self):
        files = dict(CLEAN)
        files["src/b.rs"] += textwrap.dedent(
            """
            pub fn e() -> (&'static str, &'static str) { ("memory", "--memory-max") }
            pub fn f(x: u8) -> String { format!("{x}: run `reaper doctor`") }
            pub fn h() -> &'static str { r#"give "--time-out""# }
            pub fn i() -> &'static str { "too long: \\
                see reaper
                run" }
            pub fn j() -> &'static str { "--kill-after and --repeat" }
            pub fn k() -> &'static str { "reaper guardian: hidden, the library's own" }
            pub fn l() -> &'static str { "http://a //--memory-max" }
            """
        )
        files["platform/src/x.rs"] = 'pub fn y() -> &\'static str { "--memory-max" }\n'
        rc, out, err = check(crate(files))
        self.assertEqual(rc, 1, out)
        for word in (
            "src/b.rs: --memory-max (+2)", "src/b.rs: reaper doctor (+1)", "src/b.rs: --time-out (+1)",
            "src/b.rs: reaper run (+1)", "src/b.rs: --kill-after (+1)", "src/b.rs: --repeat (+1)",
            "platform/src/x.rs: --memory-max (+1)",
        ):
            self.assertIn(f"new: word {word}\n", err)
        self.assertNotIn("guardian", err)
        rc, out, _ = check(crate(files), "--report")
        self.assertEqual(rc, 0)
        self.assertIn('word src/b.rs:', out)
        self.assertIn("8 in the library's string literals", out)

    def test_allowlist_ratchets(self):
        files = dict(CLEAN)
        files["src/a/sub/mod.rs"] = "pub fn leaf() { let _ = super::X; }\n"
        files["src/b.rs"] = 'pub fn g() -> &\'static str { "--memory-max" }\n'
        root = crate(files)
        allow = os.path.join(root, "allowed.txt")
        rc, _, _ = check(root, "--allowlist", allow, "--record")
        self.assertEqual(rc, 0)
        listed = read(allow)
        self.assertIn("circle reaper: a -> a::sub\n", listed)
        self.assertIn("word src/b.rs: --memory-max (1)\n", listed)
        rc, out, err = check(root, "--allowlist", allow)
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("3 known findings", out)

        # A second occurrence in the same file is new.
        with open(os.path.join(root, "src/b.rs"), "a") as f:
            f.write('pub fn h() -> &\'static str { "--memory-max" }\n')
        rc, _, err = check(root, "--allowlist", allow)
        self.assertEqual(rc, 1)
        self.assertIn("new: word src/b.rs: --memory-max (+1)", err)

        # A finding gone: its entry must go too, and --shrink removes it (adding nothing).
        with open(os.path.join(root, "src/b.rs"), "w") as f:
            f.write("pub fn g() {}\n")
        with open(os.path.join(root, "src/a/sub/mod.rs"), "w") as f:
            f.write("pub fn leaf() {}\n")
        rc, _, err = check(root, "--allowlist", allow)
        self.assertEqual(rc, 1)
        self.assertIn("gone (remove it from allowed.txt: ci/layering.py --shrink): word src/b.rs: --memory-max", err)
        self.assertIn("gone (remove it from allowed.txt: ci/layering.py --shrink): circle reaper: a -> a::sub", err)
        with open(os.path.join(root, "src/b.rs"), "w") as f:
            f.write('pub fn g() -> &\'static str { "reaper doctor" }\n')
        rc, _, err = check(root, "--allowlist", allow, "--shrink")
        self.assertEqual(rc, 1)  # the new word still fails
        self.assertIn("new: word src/b.rs: reaper doctor", err)
        self.assertNotIn("reaper doctor", read(allow))
        self.assertNotIn("circle reaper", read(allow))
        rc, out, _ = check(root, "--allowlist", allow, "--report")
        self.assertEqual(rc, 0)
        self.assertIn("word src/b.rs:1: reaper doctor", out)

    def test_strict_without_allowlist(self):
        files = dict(CLEAN)
        files["src/b.rs"] = 'pub fn g() -> &\'static str { "--memory-max" }\n'
        rc, _, err = check(crate(files), "--allowlist", "/nonexistent/allowed.txt")
        self.assertEqual(rc, 1)
        self.assertIn("new: word src/b.rs: --memory-max", err)

    def test_hard_rules_fail_in_every_mode(self):
        files = dict(CLEAN)
        files["src/b.rs"] = "use crate::bin::x;\n"
        root = crate(files)
        for mode in ([], ["--report"]):
            rc, _, err = check(root, *mode)
            self.assertEqual(rc, 1)
            self.assertIn("src/b.rs: the library names the binary", err)

    def test_the_library_package_has_no_binary(self):
        files = dict(CLEAN)
        files["src/bin/tool.rs"] = "fn main() {}\n"
        rc, _, err = check(crate(files))
        self.assertEqual(rc, 1)
        self.assertIn("src/bin: the library's package has no binary", err)


if __name__ == "__main__":
    unittest.main(verbosity=1)
