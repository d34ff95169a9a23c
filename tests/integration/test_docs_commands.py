"""Every shell command of README.md, docs/*.md and the examples' docstrings runs as written.

The commands (``fluss_spark/testing/doc_commands.py`` finds them) run in bash with ``set -euo
pipefail``, one script per block in the docs' order, against ONE local embedded cluster: the
README's ``cluster start --dir /tmp/fluss --tablets 2``, started here first (``/tmp/`` of every
command is the test's temp dir, and ``$FLUSS_SPARK_HOME`` names that cluster too), so the docs'
own ``cluster start`` commands find it running and print its address, and their ``cluster stop``
runs last. The session's cluster of ``tests/conftest.py`` does not fit: the docs start and stop
theirs by directory. A block that starts an Apache Fluss cluster runs against the session's
Apache Fluss cluster (``apache_fluss``) instead, with the start and stop another test runs.

A command another test runs (an example under spark-submit, the tiering job) is listed with
that test in ``COVERED``; one that no test can run (installing, the test suite itself) is in
``SKIPPED`` with the reason. Their ``fluss-spark`` arguments are still parsed by the real
parser. A command that is neither run nor listed fails the first test, so both lists stay
complete; a listed command the docs no longer have fails it too.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from fluss_spark.cli import build_parser
from fluss_spark.testing.doc_commands import ROOT, Block, Command, all_blocks

#: Commands another test runs, by that test.
COVERED: dict[str, tuple[str, ...]] = {
    "tests/spark/test_standalone_tiering.py::test_tiering_on_a_standalone_cluster_into_an_s3_"
    "warehouse": (
        "export PYICEBERG_CATALOG__FLUSS_LAKE__S3__ACCESS_KEY_ID=...",
        "export PYICEBERG_CATALOG__FLUSS_LAKE__S3__SECRET_ACCESS_KEY=...",
        "spark-submit --master spark://master:7077 --py-files dist/fluss_spark.zip --conf "
        "spark.executorEnv.PYICEBERG_CATALOG__FLUSS_LAKE__S3__ACCESS_KEY_ID="
        "\"$PYICEBERG_CATALOG__FLUSS_LAKE__S3__ACCESS_KEY_ID\" --conf "
        "spark.executorEnv.PYICEBERG_CATALOG__FLUSS_LAKE__S3__SECRET_ACCESS_KEY="
        "\"$PYICEBERG_CATALOG__FLUSS_LAKE__S3__SECRET_ACCESS_KEY\" examples/tier_tables.py "
        "--bootstrap-servers \"$FLUSS_BOOTSTRAP_SERVERS\" --lake /srv/lake --pattern 'shop\\..*' "
        "--catalog type=sql --catalog uri=sqlite:////srv/lake/_tiering/catalog.db --catalog "
        "warehouse=s3://fluss/lake --catalog s3.endpoint=http://store:8333 --catalog "
        "s3.region=us-east-1",
    ),
    "tests/spark/test_cli_tier.py::test_tier_run_once_then_status": (
        "fluss-spark tier run --lake /tmp/lake --pattern 'shop\\.orders' --once",
        "fluss-spark tier status --lake /tmp/lake",
    ),
    "tests/spark/test_cli_tier.py::test_tier_compact_and_expire_keep_the_copies_equal_through_"
    "both_readers": (
        "fluss-spark tier compact --lake /tmp/lake",
        "fluss-spark tier expire --lake /tmp/lake --older-than 1d --retain-last 10",
    ),
    "tests/spark/test_cli_tier.py::test_a_lake_of_the_old_format_is_migrated_and_tiering_"
    "continues_where_it_stopped": (
        "fluss-spark tier migrate --lake /tmp/lake",
    ),
    "tests/spark/test_tiering_restart.py::test_kill_9_mid_round_then_restart_is_exact_with_no_"
    "duplicates_and_no_lease": (
        "PYSPARK_PYTHON=$(which python) spark-submit --master \"local[2,4]\" "
        "examples/tier_tables.py --lake /tmp/lake --pattern 'demo\\..*'",
        "PYSPARK_PYTHON=/opt/venv/bin/python spark-submit --master yarn examples/tier_tables.py "
        "--bootstrap-servers \"$FLUSS_BOOTSTRAP_SERVERS\" --lake /tmp/lake --pattern 'shop\\..*'",
    ),
    # Both run these arguments (tests/spark/test_examples.py reads them from the docstrings).
    "tests/spark/test_examples.py::test_stream_pk_table_example_writes_snapshot_then_changelog": (
        "PYSPARK_PYTHON=$(which python) spark-submit --master \"local[2]\" "
        "examples/stream_pk_table.py --table demo.orders --out /tmp/orders-parquet "
        "--checkpoint /tmp/orders-ckpt --available-now",
    ),
    "tests/spark/test_examples.py::test_batch_aggregate_example_with_the_package_shipped_as_py_"
    "files": (
        "PYSPARK_PYTHON=$(which python) spark-submit --master \"local[2]\" "
        "examples/batch_aggregate.py --table demo.orders --group-by paid --sum amount",
        "PYSPARK_PYTHON=$(which python) spark-submit --master \"local[2]\" --py-files "
        "dist/fluss_spark.zip examples/batch_aggregate.py --table demo.orders --group-by paid "
        "--sum amount",
    ),
    "tests/spark/test_examples.py::test_monitor_example_prints_lag_down_to_zero": (
        "PYSPARK_PYTHON=$(which python) spark-submit --master \"local[2]\" examples/monitor_lag.py "
        "--tables demo.orders,demo.events --max-offsets-per-trigger 500 --until-caught-up",
    ),
    "tests/spark/test_standalone.py::test_full_mode_on_two_workers_survives_a_killed_worker": (
        "PYSPARK_PYTHON=python3 spark-submit --master spark://spark-master:7077 --py-files "
        "dist/fluss_spark.zip examples/batch_aggregate.py --table demo.orders --group-by paid "
        "--sum amount",
    ),
    "tests/integration/test_apache_fluss_cluster.py::test_cli_start_status_stop_round_trip": (
        "export FLUSS_BOOTSTRAP_SERVERS=$(fluss-spark cluster start --engine apache-fluss --dir "
        "/tmp/apache-fluss --tablets 2)",
        "fluss-spark cluster status --dir /tmp/apache-fluss",
        "fluss-spark cluster stop --dir /tmp/apache-fluss",
        "export FLUSS_BOOTSTRAP_SERVERS=$(fluss-spark cluster start --engine apache-fluss "
        "--remote-storage s3 --dir /tmp/fluss-s3)",
        "fluss-spark cluster status --dir /tmp/fluss-s3 --json",
    ),
}

#: Commands no test can run, by why.
SKIPPED: dict[str, tuple[str, ...]] = {
    "needs a YARN cluster or Kubernetes (docs/deployment.md marks them untested)": (
        "PYSPARK_PYTHON=./env/bin/python spark-submit --master yarn --deploy-mode cluster "
        "--archives env.tar.gz#env --py-files dist/fluss_spark.zip examples/batch_aggregate.py "
        "--table demo.orders --group-by paid --sum amount",
        "spark-submit --master k8s://https://k8s-api:6443 --deploy-mode cluster --conf "
        "spark.kubernetes.container.image=registry.example/spark-fluss:4.2 --conf "
        "spark.pyspark.python=python3 local:///opt/jobs/batch_aggregate.py --table demo.orders "
        "--group-by paid --sum amount",
    ),
    "runs until Ctrl-C; the Spark tests' `standalone` fixture starts the same master and "
    "workers (fluss_spark/testing/standalone.py)": ("./dev.sh standalone --workers 2",),
    "installs the project into .venv (CI runs `./dev.sh test` itself); the demo is "
    "examples/quickstart.py, which this test runs": ("./dev.sh demo", "./dev.sh test"),
    "the test suite itself": (
        ".venv/bin/python -m pytest -q tests/integration",
        ".venv/bin/python -m pytest -q tests/spark/test_stream.py",
        ".venv/bin/python -m pytest -q tests/unit/protocol/test_apache_fluss_proto.py "
        "tests/unit/protocol/test_apache_fluss_framing.py "
        "tests/unit/protocol/test_apache_fluss_log_batch.py",
        ".venv/bin/python -m pytest -q tests/unit/protocol/test_apache_fluss_partition_messages.py "
        "tests/unit/client/test_apache_fluss_partitions.py "
        "tests/unit/client/test_apache_fluss_leases.py",
        ".venv/bin/python -m pytest -q tests/integration/test_apache_fluss_client.py "
        "tests/integration/test_apache_fluss_partitions.py",
    ),
    "the example pipeline's spark-submit runs, killed and restarted, in "
    "tests/spark/test_sink_restarts.py (extended: minutes of spark-submit runs)": (
        "PYSPARK_PYTHON=$(which python) spark-submit --master \"local[2]\" "
        "examples/pipeline_pk_to_pk.py --source demo.orders --target demo.order_sizes "
        "--checkpoint /tmp/order-sizes-ckpt --available-now",
    ),
    "a 4-minute soak under injected faults (bench/soak.py; its figures are in the README)": (
        ".venv/bin/python bench/soak.py --duration 240 --fault-every 12 --seed 7",
        ".venv/bin/python bench/soak.py --duration 240 --fault-every 12 --seed 7 --sasl",
    ),
    "needs an Iceberg REST catalog and S3 (only the SQLite catalog is tested)": (
        "fluss-spark tier run --lake /tmp/lake --pattern 'shop\\..*' --catalog type=rest "
        "--catalog uri=http://iceberg-rest:8181 --catalog warehouse=s3://bucket/lake "
        "--catalog s3.region=eu-west-1",
    ),
    "installs a wheel built from the checkout (.ci/wheel_check.py builds one and installs it "
    "into a clean virtualenv; tests/unit/test_extras.py keeps the dependency list equal to "
    "setup.cfg's)": (
        "python -m pip wheel --no-deps --wheel-dir dist .",
        'python -m pip install "$(ls dist/fluss_spark-*.whl)[tiering]"',
        "pip install --no-deps fluss_spark-<version>-*.whl",
        'pip install "pyarrow>=15" "msgpack>=1.0" "pandas>=2,<3" "numpy>=1.24" '
        '"google-crc32c>=1.5" "rocksdict>=0.3.25" "platformdirs>=3" "pyfluss>=1.0.0"',
    ),
}

#: What the output of some commands must show (a regex over stdout and stderr), beyond exit
#: status 0 and no error on stderr.
EXPECT: dict[str, str] = {
    "export FLUSS_BOOTSTRAP_SERVERS=$(fluss-spark cluster start --dir /tmp/fluss --tablets 2)":
        r"(?s)coordinator 0 already running on .*export FLUSS_BOOTSTRAP_SERVERS=127\.0\.0\.1:",
    "fluss-spark produce shop.orders --rows 100000 --updates 5000 --deletes 1000 --seed 1":
        r"wrote 106000 rows to shop\.orders \(100000 inserts, 5000 updates, 1000 deletes\)",
    "fluss-spark snapshot trigger shop.orders": r"(?m)^3 +\d+ +\d+ +\d+",
    "fluss-spark scan shop.orders --limit 10": r"^ID +ITEM +AMOUNT\n(\d+ .*\n){10}$",
    "fluss-spark produce shop.visits --rows 1000 --partition dt=2026-11-25":
        r"wrote 1000 rows to shop\.visits",
    "fluss-spark acl list --principal User:alice": r"User:alice +ALLOW +READ +table:shop\.orders",
    "fluss-spark snapshot trigger demo.orders": r"(?m)^1 +\d+ +\d+ +\d+",
    "python examples/quickstart.py --rows 20000": r"folded stream equals the table: True",
    "fluss-spark cluster stop --dir /tmp/fluss": r"stopped the cluster in ",
    "fluss-spark table list": r"^TABLE\n\S",
}

#: Fenced-block languages: the shells' are run; the others are not commands.
LANGUAGES = ("bash", "json", "python", "text", "yaml")


def _listed(table: dict[str, tuple[str, ...]]) -> dict[str, str]:
    return {cmd: why for why, cmds in table.items() for cmd in cmds}


def _apache_fluss(block: Block) -> bool:
    return "--engine apache-fluss" in block.text


def _deferred(c: Command) -> bool:
    """The docs' ``cluster stop`` of the local cluster: run after every other block."""
    return (c.fluss_spark_argv() or [])[:2] == ["cluster", "stop"]


