"""``python -m fluss_spark.server coordinator|tablet ...``"""

import sys

from fluss_spark.server.process import main

sys.exit(main())
