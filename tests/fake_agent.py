"""The scripted agent CLI the tests run as `python tests/fake_agent.py ARGS` (what it does:
tests/fake_cli.py).

Python compiles a script at every start but caches an imported module, and the suite
starts this CLI thousands of times: so the script is only this, and the CLI a module (16 ms
of CPU a start saved).  Every board's start asks the CLI's `--version`: answered here,
without loading the CLI at all (another 10 ms)."""
import os
import sys

VERSION = "2.1.197 (Claude Code)"

if __name__ == "__main__":
    if sys.argv[1:] == ["--version"] and not os.environ.get("FAKE_VERSION_GATE"):
        print(VERSION)
        sys.exit(0)
    import fake_cli  # the script's folder is sys.path[0]

    sys.exit(fake_cli.main(sys.argv[1:]))
