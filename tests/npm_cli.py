"""Installing a pinned agent CLI from npm for the tests that drive the real thing.

Each CLI goes into its own prefix, `~/.cache/taskboard-tests/<name>-<version>` (or the
directory an environment variable names), once, under a lock file so that parallel test runs
do not install over each other.  When npm cannot provide it, the calling test is skipped with
npm's own reason: never a silent pass."""

import fcntl
import os
import subprocess
import tempfile

#: npm install of a CLI (some bring a native binary of a few hundred MB).
INSTALL_TIMEOUT = 600


def cache_dir(dirname: str, env_var: str | None = None) -> str:
    """The install prefix: $env_var when set, else ~/.cache/taskboard-tests/<dirname>."""
    default = os.path.join(os.path.expanduser("~"), ".cache", "taskboard-tests", dirname)
    return (os.environ.get(env_var) if env_var else None) or default


def npm_error(output: str) -> str:
    """The telling part of npm's error output: its first `npm error` lines, without the
    stack trace (e.g. "code ECONNREFUSED | ... | FetchError: request to … failed")."""
    lines = [line.removeprefix("npm error").strip() for line in output.splitlines()
             if line.startswith("npm error")]
    lines = [line for line in lines if line and not line.startswith(("at ", "{", "}"))]
    return " | ".join(lines[:4] or output.strip().splitlines()[-5:])


def npm_install(prefix: str, package: str) -> str | None:
    """Run npm install of package into prefix; None when it worked, else why it did not."""
    command = ["npm", "install", "--prefix", prefix, package]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    except FileNotFoundError:
        return "npm not found on PATH"
    except subprocess.TimeoutExpired:
        return f"`{' '.join(command)}` took more than {INSTALL_TIMEOUT}s"
    if done.returncode != 0:
        return f"exit {done.returncode}: {npm_error(done.stderr or done.stdout)}"
    return None


def npm_cli(title: str, package: str, prefix: str, find) -> str:
    """The path of an installed CLI, installing `package` ("name@version") into prefix on
    first use.  find(prefix) gives the path of a working CLI at the pinned version, or None.
    Skips the calling test, with npm's reason, when it cannot be had."""
    import pytest

    os.makedirs(prefix, exist_ok=True)
    why = None
    with open(os.path.join(prefix, ".install.lock"), "w") as lock:
        # Blocks while another run installs; that run is bounded by INSTALL_TIMEOUT.
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = find(prefix)
        if path:
            return path
        why = npm_install(prefix, package)
        path = find(prefix)
    if path:
        return path
    why = why or f"no working {title} under {prefix}/node_modules after the install"
    pytest.skip(f"real {title} unavailable: npm install {package} failed: {why}")


def first_runnable(candidates, env_for, version: str) -> str | None:
    """The first executable path among candidates whose `--version` names version, run in
    the environment env_for(home) gives for a throwaway $HOME (even --version must not touch
    the real user's settings); None when there is none."""
    for path in candidates:
        if os.access(path, os.X_OK) and version in (version_output(path, env_for) or "").split():
            return path
    return None


def version_output(path: str, env_for) -> str | None:
    """What `path --version` prints, or None when it does not run."""
    with tempfile.TemporaryDirectory() as home:
        try:
            done = subprocess.run([path, "--version"], capture_output=True, text=True,
                                  timeout=60, env=env_for(home))
        except (OSError, subprocess.TimeoutExpired):
            return None
    return done.stdout.strip() if done.returncode == 0 else None
