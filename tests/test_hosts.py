"""Agents on other machines (design.md §15): the hosts they run on, reached over OpenSSH."""

import os
import subprocess

import pytest
from ssh_helpers import SshServer, sshd_missing

pytestmark = pytest.mark.skipif(sshd_missing() is not None, reason=str(sshd_missing()))


@pytest.fixture
def sshd(tmp_path):
    server = SshServer(tmp_path)
    yield server
    server.stop()


def test_the_loopback_host_takes_its_key_only_and_runs_commands_there(sshd, tmp_path):
    """The rig of the host tests: a real sshd, key-only, its host key pinned."""
    done = sshd.ssh(f"cd {tmp_path} && pwd && printf '%s' \"$SSH_CONNECTION\"")
    assert done.returncode == 0, done.stderr
    folder, connection = done.stdout.split("\n", 1)
    assert folder == str(tmp_path) and connection.startswith("127.0.0.1 ")
    assert sshd.fingerprint.startswith("SHA256:")
    stranger = os.path.join(tmp_path, "stranger")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", stranger], check=True)
    refused = sshd.ssh("true", identity=stranger)
    assert refused.returncode == 255 and "Permission denied" in refused.stderr