def _runs(c: Command) -> bool:
    return c.key not in _listed(COVERED) and c.key not in _listed(SKIPPED)


def _is_run_here(c: Command) -> bool:
    """Whether this module runs ``c``: a fluss-spark command or the quickstart."""
    return c.fluss_spark_argv() is not None or c.key.startswith("python examples/")


def test_every_command_is_run_covered_or_skipped():
    blocks = all_blocks()
    commands = [c for b in blocks for c in b.commands()]
    assert len(commands) > 50
    untagged = [f"{b.source}:{b.line}" for b in blocks if b.language not in LANGUAGES]
    assert not untagged, (f"code blocks without a language of {LANGUAGES} (a shell's is run "
                          f"by this test): {untagged}")
    unknown = [f"{c.where}: {c.key}" for c in commands if _runs(c) and not _is_run_here(c)]
    assert not unknown, ("commands neither run here nor listed in COVERED or SKIPPED of "
                         f"{Path(__file__).name}: {unknown}")
    keys = {c.key for c in commands}
    stale = sorted((set(_listed(COVERED)) | set(_listed(SKIPPED)) | set(EXPECT)) - keys)
    assert not stale, f"listed commands the docs do not have (any more): {stale}"
    for test in COVERED:
        path, _, name = test.partition("::")
        assert f"def {name}(" in (ROOT / path).read_text(), f"{test} does not exist"
    parser = build_parser()
    for c in commands:
        argv = c.fluss_spark_argv()
        if argv is not None:
            try:
                parser.parse_args(argv)
            except SystemExit:
                pytest.fail(f"{c.where}: `fluss-spark {' '.join(argv)}` does not parse")


