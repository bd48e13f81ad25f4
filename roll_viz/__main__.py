"""Command line: ``python -m roll_viz compute CASES.json`` and ``python -m roll_viz sample ...``."""

import sys

USAGE = """usage: python -m roll_viz compute CASES.json|-
       python -m roll_viz sample --prompt TEXT [--prompt TEXT ...] [options]  (see sample --help)"""


def main(argv: list[str]) -> int:
    """Dispatch to a subcommand; returns the process exit code."""
    if not argv or argv[0] in {"-h", "--help"}:
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "compute":
        from roll_viz.cli.calculator import main as compute_main

        return compute_main(rest)
    if command == "sample":
        from roll_viz.cli.sample import main as sample_main

        return sample_main(rest)
    print(f"error: unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
