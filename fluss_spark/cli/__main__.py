"""``python -m fluss_spark.cli``: the ``fluss-spark`` command."""

import sys

from fluss_spark.cli import main

sys.exit(main())
