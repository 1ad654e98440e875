"""The scripted agent CLI the tests run as `python tests/fake_agent.py ARGS` (what it does:
tests/fake_cli.py).

Python compiles a script at every start but caches an imported module, and the suite
starts this CLI thousands of times: so the script is only this, and the CLI a module (16 ms
of CPU a start saved)."""
import sys

import fake_cli  # the script's folder is sys.path[0]

sys.exit(fake_cli.main(sys.argv[1:]))
