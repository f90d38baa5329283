"""What tests/test_warm.py's warm start server runs in its children instead of rag.cli.main:
``report CODE`` prints what the child sees and exits with CODE; ``sleep`` prints its pid and waits."""

import json
import os
import sys
import tempfile
import time


tempfile.gettempdir()  # looked up (and cached) at import, as some libraries do: the server preloads this module


def main(argv: list[str]) -> int:
    if argv[0] == "report":
        mask = os.umask(0)
        os.umask(mask)
        print(json.dumps({"argv": argv, "sys_argv": sys.argv, "cwd": os.getcwd(), "umask": mask,
                          "x": os.environ.get("WARM_TEST_X"), "stdin": sys.stdin.read(), "pid": os.getpid(),
                          "tmp": tempfile.gettempdir()}), flush=True)
        print("said on stderr", file=sys.stderr)
        return int(argv[1])
    if argv[0] == "sleep":
        print(json.dumps({"pid": os.getpid()}), flush=True)
        time.sleep(60)
        return 0
    raise SystemExit(f"unknown mode {argv[0]}")
