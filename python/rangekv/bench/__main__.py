"""python -m rangekv.bench <workload> [options]"""

import argparse
import sys

from . import ttft_hf


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rangekv.bench", description=__doc__)
    sub = parser.add_subparsers(dest="workload", required=True)
    ttft_hf.add_parser(sub)
    try:
        from . import serve
    except ImportError:
        serve = None
    if serve is not None:
        serve.add_parser(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