def test_snippets_take_the_address_from_the_environment():
    """No snippet or example names a bootstrap address of its own: copied, they would miss the
    reader's cluster."""
    text = "\n".join(b.text for b in all_blocks())
    assert not re.findall(r"(?:localhost|127\.0\.0\.1|[a-z-]+):9123", text)
    spark = [b for b in all_blocks() if b.language == "python"
             and ("bootstrap.servers" in b.text or "FlussConnection(" in b.text)]
    assert spark and all('os.environ["FLUSS_BOOTSTRAP_SERVERS"]' in b.text for b in spark)


def _env(tmp_path: Path, servers: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLUSS_USERNAME", "FLUSS_PASSWORD", "FLUSS_TLS"))}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               FLUSS_SPARK_HOME=str(tmp_path / "fluss"), FLUSS_BOOTSTRAP_SERVERS=servers,
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    return env


def _start(commands: list[Command], tmp_path: Path, env: dict[str, str],
           name: str) -> tuple[subprocess.Popen, Path]:
    """Start ``commands`` (of one block) as one bash script in ``tmp_path`` (where
    ``examples`` is the checkout's), ``/tmp/`` replaced by ``tmp_path``; its output goes to
    ``tmp_path/<name>.out|.err`` (files: a pipe nobody reads would stall a long command)."""
    script = ["set -euo pipefail"]
    for i, c in enumerate(commands):
        script += [f"echo '@@{i}'; echo '@@{i}' >&2", c.text.replace("/tmp/", f"{tmp_path}/")]
    logs = tmp_path / "logs" / name
    logs.parent.mkdir(exist_ok=True)
    with open(f"{logs}.out", "w") as out, open(f"{logs}.err", "w") as err:
        proc = subprocess.Popen(["bash", "-c", "\n".join(script)], cwd=tmp_path, env=env,
                                stdout=out, stderr=err, text=True, start_new_session=True)
    return proc, logs


def _interrupt(proc: subprocess.Popen) -> None:
    """Ctrl-C a script still running (the quickstart then stops its cluster), kill it if that
    takes longer than 30 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _check(commands: list[Command], proc: subprocess.Popen, logs: Path) -> None:
    """Wait for a script of ``_start`` and check each command's exit status and output."""
    code = proc.wait(timeout=300)
    outs = re.split(r"@@\d+\n", Path(f"{logs}.out").read_text())[1:]
    errs = re.split(r"@@\d+\n", Path(f"{logs}.err").read_text())[1:]
    for c, out, err in zip(commands, outs, errs):
        failed = code != 0 and c is commands[len(errs) - 1]
        assert not failed and "Traceback" not in err and "error:" not in err, \
            f"{c.where}: `{c.text}` failed (exit status {code}):\n{out[-3000:]}\n{err[-3000:]}"
        want = EXPECT.get(c.key)
        assert want is None or re.search(want, out + err), \
            f"{c.where}: `{c.text}` printed no match for {want!r}:\n{out[-3000:]}\n{err[-3000:]}"
    assert code == 0 and len(outs) == len(commands), errs[-1:]


def _run(commands: list[Command], tmp_path: Path, env: dict[str, str], name: str) -> None:
    if commands:
        _check(commands, *_start(commands, tmp_path, env, name))


@pytest.fixture
def docs_dir(tmp_path):
    """The commands' /tmp/: the checkout's examples/, and the README's local cluster in
    fluss/, started (2 tablets) and stopped at the end whatever happened."""
    from fluss_spark.local.embedded import EmbeddedProcesses
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    cluster = EmbeddedProcesses(tmp_path / "fluss", tablets=2)
    try:
        yield tmp_path, cluster.start()
    finally:
        cluster.stop()


def test_the_commands_run_against_a_local_cluster(docs_dir):
    tmp_path, cluster = docs_dir
    env = _env(tmp_path, cluster.bootstrap_servers)
    last: list[Command] = []
    done: set[str] = set()     # a command the docs repeat (`cluster start`) runs once
    blocks = []
    for block in all_blocks():
        commands = [c for c in block.commands() if _runs(c) and c.key not in done]
        if commands and not _apache_fluss(block):
            done.update(c.key for c in commands)
            blocks.append(commands)
    # A block that does not use the cluster (the quickstart starts its own) runs meanwhile.
    apart = [b for b in blocks if all(c.fluss_spark_argv() is None for c in b)]
    aside = [(b, *_start(b, tmp_path, env, f"aside-{n}")) for n, b in enumerate(apart)]
    try:
        for n, commands in enumerate(b for b in blocks if b not in apart):
            last += [c for c in commands if _deferred(c)]
            _run([c for c in commands if not _deferred(c)], tmp_path, env, f"block-{n}")
        for commands, proc, logs in aside:
            _check(commands, proc, logs)
    finally:
        for _, proc, _ in aside:
            _interrupt(proc)
    # What the docs' commands left in the cluster: the tables the README and examples made.
    res = subprocess.run(["fluss-spark", "table", "list", "--json"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert {t["table"] for t in json.loads(res.stdout)} >= {
        "shop.orders", "shop.visits", "demo.orders", "demo.events"}, res.stderr
    assert [c.key for c in last] == ["fluss-spark cluster stop --dir /tmp/fluss"]
    _run(last, tmp_path, env, "stop")
    assert not any(p["alive"] for p in cluster.processes())


def test_the_apache_fluss_commands_run_against_an_apache_fluss_cluster(apache_fluss, tmp_path):
    commands = [c for b in all_blocks() if _apache_fluss(b) for c in b.commands() if _runs(c)]
    assert [c.key for c in commands] == ["fluss-spark table list"]
    env = _env(tmp_path, apache_fluss.bootstrap_servers)
    # A table to list, whatever the other tests of the session did with the cluster.
    made = subprocess.run(["fluss-spark", "table", "create", f"docs.t_{uuid.uuid4().hex[:8]}",
                           "--schema", "id BIGINT", "--if-not-exists"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    _run(commands, tmp_path, env, "apache-fluss")
