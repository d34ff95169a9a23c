#!/usr/bin/env bash
# Set up everything this project needs on a fresh Debian machine, then run one task.
#   ./dev.sh demo    install, then run the quickstart job (local cluster + Spark streaming read)
#   ./dev.sh test    install, then type-check (mypy), lint (ruff), check the wheel in a clean
#                    virtualenv (.ci/wheel_check.py) and run the test suite (CI's run: everything
#                    but the tests marked extended)
#   ./dev.sh test-all  the same with the extended tests (more kill points and replays, ~6 min more)
#   ./dev.sh check   install, then mypy, ruff and the unit tests (tests/unit), stopping at the
#                    first failure: the developer's loop, under 2 minutes
#   ./dev.sh typecheck  install, then run mypy (configured in setup.cfg, section [mypy])
#   ./dev.sh fluss-jars  install, then fetch the jars the local clusters and the tests run (Apache
#                    Fluss, ZooKeeper, Iceberg's Spark runtime) from Maven Central into the cache
#   ./dev.sh wheel-check  install, then only the wheel check of ./dev.sh test
#   ./dev.sh standalone  install, then run a Spark standalone cluster (a master, 2 workers) on
#                    loopback until Ctrl-C, to spark-submit jobs to executors in processes of their own
#   ./dev.sh install install only
set -euo pipefail
cd "$(dirname "$0")"
VENV=${VENV:-.venv}

# Java is the only system package: ZooKeeper's and Apache Fluss's jars are pinned and fetched
# over HTTPS by the package itself (fluss_spark/local/maven.py), no Maven needed. They go to the
# per-user cache (~/.cache/fluss-spark, or $FLUSS_SPARK_CACHE), which every checkout of this
# machine and CI's fresh clones share, so CI does not download them again on each run.
need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
# Go builds the local S3 object store (SeaweedFS) of `cluster start --remote-storage s3` and of
# the tests, once per machine from the Go module proxy (fluss_spark/local/object_store.py).
command -v go >/dev/null 2>&1 || need_apt+=(golang-go)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "Installing ${need_apt[*]} with apt-get"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || { echo "error: Python >= 3.11 is required (found $("$PY" --version))" >&2; exit 1; }
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
# The compiled decode (native/) is built by pip with cargo, which rustup installs here.
if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! "$VENV/bin/python" -c 'import fluss_spark, pyspark, chispa, mypy, ruff' >/dev/null 2>&1 \
   || [ setup.cfg -nt "$VENV/.installed" ] || [ pyproject.toml -nt "$VENV/.installed" ] \
   || [ -n "$(find native -newer "$VENV/.installed" \( -name '*.rs' -o -name 'Cargo.*' \) \
              -not -path '*/target/*' 2>/dev/null)" ] \
   || { command -v cargo >/dev/null \
        && ! "$VENV/bin/python" -c 'import fluss_spark.protocol.apache_fluss._native' 2>/dev/null; }; then
  echo "Installing Python packages into $VENV (log: $VENV/install.log)"
  # compat mode puts the checkout on sys.path, where Spark's lookup of pyspark_* modules sees
  # pyspark_fluss (the default editable mode hides top-level modules from that lookup).
  if ! { "$VENV/bin/python" -m pip install --upgrade pip \
         && "$VENV/bin/python" -m pip install -e ".[test]" --config-settings editable_mode=compat; \
       } >"$VENV/install.log" 2>&1; then
    tail -n 30 "$VENV/install.log" >&2
    echo "error: installing the Python packages failed; see $VENV/install.log" >&2
    exit 1
  fi
  "$VENV/bin/python" -c 'import fluss_spark, pyspark, chispa, kazoo, rocksdict, pyspark_fluss, mypy, ruff, fluss, pyiceberg, google_crc32c, platformdirs'
  if [ "${CI:-}" = true ]; then   # CI tests the compiled decode too: it must have been built
    "$VENV/bin/python" -c 'import fluss_spark.protocol.apache_fluss._native' \
      || { echo "error: the compiled decode (native/) was not built; see $VENV/install.log" >&2; exit 1; }
  fi
  touch "$VENV/.installed"
fi
export PATH="$PWD/$VENV/bin:$PATH"
export PYSPARK_PYTHON="$PWD/$VENV/bin/python"
export PYSPARK_DRIVER_PYTHON="$PWD/$VENV/bin/python"

typecheck() {
  python -m mypy
}

lint() {
  ruff check .       # configured in pyproject.toml, section [tool.ruff]
}

fluss_jars() {
  python -m fluss_spark.local.zookeeper_jars
  python -m fluss_spark.local.apache_fluss_jars
  # Iceberg's Spark runtime: the tests read the tiered lake through it.
  python -m fluss_spark.local.iceberg_jars
  # The S3 object store of the tests (built once, a few minutes; then only looked up).
  python -m fluss_spark.local.object_store
}

case "${1:-}" in
  demo)    shift; exec python examples/quickstart.py "$@" ;;
  test|test-all)
           [ "$1" = test ] && select=(-m "not extended") || select=()
           shift
           typecheck          # a type error fails the run (and CI) before any test
           lint               # so does a lint finding
           fluss_jars >/dev/null   # the real Apache Fluss cluster of the tests runs these jars
           # Three groups, two of them at once, and the check of the package as a user installs it
           # (.ci/wheel_check.py, beside the Spark tests): tests/suite.py. Each group closes its
           # report with its 20 slowest tests: the place to look when CI time grows.
           exec python tests/suite.py "${select[@]}" "$@" ;;
  check)   shift
           typecheck
           lint
           exec python -m pytest -q -x tests/unit "$@" ;;
  fluss-jars) shift; fluss_jars ;;
  wheel-check) shift; exec python .ci/wheel_check.py ;;
  standalone) shift; exec python -m fluss_spark.testing.standalone "$@" ;;
  typecheck) shift; typecheck ;;
  install) echo "Installed: $(python -c 'import fluss_spark; print(fluss_spark.__version__)')" ;;
  *) echo "usage: ./dev.sh demo|test|test-all|check|typecheck|fluss-jars|wheel-check|standalone|install" >&2
     exit 2 ;;
esac
