"""``python -m roll_viz.bench``: dispatch to one benchmark family (see the package docstring)."""

import sys

from roll_viz.bench.pipeline import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
