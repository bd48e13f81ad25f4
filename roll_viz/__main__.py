"""The command line: ``python -m roll_viz <command>`` (see ``USAGE`` or ``--help``)."""

import sys

USAGE = """usage: python -m roll_viz compute CASES.json|-
       python -m roll_viz sample --prompt TEXT [--prompt TEXT ...] [options]  (see sample --help)
       python -m roll_viz train --prompt TEXT --steps N [options]             (see train --help)
       python -m roll_viz episodes --preset NAME | --task ID [options]        (see episodes --help)
       python -m roll_viz runs inspect PATH | runs export PATH --step K --to unipo|rllb|compute
       python -m roll_viz serve [SCRIPT] [streamlit flags]                    (the app, warm)
       python -m roll_viz hall [--processes N] [--port P] [-- streamlit flags] (a lecture hall)"""

#: subcommand -> module whose ``main(argv) -> exit code`` runs it
COMMANDS = {
    "compute": "roll_viz.cli.calculator",
    "sample": "roll_viz.cli.sample",
    "train": "roll_viz.cli.train",
    "episodes": "roll_viz.cli.record_episodes",
    "runs": "roll_viz.cli.runs",
    "serve": "roll_viz.cli.serve",
    "hall": "roll_viz.cli.hall",
}


def main(argv: list[str]) -> int:
    """Dispatch to a subcommand; returns the process exit code."""
    if not argv or argv[0] in {"-h", "--help"}:
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"error: unknown command {command!r}\n{USAGE}", file=sys.stderr)
        return 2
    module = __import__(COMMANDS[command], fromlist=["main"])
    return module.main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
