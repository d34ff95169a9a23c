"""The shell commands the docs tell a reader to run, as the reader would copy them.

They come from the fenced code blocks of README.md and docs/*.md whose language is a shell
(``bash``, ``sh``, ``shell``, ``console``) and from the literal blocks (a paragraph ending in
``::``) of the examples' module docstrings. A command's continuation lines (``\\`` at the end)
are joined and its comments dropped. tests/integration/test_docs_commands.py runs them;
tests/spark/test_examples.py runs the examples with the arguments their docstrings give.
"""

from __future__ import annotations

import ast
import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL_LANGUAGES = ("bash", "sh", "shell", "console")
#: A fenced block, maybe indented (inside a list item): its indent, language and text.
_FENCE = re.compile(r"^([ \t]*)```([^\n`]*)\n(.*?)^\1```[ \t]*$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    """A code block: where it starts (``source`` relative to the repository root, the 1-based
    ``line`` of its first code line), its language and its text."""

    source: str
    line: int
    language: str
    text: str

    def commands(self) -> list["Command"]:
        """Its commands, in order (none unless the block is a shell's)."""
        if self.language not in SHELL_LANGUAGES:
            return []
        out: list[Command] = []
        parts: list[str] = []
        start = 0
        for i, raw in enumerate(self.text.splitlines()):
            if not parts:
                start = i
            line = _strip_comment(raw).rstrip()
            if line.endswith("\\"):
                parts.append(line[:-1].strip())
                continue
            parts.append(line.strip())
            text = " ".join(p for p in parts if p)
            parts = []
            if text:
                out.append(Command(self, self.line + start, text))
        return out


@dataclass(frozen=True)
class Command:
    """One command of a block, continuation lines joined, comments dropped."""

    block: Block
    line: int
    text: str

    @property
    def key(self) -> str:
        """The text with runs of blanks as one space: how lists of commands name it."""
        return " ".join(self.text.split())

    @property
    def where(self) -> str:
        return f"{self.block.source}:{self.line}"

    def fluss_spark_argv(self) -> list[str] | None:
        """The arguments it gives ``fluss-spark`` (also inside ``$(...)``); None when it does
        not run fluss-spark."""
        words = shlex.split(self.text)
        for i, w in enumerate(words):
            head = w.rpartition("$(")[2]
            if head == "fluss-spark" or head.endswith("/fluss-spark"):
                argv = words[i + 1:]
                if "$(" in w and argv:
                    argv[-1] = argv[-1].removesuffix(")")
                return argv
        return None


def _strip_comment(line: str) -> str:
    """``line`` without a shell comment (a ``#`` at a word start, outside quotes)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def markdown_blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file."""
    text = path.read_text()
    return [Block(_rel(path), text.count("\n", 0, m.start(3)) + 1, m.group(2).strip(),
                  textwrap.dedent(m.group(3))) for m in _FENCE.finditer(text)]


def docstring_blocks(path: Path) -> list[Block]:
    """The literal blocks of a Python file's module docstring, as shell blocks."""
    module = ast.parse(path.read_text())
    doc = ast.get_docstring(module, clean=False)
    if not doc:
        return []
    first = module.body[0].lineno   # the docstring's first line
    lines = doc.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        if not lines[i].rstrip().endswith("::"):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        body: list[str] = []
        start = j
        while j < len(lines) and (not lines[j].strip() or lines[j].startswith((" ", "\t"))):
            body.append(lines[j])
            j += 1
        indent = min((len(b) - len(b.lstrip()) for b in body if b.strip()), default=0)
        blocks.append(Block(_rel(path), first + start, "bash",
                            "\n".join(b[indent:] for b in body).strip("\n") + "\n"))
        i = j
    return blocks


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md, then docs/*.md, then examples/*.py."""
    return ([root / "README.md"] + sorted((root / "docs").glob("*.md"))
            + sorted((root / "examples").glob("*.py")))


def all_blocks(root: Path = ROOT) -> list[Block]:
    """Every code block of the docs, in the order of ``doc_files``."""
    return [b for p in doc_files(root)
            for b in (docstring_blocks(p) if p.suffix == ".py" else markdown_blocks(p))]


def example_command(script: str, needle: str = "spark-submit") -> Command:
    """The first command of ``examples/<script>``'s docstring that contains ``needle``."""
    for block in docstring_blocks(ROOT / "examples" / script):
        for c in block.commands():
            if needle in c.text:
                return c
    raise LookupError(f"examples/{script}'s docstring has no command with {needle!r}")


def script_args(command: Command, replace: dict[str, str] | None = None) -> list[str]:
    """The arguments a command gives its ``examples/...`` script, each with the ``replace``
    substitutions made (a documented table name for a test's, ``/tmp/`` for a temp dir)."""
    words = shlex.split(command.text)
    at = next(i for i, w in enumerate(words) if w.startswith("examples/"))
    args = words[at + 1:]
    for old, new in (replace or {}).items():
        args = [a.replace(old, new) for a in args]
    return args


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
