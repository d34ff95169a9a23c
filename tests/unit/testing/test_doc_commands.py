"""Finding the docs' commands: fenced and docstring blocks, continuations, comments, arguments."""

from __future__ import annotations

from fluss_spark.testing.doc_commands import Block, docstring_blocks, markdown_blocks


def test_markdown_blocks_with_their_language_and_line(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("# t\n\n```bash\nfluss-spark table list  # all tables\n```\n\n"
                   "- item\n\n  ```text\n  a | b\n  ```\n")
    blocks = markdown_blocks(doc)
    assert [(b.line, b.language, b.text) for b in blocks] == [
        (4, "bash", "fluss-spark table list  # all tables\n"), (10, "text", "a | b\n")]
    assert [c.text for c in blocks[0].commands()] == ["fluss-spark table list"]
    assert blocks[1].commands() == []       # not a shell's


def test_continuations_are_joined_and_a_hash_in_quotes_is_kept():
    block = Block("doc.md", 10, "bash",
                  "# a comment line\n"
                  "export FLUSS_BOOTSTRAP_SERVERS=$(fluss-spark cluster start \\\n"
                  "    --dir /tmp/fluss)   # prints the address\n"
                  "\n"
                  "fluss-spark tier run --lake /tmp/lake --pattern 'a#b\\..*'\n")
    first, second = block.commands()
    assert (first.line, first.text) == (11, "export FLUSS_BOOTSTRAP_SERVERS=$(fluss-spark cluster "
                                            "start --dir /tmp/fluss)")
    assert first.fluss_spark_argv() == ["cluster", "start", "--dir", "/tmp/fluss"]
    assert second.fluss_spark_argv() == ["tier", "run", "--lake", "/tmp/lake", "--pattern",
                                         "a#b\\..*"]
    assert Block("d", 1, "bash", "./dev.sh demo\n").commands()[0].fluss_spark_argv() is None


def test_docstring_literal_blocks_are_shell_blocks(tmp_path):
    script = tmp_path / "example.py"
    script.write_text('"""An example.\n\nRun::\n\n    fluss-spark produce t \\\\\n'
                      '        --rows 5\n\nDone.\n"""\n\nimport sys\n')
    [block] = docstring_blocks(script)
    assert block.language == "bash" and block.line == 5
    [c] = block.commands()
    assert (c.line, c.key) == (5, "fluss-spark produce t --rows 5")
