"""taskboard.service: a hardened unit for a home server (design.md §11, agent-cli.md §5)."""
import configparser
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNIT = os.path.join(ROOT, "taskboard.service")
#: Options that break agent CLIs (agent-cli.md §5); the unit must not set them.
BREAKS_AGENTS = ("DynamicUser", "ProtectHome", "MemoryDenyWriteExecute", "RestrictNamespaces",
                 "SystemCallFilter", "PrivateUsers", "PrivateNetwork", "IPAddressDeny")


def unit_text():
    with open(UNIT, encoding="utf-8") as f:
        return f.read()


def service():
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    with open(UNIT, encoding="utf-8") as f:
        parser.read_file(f)
    return parser["Service"]


def test_unit_runs_as_the_code_owner_with_state_dir_path_and_mixed_kill():
    unit = service()
    assert unit["User"] not in ("", "root") and unit["Group"] != "root"
    assert unit["StateDirectory"] == "taskboard"
    assert unit["KillMode"] == "mixed" and int(unit["TimeoutStopSec"]) >= 10
    path = [v for v in unit_text().splitlines() if v.startswith("Environment=PATH=")]
    assert path and ".local/bin" in path[0], "the agent CLI must be found"
    assert unit["NoNewPrivileges"] == "yes" and unit["ProtectSystem"] == "full"
    assert unit["ExecStart"].endswith(" -m taskboard") and unit["WorkingDirectory"]
    for name in BREAKS_AGENTS:
        assert name not in unit, f"{name} breaks agent CLIs"


def test_unit_keeps_the_token_and_the_data_private():
    """The token is the generated file in the state dir: never on ExecStart, where every
    local user reads it in the process list; what the board writes is the owner's alone."""
    unit = service()
    assert "--token" not in unit["ExecStart"] and "TOKEN" not in unit["ExecStart"]
    assert unit["UMask"] == "0077" and unit["StateDirectoryMode"] == "0700"


def test_unit_keeps_the_bytecode_where_the_service_can_write_it(tmp_path):
    """Started as the unit starts it (python -m taskboard, in its working directory, with
    the unit's PYTHONPYCACHEPREFIX), Taskboard's bytecode is written to the cache directory
    and not to the checkout, so a checkout the service cannot write is compiled only once
    (a script, `python taskboard.py`, is compiled at every start before it goes on as an
    import)."""
    unit = service()
    assert unit["CacheDirectory"] == "taskboard"
    assert "Environment=PYTHONPYCACHEPREFIX=%C/taskboard" in unit_text().splitlines()
    checkout, cache = tmp_path / "checkout", tmp_path / "cache"
    checkout.mkdir()
    shutil.copy(os.path.join(ROOT, "taskboard.py"), checkout)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, *unit["ExecStart"].split()[1:], "--help"], cwd=checkout,
                   env={**env, "PYTHONPYCACHEPREFIX": str(cache)}, check=True,
                   capture_output=True, timeout=60)
    assert list(cache.rglob("taskboard.*.pyc")), "no bytecode where the unit keeps it"
    assert not (checkout / "__pycache__").exists()


#: Run twice on one data dir: what a started board has imported, then what it imports when
#: push, webhooks and dataset's schema changes are first used.
AT_REST = """
import importlib.util, sys
import taskboard
taskboard.init(taskboard.parse_args(["--db", sys.argv[1], "--no-auth"]))
LATER = ("alembic", "requests", "cryptography.hazmat.primitives.asymmetric.ec", "py_vapid")
def imported():
    return sorted(m for m in LATER if m in sys.modules
                  and not isinstance(sys.modules[m], importlib.util._LazyModule))
print("at start", imported())
key = taskboard.runtime.push.public_key
session = taskboard.runtime.push.session
print("used", len(taskboard.b64url_decode(key)), type(session).__name__,
      type(taskboard.runtime.db.op).__name__, imported())
taskboard.shutdown()
"""


def test_a_started_board_imports_push_and_webhook_libraries_only_when_used(tmp_path):
    """Memory at rest (issue 34): requests, cryptography and alembic (which dataset imports
    for schema changes Taskboard never makes) cost every start 24 MB and 0.2 s, so they are
    imported when first used; then they are the real ones. The first start makes the push
    key, so it is the second start that shows it."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    runs = [subprocess.run([sys.executable, "-c", AT_REST, str(tmp_path / "t.db")], env=env,
                           cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True)
            for _ in range(2)]
    assert runs[1].stdout.splitlines() == [
        "at start []",
        "used 65 Session Operations ['alembic', 'cryptography.hazmat.primitives.asymmetric.ec', "
        "'py_vapid', 'requests']"]


def test_unit_has_no_trailing_comments_on_values():
    """systemd keeps a trailing `# ...` as part of the value."""
    for line in unit_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            assert " #" not in line, line


@pytest.mark.skipif(shutil.which("systemd-analyze") is None and not os.environ.get(
    "TASKBOARD_CI"), reason="systemd-analyze is not installed (CI installs it)")
def test_unit_passes_systemd_analyze_verify_without_warnings(tmp_path):
    """The unit as shipped, with its paths pointed at this checkout (verify fails when the
    ExecStart binary is missing); any warning on stderr counts as a failure."""
    text = unit_text()
    text = text.replace("/opt/taskboard/.venv/bin/python", sys.executable)
    text = text.replace("/opt/taskboard", ROOT)
    copy = tmp_path / "taskboard.service"
    copy.write_text(text)
    done = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr
